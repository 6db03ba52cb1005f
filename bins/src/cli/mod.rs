//! The `handler` command line: its clap types ([`Cli`]) and one module per group of verbs; the
//! binary's `main` only parses and calls [`run`].

mod attach;
pub mod chat;
mod legacy;
mod ui;
pub mod resolve;
pub mod run;
pub mod session;
pub mod terminal;

pub use legacy::{AcpArgs, LoginArgs, run_account_login, run_acp, run_render};
pub use ui::{UiArgs, run_ui};

use clap::{Parser, Subcommand};

/// `handler`: the command line client of handlerd.
#[derive(Parser, Debug)]
#[command(
    name = "handler",
    version,
    about = "Run AI coding agents in sandboxes, through handlerd"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `handler`'s verbs.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Speak ACP on stdio with an agent of handlerd (for editors).
    Acp(AcpArgs),
    /// Harness adapters: render one launch to test a descriptor.
    #[command(subcommand)]
    Harness(HarnessCommand),
    /// Accounts: the model subscriptions agents use.
    #[command(subcommand)]
    Account(AccountCommand),
    /// Open the web UI in the desktop's browser (the token in the URL's fragment).
    Ui(UiArgs),
    /// Chat with the folder's agent in this terminal (a session handlerd keeps).
    Run(run::RunArgs),
    /// Re-attach to a session, with its history.
    Attach(session::AttachArgs),
    /// Sessions: list, show, stop, remove, read their log.
    #[command(subcommand)]
    Session(session::SessionCommand),
    /// The harness's own terminal program, in a sandbox of the folder's agent.
    Terminal(terminal::TerminalArgs),
}

/// `handler account …`.
#[derive(Subcommand, Debug)]
pub enum AccountCommand {
    /// Run the account's file login on this terminal; handlerd keeps the file it leaves.
    Login(LoginArgs),
}

/// `handler harness …`.
#[derive(Subcommand, Debug)]
pub enum HarnessCommand {
    /// Render one HarnessLaunch from a render request (JSON; `-` for stdin), to test a descriptor.
    Render {
        /// The render request's file, or `-` for stdin.
        #[arg(long)]
        input: String,
    },
}

/// Runs one parsed command line; returns the process's exit code.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Acp(args) => run_acp(args).await,
        Command::Harness(HarnessCommand::Render { input }) => run_render(&input).map(|()| 0),
        Command::Account(AccountCommand::Login(args)) => run_account_login(args).await,
        Command::Ui(args) => run_ui(&args),
        Command::Run(args) => run::run_run(args).await,
        Command::Attach(args) => session::run_attach(args).await,
        Command::Session(cmd) => session::run_session(cmd).await,
        Command::Terminal(args) => terminal::run_terminal(args).await,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
