//! handler-sandbox's integration tests: the podman plan's snapshots and refusals.
//! One integration-test binary for this crate (docs/testing.md): one module per former test file.

mod example;
mod plan;
