//! handler-egress-proxy: a sandbox's egress proxy (A.3). Reads its configuration (JSON, with the
//! injections' values) on stdin to its end, prints one ready line on stdout, reports egress
//! events on stderr, and runs until SIGTERM. All of it is handler-core's `egress` runtime.

use clap::Parser;

/// The per-sandbox egress proxy of handler-sandbox-podman; its configuration comes on stdin.
#[derive(Parser)]
#[command(name = "handler-egress-proxy", version)]
struct Args {}

fn main() -> anyhow::Result<()> {
    Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if let Err(e) = rt.block_on(handler_core::egress::run_from_stdin()) {
        eprintln!("handler-egress-proxy: {e}");
        std::process::exit(66);
    }
    Ok(())
}
