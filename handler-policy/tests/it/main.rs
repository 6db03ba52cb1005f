//! handler-policy's integration tests: the transcript fixtures, the real-traffic corpus and the properties.
//! One integration-test binary for this crate (docs/testing.md): one module per former test file.

mod corpus;
mod example;
mod fixtures;
mod properties;
