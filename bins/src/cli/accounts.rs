//! `handler account …`: the model subscriptions agents run on, their token logins (the token
//! pasted on stdin or at a prompt, or where the person keeps it) and file logins.

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::legacy::{LoginArgs, run_account_login};
use super::out::{Ctx, Refused, print_fields, print_table, read_secret, seg, text};

/// `handler account …`.
#[derive(Subcommand, Debug)]
pub enum AccountCommand {
    /// List the accounts: harness, plan, whether logged in.
    #[command(visible_alias = "ls")]
    List,
    /// Show one account.
    Show {
        /// The account's name.
        name: String,
    },
    /// Add an account of a harness; a token login's token from one of the --token options.
    Add(AddArgs),
    /// Set a token login's token (pasted on stdin or at a prompt, or a reference).
    Token {
        /// The account's name.
        name: String,
        /// Where the token is.
        #[command(flatten)]
        token: TokenArgs,
    },
    /// Run the account's file login on this terminal; handlerd keeps the file it leaves.
    Login(LoginArgs),
    /// Give handlerd a file login's credential file made elsewhere (e.g. `~/.codex/auth.json`).
    Import {
        /// The account's name.
        name: String,
        /// The credential file.
        file: std::path::PathBuf,
    },
    /// Remove an account, its token and its credential file.
    #[command(alias = "remove")]
    Rm {
        /// The account's name.
        name: String,
    },
}

/// `handler account add NAME --harness H …`.
#[derive(Args, Debug)]
pub struct AddArgs {
    /// The account's name.
    pub name: String,
    /// The harness the subscription logs in to (`handler harness list` names them).
    #[arg(long)]
    pub harness: String,
    /// What you call it, shown in lists.
    #[arg(long)]
    pub description: Option<String>,
    /// The subscription's plan.
    #[arg(long)]
    pub plan: Option<String>,
    /// A context it may be used in (repeat for several; none: every context).
    #[arg(long = "context")]
    pub contexts: Vec<String>,
    /// Where the token is, for a token login.
    #[command(flatten)]
    pub token: TokenArgs,
}

/// Where a token login's token is; at most one.
#[derive(Args, Debug, Default)]
#[group(multiple = false)]
pub struct TokenArgs {
    /// Paste the token: read from stdin, or at a prompt that does not echo.
    #[arg(long)]
    pub token: bool,
    /// An environment variable of handlerd holding it.
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// A file holding it (its first line).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<String>,
    /// A command printing it, e.g. `pass show claude`.
    #[arg(long, value_name = "CMD")]
    pub token_command: Option<String>,
}

impl TokenArgs {
    /// The API's TokenInput, when one is given.
    fn input(&self) -> anyhow::Result<Option<Value>> {
        Ok(if self.token {
            Some(json!({"value": read_secret("Token: ")?}))
        } else if let Some(v) = &self.token_env {
            Some(json!({"env": v}))
        } else if let Some(f) = &self.token_file {
            Some(json!({"file": f}))
        } else if let Some(c) = &self.token_command {
            let argv: Vec<&str> = c.split_whitespace().collect();
            if argv.is_empty() {
                return Err(Refused("--token-command: empty command".into()).into());
            }
            Some(json!({"command": argv}))
        } else {
            None
        })
    }
}

/// Runs `handler account …`; returns the exit code.
pub(crate) async fn run(cmd: AccountCommand, json: bool) -> anyhow::Result<i32> {
    match cmd {
        AccountCommand::Login(args) => run_account_login(args).await,
        other => run_api(other, &Ctx::new(json)?).await.map(|()| 0),
    }
}

async fn run_api(cmd: AccountCommand, ctx: &Ctx) -> anyhow::Result<()> {
    match cmd {
        AccountCommand::List => list(ctx).await?,
        AccountCommand::Show { name } => {
            let v = ctx.api.get(&format!("/v1/accounts/{}", seg(&name))).await?;
            warn_expiry(&v);
            ctx.show(&v, show);
        }
        AccountCommand::Add(a) => {
            let mut body = json!({"name": a.name, "harness": a.harness});
            for (k, val) in [("description", &a.description), ("plan", &a.plan)] {
                if let Some(val) = val {
                    body[k] = json!(val);
                }
            }
            if !a.contexts.is_empty() {
                body["contexts"] = json!(a.contexts);
            }
            if let Some(t) = a.token.input()? {
                body["token"] = t;
            }
            let v = ctx.api.post("/v1/accounts", &body).await?;
            ctx.done(
                &v,
                &format!("account {} added ({})", a.name, login_line(&v)),
            );
        }
        AccountCommand::Token { name, token } => {
            let t = token.input()?.ok_or_else(|| {
                Refused("give the token: --token (stdin or a prompt), --token-env, --token-file or --token-command".into())
            })?;
            let v = ctx
                .api
                .put(&format!("/v1/accounts/{}/token", seg(&name)), &t)
                .await?;
            ctx.done(&v, &format!("account {name}: token set"));
        }
        AccountCommand::Import { name, file } => {
            let content = std::fs::read_to_string(&file)
                .map_err(|e| Refused(format!("{}: {e}", file.display())))?;
            let v = ctx
                .api
                .put(
                    &format!("/v1/accounts/{}/login", seg(&name)),
                    &json!({"content": content}),
                )
                .await?;
            ctx.done(&v, &format!("account {name}: credential file kept"));
        }
        AccountCommand::Rm { name } => {
            let v = ctx
                .api
                .delete(&format!("/v1/accounts/{}", seg(&name)))
                .await?;
            ctx.done(&v, &format!("account {name} removed"));
        }
        AccountCommand::Login(_) => {}
    }
    Ok(())
}

