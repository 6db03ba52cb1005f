//! handler-egress-proxy: a sandbox's egress proxy (A.3). Reads its configuration (JSON, with the
//! injections' values) on stdin to its end (a machine's, without secrets, from `--config FILE`), prints one ready line on stdout, reports egress
//! events on stderr, and runs until SIGTERM. As `shim`, the sandbox's side of it (decision 0024);
//! as `exec-server`, a machine's first process (decision 0171).
//! All of it is handler-core's `egress` runtime.

use clap::{Parser, Subcommand};

/// The per-sandbox egress proxy of handler-sandbox-podman; its configuration comes on stdin.
#[derive(Parser)]
#[command(name = "handler-egress-proxy", version)]
struct Args {
    /// Read the configuration from FILE instead of stdin (a machine's proxy: no secret in it).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// A warm pool member (decision 0175): wait for one launcher on SOCKET, which gives the
    /// configuration and takes the ready line and the events.
    #[arg(long, value_name = "SOCKET", conflicts_with = "config")]
    claim: Option<std::path::PathBuf>,
    /// With --claim: end after SECONDS unclaimed.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 600,
        requires = "claim"
    )]
    idle: u64,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// In the sandbox: forward LISTEN to the proxy's SOCKET, then become COMMAND.
    Shim {
        #[arg(long)]
        listen: String,
        #[arg(long)]
        socket: std::path::PathBuf,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// A machine's first process: runs COMMAND and the execs asked in DIR (decision 0171).
    #[command(name = "exec-server")]
    ExecServer {
        #[arg(long)]
        dir: std::path::PathBuf,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// The shim's forwarder (its listener is stdin).
    #[command(name = "shim-forward", hide = true)]
    ShimForward {
        #[arg(long)]
        socket: std::path::PathBuf,
        #[arg(long)]
        detach: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let args = Args::parse();
    match args.cmd {
        Some(Cmd::Shim {
            listen,
            socket,
            command,
        }) => {
            let e = handler_core::runtime::egress::shim::run(&exe, &listen, &socket, &command);
            eprintln!("{e}");
            std::process::exit(e.exit_code());
        }
        Some(Cmd::ExecServer { dir, command }) => {
            std::process::exit(handler_core::runtime::exec_server::run(&dir, &command));
        }
        Some(Cmd::ShimForward { socket, detach }) => {
            return Ok(handler_core::runtime::egress::shim::forward_main(
                &exe, &socket, detach,
            )?);
        }
        None => {}
    }
    if let Some(sock) = &args.claim
        && !handler_core::runtime::egress::claim::wait(
            sock,
            std::time::Duration::from_secs(args.idle),
        )?
    {
        // Nobody claimed it: its container ends (and goes, `--rm`).
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let run = async {
        match (&args.config, &args.claim) {
            (Some(f), _) => handler_core::runtime::egress::run_from_file(f).await,
            (None, Some(_)) => handler_core::runtime::egress::claim::run_claimed().await,
            (None, None) => handler_core::runtime::egress::run_from_stdin().await,
        }
    };
    if let Err(e) = rt.block_on(run) {
        eprintln!("handler-egress-proxy: {e}");
        std::process::exit(66);
    }
    Ok(())
}
