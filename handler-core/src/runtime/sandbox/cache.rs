//! `handler-sandbox-podman cache <verb>` (A.9): the size of cache folders and emptying them,
//! counting and removing the files a sandbox wrote with inner ids (via `podman unshare`, where
//! the user is root over its subordinate ids). Clearing is refused while a container mounts the
//! folder, one inside it or one around it. Exit 0 when done, 1 otherwise.

use std::fs;
use std::os::unix::fs::MetadataExt;

use handler_sandbox::host::holds_cache;
use handler_sandbox::validate::check_abs_path;
use serde_json::json;

use super::{log, podman};

fn fail(msg: impl std::fmt::Display) -> i32 {
    log(&msg.to_string());
    1
}

/// Why a path is not a cache folder the verbs accept.
#[derive(Debug, thiserror::Error)]
enum NotACache {
    #[error(transparent)]
    Path(#[from] handler_sandbox::error::SpecError),
    #[error("{path}: {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("{0} is not a folder")]
    NotAFolder(String),
    #[error("{0} is not this user's folder")]
    NotOwned(String),
    #[error("{0} is not a cache folder")]
    Refused(String),
}

/// A cache folder the verbs accept: absolute, normalized, an existing folder of this user's,
/// not `/` and not the home itself.
fn checked(path: &str) -> Result<(), NotACache> {
    check_abs_path("path", path)?;
    let m = fs::symlink_metadata(path).map_err(|source| NotACache::Unreadable {
        path: path.to_string(),
        source,
    })?;
    if !m.is_dir() {
        return Err(NotACache::NotAFolder(path.into()));
    }
    if m.uid() != nix::unistd::getuid().as_raw() {
        return Err(NotACache::NotOwned(path.into()));
    }
    if path == "/" || std::env::var("HOME").is_ok_and(|h| h.trim_end_matches('/') == path) {
        return Err(NotACache::Refused(path.into()));
    }
    Ok(())
}

/// `cache size PATH…`: one `{"path", "bytes"}` line per folder.
pub fn size(paths: &[String]) -> i32 {
    for p in paths {
        if let Err(e) = checked(p) {
            return fail(format!("cache size: {e}"));
        }
        match in_user_namespace(&["du", "-s", "-B1", "--apparent-size", "--", p]) {
            Ok(out) => match out
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
            {
                Some(bytes) => println!("{}", json!({"path": p, "bytes": bytes})),
                None => return fail(format!("cache size: unreadable du output for {p}")),
            },
            Err(e) => return fail(format!("cache size: {e}")),
        }
    }
    0
}

/// Runs `argv` where the sandboxes' files are all this user's: podman's user namespace
/// (`podman unshare`, files of subordinate ids included); Docker's: the rootless daemon's
/// (`nsenter -U` into it).
fn in_user_namespace(argv: &[&str]) -> Result<String, podman::PodmanError> {
    if super::engine::current() == super::engine::Kind::Podman {
        let mut args = vec!["unshare"];
        args.extend(argv);
        return podman::run(&args);
    }
    // Docker: inside the rootless daemon's user namespace when it can be found (files of inner
    // ids are subordinate ids here); otherwise as this user.
    let mut cmd = match super::docker::daemon_pid() {
        Some(pid) => {
            let mut c = std::process::Command::new("nsenter");
            c.args(["-U", "--preserve-credentials", "-t", &pid.to_string(), "--"]);
            c.args(argv);
            c
        }
        None => {
            let mut c = std::process::Command::new(argv[0]);
            c.args(&argv[1..]);
            c
        }
    };
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| podman::PodmanError::Spawn {
            program: argv[0].to_string(),
            source,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(podman::PodmanError::Failed {
            verb: argv[0].to_string(),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// The names of containers mounting `path`, one inside it or one around it.
pub fn holders(path: &str) -> Result<Vec<String>, podman::PodmanError> {
    let ids = podman::run(&["ps", "-a", "-q"])?;
    let mut names = Vec::new();
    // One at a time: a container removed meanwhile is simply not a holder.
    let found: Vec<serde_json::Value> = ids
        .split_whitespace()
        .filter_map(|id| podman::json(&["container", "inspect", id]).ok())
        .filter_map(|v| v.get(0).cloned())
        .collect();
    for c in &found {
        let holds = c["Mounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["Source"].as_str())
            .any(|s| holds_cache(s, path));
        if holds {
            names.push(
                c["Name"]
                    .as_str()
                    .unwrap_or("?")
                    .trim_start_matches('/')
                    .to_string(),
            );
        }
    }
    Ok(names)
}

/// `cache clear PATH…`: empties each folder (the folder itself stays).
pub fn clear(paths: &[String]) -> i32 {
    for p in paths {
        if let Err(e) = checked(p) {
            return fail(format!("cache clear: {e}"));
        }
        match holders(p) {
            Ok(h) if !h.is_empty() => {
                return fail(format!("cache clear: {p} is mounted by {}", h.join(", ")));
            }
            Ok(_) => {}
            Err(e) => return fail(format!("cache clear: {e}")),
        }
        if let Err(e) = in_user_namespace(&[
            "find",
            p,
            "-mindepth",
            "1",
            "-maxdepth",
            "1",
            "-exec",
            "rm",
            "-rf",
            "--",
            "{}",
            "+",
        ]) {
            return fail(format!("cache clear: {e}"));
        }
    }
    0
}
