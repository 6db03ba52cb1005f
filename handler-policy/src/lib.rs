//! The ACP policy pipeline (C.4, P1–P9) as a pure, sans-I/O state machine.
//!
//! One [`Pipeline`] sits between one agent and its clients. The caller (the daemon) hands it
//! every frame with its [`Direction`] and carries out the [`Action`]s it returns: forward the
//! original bytes, forward a rewritten message, answer a request with an error, drop, log.
//! Only the JSON-RPC envelope is parsed; rules read the few fields they need through narrow
//! views; a message no rule touches is forwarded byte for byte. See `docs/policy.md`.
#![warn(missing_docs)]

mod config;
mod envelope;
mod event;
mod json;
mod pipeline;
mod redact;
pub mod rules;
mod tools;

pub use config::{ConfigError, PathResolver, PolicyConfig, ResolveError, UnattendedMode};
pub use event::{Answerer, Event, Side};
pub use pipeline::{Action, ClientId, Direction, Pipeline};
pub use redact::redact;
pub use tools::ToolCallInfo;
