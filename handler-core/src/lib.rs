//! Handler's I/O, as libraries: the daemon (control plane), the sandbox runtime (the launcher
//! verbs and the egress proxy), the client side of handlerd and the git reader child, wiring the
//! pure crates, which make every decision, to the world (tokio, processes, sockets, files).
//!
//! Four parts, each a cargo feature: `daemon` (handlerd), `runtime` (`handler-sandbox-podman`,
//! `handler-sandbox-docker`, `handler-egress-proxy`) and `client` (`handler`), on by default, and
//! `gitread` (`handler-git-read`, the session files' git reader: gix is linked only into it). They
//! never import each other: the daemon starts the runtime and the git reader as processes (the
//! spec on fd 3, CLI verbs) and the client talks to handlerd over HTTP. Two small modules are
//! shared: `lines` (bounded line reading: the runtime's and the daemon's) and `socket`
//! (handlerd's unix socket: the daemon's and the client's).

#![warn(missing_docs)]

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "gateway")]
pub mod gateway;
#[cfg(feature = "gitread")]
pub mod gitread;
pub mod lines;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(any(feature = "daemon", feature = "client"))]
pub mod socket;
