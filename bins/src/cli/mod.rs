//! The `handler` command line: its clap types ([`Cli`]) and one module per group of verbs; the
//! binary's `main` only parses and calls [`run()`].

mod accounts;
mod addon;
mod agents;
mod app;
mod attach;
mod builds;
pub mod chat;
mod daemon;
mod docs;
mod legacy;
mod machine;
mod machine_exec;
pub mod out;
mod places;
mod projects;
mod providers;
mod remote;
pub mod resolve;
pub mod run;
pub mod runs;
mod secrets;
pub mod session;
mod setup;
mod skills;
pub mod terminal;
mod token;
mod ui;

pub use accounts::AccountCommand;
pub use addon::AddonCommand;
pub use agents::AgentCommand;
pub use builds::{BuildCommand, ImageUpdatesCommand};
pub use daemon::DaemonCommand;
pub use docs::Shell;
pub use legacy::{AcpArgs, LoginArgs, run_account_login, run_acp, run_render};
pub use places::{ContextCommand, FolderCommand};
pub use projects::ProjectCommand;
pub use providers::ProviderCommand;
pub use secrets::SecretCommand;
pub use setup::SetupArgs;
pub use skills::SkillCommand;
pub use ui::{UiArgs, run_ui};

use clap::{Parser, Subcommand};

/// `handler`: the command line client of handlerd.
#[derive(Parser, Debug)]
#[command(
    name = "handler",
    version,
    about = "Run AI coding agents in sandboxes, through handlerd",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// Print the API's objects as JSON instead of tables and sentences.
    #[arg(long, global = true)]
    pub json: bool,
    /// On an error, print its whole chain of causes and a backtrace when one was captured.
    #[arg(long, global = true)]
    pub debug: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The exit codes, as `handler --help` ends.
pub const EXIT_CODES: &str = "Exit codes:
  0  done
  1  failed: the error line says what and how to fix it
  2  nothing done: the command line is wrong, or a confirmation is missing
  3  handlerd cannot be reached (start it: handler daemon start)
  handler acp: 0 when the editor closed, else what the agent's connection ended with";

