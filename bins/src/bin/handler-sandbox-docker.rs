//! `handler-sandbox-docker`: Handler's sandbox executable for (rootless) Docker (contract A,
//! issue 19): the same verbs as `handler-sandbox-podman`, over the docker CLI. A rootful daemon
//! is refused unless `HANDLER_DOCKER_ALLOW_ROOTFUL=1` (decision 0080); `HANDLER_DOCKER_OCI_RUNTIME`
//! names the OCI runtime (`--runtime`, e.g. runsc); `HANDLER_DOCKER` the docker executable.

#[path = "../sandbox_cli.rs"]
mod sandbox_cli;

fn main() {
    sandbox_cli::main(
        handler_core::runtime::sandbox::engine::Kind::Docker,
        "Handler's rootless Docker sandbox (contract A)",
    );
}
