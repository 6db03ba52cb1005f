//! `handler terminal [AGENT|ACCOUNT|PROVIDER] [SCOPE] [agent options] [--anyway] [-- ARGS…]`:
//! the harness's own terminal program in a sandbox of the folder's agent. It says who the
//! program runs as, asks handlerd for the sandbox (`POST /v1/agents/{id}/terminal`), then runs the
//! sandbox's `attach` on this terminal: handlerd is not in between, the exit code is the
//! program's.

use std::io::IsTerminal;

use clap::Args;
use handler_contracts::control::{AccountInfo, Agent, ModelAccess, ProviderInfo};
use handler_core::client::Discovery;
use handler_core::client::api::{Api, encode};
use serde_json::json;

use super::run::{REFUSED, Target};

/// `handler terminal`.
#[derive(Args, Debug)]
pub struct TerminalArgs {
    /// Which agent, in which folder.
    #[command(flatten)]
    pub target: Target,
    /// Arguments for the harness's program.
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// Who the program runs as, from Handler's files: the harness, its account with its description
/// and plan (a subscription), or its provider (no subscription).
pub fn runs_as(
    model: &ModelAccess,
    agent: Option<&Agent>,
    accounts: &[AccountInfo],
    providers: &[ProviderInfo],
) -> String {
    let first = agent.and_then(|a| a.models.first());
    let harness = model
        .harness
        .clone()
        .or_else(|| first.map(|m| m.harness.clone()))
        .unwrap_or_else(|| "its harness".into());
    let model_part = model
        .model
        .as_ref()
        .map(|m| format!(", model {m}"))
        .unwrap_or_default();
    if let Some(name) = &model.account {
        let a = accounts.iter().find(|a| &a.name == name);
        let desc = a
            .and_then(|a| a.description.clone())
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        let plan = a
            .and_then(|a| a.plan.clone())
            .map_or("a subscription".to_string(), |p| {
                format!("subscription plan {p}")
            });
        return format!("{harness} as account {name}{desc}, {plan}{model_part}");
    }
    if let Some(name) = &model.provider {
        let p = providers.iter().find(|p| &p.name == name);
        let desc = p
            .and_then(|p| p.description.clone())
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        return format!("{harness} on provider {name}{desc}, no subscription{model_part}");
    }
    format!("{harness}{model_part}")
}

/// Runs `handler terminal`; the program's exit code.
pub async fn run_terminal(args: TerminalArgs) -> anyhow::Result<i32> {
    let api = Api::new(Discovery::from_process_env()?);
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if !tty {
        eprintln!("handler: handler terminal needs a terminal (stdin and stdout)");
        return Ok(REFUSED);
    }
    let chosen = match args.target.choose(&api, tty).await? {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let agent = chosen.settings.as_ref();
    let model = chosen.model.clone().or_else(|| {
        agent.and_then(|a| a.models.first()).map(|m| ModelAccess {
            harness: Some(m.harness.clone()),
            account: m.account.clone(),
            provider: m.provider.clone(),
            model: m.model.clone(),
        })
    });
    let accounts: Vec<AccountInfo> = serde_json::from_value(api.get("/v1/accounts").await?)?;
    let providers: Vec<ProviderInfo> = serde_json::from_value(api.get("/v1/providers").await?)?;
    if let Some(m) = &model {
        eprintln!(
            "handler: the program runs as {}",
            runs_as(m, agent, &accounts, &providers)
        );
    }
    let mut body = json!({"args": args.args});
    for (k, var) in [("term", "TERM"), ("colorterm", "COLORTERM")] {
        if let Ok(v) = std::env::var(var) {
            body[k] = json!(v);
        }
    }
    if let Some(m) = &chosen.model {
        body["model"] = serde_json::to_value(m)?;
    }
    eprintln!("handler: starting its sandbox…");
    let started = api
        .post(
            &format!("/v1/agents/{}/terminal", encode(&chosen.agent)),
            &body,
        )
        .await?;
    let argv: Vec<String> = serde_json::from_value(started["attach"].clone())?;
    let Some((program, rest)) = argv.split_first() else {
        anyhow::bail!("handlerd gave no attach command");
    };
    // The sandbox's attach puts the program on this terminal (raw, resized, signals passed on).
    let status = std::process::Command::new(program).args(rest).status()?;
    Ok(status.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use handler_contracts::control::ModelAccess;
    use serde_json::json;

    #[test]
    fn it_says_who_the_program_runs_as() {
        let accounts = vec![
            serde_json::from_value(
                json!({"name": "perso", "description": "my own", "plan": "Max", "loggedIn": true}),
            )
            .unwrap(),
        ];
        let providers =
            vec![serde_json::from_value(json!({"name": "local", "keySet": true})).unwrap()];
        let on = |a: Option<&str>, p: Option<&str>| ModelAccess {
            harness: Some("claude-code".into()),
            account: a.map(String::from),
            provider: p.map(String::from),
            model: None,
        };
        assert_eq!(
            super::runs_as(&on(Some("perso"), None), None, &accounts, &providers),
            "claude-code as account perso (my own), subscription plan Max"
        );
        assert_eq!(
            super::runs_as(&on(None, Some("local")), None, &accounts, &providers),
            "claude-code on provider local, no subscription"
        );
    }
}