/// `handler account list`: the table, after a warning per token about to expire.
async fn list(ctx: &Ctx) -> anyhow::Result<()> {
    let v = ctx.api.get("/v1/accounts").await?;
    for a in v.as_array().into_iter().flatten() {
        warn_expiry(a);
    }
    ctx.show(&v, |v| {
        print_table(
            v,
            &[
                "name",
                "harness",
                "login",
                "logged in",
                "plan",
                "contexts",
                "expires",
                "description",
            ],
            row,
            "no accounts (add one: handler account add NAME --harness H)",
        );
    });
    Ok(())
}

/// [`expiry_warning`] on stderr, when there is one.
fn warn_expiry(a: &Value) {
    if let Some(w) = expiry_warning(a) {
        eprintln!("warning: {w}");
    }
}

fn row(a: &Value) -> Vec<String> {
    vec![
        text(a, "name"),
        text(a, "harness"),
        text(a, "login"),
        text(a, "loggedIn"),
        text(a, "plan"),
        if a["contexts"].is_null() {
            "any".into()
        } else {
            text(a, "contexts")
        },
        match (a["expiresAt"].as_str(), a["expiry"].as_str()) {
            (Some(at), Some("valid")) => at.get(..10).unwrap_or(at).to_string(),
            (Some(at), Some(state)) => format!("{} ({state})", at.get(..10).unwrap_or(at)),
            _ => String::new(),
        },
        text(a, "description"),
    ]
}

/// The line that tells a person their account's token is about to stop working, or has
/// (B.1 `tokenLifetimeDays`, decision 0150), with what renews it.
fn expiry_warning(a: &Value) -> Option<String> {
    let (name, at) = (text(a, "name"), a["expiresAt"].as_str()?);
    let when = match a["expiry"].as_str()? {
        "soon" => "expires",
        "expired" => "expired",
        _ => return None,
    };
    Some(format!(
        "account {name}'s token {when} on {at}: give a new one with handler account token {name} --token"
    ))
}

fn login_line(a: &Value) -> String {
    match (a["login"].as_str(), a["loggedIn"].as_bool()) {
        (_, Some(true)) => "logged in".into(),
        (Some("file"), _) => format!("log in: handler account login {}", text(a, "name")),
        (Some("token"), _) => format!(
            "set its token: handler account token {} --token",
            text(a, "name")
        ),
        _ => "not logged in".into(),
    }
}

fn show(a: &Value) {
    print_fields(
        a,
        &[
            "name",
            "harness",
            "description",
            "plan",
            "contexts",
            "login",
            "loggedIn",
            "loggedInAt",
            "expiresAt",
            "expiry",
            "error",
        ],
    );
    if let Some(t) = a["token"].as_object() {
        let (k, v) = t
            .iter()
            .next()
            .map_or(("", String::new()), |(k, v)| (k.as_str(), v.to_string()));
        println!("token: {k} {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::{expiry_warning, row};
    use serde_json::json;

    #[test]
    fn a_token_about_to_expire_is_said_with_what_renews_it() {
        let a = |expiry: &str| {
            json!({"name": "cc", "harness": "claude-code", "loggedIn": true,
                "expiresAt": "2027-12-04T20:00:00Z", "expiry": expiry})
        };
        assert_eq!(expiry_warning(&a("valid")), None);
        assert_eq!(
            expiry_warning(&a("soon")).as_deref(),
            Some(
                "account cc's token expires on 2027-12-04T20:00:00Z: give a new one with handler account token cc --token"
            )
        );
        assert!(
            expiry_warning(&a("expired"))
                .unwrap()
                .contains("token expired on")
        );
        assert_eq!(expiry_warning(&json!({"name": "x"})), None);
        assert_eq!(row(&a("valid"))[6], "2027-12-04");
        assert_eq!(row(&a("soon"))[6], "2027-12-04 (soon)");
        assert_eq!(row(&json!({"name": "x"}))[6], "");
    }
}
