//! `handler completions SHELL` and `handler man`: generated from the clap tree, so they name
//! every verb there is.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::CommandFactory;

/// The shells `handler completions` writes a script for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shell {
    /// Bash (`source <(handler completions bash)`).
    Bash,
    /// Zsh (write it as `_handler` in a folder of `$fpath`).
    Zsh,
    /// Fish (write it to `~/.config/fish/completions/handler.fish`).
    Fish,
}

/// Writes `shell`'s completion script of `handler` to `out`.
pub(crate) fn completions(shell: Shell, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut cmd = super::Cli::command();
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(shell, &mut cmd, "handler", out);
    Ok(())
}

/// Writes the man page of `handler` to `out`, or one page per verb into `dir`.
pub(crate) fn man(dir: Option<&Path>, out: &mut dyn Write) -> anyhow::Result<()> {
    let cmd = super::Cli::command();
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("making {}", d.display()))?;
            clap_mangen::generate_to(cmd, d)
                .with_context(|| format!("writing the man pages into {}", d.display()))?;
        }
        None => clap_mangen::Man::new(cmd)
            .render(out)
            .context("writing the man page")?,
    }
    Ok(())
}
