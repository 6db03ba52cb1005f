//! `handler app …` (H.6, decision 0157): mini apps over `/v1/apps` — register a folder an agent
//! wrote, list, show, deploy (what it adds to its needs asked first), roll back, start or stop
//! its backend, set a secret (the value from stdin or a silent prompt, never argv), read the
//! log and the notifications, remove, open.

use std::io::IsTerminal as _;

use anyhow::Context as _;
use clap::Subcommand;
use serde_json::{Value, json};

use super::out::{Ctx, Refused, confirm, print_table, read_secret, seg, text};

/// `handler app …`.
#[derive(Subcommand, Debug)]
pub enum AppCommand {
    /// Register a mini app's folder (app.toml at its root); the app is named by it.
    Register {
        /// The app's folder.
        folder: std::path::PathBuf,
    },
    /// The mini apps, with their state and the version served.
    #[command(visible_alias = "list")]
    Ls,
    /// One app: its versions, needs, secrets and its folder as it is now.
    Show {
        /// The app.
        name: String,
    },
    /// Deploy the version in the app's folder (asks first when it adds to the needs).
    Deploy {
        /// The app.
        name: String,
        /// Accept what the deploy adds to the needs without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Serve a version deployed before.
    Rollback {
        /// The app.
        name: String,
        /// The version.
        version: String,
    },
    /// Start the app's backend now (as its first request would).
    Start {
        /// The app.
        name: String,
    },
    /// Stop the app's backend (the next request starts it again).
    Stop {
        /// The app.
        name: String,
    },
    /// An app's secrets (the value is read from stdin or a prompt, never the command line).
    #[command(subcommand)]
    Secret(AppSecretCommand),
    /// The app's log.
    Logs {
        /// The app.
        name: String,
    },
    /// The last notifications the app's backend sent (needs.notify), oldest first.
    Notifications {
        /// The app.
        name: String,
    },
    /// Remove an app: its versions, data, log and secrets (never its folder).
    #[command(visible_alias = "remove")]
    Rm {
        /// The app.
        name: String,
    },
    /// Open the app in the browser, logged in (or print the one-time address).
    Open {
        /// The app.
        name: String,
        /// Print the address instead of opening it.
        #[arg(long)]
        print: bool,
    },
}

/// `handler app secret …`.
#[derive(Subcommand, Debug)]
pub enum AppSecretCommand {
    /// Set a secret the app declares (needs.secrets).
    Set {
        /// The app.
        app: String,
        /// The variable's name.
        name: String,
    },
    /// Remove a secret's value.
    Rm {
        /// The app.
        app: String,
        /// The variable's name.
        name: String,
    },
}

fn path(name: &str, rest: &str) -> String {
    format!("/v1/apps/{}{rest}", seg(name))
}

fn show_app(v: &Value) {
    println!("{}  {}", text(v, "name"), text(v, "url"));
    if let Some(d) = v["description"].as_str() {
        println!("  {d}");
    }
    println!("  state     {}", text(v, "state"));
    println!(
        "  deployed  {}",
        v["deployed"].as_str().unwrap_or("nothing yet")
    );
    let versions: Vec<&str> = v["versions"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["version"].as_str()).collect())
        .unwrap_or_default();
    if !versions.is_empty() {
        println!("  versions  {}", versions.join(", "));
    }
    for s in v["secrets"].as_array().into_iter().flatten() {
        let set = if s["set"] == true { "set" } else { "NOT SET" };
        println!("  secret    {} ({set})", text(s, "name"));
    }
    let src = &v["source"];
    println!("  folder    {}", text(src, "folder"));
    match (src["version"].as_str(), src["error"].as_str()) {
        (_, Some(e)) => println!("  folder's app.toml: {e}"),
        (Some(ver), None) => println!("  folder's version {ver}"),
        _ => {}
    }
    for n in src["addedNeeds"].as_array().into_iter().flatten() {
        println!("  a deploy adds  {}", n.as_str().unwrap_or_default());
    }
}

