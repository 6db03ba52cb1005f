//! Launching sandboxes: everything between "start this agent" and a running sandbox — gather
//! (the I/O: stores, folders, secret references, skills, caches, state), the pure resolve
//! (E1–E6, render, compose, the policy's configuration), and the launcher (the sandbox
//! executable with the spec on fd 3) the control plane drives.

pub mod addons;
pub mod agent;
pub mod caches;
pub mod gather;
pub mod gitguard;
pub mod image_verbs;
pub mod kept;
pub mod launcher;
pub mod prepare;
pub mod records;
pub mod resolve;
pub mod seed;
pub mod sources;
