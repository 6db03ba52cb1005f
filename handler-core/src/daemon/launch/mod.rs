//! Launching sandboxes: the launcher (the sandbox executable with the spec on fd 3) the
//! control plane drives.

pub mod addons;
pub mod launcher;
pub mod rules;
