//! handler-harness' integration tests: the platform descriptors and the render rules and golden matrix.
//! One integration-test binary for this crate (docs/testing.md): one module per former test file.
#![allow(
    clippy::too_many_lines,
    reason = "a test reads as the scenario it runs, step by step"
)]
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "tests read fixtures and run examples: the I/O is outside the pure library"
)]

mod addon_images;
mod common;
mod descriptors;
mod example;
mod render_matrix;
mod render_rules;
mod seed;
