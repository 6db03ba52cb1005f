//! The sandbox executable's runtime (contract A) for `handler-sandbox-podman` and
//! `handler-sandbox-docker` (the engine chosen once, `engine`): launch (fd 3, signals, cleanup),
//! attach, sweep, check, image and cache verbs, through the engine's CLI.
//! Every decision (validation, the podman argv) is handler-sandbox's pure plan.

pub mod attach;
pub mod cache;
pub mod check;
pub mod docker;
pub mod egress_verbs;
pub mod engine;
pub mod git_bundle;
pub mod host;
pub mod image;
pub mod image_base;
pub mod keep;
pub mod launch;
pub mod machine;
pub mod machine_server;
pub mod machine_up;
pub mod podman;
pub mod stderr;
pub mod sweep;
pub mod watchdog;

/// A log line on stderr (A5: never stdout).
pub fn log(msg: &str) {
    eprintln!("{}: {msg}", engine::current().executable());
}
