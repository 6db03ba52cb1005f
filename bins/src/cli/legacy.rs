//! The first verbs of `handler`: the editor's ACP bridge, `harness render` and `account login`.

use clap::Args;
use handler_contracts::control::{Agent, ModelAccess};
use handler_core::client::api::{Api, ApiError, encode};
use handler_core::client::{Discovery, acp_bridge};

use super::resolve::{AgentFlags, Resolution, for_agent};
use super::run::{REFUSED, choose, folder_and_word};

/// `handler acp [AGENT|ACCOUNT|PROVIDER] [SCOPE] [agent options] [--save]`: an agent's id, or the
/// folder's agent by the CLI's resolution.
#[derive(Args, Debug)]
pub struct AcpArgs {
    /// An agent's id, an agent of the folder's project, an account or a provider (default: the
    /// folder's agent).
    pub agent: Option<String>,
    /// The folder (default: the current one, where the editor starts it).
    pub scope: Option<String>,
    /// With an agent's id: run with this account instead of its first model.
    #[arg(long, conflicts_with = "provider")]
    pub account: Option<String>,
    /// With an agent's id: run with this provider (give --harness too).
    #[arg(long, requires = "harness")]
    pub provider: Option<String>,
    /// The agent options (harness, model, network…).
    #[command(flatten)]
    pub flags: AgentFlags,
    /// Save options that differ from the agent's (without it, they are refused: an editor has no
    /// terminal to ask in).
    #[arg(long)]
    pub save: bool,
    /// Refused here (it needs a typed yes); kept so the refusal can say so.
    #[arg(long)]
    pub anyway: bool,
    /// The largest ACP message, in bytes (default 16 MiB).
    #[arg(long, default_value_t = handler_contracts::acp::DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
}

/// `/v1/agents/{id}/acp` with the model the query names.
pub(crate) fn acp_path(agent: &str, model: Option<&ModelAccess>) -> String {
    let mut query: Vec<String> = Vec::new();
    if let Some(m) = model {
        for (k, v) in [
            ("account", &m.account),
            ("provider", &m.provider),
            ("harness", &m.harness),
            ("model", &m.model),
        ] {
            if let Some(v) = v {
                query.push(format!("{k}={}", encode(v)));
            }
        }
    }
    let q = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    format!("/v1/agents/{}/acp{q}", encode(agent))
}

/// Which agent and model the bridge opens: an agent's id as typed (with --account, --provider,
/// --harness, --model), else the resolution; `Err(code)` once refused.
async fn acp_target(api: &Api, args: &AcpArgs) -> anyhow::Result<Result<String, i32>> {
    let by_id = match &args.agent {
        Some(id) => match api.get(&format!("/v1/agents/{}", encode(id))).await {
            Ok(a) => Some(serde_json::from_value::<Agent>(a)?),
            Err(ApiError::Problem { status: 404, .. }) => None,
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    if let Some(agent) = by_id {
        let r = for_agent(&args.flags, &agent);
        if let Err(code) = settle_differences(api, &agent, &r, args.save).await? {
            return Ok(Err(code));
        }
        let f = &args.flags;
        let typed = args.account.is_some()
            || args.provider.is_some()
            || f.harness.is_some()
            || f.model.is_some();
        let model = typed.then(|| ModelAccess {
            harness: f.harness.clone(),
            account: args.account.clone(),
            provider: args.provider.clone(),
            model: f.model.clone(),
        });
        return Ok(Ok(acp_path(&agent.id, model.as_ref())));
    }
    let word = args
        .agent
        .clone()
        .or_else(|| args.account.clone())
        .or_else(|| args.provider.clone());
    let (folder, word) = folder_and_word(word, args.scope.clone())?;
    let chosen = choose(
        api,
        &folder,
        word.as_deref(),
        &args.flags,
        args.anyway,
        args.save,
        false,
    )
    .await?;
    Ok(chosen.map(|c| acp_path(&c.agent, c.model.as_ref())))
}

async fn settle_differences(
    api: &Api,
    agent: &Agent,
    r: &Resolution,
    save: bool,
) -> anyhow::Result<Result<(), i32>> {
    let Some(body) = &r.saved else {
        return Ok(Ok(()));
    };
    let name = agent.name.clone().unwrap_or_else(|| agent.id.clone());
    eprintln!("handler: these options differ from agent {name}'s settings:");
    for d in &r.differs {
        eprintln!("  {d}");
    }
    if !save {
        eprintln!(
            "handler: refused: give --save to save them to the agent, or leave those options out"
        );
        return Ok(Err(REFUSED));
    }
    api.put(&format!("/v1/agents/{}", encode(&agent.id)), body)
        .await?;
    eprintln!("handler: saved to agent {name}");
    Ok(Ok(()))
}

/// Runs the bridge on this process's stdio; returns the exit code.
pub async fn run_acp(args: AcpArgs) -> anyhow::Result<i32> {
    let discovery = Discovery::from_process_env()?;
    let api = Api::new(discovery.clone());
    let path = match acp_target(&api, &args).await? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let end = acp_bridge(
        &discovery,
        &path,
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
