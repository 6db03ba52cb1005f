//! placeholder

pub mod egress;
pub mod sandbox;
