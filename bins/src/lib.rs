//! Argument types and glue shared by Handler's thin binaries (clap structs → handler-core calls).

#[cfg(feature = "client")]
pub mod cli;
