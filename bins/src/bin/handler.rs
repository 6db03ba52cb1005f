//! `handler`: the command line client of handlerd (see `handler_bins::cli`).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let code = handler_bins::cli::run(handler_bins::cli::Cli::parse()).await?;
    std::process::exit(code)
}
