//! Shared argument helpers for Handler's thin binaries.
