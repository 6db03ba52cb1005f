//! The first verbs of `handler`: the editor's ACP bridge, `harness render` and `account login`.

use clap::Args;
use handler_core::client::{Discovery, acp_bridge};

/// `handler acp AGENT [--account A | --provider P --harness H] [--model M]`.
#[derive(Args, Debug)]
pub struct AcpArgs {
    /// The agent's id.
    pub agent: String,
    /// Run with this account instead of the agent's first model.
    #[arg(long, conflicts_with = "provider")]
    pub account: Option<String>,
    /// Run with this provider (give --harness too).
    #[arg(long, requires = "harness")]
    pub provider: Option<String>,
    /// The harness that talks to the provider.
    #[arg(long)]
    pub harness: Option<String>,
    /// The model.
    #[arg(long)]
    pub model: Option<String>,
    /// The largest ACP message, in bytes (default 16 MiB).
    #[arg(long, default_value_t = handler_contracts::acp::DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
}

impl AcpArgs {
    /// `/v1/agents/{id}/acp` with the model the query names.
    pub fn path(&self) -> String {
        let mut query: Vec<String> = Vec::new();
        for (k, v) in [
            ("account", &self.account),
            ("provider", &self.provider),
            ("harness", &self.harness),
            ("model", &self.model),
        ] {
            if let Some(v) = v {
                query.push(format!("{k}={}", percent_encode(v)));
            }
        }
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        format!("/v1/agents/{}/acp{q}", percent_encode(&self.agent))
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs the bridge on this process's stdio; returns the exit code.
pub async fn run_acp(args: AcpArgs) -> anyhow::Result<i32> {
    let discovery = Discovery::from_process_env()?;
    let end = acp_bridge(
        &discovery,
        &args.path(),
        tokio::io::stdin(),
        tokio::io::stdout(),
        args.max_message_bytes,
    )
    .await?;
    if let handler_core::client::BridgeEnd::Closed { code, reason } = &end
        && *code != 1000
    {
        eprintln!("handler: the agent's connection closed ({code}): {reason}");
    }
    Ok(end.exit_code())
}

/// `handler harness render --input FILE`: prints the HarnessLaunch, or fails with render's error.
pub fn run_render(input: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let text = if input == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(input).with_context(|| format!("reading {input}"))?
    };
    print!("{}", handler_harness::render_json(&text)?);
    Ok(())
}

/// `handler account login NAME [--keep-open]`.
#[derive(Args, Debug)]
pub struct LoginArgs {
    /// The account's name.
    pub name: String,
    /// Wait for Enter at the end, so an error stays readable.
    #[arg(long)]
    pub keep_open: bool,
}

/// Runs the account's file login on this terminal and gives handlerd the file; a token
/// login is not run: it says what to run instead (exit 2).
pub async fn run_account_login(args: LoginArgs) -> anyhow::Result<i32> {
    use handler_core::client::login::{LoginError, Relay, account_login};
    let discovery = Discovery::from_process_env()?;
    let r = account_login(&discovery, &args.name, Relay::Terminal).await;
    let code = match r {
        Ok(()) => {
            eprintln!("handler: account {} is logged in", args.name);
            0
        }
        Err(e @ LoginError::TokenLogin(..)) => {
            eprintln!("handler: {e}");
            2
        }
        Err(e) => {
            eprintln!("handler: login of {} failed: {e}", args.name);
            1
        }
    };
    if args.keep_open {
        eprintln!("Press Enter to close.");
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
    }
    Ok(code)
}
