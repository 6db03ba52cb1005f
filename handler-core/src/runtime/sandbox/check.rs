//! `handler-sandbox-podman check` (A.8): whether this host can run sandboxes, as a RuntimeCheck
//! on stdout; exit 0 when every required item is ok, 1 otherwise. Starts nothing.

use std::path::Path;

use handler_contracts::sandbox::{RuntimeCheck, RuntimeCheckItem};
use handler_sandbox::host::runtime_check;
use nix::unistd::{AccessFlags, access};
use serde_json::Value;

use super::{host, podman};

fn item(name: &str, ok: bool, required: bool, detail: impl Into<String>) -> RuntimeCheckItem {
    RuntimeCheckItem {
        name: name.into(),
        ok,
        required,
        detail: detail.into(),
    }
}

fn device(path: &str, required: bool, need: &str) -> RuntimeCheckItem {
    let ok = access(path, AccessFlags::R_OK | AccessFlags::W_OK).is_ok();
    let detail = if ok {
        format!("{path} is usable")
    } else if Path::new(path).exists() {
        format!("{path} is not readable and writable by this user ({need}): chmod 666 {path}")
    } else {
        format!("{path} is missing ({need})")
    };
    item(path, ok, required, detail)
}

fn first_existing(paths: &[&str]) -> Option<String> {
    paths
        .iter()
        .find(|p| Path::new(p).exists())
        .map(std::string::ToString::to_string)
}

/// The host check: podman, the user and its subordinate ids, what `podman info` says, the
/// init, the devices and the tools nested confinement needs.
pub fn check() -> RuntimeCheck {
    let uid = nix::unistd::getuid().as_raw();
    if super::engine::current() == super::engine::Kind::Docker {
        return check_docker(uid);
    }
    let mut items = Vec::new();
    let version = podman::json(&["version", "--format", "json"]);
    let runtime = match &version {
        Ok(v) => format!("podman {}", v["Client"]["Version"].as_str().unwrap_or("?")),
        Err(_) => "podman (not found)".to_string(),
    };
    items.push(match &version {
        Ok(v) => item(
            "podman",
            true,
            true,
            format!(
                "podman {} at {}",
                v["Client"]["Version"].as_str().unwrap_or("?"),
                podman::program()
            ),
        ),
        Err(e) => item(
            "podman",
            false,
            true,
            format!("{e}: install podman (Debian: apt-get install podman)"),
        ),
    });
    user_items(uid, &mut items);
    match &podman::json(&["info", "--format", "json"]) {
        Ok(info) => {
            info_items(uid, &info["host"], &mut items);
            items.push(storage_item(
                info["store"]["graphDriverName"].as_str().unwrap_or("?"),
            ));
        }
        Err(e) => items.push(item("podman-info", false, true, e.to_string())),
    }
    tool_items(&mut items);
    runtime_check(runtime, items)
}

/// The image store's driver: on `vfs` (rootless podman without a storage.conf) every keep-id
/// start copies the image (measured 1.8–4.2 s for a 200 MB Debian image, 0.45 s for busybox):
/// a warning with the fix (not required: sandboxes still run).
pub fn storage_item(driver: &str) -> RuntimeCheckItem {
    if driver == "vfs" {
        item(
            "storage-driver",
            false,
            false,
            "vfs: every sandbox start copies its image (seconds for a 200 MB image); use overlay: \
             ~/.config/containers/storage.conf [storage] driver = \"overlay\" (with \
             [storage.options.overlay] mount_program = \"/usr/bin/fuse-overlayfs\", or native \
             overlay where the kernel allows), then podman system reset",
        )
    } else {
        item("storage-driver", true, false, driver)
    }
}

/// The Docker host check: the daemon and its rootlessness, this user not root, the devices
/// (`docker::check_items`).
fn check_docker(uid: u32) -> RuntimeCheck {
    let mut items = Vec::new();
    let runtime = super::docker::check_items(&mut items);
    items.push(if uid == 0 {
        item(
            "user",
            false,
            true,
            "running as root: sandboxes run as an unprivileged user (A3)",
        )
    } else {
        item("user", true, true, format!("uid {uid}"))
    });
    runtime_check(runtime, items)
}

