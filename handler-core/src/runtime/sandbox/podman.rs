//! Calls to the podman CLI (decision 0001: the CLI, not podman-api): one function that runs a
//! podman command and gives its output, or an error with podman's own words.

use std::process::{Command, Output, Stdio};

/// The podman executable: `$HANDLER_PODMAN`, else `podman` on PATH.
pub fn program() -> String {
    std::env::var("HANDLER_PODMAN").unwrap_or_else(|_| "podman".to_string())
}

/// A podman command with these arguments (stdin closed).
pub fn command<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut c = Command::new(program());
    c.args(args).stdin(Stdio::null());
    c
}

/// A podman call that failed.
#[derive(Debug, thiserror::Error)]
pub enum PodmanError {
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("podman {verb} failed: {stderr}")]
    Failed {
        verb: String,
        code: Option<i32>,
        stderr: String,
    },
}

/// Runs podman with `args`, capturing stdout and stderr.
pub fn output(args: &[&str]) -> Result<Output, PodmanError> {
    command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| PodmanError::Spawn {
            program: program(),
            source,
        })
}

/// Runs podman with `args`; its stdout when it succeeds.
pub fn run(args: &[&str]) -> Result<String, PodmanError> {
    let out = output(args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(PodmanError::Failed {
            verb: args.iter().take(2).copied().collect::<Vec<_>>().join(" "),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Runs podman with `args` and reads its stdout as JSON.
pub fn json(args: &[&str]) -> Result<serde_json::Value, PodmanError> {
    let text = run(args)?;
    let text = if text.trim().is_empty() {
        "null"
    } else {
        text.trim()
    };
    serde_json::from_str(text).map_err(|e| PodmanError::Failed {
        verb: args.iter().take(2).copied().collect::<Vec<_>>().join(" "),
        code: None,
        stderr: format!("unreadable JSON output: {e}"),
    })
}

/// Makes a podman child of the launcher die with it (SIGKILL when the launcher ends, also by
/// SIGKILL): a podman left running after its launcher could still create or keep a container
/// nobody removes. The launcher spawns from its one (main) thread, which lives as long as it.
#[allow(unsafe_code)]
pub fn die_with_parent(cmd: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and only makes two system calls
    // (prctl, getppid), both async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // The launcher died before the line above: end at once.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}