/// `handler`'s verbs.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Speak ACP on stdio with an agent of handlerd (for editors).
    Acp(AcpArgs),
    /// Harness adapters: render one launch to test a descriptor.
    #[command(subcommand)]
    Harness(HarnessCommand),
    /// Accounts: the model subscriptions agents run on.
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
    /// Providers: model endpoints (a local server, an API with a key).
    #[command(subcommand)]
    Provider(ProviderCommand),
    /// Secrets: the values providers and accounts use, never printed.
    #[command(subcommand)]
    Secret(SecretCommand),
    /// Agents: what sessions open on, and how they are contained.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Projects: a folder and its agents.
    #[command(subcommand)]
    Project(ProjectCommand),
    /// Contexts: what a project is for (Work, Personal, a client).
    #[command(subcommand)]
    Context(ContextCommand),
    /// Work folders: where agents may work.
    #[command(subcommand)]
    Folder(FolderCommand),
    /// Image builds: start, list, follow, cancel.
    #[command(subcommand)]
    Build(BuildCommand),
    /// The schedule that rebuilds the images.
    #[command(subcommand, name = "image-updates")]
    ImageUpdates(ImageUpdatesCommand),
    /// Skills: the library of instructions (and scripts) agents pick.
    #[command(subcommand)]
    Skill(SkillCommand),
    /// Addons: install from the catalog, a folder or an archive; list; show; remove.
    #[command(subcommand)]
    Addon(AddonCommand),
    /// Machines: sandboxes that outlive every session (make, list, stats, start, stop, remove).
    #[command(subcommand)]
    Machine(machine::MachineCommand),
    /// Profiles: the daemon's named machine settings (profiles.toml).
    #[command(subcommand)]
    Profile(machine::ProfileCommand),
    /// Parts: agent CLIs and Node as read-only mounts for machines (list, build ahead).
    #[command(subcommand)]
    Part(machine::PartCommand),
    /// Mini apps: folders an agent wrote, deployed and served at NAME.localhost (H).
    #[command(subcommand)]
    App(app::AppCommand),
    /// Remote control: a gateway, paired devices, the light (D.7).
    #[command(subcommand)]
    Remote(remote::RemoteCommand),
    /// Check this host, start handlerd, build the images, add a provider: ready to run agents.
    Setup(SetupArgs),
    /// handlerd as a service: start, stop, status, logs, install (a systemd user unit).
    #[command(subcommand)]
    Daemon(DaemonCommand),
    /// handlerd's token: rotate it.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Print a shell's completion script (bash, zsh, fish).
    Completions {
        /// The shell.
        shell: Shell,
    },
    /// Print handler's man page, or write one per verb into a folder.
    Man {
        /// Write `handler.1`, `handler-account.1`, … into this folder.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
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
    let json = cli.json;
    match cli.command {
        Command::Acp(args) => run_acp(args).await,
        Command::Harness(HarnessCommand::Render { input }) => run_render(&input).map(|()| 0),
        Command::Ui(args) => run_ui(&args).await,
        Command::Run(args) => run::run_run(args).await,
        Command::Attach(args) => session::run_attach(args).await,
        Command::Session(cmd) => session::run_session(cmd).await,
        Command::Terminal(args) => terminal::run_terminal(args).await,
        Command::Account(c) => accounts::run(c, json).await,
        Command::Provider(c) => providers::run(c, json).await,
        Command::Secret(c) => secrets::run(c, json).await,
        Command::Agent(c) => agents::run(c, json).await,
        Command::Project(c) => projects::run(c, json).await,
        Command::Context(c) => places::run_context(c, json).await,
        Command::Folder(c) => places::run_folder(c, json).await,
        Command::Build(c) => builds::run(c, json).await,
        Command::ImageUpdates(c) => builds::run_image_updates(c, json).await,
        Command::Skill(c) => skills::run(c, json).await,
        Command::Addon(c) => addon::run(c, json).await,
        Command::Machine(c) => machine::run(c, json).await,
        Command::Profile(c) => machine::run_profile(c, json).await,
        Command::Part(c) => machine::run_part(c, json).await,
        Command::App(c) => app::run(c, json).await,
        Command::Remote(c) => remote::run(c, json).await,
        Command::Setup(a) => setup::run(a).await,
        Command::Daemon(c) => daemon::run(c, json).await,
        Command::Token(c) => token::run(c, json).await,
        Command::Completions { shell } => {
            docs::completions(shell, &mut std::io::stdout()).map(|()| 0)
        }
        Command::Man { dir } => docs::man(dir.as_deref(), &mut std::io::stdout()).map(|()| 0),
    }
}

/// `handler`'s `main`: parses, runs, prints an error as one line (`handler: what: why`) and
/// exits with its code; the causes' Debug and a backtrace only with `--debug`, whatever
/// `RUST_BACKTRACE` says.
pub fn main() -> ! {
    use clap::Parser;
    let cli = Cli::parse();
    let debug = cli.debug;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(rt) => rt.block_on(run(cli)),
        Err(e) => Err(anyhow::Error::new(e).context("starting the async runtime")),
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            if debug {
                eprintln!("handler: {e:?}");
            } else {
                eprintln!("handler: {}", out::one_line(&e));
            }
            out::exit_code(&e)
        }
    };
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    /// Every noun takes `ls` for its listing and `rm` for its removal, as podman, docker and
    /// `handler machine` do (issue 33 item 11): `handler agent ls` is what a new user types.
    #[test]
    fn every_noun_lists_with_ls_and_removes_with_rm() {
        use clap::{CommandFactory, Parser};
        let cli = super::Cli::command();
        let mut nouns = 0;
        for noun in cli.get_subcommands() {
            let has = |name: &str| noun.find_subcommand(name).is_some();
            if has("list") || has("ls") {
                nouns += 1;
                assert!(
                    has("ls") && has("list"),
                    "handler {}: ls and list",
                    noun.get_name()
                );
            }
            if has("rm") || has("remove") {
                assert!(
                    has("rm") && has("remove"),
                    "handler {}: rm and remove",
                    noun.get_name()
                );
            }
        }
        assert!(nouns >= 10, "{nouns} nouns with a listing");
        for args in [
            ["agent", "ls"],
            ["project", "ls"],
            ["secret", "ls"],
            ["machine", "list"],
        ] {
            let argv = std::iter::once("handler").chain(args);
            super::Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
        super::Cli::try_parse_from(["handler", "agent", "remove", "a1"]).unwrap();
    }
}
