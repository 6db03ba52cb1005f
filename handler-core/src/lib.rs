//! Handler's I/O, as libraries: the daemon (control plane), the sandbox runtime (the launcher
//! verbs and the egress proxy) and the client side of handlerd, wiring tokio to the pure crates,
//! which make every decision.
//!
//! The halves are cargo features (both on by default): `daemon` (handlerd), `runtime`
//! (`handler-sandbox-podman`, `handler-egress-proxy`) and `client` (`handler`). They never import
//! each other: the daemon starts the runtime as a process (the spec on fd 3, CLI verbs).

#![warn(missing_docs)]

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "daemon")]
pub mod daemon;
#[cfg(feature = "gitread")]
pub mod gitread;
pub mod lines;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(any(feature = "daemon", feature = "client"))]
pub mod socket;
