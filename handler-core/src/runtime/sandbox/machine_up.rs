//! `machine up` (issue 30 item 1, decision 0161): a dev container machine made by the Dev
//! Container CLI from the DevcontainerSpec on fd 3. The CLI reads only the checked copy Handler
//! staged (its workspace and its file: neither the repository's file nor its `.devcontainer` is its input), with Handler's
//! hardening and network as its `runArgs` (`handler_sandbox::machine::devcontainer`), on this
//! executable's engine (`--docker-path`), labelled as the machine. What the engine made is then
//! judged again (a feature brings its own settings) and removed when it is wider; the user's
//! login shell is probed once for the variables each exec gets. Prints a DevcontainerUp.

use std::process::{Command, Stdio};

use handler_contracts::machine::{DevcontainerSpec, DevcontainerUp};
use handler_contracts::parse::from_json;
use handler_contracts::sandbox::exit;
use handler_sandbox::machine::devcontainer::{self, CONFIG_DIR, CONFIG_FILE, Layout};
use handler_sandbox::machine::machine_id;
use handler_sandbox::plan::Engine;
use handler_sandbox::validate_spec;

use super::machine::{container_exists, machines_dir, read_fd3, remove_args};
use super::{engine, host, log, podman};

/// The setting naming the Dev Container CLI (else `devcontainer` beside this executable, where
/// `.ci/install.sh` puts it, else on PATH).
pub const CLI_VAR: &str = "HANDLER_DEVCONTAINER_CLI";

fn cli_program() -> String {
    if let Ok(c) = std::env::var(CLI_VAR) {
        return c;
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("devcontainer")))
        .filter(|p| p.exists())
        .map_or_else(|| "devcontainer".into(), |p| p.display().to_string())
}

type Failed = (i32, String);

/// `machine adopt`: its code (0: adopted; a DevcontainerUp on stdout; 3: none to adopt).
pub fn adopt() -> i32 {
    match try_adopt() {
        Ok(up) => {
            println!(
                "{}",
                serde_json::to_string(&up).expect("a DevcontainerUp serializes")
            );
            0
        }
        Err((code, msg)) => {
            log(&format!("machine adopt: {msg}"));
            code
        }
    }
}

/// The one container made by hand for `folder` (the CLI's own label, none of Handler's).
fn made_by_hand(folder: &str) -> Result<serde_json::Value, Failed> {
    let label = format!("label={}={folder}", devcontainer::LOCAL_FOLDER_LABEL);
    let listed =
        podman::run(&["ps", "-a", "--filter", &label, "--format", "{{.ID}}"]).map_err(setup)?;
    let mut found = Vec::new();
    for c in listed.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let i = inspect(c)?;
        if i["Config"]["Labels"][handler_contracts::machine::MACHINE_LABEL].is_null() {
            found.push(i);
        }
    }
    match found.len() {
        0 => Err((
            super::machine::NO_MACHINE,
            format!("no container was made by hand for {folder}"),
        )),
        1 => Ok(found.remove(0)),
        n => Err((
            exit::SETUP_FAILED,
            format!("{n} containers were made by hand for {folder}: remove all but one"),
        )),
    }
}

fn try_adopt() -> Result<DevcontainerUp, Failed> {
    let doc: DevcontainerSpec = from_json("DevcontainerSpec", &read_fd3("DevcontainerSpec")?)
        .map_err(|e| (exit::INVALID_SPEC, format!("invalid spec: {e}")))?;
    let spec = &doc.spec;
    machine_id(&spec.name).map_err(|e| (e.exit_code(), e.to_string()))?;
    let c = made_by_hand(&doc.folder)?;
    // Decision 0169: a container made by hand has none of the agents' mounts, and a running
    // container never gains one.
    let agents = handler_sandbox::machine::session::agents_of(spec);
    if !agents.is_empty() {
        return Err((
            exit::UNENFORCEABLE,
            format!(
                "a container was made by hand for {} and it has none of the mounts of agent {} (a running container never gains one): remove it to have Handler make one for the agents, or ask for a machine without agents to adopt it",
                doc.folder,
                agents.join(", ")
            ),
        ));
    }
    let cid = c["Id"].as_str().unwrap_or_default().to_string();
    // What was made by hand is held to what Handler would have made, but for its network: the
    // request's says which (none or filtered cannot be given to it afterwards).
    devcontainer::post_check(&c, &doc.folder, &spec.network, &[]).map_err(|e| {
        (
            exit::UNENFORCEABLE,
            format!(
                "the container made by hand for {} ({}) is not adopted: {e} (remove it to have Handler make one, or, when only its network differs, ask for the network it has)",
                doc.folder,
                &cid[..cid.len().min(12)]
            )
            .replace(": it was removed", ""),
        )
    })?;
    if container_exists(&spec.name) {
        return Err((
            exit::SETUP_FAILED,
            format!("a container named {} exists already", spec.name),
        ));
    }
    // Handler's record of it first, then its name: the machine verbs know it by both.
    let dir = machines_dir().map_err(setup)?.join(&spec.name);
    std::fs::create_dir_all(&dir).map_err(setup)?;
    std::fs::write(dir.join(devcontainer::ADOPTED_FILE), &cid).map_err(setup)?;
    podman::run(&["rename", &cid, &spec.name]).map_err(setup)?;
    if c["State"]["Running"] != true {
        podman::run(&["start", &spec.name]).map_err(setup)?;
    }
    let (remote_user, remote_workspace_folder) =
        devcontainer::adopted_user_and_folder(&c, &doc.folder);
    let up = devcontainer::Up {
        container_id: cid,
        remote_user,
        remote_workspace_folder,
    };
    Ok(DevcontainerUp {
        env: probe(&up, &c, &[]),
        container_id: up.container_id,
        remote_user: up.remote_user,
        remote_workspace_folder: up.remote_workspace_folder,
    })
}

