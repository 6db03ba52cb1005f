//! The resources' rules (the services layer), called by the API's handlers: each module checks
//! and changes one resource through the stores; `connections` relays an ACP connection and
//! `sessions` a session over the one agent-start path (`launch::agent`); `ws` holds the
//! WebSocket helpers both share.

pub mod accounts;
pub mod addon_install;
pub mod addons;
#[cfg(test)]
mod agent_writable_reads;
pub mod agents;
pub mod apps;
pub mod builtin_agents;
pub mod caches;
pub mod connections;
pub mod contexts;
pub mod directories;
pub mod folders;
pub mod harnesses;
pub mod images;
pub mod knowledge;
pub mod login_window;
pub mod machine_devcontainer;
pub mod machine_events;
pub mod machine_exec;
pub mod machines;
pub mod parts;
pub mod projects;
pub mod providers;
pub mod remote;
pub mod running;
pub mod secrets;
pub mod seeds;
pub mod session_files;
pub mod sessions;
pub mod skills;
pub mod terminal_egress;
pub mod terminals;
pub mod ws;
