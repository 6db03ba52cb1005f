//! Harness adapters (contract B): the platform's descriptors for five real agents (embedded
//! platform data), the pure, deterministic `render` (B.3) and the writing of a provider into each
//! harness's own configuration (B.4). No I/O: everything comes in as arguments.
#![warn(missing_docs)]

pub mod descriptors;
pub mod error;
pub mod parts;
pub mod paths;
pub mod providers;
pub mod render;
pub mod seed;

pub use descriptors::{
    SANDBOX_ENV_PATH, SANDBOX_ENV_SCRIPT, builtin, builtin_names, containerfile,
};
pub use error::RenderError;
pub use render::{RenderContext, RenderRequest, render, render_json};
