//! `handler setup`: checks the host, starts handlerd, builds the images that are missing (the
//! network filter, the toolbox, the harnesses chosen) with progress bars, offers a provider,
//! and says the next command. Every question has a flag; `--yes` takes the defaults. A second
//! run checks and builds nothing new.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use handler_core::client::api::Api;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::out::{Refused, exit, read_secret, seg, text};

/// `handler setup`.
#[derive(Args, Debug)]
pub struct SetupArgs {
    /// Ask nothing: build what the flags name, add a provider only when --provider-template says.
    #[arg(long, short)]
    pub yes: bool,
    /// Install handlerd as a systemd user unit (else it is started in the background).
    #[arg(long)]
    pub service: bool,
    /// A harness whose image to build; repeatable (`all`: every one).
    #[arg(long = "harness")]
    pub harnesses: Vec<String>,
    /// Do not build the toolbox (the harness images need it).
    #[arg(long)]
    pub no_toolbox: bool,
    /// Add a provider from this template (`handler provider templates`).
    #[arg(long)]
    pub provider_template: Option<String>,
    /// The provider's name (default: the template's).
    #[arg(long, requires = "provider_template")]
    pub provider_name: Option<String>,
    /// Read the provider's API key from stdin (or a prompt that does not echo).
    #[arg(long, requires = "provider_template")]
    pub provider_key: bool,
}

/// Runs `handler setup`; returns the exit code.
pub(crate) async fn run(a: SetupArgs) -> anyhow::Result<i32> {
    let interactive = !a.yes && std::io::stdin().is_terminal();
    let api = if a.service {
        super::daemon::run(
            super::daemon::DaemonCommand::Install { no_start: false },
            false,
        )
        .await?;
        super::daemon::start().await?
    } else {
        super::daemon::start().await?
    };
    if !check_host(&api).await? {
        return Ok(exit::FAILED);
    }
    let mut targets = vec!["network-filter".to_string()];
    if !a.no_toolbox {
        targets.push("toolbox".into());
    }
    targets.extend(harnesses(&api, &a, interactive).await?);
    let mut built = 0;
    for t in &targets {
        if present(&api, t).await? {
            println!("✓ {t}: built");
            continue;
        }
        build(&api, t).await?;
        built += 1;
    }
    if built == 0 {
        println!("nothing to build");
    }
    let provider = provider(&api, &a, interactive).await?;
    next_command(provider.as_deref(), &a.harnesses);
    Ok(exit::OK)
}

/// Prints the runtime check: which runtime runs and why, what is missing and its fix.
async fn check_host(api: &Api) -> anyhow::Result<bool> {
    // Asked now: set-up is where a person has just changed the host (decision 0149).
    let check = api.get("/v1/runtime?fresh=true").await?;
    println!("runtime: {}", text(&check, "runtime"));
    for item in check["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let mark = match (item["ok"].as_bool(), item["required"].as_bool()) {
            (Some(true), _) => "✓",
            (_, Some(true)) => "✗",
            _ => "-",
        };
        println!("{mark} {}: {}", text(item, "name"), text(item, "detail"));
    }
    if check["ok"].as_bool() != Some(true) {
        eprintln!(
            "handler: this host cannot run sandboxes yet: fix what is marked ✗ above, then run `handler setup` again"
        );
        return Ok(false);
    }
    Ok(true)
}

/// The harnesses to build: the flags', else (on a terminal) the person's pick.
async fn harnesses(api: &Api, a: &SetupArgs, interactive: bool) -> anyhow::Result<Vec<String>> {
    let all = api.get("/v1/harnesses").await?;
    let names: Vec<String> = all
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|h| text(h, "name"))
        .collect();
    let mut chosen = a.harnesses.clone();
    if chosen.is_empty() && interactive {
        eprint!(
            "Harness images to build ({}; empty: none, `all`): ",
            names.join(", ")
        );
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        chosen = line
            .split([',', ' '])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
    }
    if chosen.iter().any(|c| c == "all") {
        return Ok(names);
    }
    if let Some(bad) = chosen.iter().find(|c| !names.contains(c)) {
        return Err(Refused(format!(
            "--harness {bad}: no such harness (there are: {})",
            names.join(", ")
        ))
        .into());
    }
    Ok(chosen)
}

