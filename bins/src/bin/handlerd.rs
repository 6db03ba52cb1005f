//! handlerd: Handler's control plane (D). Configuration comes from the environment
//! (`HANDLER_PORT`, `HANDLER_CONFIG_DIR`, …, see docs/daemon.md); it serves until SIGTERM or
//! SIGINT, then stops its sandboxes.

use clap::Parser;

/// handlerd: Handler's daemon. It serves the Control API, the web UI and the agents' ACP
/// endpoint on 127.0.0.1, and runs the agents' sandboxes. Configured by the environment
/// (HANDLER_PORT, HANDLER_CONFIG_DIR, HANDLER_RUNTIME, HANDLER_LOG …; docs/daemon.md); run it with
/// `handler daemon start` or `handler daemon install` (a systemd user unit).
#[derive(Debug, Parser)]
#[command(
    version,
    about = "Handler's daemon: the Control API, the web UI and the agents' sandboxes",
    long_about = None
)]
struct Args {
    /// The port (overrides $HANDLER_PORT; default 7430).
    #[arg(long)]
    port: Option<u16>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    handler_core::daemon::init_logging();
    let mut config = handler_core::daemon::DaemonConfig::from_env()?;
    if let Some(p) = args.port {
        config.set_port(p);
    }
    handler_core::daemon::run_with(config).await?;
    Ok(())
}
