//! handler-contracts' integration tests: documents, errors, validators, schemas and the workspace's shape.
//! One integration-test binary for this crate (docs/testing.md): one module per former test file.

mod architecture;
mod documents;
mod errors;
mod example;
mod invalid_documents;
mod schemas;
mod validators;
