//! The sandbox runtime (contract A), the half of handler-core behind the `runtime` feature:
//! `sandbox`, the verbs of the sandbox executable `handler-sandbox-podman`, and `egress`, the
//! per-sandbox egress proxy and the in-sandbox forwarder (`handler-egress-proxy`); `signals`,
//! the one way its verbs wait for a signal. It never imports the daemon; the daemon reaches it
//! only as a process (fd 3, CLI verbs).

#![warn(missing_docs)]

pub mod egress;
pub mod exec_server;
pub mod sandbox;
pub mod signals;
