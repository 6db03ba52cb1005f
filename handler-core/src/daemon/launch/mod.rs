//! Launching sandboxes: the launcher (the sandbox executable with the spec on fd 3) the
//! control plane drives.

pub mod launcher;
