//! `handler-gateway`: remote control's relay (D.7, docs/remote.md). handlerd polls it outbound;
//! paired devices talk to it; it routes sealed envelopes it cannot read. Its logic is
//! `handler_core::gateway`.

use clap::Parser;

/// Remote control's relay between handlerd and paired devices (docs/remote.md).
#[derive(Debug, Parser)]
#[command(name = "handler-gateway", version)]
struct Args {
    /// Where to listen (`0.0.0.0:443` on a server; port 0 picks one, printed on stdout).
    #[arg(long, env = "HANDLER_GATEWAY_LISTEN", default_value = "127.0.0.1:8787")]
    listen: std::net::SocketAddr,
    /// Where its store lives (made when missing).
    #[arg(
        long,
        env = "HANDLER_GATEWAY_DATA",
        default_value = "/var/lib/handler-gateway"
    )]
    data: std::path::PathBuf,
    /// A PEM certificate chain: serve HTTPS (with --tls-key).
    #[arg(long, env = "HANDLER_GATEWAY_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The certificate's PEM private key.
    #[arg(long, env = "HANDLER_GATEWAY_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Only daemons showing this token may register (recommended on a public server).
    #[arg(
        long,
        env = "HANDLER_GATEWAY_REGISTRATION_TOKEN",
        hide_env_values = true
    )]
    registration_token: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    handler_core::gateway::init_logs();
    let (addr, serve) = handler_core::gateway::bind(handler_core::gateway::GatewayConfig {
        listen: a.listen,
        data: a.data,
        tls: a.tls_cert.zip(a.tls_key),
        registration_token: a.registration_token,
    })
    .await?;
    println!("handler-gateway listening on {addr}");
    tokio::select! {
        () = serve => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
