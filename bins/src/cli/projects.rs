//! `handler project …`: a folder and its agents; its context says which accounts and providers
//! its agents may run on.

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::agents::ModelArgs;
use super::out::{Ctx, Refused, print_fields, print_table, seg, text};

/// `handler project …`.
#[derive(Subcommand, Debug)]
pub enum ProjectCommand {
    /// List the projects.
    #[command(visible_alias = "ls")]
    List,
    /// Show one project and its agents.
    Show {
        /// The project's id.
        id: String,
    },
    /// Make a project of a folder, with its first agent.
    New {
        /// Its folder (inside a work folder: `handler folder list`).
        folder: String,
        /// Its name (default: the folder's).
        #[arg(long)]
        name: Option<String>,
        /// What it is.
        #[arg(long)]
        description: Option<String>,
        /// Its context: only the accounts and providers made for it run its agents.
        #[arg(long)]
        context: Option<String>,
        /// Its first agent's name (its goal).
        #[arg(long, default_value = "code")]
        agent_name: String,
        /// Its first agent's model.
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Change a project's name, description, context or default agent.
    Edit {
        /// The project's id.
        id: String,
        /// Its new name.
        #[arg(long)]
        name: Option<String>,
        /// Its new description.
        #[arg(long)]
        description: Option<String>,
        /// Its new context (`""` removes it).
        #[arg(long)]
        context: Option<String>,
        /// The agent (its id) that becomes its default.
        #[arg(long)]
        default_agent: Option<String>,
    },
    /// Remove a project and its agents (its folder stays).
    #[command(alias = "remove")]
    Rm {
        /// The project's id.
        id: String,
    },
}

/// Runs `handler project …`; returns the exit code.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per `handler project` verb, each a few lines of request and print"
)]
pub(crate) async fn run(cmd: ProjectCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        ProjectCommand::List => {
            let v = ctx.api.get("/v1/projects").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["id", "name", "folder", "context", "agents"],
                    |p| {
                        let agents = p["agents"].as_array().map_or(0, Vec::len);
                        vec![
                            text(p, "id"),
                            text(p, "name"),
                            text(p, "folder"),
                            text(p, "context"),
                            agents.to_string(),
                        ]
                    },
                    "no projects (make one: handler project new FOLDER --account A)",
                );
            });
        }
        ProjectCommand::Show { id } => {
            let v = ctx.api.get(&format!("/v1/projects/{}", seg(&id))).await?;
            ctx.show(&v, show);
        }
        ProjectCommand::New {
            folder,
            name,
            description,
            context,
            agent_name,
            model,
        } => {
            let access = model_access(&model)?;
            let mut body = json!({"folder": absolute(&folder)?, "agent": {"name": agent_name, "models": [access]}});
            for (k, v) in [
                ("name", name),
                ("description", description),
                ("context", context),
            ] {
                if let Some(v) = v {
                    body[k] = json!(v);
                }
            }
            let v = ctx.api.post("/v1/projects", &body).await?;
            ctx.done(
                &v,
                &format!(
                    "project {} made ({}), its agent {}",
                    text(&v, "id"),
                    text(&v, "name"),
                    text(&v, "defaultAgent")
                ),
            );
        }
        ProjectCommand::Edit {
            id,
            name,
            description,
            context,
            default_agent,
        } => {
            let mut body = Map::new();
            for (k, v) in [
                ("name", name),
                ("description", description),
                ("context", context),
                ("defaultAgent", default_agent),
            ] {
                if let Some(v) = v {
                    body.insert(k.into(), json!(v));
                }
            }
            let v = ctx
                .api
                .call(
                    "PATCH",
                    &format!("/v1/projects/{}", seg(&id)),
                    Some(&Value::Object(body)),
                )
                .await?;
            ctx.done(&v, &format!("project {id} changed"));
        }
        ProjectCommand::Rm { id } => {
            let v = ctx
                .api
                .delete(&format!("/v1/projects/{}", seg(&id)))
                .await?;
            let mut said = format!("project {id} removed");
            for c in v["caches"].as_array().into_iter().flatten() {
                said.push_str(&format!(
                    "\n  its cache folder {} removed",
                    c.as_str().unwrap_or_default()
                ));
            }
            if let Some(why) = v["kept"].as_str() {
                said.push_str(&format!("\n  its cache folders were kept: {why}"));
            }
            ctx.done(&v, &said);
        }
    }
    Ok(0)
}

fn model_access(m: &ModelArgs) -> anyhow::Result<Value> {
    if m.account.is_none() && m.provider.is_none() {
        return Err(Refused(
            "its first agent needs a model: --account NAME, or --provider NAME --harness H".into(),
        )
        .into());
    }
    let mut a = Map::new();
    for (k, v) in [
        ("account", &m.account),
        ("provider", &m.provider),
        ("harness", &m.harness),
        ("model", &m.model),
    ] {
        if let Some(v) = v {
            a.insert(k.into(), json!(v));
        }
    }
    Ok(Value::Object(a))
}

fn absolute(p: &str) -> anyhow::Result<String> {
    let path = std::path::Path::new(p);
    Ok(if path.is_absolute() {
        p.to_string()
    } else {
        std::env::current_dir()?.join(path).display().to_string()
    })
}

fn show(p: &Value) {
    print_fields(
        p,
        &[
            "id",
            "name",
            "description",
            "folder",
            "context",
            "caches",
            "defaultAgent",
            "createdAt",
            "lastUsedAt",
        ],
    );
    for a in p["agents"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        println!("agent: {} {}", text(a, "id"), text(a, "name"));
    }
}
