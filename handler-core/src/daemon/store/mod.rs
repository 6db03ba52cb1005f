//! Persistence (the store layer): the documents on disk and the in-memory stores over them.
//! It imports only the low helpers (`config`, `problem`, `fsutil`, `skills`), never a service,
//! the API or the launch.

pub mod accounts;
pub mod addons;
pub mod agents;
pub mod catalog;
pub mod contexts;
pub mod documents;
pub mod folders;
pub mod knowledge;
pub mod platform;
pub mod providers;
pub mod secrets;
pub mod sessions;
pub mod skills;
pub mod tomldoc;

pub use agents::{AgentStore, StoreError, StoredAgent, StoredProject, new_id};
pub mod builds;
