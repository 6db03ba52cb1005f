//! placeholder

pub mod egress;
