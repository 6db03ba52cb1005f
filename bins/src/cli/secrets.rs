//! `handler secret …`: Handler's store of secret values. A value comes from stdin or a prompt
//! that does not echo, never from the command line, and no command prints one.

use clap::Subcommand;
use serde_json::json;

use super::out::{Ctx, print_table, read_secret, text};

/// `handler secret …`.
#[derive(Subcommand, Debug)]
pub enum SecretCommand {
    /// List the secrets (their paths and where they are sent, never their values).
    #[command(visible_alias = "ls")]
    List,
    /// Set a secret's value, read from stdin or at a prompt that does not echo.
    Set {
        /// Its path, after what owns it, e.g. `providers/openrouter/apiKey`.
        path: String,
        /// What it is.
        #[arg(long)]
        description: Option<String>,
    },
    /// Remove a secret.
    #[command(alias = "remove")]
    Rm {
        /// Its path.
        path: String,
    },
}

/// `/v1/secrets/<path>`: the path's segments encoded one by one, its slashes kept.
fn secret_path(path: &str) -> String {
    let segs: Vec<String> = path.split('/').map(super::out::seg).collect();
    format!("/v1/secrets/{}", segs.join("/"))
}

/// Runs `handler secret …`; returns the exit code.
pub(crate) async fn run(cmd: SecretCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        SecretCommand::List => {
            let v = ctx.api.get("/v1/secrets").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["path", "hosts", "updated", "description"],
                    |s| {
                        vec![
                            text(s, "path"),
                            text(s, "hosts"),
                            text(s, "updatedAt"),
                            text(s, "description"),
                        ]
                    },
                    "no secrets",
                );
            });
        }
        SecretCommand::Set { path, description } => {
            let value = read_secret(&format!("Value of {path}: "))?;
            let mut body = json!({"value": value});
            if let Some(d) = description {
                body["description"] = json!(d);
            }
            let v = ctx.api.put(&secret_path(&path), &body).await?;
            ctx.done(&v, &format!("secret {path} set"));
        }
        SecretCommand::Rm { path } => {
            let v = ctx.api.delete(&secret_path(&path)).await?;
            ctx.done(&v, &format!("secret {path} removed"));
        }
    }
    Ok(0)
}
