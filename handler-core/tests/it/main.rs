//! handler-core's integration tests: the daemon over real HTTP and WebSockets, the egress proxy over real TLS, the runtime's settings.
//! One integration-test binary for this crate (docs/testing.md): one module per former test file.
#![allow(
    clippy::too_many_lines,
    reason = "a test reads as the scenario it runs, step by step"
)]

mod acp_endpoint;
mod acp_python_client;
mod addon_install;
mod api_control;
mod apps_api;
mod builtin_upstream;
mod caches_api;
mod daemon_addons;
mod daemon_images;
mod daemon_launch;
mod daemon_login;
mod daemon_support;
mod egress_proxy;
mod egress_relay;
mod egress_support;
mod egress_ws;
mod knowledge_api;
mod remote_connector;
mod runs_api;
mod runtime_settings;
mod session_files;
mod session_files_api;
mod sessions_api;
mod sessions_live;
mod skills_api;
mod web_ui;
