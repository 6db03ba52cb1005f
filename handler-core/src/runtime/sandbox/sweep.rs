//! `handler-sandbox-podman sweep` (A): removes what launchers that died left behind — their
//! containers, networks, volumes and instance folders — never a live launcher's, even one
//! still setting its sandbox up. A launcher is known by pid, start time and boot.

use std::fs;

use handler_sandbox::host::{launcher_alive, launcher_from_labels};
use handler_sandbox::plan::labels;
use serde_json::{Value, json};

use super::{docker, engine, host, launch, log, podman};

fn label<'a>(labels: &'a Value, key: &str) -> Option<&'a str> {
    labels.get(key).and_then(Value::as_str)
}

fn dead(labels: &Value, boot: &str) -> bool {
    match launcher_from_labels(
        label(labels, labels::LAUNCHER_PID),
        label(labels, labels::LAUNCHER_START),
        label(labels, labels::LAUNCHER_BOOT),
    ) {
        Some(l) => !launcher_alive(&l, host::process_start(l.pid), boot),
        None => false,
    }
}

/// The instance folder a label names, only when it is directly inside this user's runtime
/// folder (a label is anyone's to write: `podman create --label handler.instance-dir=~` must not
/// make sweep remove a home folder).
fn own_instance_dir(dir: &str) -> Option<std::path::PathBuf> {
    let base = host::runtime_base(nix::unistd::getuid().as_raw()).ok()?;
    let base = fs::canonicalize(base).ok()?;
    let p = std::path::Path::new(dir);
    let name = p.file_name()?;
    // The parent canonicalized (a link in the path resolved), the last part kept as it is: a
    // link named like an instance is removed as a link, never followed.
    let parent = fs::canonicalize(p.parent()?).ok()?;
    if parent != base || name == ".." || name == "." {
        return None;
    }
    Some(base.join(name))
}

/// Removes one kind of leftovers; the names removed.
fn sweep_kind(
    items: Result<Value, podman::PodmanError>,
    id_key: &str,
    rm: &[&str],
    boot: &str,
) -> Result<Vec<String>, podman::PodmanError> {
    let items = items?;
    let mut removed = Vec::new();
    for item in items.as_array().into_iter().flatten() {
        let labels = item
            .get("Labels")
            .or_else(|| item.get("labels"))
            .cloned()
            .unwrap_or(Value::Null);
        if !dead(&labels, boot) {
            continue;
        }
        let Some(id) = item.get(id_key).and_then(|v| {
            v.as_str().map(str::to_string).or_else(|| {
                v.as_array()
                    .and_then(|a| a.first())
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
        }) else {
            continue;
        };
        let mut args = rm.to_vec();
        args.push(&id);
        match podman::run(&args) {
            Ok(_) => removed.push(id.clone()),
            Err(e) => log(&format!("sweep: {e}")),
        }
        if let Some(dir) = label(&labels, labels::INSTANCE_DIR) {
            match own_instance_dir(dir) {
                Some(d) => {
                    let _ = fs::remove_dir_all(d);
                }
                None => log(&format!(
                    "sweep: {id}: its label {} names {dir:?}, not a folder of this user's runtime folder: left alone",
                    labels::INSTANCE_DIR
                )),
            }
        }
    }
    Ok(removed)
}

/// `sweep`: prints what it removed as JSON; 0, or 1 when podman could not be asked.
pub fn run() -> i32 {
    let boot = host::boot_id();
    let filter = format!("label={}", labels::LAUNCHER_PID);
    let (containers, networks, volumes) = if engine::current() == engine::Kind::Docker {
        // Docker: no networks of Handler's (the proxy runs on the default bridge).
        (
            sweep_kind(
                docker::labelled("container", labels::LAUNCHER_PID),
                "Names",
                &["rm", "-f"],
                &boot,
            ),
            Ok(Vec::new()),
            sweep_kind(
                docker::labelled("volume", labels::LAUNCHER_PID),
                "Name",
                &["volume", "rm", "-f"],
                &boot,
            )
            .and_then(|mut v| {
                v.extend(docker::remove_stale_image_volumes()?);
                Ok(v)
            }),
        )
    } else {
        (
            sweep_kind(
                podman::json(&["ps", "-a", "--filter", &filter, "--format", "json"]),
                "Names",
                &["rm", "-f", "--time", "0"],
                &boot,
            ),
            sweep_kind(
                podman::json(&["network", "ls", "--filter", &filter, "--format", "json"]),
                "name",
                &["network", "rm", "-f"],
                &boot,
            ),
            sweep_kind(
                podman::json(&["volume", "ls", "--filter", &filter, "--format", "json"]),
                "Name",
                &["volume", "rm", "-f"],
                &boot,
            ),
        )
    };
    let mut dirs = Vec::new();
    if let Ok(base) = host::runtime_base(nix::unistd::getuid().as_raw())
        && let Ok(entries) = fs::read_dir(&base)
    {
        for e in entries.flatten() {
            let p = e.path();
            // A folder without its launcher file is being set up: left alone.
            if let Some(l) = launch::instance_dir_launcher(&p)
                && !launcher_alive(&l, host::process_start(l.pid), &boot)
            {
                match fs::remove_dir_all(&p) {
                    Ok(()) => dirs.push(p.to_string_lossy().into_owned()),
                    Err(e) => log(&format!("sweep: {}: {e}", p.display())),
                }
            }
        }
    }
    let mut failed = false;
    let mut list = |r: Result<Vec<String>, podman::PodmanError>| match r {
        Ok(v) => v,
        Err(e) => {
            log(&format!("sweep: {e}"));
            failed = true;
            Vec::new()
        }
    };
    let out = json!({
        "containers": list(containers),
        "networks": list(networks),
        "volumes": list(volumes),
        "folders": dirs,
    });
    println!("{out}");
    i32::from(failed)
}
