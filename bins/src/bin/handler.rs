//! `handler`: the command line client of handlerd. `handler acp AGENT` bridges an editor's ACP
//! stdio to the agent's WebSocket (C.1); `handler harness render` renders one launch (B.3);
//! `handler account login NAME` runs a file login and gives its file to handlerd (D.9).

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "handler",
    version,
    about = "Run AI coding agents in sandboxes, through handlerd"
)]
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
    /// Accounts (D.9).
    #[command(subcommand)]
    Account(AccountCommand),
}

#[derive(Subcommand)]
enum AccountCommand {
    /// Run the account's file login on this terminal; handlerd keeps the file it leaves.
    Login(handler_bins::LoginArgs),
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
        Command::Account(AccountCommand::Login(args)) => {
            std::process::exit(handler_bins::run_account_login(args).await?)
        }
    }
}
