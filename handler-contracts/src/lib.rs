//! Handler's contracts: every document of the seed (sections A–H) as serde types, the pure
//! validators for rules about one document, and the JSON Schemas generated from the types.
//!
//! This crate does no I/O: no file system, no processes, no clock, no network.
#![warn(missing_docs)]

pub mod access;
pub mod account;
pub mod acp;
pub mod addon;
pub mod allow;
pub mod api_version;
pub mod containment;
pub mod context;
pub mod control;
pub mod files;
pub mod harness;
pub mod hosts;
pub mod machine;
pub mod miniapp;
pub mod parse;
pub mod patterns;
pub mod remote;
pub mod run;
pub mod sandbox;
pub mod schema;
pub mod session;
pub mod settings;
pub mod skill;
pub mod skill_archive;
pub mod skill_scan;
pub mod validate;

pub use access::{Account, AgentSpec, FileSource, Protocol, Provider, ProviderModel, SecretRef};
pub use allow::{AllowEntry, AllowTarget};
pub use harness::{HarnessDescriptor, HarnessLaunch, McpServer, PermissionMode, RenderInput};
pub use parse::DocumentError;
pub use sandbox::{NetworkPolicy, SandboxSpec};
pub use validate::ValidationError;

/// The Control API's default port (D, discovery): `$HANDLER_PORT` overrides it.
pub const DEFAULT_PORT: u16 = 7430;
/// The token's file name in `$HANDLER_CONFIG_DIR` (default `~/.config/handler-ai`).
pub const TOKEN_FILE_NAME: &str = "token";
/// Where an image records what it installed (B.6).
pub const IMAGE_VERSION_FILE: &str = "/usr/share/handler/version";
/// Handler's folder name under `~/.config`, `~/.local/state`, `~/.cache`.
pub const APP_DIR_NAME: &str = "handler-ai";
