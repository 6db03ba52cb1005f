//! `handler`: the command line client of handlerd. `handler acp AGENT` bridges an editor's ACP
//! stdio to the agent's WebSocket (C.1); `handler harness render` renders one launch (B.3).

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "handler", version, about = "Run AI coding agents in sandboxes, through handlerd")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Speak ACP on stdio with an agent of handlerd (for editors).
    Acp(handler_bins::AcpArgs),
    /// Harness adapters (contract B).
    #[command(subcommand)]
    Harness(HarnessCommand),
}

#[derive(Subcommand)]
enum HarnessCommand {
    /// Render one HarnessLaunch from a render request (JSON; `-` for stdin), to test a descriptor.
    Render {
        #[arg(long)]
        input: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Acp(args) => std::process::exit(handler_bins::run_acp(args).await?),
        Command::Harness(HarnessCommand::Render { input }) => handler_bins::run_render(&input),
    }
}