/// Runs `handler app …`; returns the exit code.
pub(crate) async fn run(cmd: AppCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        AppCommand::Register { folder } => {
            let folder = std::path::absolute(&folder)
                .with_context(|| format!("{}: not a usable path", folder.display()))?;
            let v = ctx
                .api
                .post("/v1/apps", &json!({"folder": folder.display().to_string()}))
                .await?;
            ctx.done(
                &v,
                &format!(
                    "registered {}: handler app deploy {} serves it at {}",
                    text(&v, "name"),
                    text(&v, "name"),
                    text(&v, "url")
                ),
            );
        }
        AppCommand::Ls => list(&ctx).await?,
        AppCommand::Show { name } => {
            let v = ctx.api.get(&path(&name, "")).await?;
            ctx.show(&v, show_app);
        }
        AppCommand::Deploy { name, yes } => return deploy(&ctx, &name, yes).await,
        AppCommand::Rollback { name, version } => {
            let v = ctx
                .api
                .post(&path(&name, "/rollback"), &json!({"version": version}))
                .await?;
            ctx.done(&v, &format!("{name} serves {version} again"));
        }
        AppCommand::Secret(AppSecretCommand::Set { app, name }) => {
            let value = read_secret(&format!("{app}'s {name}: "))?;
            ctx.api
                .put(
                    &path(&app, &format!("/secrets/{}", seg(&name))),
                    &json!({"value": value}),
                )
                .await?;
            eprintln!("set {app}'s {name}");
        }
        AppCommand::Secret(AppSecretCommand::Rm { app, name }) => {
            ctx.api
                .delete(&path(&app, &format!("/secrets/{}", seg(&name))))
                .await?;
            eprintln!("removed {app}'s {name}");
        }
        AppCommand::Logs { name } => logs(&ctx, &name).await?,
        AppCommand::Notifications { name } => notifications(&ctx, &name).await?,
        AppCommand::Start { name } => {
            let v = ctx.api.post(&path(&name, "/start"), &json!({})).await?;
            ctx.done(
                &v,
                &format!("{name}'s backend runs ({})", text(&v, "state")),
            );
        }
        AppCommand::Stop { name } => {
            ctx.api.post(&path(&name, "/stop"), &json!({})).await?;
            eprintln!("stopped {name}'s backend");
        }
        AppCommand::Rm { name } => {
            ctx.api.delete(&path(&name, "")).await?;
            eprintln!("removed {name} (its folder is untouched)");
        }
        AppCommand::Open { name, print } => return open(&ctx, &name, print).await,
    }
    Ok(0)
}

async fn list(ctx: &Ctx) -> anyhow::Result<()> {
    let v = ctx.api.get("/v1/apps").await?;
    ctx.show(&v, |v| {
        print_table(
            v,
            &["app", "state", "deployed", "folder's", "url"],
            |a| {
                vec![
                    text(a, "name"),
                    text(a, "state"),
                    a["deployed"].as_str().unwrap_or("-").to_string(),
                    a["source"]["version"]
                        .as_str()
                        .unwrap_or("invalid")
                        .to_string(),
                    text(a, "url"),
                ]
            },
            "no mini app: handler app register FOLDER",
        );
    });
    Ok(())
}

async fn notifications(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    let v = ctx.api.get(&path(name, "/notifications")).await?;
    ctx.show(&v["notifications"], |v| {
        print_table(
            v,
            &["at", "version", "title", "body"],
            |n| {
                vec![
                    text(n, "at"),
                    text(n, "version"),
                    text(n, "title"),
                    text(n, "body"),
                ]
            },
            &format!("no notification from {name} (its app.toml needs notify = true)"),
        );
    });
    Ok(())
}

async fn logs(ctx: &Ctx, name: &str) -> anyhow::Result<()> {
    let (status, body) = ctx.api.raw("GET", &path(name, "/logs"), None).await?;
    if status != 200 {
        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
        anyhow::bail!("{}: {}", text(&v, "title"), text(&v, "detail"));
    }
    print!("{}", String::from_utf8_lossy(&body));
    Ok(())
}

async fn deploy(ctx: &Ctx, name: &str, yes: bool) -> anyhow::Result<i32> {
    let now = ctx.api.get(&path(name, "")).await?;
    let added: Vec<String> = now["source"]["addedNeeds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    if !added.is_empty() && !yes {
        let asked = std::io::stdin().is_terminal() && {
            eprintln!("deploying {name} adds to what it may reach:");
            for n in &added {
                eprintln!("  {n}");
            }
            confirm("deploy it?")
        };
        if !asked {
            return Err(Refused(format!(
                "not deployed: {name} adds {} (run again and answer y, or pass --yes)",
                added.join(", ")
            ))
            .into());
        }
    }
    let v = ctx
        .api
        .post(&path(name, "/deploy"), &json!({"confirmAddedNeeds": added}))
        .await?;
    ctx.done(
        &v,
        &format!(
            "deployed {name} {} at {}",
            text(&v, "deployed"),
            text(&v, "url")
        ),
    );
    Ok(0)
}

async fn open(ctx: &Ctx, name: &str, print: bool) -> anyhow::Result<i32> {
    let v = ctx.api.post(&path(name, "/login"), &json!({})).await?;
    let url = text(&v, "url");
    let display =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if print || !display {
        println!("{url}");
        return Ok(0);
    }
    // The address is one-time and valid for a minute: on argv it is no secret worth keeping.
    let status = std::process::Command::new("xdg-open")
        .arg(&url)
        .status()
        .context(
            "cannot run xdg-open (no desktop?): `handler app open --print` prints the address",
        )?;
    if !status.success() {
        anyhow::bail!("xdg-open failed ({status}): `handler app open --print` prints the address");
    }
    eprintln!("handler app open: opened {name}");
    Ok(0)
}
