//! Handler's I/O: the daemon, the Podman launcher, the egress proxy runtime and the client
//! bridge, wiring tokio to the pure crates, which make every decision.

pub mod client;
pub mod daemon;
pub mod egress;
pub mod launch;
pub mod sandbox;
