//! `handler run [AGENT|ACCOUNT|PROVIDER] [SCOPE] [agent options] [-- PROMPT]`: the folder's agent
//! (the resolution in [`super::resolve`]), the questions it needs (the typed yes of `--anyway`,
//! "Save this to the agent?"), a Session with origin `cli`, then the chat.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::Context;
use clap::Args;
use handler_contracts::control::{AccountInfo, Agent, ModelAccess, Project, ProviderInfo};
use handler_core::client::Discovery;
use handler_core::client::api::{Api, encode};
use serde_json::json;

use super::resolve::{self, AgentFlags, Known, Resolution, Typed, resolve};

/// The exit code of a refusal (what to type instead is on stderr).
pub const REFUSED: i32 = 2;

/// What `handler run` and `handler terminal` take to find the agent: the word, the folder, the
/// agent options, `--anyway` and `--save`.
#[derive(Args, Debug)]
pub struct Target {
    /// An agent of the folder's project, an account or a provider (default: the folder's agent).
    pub what: Option<String>,
    /// The folder to work in (default: the current one).
    pub scope: Option<String>,
    /// The agent options.
    #[command(flatten)]
    pub flags: AgentFlags,
    /// Run an account or provider the project's context does not allow, outside the project
    /// (asks you to type yes).
    #[arg(long)]
    pub anyway: bool,
    /// Save options that differ from the agent's without asking (for scripts).
    #[arg(long)]
    pub save: bool,
}

impl Target {
    /// The folder and word typed, then [`choose`]: the agent and model, or the exit code of a
    /// refusal already said.
    pub async fn choose(
        &self,
        api: &Api,
        interactive: bool,
    ) -> anyhow::Result<Result<Chosen, i32>> {
        let (folder, word) = folder_and_word(self.what.clone(), self.scope.clone())?;
        let f = &self.flags;
        choose(
            api,
            &folder,
            word.as_deref(),
            f,
            self.anyway,
            self.save,
            interactive,
        )
        .await
    }
}

/// `handler run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Which agent, in which folder.
    #[command(flatten)]
    pub target: Target,
    /// A first prompt; without a terminal, the one turn to run.
    #[arg(last = true)]
    pub prompt: Vec<String>,
}

/// What the resolution and its questions settled: the agent and the model to open.
#[derive(Debug, Clone)]
pub struct Chosen {
    /// The agent's id.
    pub agent: String,
    /// The model for this session only; none: the agent's first.
    pub model: Option<ModelAccess>,
    /// The agent as it is now (after a save).
    pub settings: Option<Agent>,
}

/// The folder (absolute, resolved) and the word, telling a path typed first from a name.
pub fn folder_and_word(
    what: Option<String>,
    scope: Option<String>,
) -> anyhow::Result<(String, Option<String>)> {
    let looks_like_path = |w: &str| w.starts_with('/') || w.starts_with('.') || w.starts_with('~');
    let (word, scope) = match (what, scope) {
        (Some(w), None) if looks_like_path(&w) => (None, Some(w)),
        other => other,
    };
    let folder = match scope {
        Some(s) => std::fs::canonicalize(&s).with_context(|| format!("SCOPE: {s}"))?,
        None => std::env::current_dir().context("the current folder")?,
    };
    let folder = folder.to_string_lossy().trim_end_matches('/').to_string();
    Ok((
        if folder.is_empty() {
            "/".into()
        } else {
            folder
        },
        word,
    ))
}

/// Reads what the resolution needs from handlerd.
async fn known(
    api: &Api,
) -> anyhow::Result<(
    Vec<Project>,
    Vec<Agent>,
    Vec<AccountInfo>,
    Vec<ProviderInfo>,
)> {
    let projects = serde_json::from_value(api.get("/v1/projects").await?)?;
    let agents = serde_json::from_value(api.get("/v1/agents").await?)?;
    let accounts = serde_json::from_value(api.get("/v1/accounts").await?)?;
    let providers = serde_json::from_value(api.get("/v1/providers").await?)?;
    Ok((projects, agents, accounts, providers))
}

