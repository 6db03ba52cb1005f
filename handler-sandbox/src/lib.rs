//! placeholder
pub mod egress;
