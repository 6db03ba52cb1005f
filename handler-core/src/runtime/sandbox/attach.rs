//! `handler-sandbox-podman attach <name>` (A, tty): starts a tty sandbox's process on the
//! caller's terminal (podman puts it in raw mode, follows its size, passes its signals on) and
//! exits with the process's code; when the terminal goes away first, it stops the sandbox.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use super::{log, podman};
use crate::runtime::signals::Signals;
use handler_sandbox::plan::labels;

/// Exit code when the sandbox cannot be attached (no such tty sandbox, already started).
pub const NOT_ATTACHABLE: i32 = 1;

/// `attach NAME`: the process's exit code.
pub fn run(name: &str) -> i32 {
    let fmt = format!(
        "{{{{.State.Status}}}} {{{{index .Config.Labels \"{}\"}}}}",
        labels::SANDBOX
    );
    match podman::run(&["container", "inspect", "--format", &fmt, name]) {
        Ok(s) => {
            let mut f = s.split_whitespace();
            let (state, label) = (f.next().unwrap_or(""), f.next().unwrap_or(""));
            if label != name {
                log(&format!("{name:?} is not a Handler sandbox"));
                return NOT_ATTACHABLE;
            }
            if state != "created" && state != "configured" {
                log(&format!(
                    "{name:?} is {state}: only a waiting tty sandbox can be attached, once"
                ));
                return NOT_ATTACHABLE;
            }
        }
        Err(e) => {
            log(&format!("no sandbox {name:?}: {e}"));
            return NOT_ATTACHABLE;
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log(&e.to_string());
            return NOT_ATTACHABLE;
        }
    };
    rt.block_on(async {
        let Ok(mut signals) = Signals::new(&[libc::SIGHUP, libc::SIGTERM]) else {
            log("cannot handle signals");
            return NOT_ATTACHABLE;
        };
        let mut child = match tokio::process::Command::new(podman::program())
            .args(["start", "--attach", "--interactive", name])
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                log(&format!("cannot run podman: {e}"));
                return NOT_ATTACHABLE;
            }
        };
        let stop = |why: &str| {
            log(&format!("{why}: stopping the sandbox"));
            if let Err(e) = podman::run(&["stop", "--time", "3", name]) {
                log(&e.to_string());
            }
        };
        let st = tokio::select! {
            st = child.wait() => st,
            sig = signals.recv() => {
                stop(if sig == libc::SIGHUP { "the terminal went away" } else { "terminated" });
                child.wait().await
            }
        };
        match st {
            Ok(st) => st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)),
            Err(e) => {
                log(&e.to_string());
                NOT_ATTACHABLE
            }
        }
    })
}
