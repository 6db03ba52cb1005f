//! `handler context …` (what a project is for: Work, Personal, a client) and `handler folder …`
//! (the folders agents may work in).

use clap::Subcommand;
use serde_json::{Value, json};

use super::out::{Ctx, print_table, seg, text};

/// `handler context …`.
#[derive(Subcommand, Debug)]
pub enum ContextCommand {
    /// List the contexts, their projects, accounts and providers.
    #[command(visible_alias = "ls")]
    List,
    /// Add a context.
    Add {
        /// Its name (letters, digits, spaces, - and _).
        name: String,
        /// Its badge's colour: blue, violet, cyan, pink or slate.
        #[arg(long, default_value = "blue")]
        color: String,
    },
    /// Change a context's colour.
    Edit {
        /// Its name.
        name: String,
        /// Its badge's colour: blue, violet, cyan, pink or slate.
        #[arg(long)]
        color: String,
    },
    /// Remove a context (refused while a project is in it).
    #[command(alias = "remove")]
    Rm {
        /// Its name.
        name: String,
    },
}

/// `handler folder …`.
#[derive(Subcommand, Debug)]
pub enum FolderCommand {
    /// List the work folders: as written, and resolved.
    #[command(visible_alias = "ls")]
    List,
    /// Allow agents to work in a folder (and those inside it).
    Add {
        /// The folder (`~/` allowed).
        path: String,
    },
    /// Stop allowing a folder.
    #[command(alias = "remove")]
    Rm {
        /// The folder, as `folder list` writes it.
        path: String,
    },
}

/// Runs `handler context …`; returns the exit code.
pub(crate) async fn run_context(cmd: ContextCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        ContextCommand::List => {
            let v = ctx.api.get("/v1/contexts").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["name", "color", "projects", "accounts", "providers"],
                    |c| {
                        ["name", "color", "projects", "accounts", "providers"]
                            .map(|k| text(c, k))
                            .to_vec()
                    },
                    "no contexts (add one: handler context add Work)",
                );
            });
        }
        ContextCommand::Add { name, color } => {
            let v = ctx
                .api
                .post("/v1/contexts", &json!({"name": name, "color": color}))
                .await?;
            ctx.done(&v, &format!("context {name} added"));
        }
        ContextCommand::Edit { name, color } => {
            let v = ctx
                .api
                .put(
                    &format!("/v1/contexts/{}", seg(&name)),
                    &json!({"color": color}),
                )
                .await?;
            ctx.done(&v, &format!("context {name} changed"));
        }
        ContextCommand::Rm { name } => {
            let v = ctx
                .api
                .delete(&format!("/v1/contexts/{}", seg(&name)))
                .await?;
            ctx.done(&v, &format!("context {name} removed"));
        }
    }
    Ok(0)
}

/// Runs `handler folder …`; returns the exit code.
pub(crate) async fn run_folder(cmd: FolderCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    let now = ctx.api.get("/v1/folders").await?;
    let mut roots: Vec<String> = now["roots"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let line = match cmd {
        FolderCommand::List => {
            ctx.show(&now, list);
            return Ok(0);
        }
        FolderCommand::Add { path } => {
            if roots.contains(&path) {
                format!("{path} is already a work folder")
            } else {
                roots.push(path.clone());
                format!("agents may work in {path}")
            }
        }
        FolderCommand::Rm { path } => {
            let before = roots.len();
            roots.retain(|r| *r != path);
            if roots.len() == before {
                return Err(super::out::Refused(format!(
                    "{path} is not a work folder (handler folder list shows them as written)"
                ))
                .into());
            }
            format!("{path} is no longer a work folder")
        }
    };
    let v = ctx.api.put("/v1/folders", &json!({"roots": roots})).await?;
    ctx.done(&v, &line);
    Ok(0)
}

fn list(v: &Value) {
    let roots = v["roots"].as_array().cloned().unwrap_or_default();
    let resolved = v["resolved"].as_array().cloned().unwrap_or_default();
    println!(
        "work folders: {}",
        if roots.is_empty() {
            "none".into()
        } else {
            roots
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        }
    );
    if !resolved.is_empty() {
        println!(
            "resolved: {}",
            resolved
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}