/// D.16's resolution, the typed yes and "Save this to the agent?"; `Err` with the exit code
/// printed already when it is refused or declined.
pub async fn choose(
    api: &Api,
    folder: &str,
    word: Option<&str>,
    flags: &AgentFlags,
    anyway: bool,
    save: bool,
    interactive: bool,
) -> anyhow::Result<Result<Chosen, i32>> {
    let (projects, agents, accounts, providers) = known(api).await?;
    let typed = Typed {
        folder,
        word,
        flags,
        anyway,
    };
    let k = Known {
        projects: &projects,
        agents: &agents,
        accounts: &accounts,
        providers: &providers,
    };
    let r = match resolve(&typed, &k) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("handler: {e}");
            return Ok(Err(REFUSED));
        }
    };
    if let Some(p) = &r.outside_project
        && let Err(code) = typed_yes(p, interactive)
    {
        return Ok(Err(code));
    }
    if r.saved.is_some() || matches!(r.target, resolve::Target::Create(_)) {
        for w in super::resolve::widening(flags) {
            eprintln!("handler: {w}");
        }
    }
    settle(api, r, save, interactive).await
}

fn typed_yes(project: &str, interactive: bool) -> Result<(), i32> {
    eprintln!(
        "handler: --anyway runs this outside project {project}: an ad-hoc agent of this folder, its sessions under \"Outside projects\", with an account or provider the project's context does not allow."
    );
    if !interactive {
        eprintln!("handler: refused: there is no terminal to type yes in");
        return Err(REFUSED);
    }
    eprint!("Type yes to run it anyway: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    if line.trim() == "yes" {
        Ok(())
    } else {
        eprintln!("handler: nothing started");
        Err(1)
    }
}

async fn settle(
    api: &Api,
    r: Resolution,
    save: bool,
    interactive: bool,
) -> anyhow::Result<Result<Chosen, i32>> {
    match r.target {
        resolve::Target::Create(req) => {
            let a: Agent = serde_json::from_value(
                api.post("/v1/agents", &serde_json::to_value(&req)?).await?,
            )?;
            eprintln!(
                "handler: made the ad-hoc agent {} for {}",
                a.id,
                a.scope.clone().unwrap_or_default()
            );
            Ok(Ok(Chosen {
                agent: a.id.clone(),
                model: None,
                settings: Some(a),
            }))
        }
        resolve::Target::Existing { agent, model } => {
            let mut settings = Some(*agent.clone());
            if let Some(body) = r.saved {
                let name = agent.name.clone().unwrap_or_else(|| agent.id.clone());
                eprintln!("handler: these options differ from agent {name}'s settings:");
                for d in &r.differs {
                    eprintln!("  {d}");
                }
                if !save && !ask_save(interactive) {
                    if interactive {
                        eprintln!("handler: nothing started");
                        return Ok(Err(1));
                    }
                    eprintln!(
                        "handler: refused: give --save to save them to the agent, or leave those options out"
                    );
                    return Ok(Err(REFUSED));
                }
                let saved = api
                    .put(&format!("/v1/agents/{}", encode(&agent.id)), &body)
                    .await?;
                eprintln!("handler: saved to agent {name}");
                settings = serde_json::from_value(saved).ok();
            }
            Ok(Ok(Chosen {
                agent: agent.id.clone(),
                model,
                settings,
            }))
        }
    }
}

fn ask_save(interactive: bool) -> bool {
    if !interactive {
        return false;
    }
    eprint!("Save this to the agent? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    matches!(line.trim(), "y" | "Y" | "yes")
}

/// Runs `handler run`; the exit code.
pub async fn run_run(args: RunArgs) -> anyhow::Result<i32> {
    let api = Api::new(Discovery::from_process_env()?);
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let chosen = match args.target.choose(&api, tty).await? {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let prompt = (!args.prompt.is_empty()).then(|| args.prompt.join(" "));
    if !tty && prompt.is_none() {
        eprintln!(
            "handler: no terminal: give the prompt after -- (handler run … -- \"what to do\")"
        );
        return Ok(REFUSED);
    }
    let mut body = json!({"agentId": chosen.agent, "origin": "cli"});
    if let Some(m) = &chosen.model {
        body["model"] = serde_json::to_value(m)?;
    }
    let s = api.post("/v1/sessions", &body).await?;
    let id = s["id"].as_str().unwrap_or_default().to_string();
    if s["state"] == "failed" {
        let why = s["error"].as_str().unwrap_or("no reason given");
        eprintln!("handler: session {id} could not start: {why}");
        return Ok(1);
    }
    eprintln!(
        "handler: session {id} ({})",
        s["state"].as_str().unwrap_or_default()
    );
    match prompt {
        Some(p) if !tty => super::attach::one_turn(&api, &id, &p).await,
        first => super::attach::chat(&api, &id, first).await,
    }
}
