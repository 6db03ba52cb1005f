//! The pure part of Handler's sandbox (contract A): SandboxSpec validation (65, the field named),
//! what this host can enforce (64), and the podman plan (argv, podman's environment, staged
//! files) as a pure function of the spec and the host facts. No I/O: handler-core runs the plan.

#![warn(missing_docs)]

pub mod app;
pub mod compose;
pub mod copytree;
pub mod egress;
pub mod error;
pub mod facts;
pub mod git;
pub mod guard;
pub mod host;
pub mod keep;
pub mod machine;
pub mod network;
pub mod plan;
pub mod validate;
pub mod verbs;

pub use error::SpecError;
pub use facts::{HostFacts, LauncherId, PathKind};
pub use network::{NetworkPlan, plan_network};
pub use plan::{LaunchPlan, ProxyPlan, Stage, plan_launch};
pub use validate::{ValidSpec, validate_spec};