/// `machine up`: its code (0: made and started; a DevcontainerUp on stdout).
pub fn up() -> i32 {
    match try_up() {
        Ok(up) => {
            println!(
                "{}",
                serde_json::to_string(&up).expect("a DevcontainerUp serializes")
            );
            0
        }
        Err((code, msg)) => {
            log(&format!("machine up: {msg}"));
            code
        }
    }
}

fn setup(e: impl std::fmt::Display) -> Failed {
    (exit::SETUP_FAILED, format!("setup failed: {e}"))
}

fn try_up() -> Result<DevcontainerUp, Failed> {
    let doc: DevcontainerSpec = from_json("DevcontainerSpec", &read_fd3("DevcontainerSpec")?)
        .map_err(|e| (exit::INVALID_SPEC, format!("invalid spec: {e}")))?;
    let spec = &doc.spec;
    let valid = validate_spec(spec).map_err(|e| (e.exit_code(), e.to_string()))?;
    let id = machine_id(&spec.name).map_err(|e| (e.exit_code(), e.to_string()))?;
    if nix::unistd::geteuid().is_root() {
        return Err((
            exit::UNENFORCEABLE,
            "refusing to run as root: machines run rootless as the host user (A3)".into(),
        ));
    }
    let dir = machines_dir().map_err(setup)?.join(&spec.name);
    let facts = host::gather_devcontainer(
        spec,
        dir.to_string_lossy().into_owned(),
        host::launcher_self(),
    )
    .map_err(setup)?;
    let refused = |e: handler_sandbox::SpecError| (e.exit_code(), e.to_string());
    let up_plan = match engine::current() {
        engine::Kind::Podman => {
            devcontainer::plan_up(Engine::Podman, &valid, &facts).map_err(refused)?
        }
        engine::Kind::Docker => {
            let d = super::docker::facts(spec, &facts.instance_dir).map_err(setup)?;
            devcontainer::plan_up(Engine::Docker(&d), &valid, &facts).map_err(refused)?
        }
    };
    write_config(&doc, &up_plan)?;
    if container_exists(&spec.name) {
        return Err((
            exit::SETUP_FAILED,
            format!("a container named {} exists already", spec.name),
        ));
    }
    // What a machine whose container is gone left (removed outside Handler): made afresh, as
    // `machine create` does.
    if std::fs::symlink_metadata(&dir).is_ok() {
        std::fs::remove_dir_all(&dir).map_err(|e| setup(format!("{}: {e}", dir.display())))?;
    }
    let labels = devcontainer::labels(spec, id, &doc.folder);
    let own = up_plan.own_mounts();
    let made = engine_for_cli(&dir)
        .and_then(|engine| {
            // A filtered dev container's own proxy first (decision 0153), and the filter's
            // volume on Docker: the forwarder waits for it.
            if let Some(p) = &up_plan.proxy {
                super::machine::run_proxy(&spec.name, &dir, p)?;
            }
            super::docker::fill_image_volumes(&up_plan.image_volumes).map_err(setup)?;
            // Made for agents: their homes and files (decision 0169).
            super::launch::stage(&up_plan.stage)
                .map_err(|e| setup(format!("staging its agents' files: {e}")))?;
            Ok(engine)
        })
        .and_then(|engine| run_cli(&doc.config_dir, &engine, &labels))
        .and_then(|up| {
            let inspect = inspect(&up.container_id)?;
            devcontainer::post_check(&inspect, &doc.folder, &spec.network, &own)
                .map_err(|e| (exit::UNENFORCEABLE, e.to_string()))?;
            Ok(DevcontainerUp {
                env: probe(&up, &inspect, &spec.path_prepend),
                container_id: up.container_id,
                remote_user: up.remote_user,
                remote_workspace_folder: up.remote_workspace_folder,
            })
        });
    if made.is_err() {
        let _ = podman::output(&remove_args(&spec.name));
        let _ = podman::output(&remove_args(&format!("{}-egress", spec.name)));
        let _ = std::fs::remove_dir_all(&dir);
    }
    made
}

