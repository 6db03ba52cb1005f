//! The sandbox executable's runtime (contract A) for `handler-sandbox-podman`: launch (fd 3,
//! signals, cleanup), attach, sweep, check, image and cache verbs, all through the podman CLI.
//! Every decision (validation, the podman argv) is handler-sandbox's pure plan.

pub mod attach;
pub mod cache;
pub mod check;
pub mod egress_verbs;
pub mod host;
pub mod image;
pub mod launch;
pub mod podman;
pub mod stderr;
pub mod sweep;
pub mod watchdog;

/// A log line on stderr (A5: never stdout).
pub fn log(msg: &str) {
    eprintln!("handler-sandbox-podman: {msg}");
}
