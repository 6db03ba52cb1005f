//! `handler-sandbox-podman`: Handler's sandbox executable for rootless Podman (contract A):
//! launch (SandboxSpec on fd 3), attach, set-egress, set-allow, sweep, check, image and cache.

#[path = "../sandbox_cli.rs"]
mod sandbox_cli;

fn main() {
    sandbox_cli::main(
        handler_core::runtime::sandbox::engine::Kind::Podman,
        "Handler's rootless Podman sandbox (contract A)",
    );
}