/// Checks the staged copy again (it is Handler's own file, checked all the same) and writes the
/// document the CLI reads over it, with Handler's egress feature beside it when filtered.
fn write_config(doc: &DevcontainerSpec, up_plan: &devcontainer::UpPlan) -> Result<(), Failed> {
    let staged = std::path::Path::new(&doc.config_dir).join(CONFIG_DIR);
    let config = staged.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&config)
        .map_err(|e| setup(format!("{}: {e}", config.display())))?;
    let checked = devcontainer::parse(&config.display().to_string(), &text)
        .and_then(|m| devcontainer::check(&m, Layout::Folder, &doc.folder))
        .map_err(|e| (exit::UNENFORCEABLE, e.to_string()))?;
    let over = devcontainer::override_config(&checked, &doc.folder, up_plan);
    if let Some(entry) = &up_plan.egress_entrypoint {
        let feat = staged.join(devcontainer::EGRESS_FEATURE);
        let (json, install) = devcontainer::egress_feature(entry);
        let _ = std::fs::remove_dir_all(&feat);
        std::fs::create_dir_all(&feat).map_err(setup)?;
        std::fs::write(feat.join("devcontainer-feature.json"), json).map_err(setup)?;
        let sh = feat.join("install.sh");
        std::fs::write(&sh, install).map_err(setup)?;
        std::fs::set_permissions(&sh, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(setup)?;
    }
    std::fs::write(
        &config,
        serde_json::to_vec_pretty(&over).expect("a JSON object serializes"),
    )
    .map_err(|e| setup(format!("{}: {e}", config.display())))
}

/// Writes the engine script the CLI is given (`devcontainer::engine_script`) into the machine's
/// staged folder (made 0700 here): its events replay from a second before now.
fn engine_for_cli(dir: &std::path::Path) -> Result<String, Failed> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| setup(format!("{}: {e}", dir.display())))?;
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs().saturating_sub(1));
    let path = dir.join("engine");
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&path)
        .map_err(|e| setup(format!("{}: {e}", path.display())))?;
    std::io::Write::write_all(
        &mut f,
        devcontainer::engine_script(&engine::current().program(), since).as_bytes(),
    )
    .map_err(|e| setup(format!("{}: {e}", path.display())))?;
    Ok(path.display().to_string())
}

/// Runs `devcontainer up` on `engine`: what it answered, or its own message.
fn run_cli(
    stage: &str,
    engine: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<devcontainer::Up, Failed> {
    let cli = cli_program();
    let argv = devcontainer::up_argv(stage, engine, labels);
    let out = Command::new(&cli)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| {
            (
                exit::SETUP_FAILED,
                if e.kind() == std::io::ErrorKind::NotFound {
                    format!(
                        "the Dev Container CLI ({cli}) is not installed: run Handler's install.sh, which installs @devcontainers/cli, or set {CLI_VAR}"
                    )
                } else {
                    format!("{cli}: {e}")
                },
            )
        })?;
    devcontainer::parse_up(&String::from_utf8_lossy(&out.stdout)).map_err(|m| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        (
            exit::SETUP_FAILED,
            format!(
                "devcontainer up failed: {m} ({})",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ),
        )
    })
}

fn inspect(container: &str) -> Result<serde_json::Value, Failed> {
    let text = podman::run(&["inspect", "--type", "container", container]).map_err(setup)?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(setup)?;
    Ok(v.get(0).cloned().unwrap_or(v))
}

/// The probe's bounds: its output is cut at 1 MiB, and it is given 10 s (the user's login
/// shell is the image's, so the repository's: it may print, or never end).
const PROBE_MAX: u64 = 1 << 20;
const PROBE_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);
/// What the probe prints before the environment: whatever a profile printed comes before it.
const PROBE_MARK: &[u8] = b"HANDLER-PROBED-ENVIRONMENT:";

/// The environment of the user's login shell, as `/proc/self/environ` (NUL-separated).
fn probe_output(up: &devcontainer::Up) -> Option<Vec<u8>> {
    use std::io::Read as _;
    let script = format!(
        "printf '%s' '{}'; cat /proc/self/environ",
        String::from_utf8_lossy(PROBE_MARK)
    );
    let mut child = podman::command([
        "exec",
        "--user",
        up.remote_user.as_str(),
        up.container_id.as_str(),
        "/bin/sh",
        "-lc",
        script.as_str(),
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .ok()?;
    let out = child.stdout.take()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.take(PROBE_MAX).read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    let got = rx.recv_timeout(PROBE_WITHIN).ok();
    let _ = child.kill();
    let _ = child.wait();
    let got = got?;
    let at = got
        .windows(PROBE_MARK.len())
        .position(|w| w == PROBE_MARK)?;
    Some(got[at + PROBE_MARK.len()..].to_vec())
}

/// The variables each exec gets: one probe of the user's login shell (none when it cannot
/// run: the file's `remoteEnv` alone), its parts' `bin` before its PATH (decision 0164).
fn probe(
    up: &devcontainer::Up,
    inspect: &serde_json::Value,
    path_prepend: &[String],
) -> std::collections::BTreeMap<String, String> {
    let environ = probe_output(up).unwrap_or_else(|| {
        log("machine up: the login shell could not be probed; its variables are the file's remoteEnv alone");
        Vec::new()
    });
    let env = devcontainer::inspect_env(&environ, inspect);
    devcontainer::parts_path(env, &devcontainer::container_env(inspect), path_prepend)
}