/// Whether `target`'s image is built.
async fn present(api: &Api, target: &str) -> anyhow::Result<bool> {
    let v = match target {
        "network-filter" => api.get("/v1/network-filter").await?,
        "toolbox" => api.get("/v1/toolbox").await?,
        h => api.get(&format!("/v1/harnesses/{}", seg(h))).await?,
    };
    Ok(v["imagePresent"].as_bool() == Some(true))
}

/// Builds `target` (or follows its running build), a progress bar fed by its step/steps and stage.
async fn build(api: &Api, target: &str) -> anyhow::Result<()> {
    let running = api.get("/v1/builds").await?;
    let existing = running.as_array().and_then(|b| {
        b.iter()
            .find(|b| b["target"] == target && b["state"] == "running")
            .cloned()
    });
    let b = match existing {
        Some(b) => b,
        None => api.post("/v1/builds", &json!({"target": target})).await?,
    };
    let id = text(&b, "id");
    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix:>14} [{bar:30}] {pos}/{len} {msg}")?
            .progress_chars("=> "),
    );
    bar.set_prefix(target.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    let end = loop {
        let b = api.get(&format!("/v1/builds/{}", seg(&id))).await?;
        if let (Some(s), Some(n)) = (b["step"].as_u64(), b["steps"].as_u64()) {
            bar.set_length(n);
            bar.set_position(s);
        }
        bar.set_message(text(&b, "stage"));
        if b["state"] != "running" {
            break b;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    bar.finish_and_clear();
    if end["state"] == "succeeded" {
        println!("✓ {target}: built (build {id})");
        return Ok(());
    }
    anyhow::bail!(
        "building {target} {}: {} (its log: handler build log {id})",
        text(&end, "state"),
        text(&end, "error")
    )
}

/// Adds the provider the flags (or the person) choose, unless it exists; answers its name.
async fn provider(api: &Api, a: &SetupArgs, interactive: bool) -> anyhow::Result<Option<String>> {
    let mut template = a.provider_template.clone();
    if template.is_none() && interactive {
        let t = api.get("/v1/provider-templates").await?;
        let names: Vec<String> = t
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|t| text(t, "name"))
            .collect();
        eprint!(
            "Add a provider from a template ({}; empty: skip): ",
            names.join(", ")
        );
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        template = Some(line.trim().to_string()).filter(|s| !s.is_empty());
    }
    let Some(template) = template else {
        return Ok(None);
    };
    let name = a.provider_name.clone().unwrap_or_else(|| template.clone());
    if api
        .get(&format!("/v1/providers/{}", seg(&name)))
        .await
        .is_ok()
    {
        println!("✓ provider {name}: there");
        return Ok(Some(name));
    }
    let mut body = json!({"name": name, "template": template});
    let ask_key = interactive && super::out::confirm("Does it need an API key?");
    if a.provider_key || ask_key {
        body["apiKey"] = Value::String(read_secret("API key: ")?);
    }
    api.post("/v1/providers", &body).await?;
    println!("✓ provider {name}: added from {template}");
    Ok(Some(name))
}

fn next_command(provider: Option<&str>, harnesses: &[String]) {
    let harness = harnesses
        .first()
        .filter(|h| *h != "all")
        .map_or("HARNESS", String::as_str);
    match provider {
        Some(p) => println!(
            "next: in a project's folder, handler run {p} --harness {harness} -- \"what to do\""
        ),
        None => println!(
            "next: add a model (handler account add NAME --harness {harness}, or handler provider add NAME --template T), then handler run"
        ),
    }
}
