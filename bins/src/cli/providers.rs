//! `handler provider …`: model endpoints (a local server, an API with a key), made from the
//! templates handlerd ships; the key read on stdin or at a no-echo prompt, to the secret store.

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::out::{Ctx, Refused, print_fields, print_table, read_secret, seg, text};

/// `handler provider …`.
#[derive(Subcommand, Debug)]
pub enum ProviderCommand {
    /// List the providers: endpoints, models, whether their key is set.
    #[command(visible_alias = "ls")]
    List,
    /// List the templates a provider can be made from.
    Templates,
    /// Show one provider.
    Show {
        /// The provider's name.
        name: String,
    },
    /// Add a provider from a template; what you give replaces the template's.
    Add(ProviderArgs),
    /// Change a provider: what you give replaces what it has.
    Edit(ProviderArgs),
    /// Remove a provider and its key.
    #[command(alias = "remove")]
    Rm {
        /// The provider's name.
        name: String,
    },
}

/// What `provider add` and `provider edit` take.
#[derive(Args, Debug)]
pub struct ProviderArgs {
    /// The provider's name.
    pub name: String,
    /// The template it is made from (`handler provider templates`); add only.
    #[arg(long)]
    pub template: Option<String>,
    /// What you call it, shown in lists.
    #[arg(long)]
    pub description: Option<String>,
    /// An endpoint, `PROTOCOL=URL` (protocols: anthropic, openai-chat, responses); repeatable.
    #[arg(long = "endpoint", value_name = "PROTOCOL=URL")]
    pub endpoints: Vec<String>,
    /// A model it serves, the first the default; repeatable.
    #[arg(long = "model", value_name = "ID")]
    pub models: Vec<String>,
    /// A context it may be used in (`any`: every one); repeatable.
    #[arg(long = "context")]
    pub contexts: Vec<String>,
    /// Set its API key: read from stdin, or at a prompt that does not echo.
    #[arg(long, conflicts_with = "remove_key")]
    pub key: bool,
    /// Remove its key (a local server needs none).
    #[arg(long)]
    pub remove_key: bool,
}

impl ProviderArgs {
    /// Writes what was given into `body` (a ProviderRequest).
    fn apply(&self, body: &mut Map<String, Value>) -> anyhow::Result<()> {
        if let Some(d) = &self.description {
            body.insert("description".into(), json!(d));
        }
        if !self.endpoints.is_empty() {
            let mut e = Map::new();
            for spec in &self.endpoints {
                let (p, url) = spec.split_once('=').ok_or_else(|| {
                    Refused(format!("--endpoint {spec:?}: write PROTOCOL=URL, e.g. openai-chat=http://127.0.0.1:8080/v1"))
                })?;
                e.insert(p.to_string(), json!(url));
            }
            body.insert("endpoints".into(), Value::Object(e));
        }
        if !self.models.is_empty() {
            let models: Vec<Value> = self.models.iter().map(|m| json!({"id": m})).collect();
            body.insert("models".into(), json!(models));
        }
        if !self.contexts.is_empty() {
            body.insert("contexts".into(), json!(self.contexts));
        }
        if self.key {
            body.insert("apiKey".into(), json!(read_secret("API key: ")?));
        }
        if self.remove_key {
            body.insert("removeApiKey".into(), json!(true));
        }
        Ok(())
    }
}

/// Runs `handler provider …`; returns the exit code.
pub(crate) async fn run(cmd: ProviderCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        ProviderCommand::List => {
            let v = ctx.api.get("/v1/providers").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &[
                        "name",
                        "endpoints",
                        "models",
                        "key",
                        "contexts",
                        "description",
                    ],
                    row,
                    "no providers (add one: handler provider add NAME --template T)",
                );
            });
        }
        ProviderCommand::Templates => {
            let v = ctx.api.get("/v1/provider-templates").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["template", "endpoints", "models", "description"],
                    |t| {
                        let p = &t["provider"];
                        vec![
                            text(t, "name"),
                            endpoints(p),
                            models(p),
                            text(p, "description"),
                        ]
                    },
                    "no provider templates",
                );
            });
        }
        ProviderCommand::Show { name } => {
            let v = ctx
                .api
                .get(&format!("/v1/providers/{}", seg(&name)))
                .await?;
            ctx.show(&v, |p| {
                print_fields(p, &["name", "description", "contexts", "keySet", "error"]);
                println!("endpoints: {}\nmodels: {}", endpoints(p), models(p));
            });
        }
        ProviderCommand::Add(a) => {
            let mut body = Map::new();
            body.insert("name".into(), json!(a.name));
            if let Some(t) = &a.template {
                body.insert("template".into(), json!(t));
            }
            a.apply(&mut body)?;
            let v = ctx.api.post("/v1/providers", &Value::Object(body)).await?;
            ctx.done(&v, &format!("provider {} added ({})", a.name, key_line(&v)));
        }
        ProviderCommand::Edit(a) => edit(&ctx, &a).await?,
        ProviderCommand::Rm { name } => {
            let v = ctx
                .api
                .delete(&format!("/v1/providers/{}", seg(&name)))
                .await?;
            ctx.done(&v, &format!("provider {name} removed"));
        }
    }
    Ok(0)
}

/// PUT replaces the provider: what it has now, then what was given.
async fn edit(ctx: &Ctx, a: &ProviderArgs) -> anyhow::Result<()> {
    if a.template.is_some() {
        return Err(Refused("--template: only `provider add` takes a template".into()).into());
    }
    let path = format!("/v1/providers/{}", seg(&a.name));
    let now = ctx.api.get(&path).await?;
    let mut body = Map::new();
    for k in ["description", "endpoints", "models", "files", "contexts"] {
        if !now[k].is_null() {
            body.insert(k.into(), now[k].clone());
        }
    }
    a.apply(&mut body)?;
    let v = ctx.api.put(&path, &Value::Object(body)).await?;
    ctx.done(
        &v,
        &format!("provider {} changed ({})", a.name, key_line(&v)),
    );
    Ok(())
}

fn endpoints(p: &Value) -> String {
    p["endpoints"]
        .as_object()
        .map(|e| {
            e.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn models(p: &Value) -> String {
    p["models"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| text(m, "id"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

fn key_line(p: &Value) -> String {
    match (p["apiKey"].is_null(), p["keySet"].as_bool()) {
        (true, _) => "no key".into(),
        (false, Some(true)) => "key set".into(),
        (false, _) => format!(
            "its key is not set: handler provider edit {} --key",
            text(p, "name")
        ),
    }
}

fn row(p: &Value) -> Vec<String> {
    let key = match (p["apiKey"].is_null(), p["keySet"].as_bool()) {
        (true, _) => "none",
        (false, Some(true)) => "set",
        (false, _) => "MISSING",
    };
    let contexts = if p["contexts"].is_null() {
        "any".into()
    } else {
        text(p, "contexts")
    };
    vec![
        text(p, "name"),
        endpoints(p),
        models(p),
        key.into(),
        contexts,
        text(p, "description"),
    ]
}
