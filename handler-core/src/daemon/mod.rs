//! handlerd, the control plane (D), in layers that only call downward: `server` (binding and
//! serving) > `api` (routes, auth, OpenAPI, one thin handler module per resource) >
//! `services` (each resource's rules, the ACP connections) > `launch` (from "start this agent"
//! to a running sandbox) > `state` (the shared state) > `store` (persistence) > the low helpers
//! (`config`, `problem`, `fsutil`, `agentfs`, `memo`). A file's layer is its folder;
//! `handler-contracts/tests/it/architecture.rs` checks the order.

pub mod agentfs;
pub mod api;
pub mod config;
pub mod fsutil;
pub mod launch;
pub mod memo;
pub mod problem;
pub mod secretref;
pub mod server;
pub mod services;
pub mod state;
pub mod store;

pub use api::{auth, openapi, routes};
pub use config::DaemonConfig;
pub use server::{DaemonError, Running, build, init_logging, run, run_with, serve, signals};
pub use state::{App, AppState, EGRESS_EVENTS_KEPT, LiveConnection};
