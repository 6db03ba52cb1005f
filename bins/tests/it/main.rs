//! handler-bins' integration tests: the CLI and the container tests against real rootless Podman.
//! One integration-test binary for this crate (docs/testing.md): one module per former test file.
#![allow(
    clippy::too_many_lines,
    reason = "a test reads as the scenario it runs, step by step"
)]

mod cli_harness_render;
mod cli_resources;
mod cli_sessions;
mod cli_setup;
mod cli_transport;
mod daemon_acp_sandbox;
mod daemon_addon_images;
mod daemon_apps;
mod daemon_git_guard;
mod daemon_images;
mod daemon_listings;
mod daemon_login_cli;
mod daemon_machine_pull;
mod daemon_machines;
mod daemon_parts;
mod daemon_runs;
mod daemon_seed;
mod daemon_session_tree;
mod daemon_sessions;
mod egress_podman;
mod example_relay;
mod installed_handler;
mod real_agents_e2e;
mod remote;
mod sandbox_conformance;
mod sandbox_machine;
mod sandbox_runtime;
mod session_files_git;
mod temp_daemon;
mod web_ui;