/// Rootless, the subordinate id ranges, newuidmap.
fn user_items(uid: u32, items: &mut Vec<RuntimeCheckItem>) {
    items.push(if uid == 0 {
        item(
            "rootless",
            false,
            true,
            "running as root: sandboxes run rootless as an unprivileged user (A3)",
        )
    } else {
        item("rootless", true, true, format!("uid {uid}"))
    });
    let user = host::user_name(uid);
    for (name, file) in [("subuid", "/etc/subuid"), ("subgid", "/etc/subgid")] {
        items.push(match host::subids(file, uid) {
            Some(n) if n >= 65536 => item(name, true, true, format!("{user} has {n} subordinate ids in {file}")),
            Some(n) => item(name, false, true, format!("{user} has only {n} subordinate ids in {file}; give it 65536 (usermod --add-sub{}s)", &name[3..])),
            None => item(name, false, true, format!("no range for {user} in {file}: usermod --add-sub{}s 100000-165535 {user}", &name[3..])),
        });
    }
    let newuidmap = first_existing(&["/usr/bin/newuidmap", "/bin/newuidmap"]);
    items.push(item(
        "newuidmap",
        newuidmap.is_some(),
        true,
        newuidmap.map_or("newuidmap is missing: install uidmap".into(), |p| p.clone()),
    ));
}

/// What `podman info`'s `host` says: the OCI runtime, keep-id, slirp4netns, cgroup limits.
fn info_items(uid: u32, h: &Value, items: &mut Vec<RuntimeCheckItem>) {
    let rt = h["ociRuntime"]["name"].as_str().unwrap_or("?").to_string();
    let rt_version = h["ociRuntime"]["version"]
        .as_str()
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    let hybrid = Path::new("/sys/fs/cgroup/unified").exists();
    let ok = !(rt == "crun" && hybrid);
    items.push(item(
        "runtime",
        ok,
        true,
        if ok {
            format!("{rt}: {rt_version}")
        } else {
            "crun refuses cgroups in hybrid mode: set runtime = \"runc\" under [engine] in ~/.config/containers/containers.conf".into()
        },
    ));
    let rootless = h["security"]["rootless"].as_bool().unwrap_or(false);
    let maps = h["idMappings"]["uidmap"].as_array().map_or(0, Vec::len);
    items.push(item(
        "keep-id",
        rootless && maps > 1,
        true,
        if rootless && maps > 1 {
            "rootless podman with subordinate ids: --userns=keep-id works".to_string()
        } else {
            "rootless podman has no subordinate ids in effect: add them, then podman system migrate"
                .to_string()
        },
    ));
    let slirp = h["slirp4netns"]["executable"].as_str().unwrap_or("");
    items.push(item(
        "slirp4netns",
        !slirp.is_empty(),
        true,
        if slirp.is_empty() {
            "slirp4netns is missing (open networks and the egress proxy of filtered ones): install slirp4netns".into()
        } else {
            slirp.to_string()
        },
    ));
    let cg = h["cgroupVersion"].as_str().unwrap_or("?");
    let limits = host::cgroup_delegated(uid, "memory") && host::cgroup_delegated(uid, "cpu");
    items.push(item(
        "cgroup-limits",
        limits,
        false,
        if limits {
            format!("cgroups {cg} with memory and cpu delegated: resources can be enforced")
        } else {
            format!("cgroups {cg} without memory/cpu delegated to this user: a spec with resources is refused (64)")
        },
    ));
}

/// The init for `--init`, the devices, fuse-overlayfs.
fn tool_items(items: &mut Vec<RuntimeCheckItem>) {
    let init = first_existing(&[
        "/usr/libexec/podman/catatonit",
        "/usr/bin/catatonit",
        "/usr/libexec/catatonit/catatonit",
    ]);
    items.push(item(
        "init",
        init.is_some(),
        true,
        init.map_or(
            "no catatonit for --init (A8): install catatonit".into(),
            |p| p,
        ),
    ));
    items.push(device("/dev/net/tun", true, "rootless networking"));
    items.push(device("/dev/fuse", false, "nested confinement"));
    let fo = first_existing(&["/usr/bin/fuse-overlayfs"]);
    items.push(item(
        "fuse-overlayfs",
        fo.is_some(),
        false,
        fo.unwrap_or_else(|| {
            "missing (nested confinement's inner podman): install fuse-overlayfs".into()
        }),
    ));
}

/// `check`: prints the RuntimeCheck; 0 when ok.
pub fn run() -> i32 {
    let c = check();
    println!("{}", serde_json::to_string_pretty(&c).unwrap_or_default());
    i32::from(!c.ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vfs_is_a_warning_with_its_fix() {
        let i = storage_item("vfs");
        assert!(!i.ok && !i.required, "{i:?}");
        assert!(i.detail.contains("driver = \"overlay\""), "{}", i.detail);
        let i = storage_item("overlay");
        assert!(i.ok && !i.required && i.detail == "overlay", "{i:?}");
    }
}
