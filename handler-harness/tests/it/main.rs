//! handler-harness' integration tests: the platform descriptors and the render rules and golden matrix.
//! One integration-test binary for this crate (docs/testing.md): one module per former test file.

mod common;
mod descriptors;
mod example;
mod render_matrix;
mod render_rules;
