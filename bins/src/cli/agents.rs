//! `handler agent …`: what sessions open on (its models, its folder, how it is contained). The
//! flags that widen what an agent may do (`--network open`, `--log-only`, `--containers`,
//! `--permissions bypass`) are the confirmation themselves, and say on stderr what they give.

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::out::{Ctx, Refused, print_fields, print_table, seg, text};

/// `handler agent …`.
#[derive(Subcommand, Debug)]
pub enum AgentCommand {
    /// List the agents, ad hoc and of projects.
    #[command(visible_alias = "ls")]
    List {
        /// Only this project's agents (its id).
        #[arg(long)]
        project: Option<String>,
    },
    /// Show one agent: its models (and why one cannot start), containment, connections.
    Show {
        /// The agent's id.
        id: String,
    },
    /// Make an agent: of a project (`--project`, with `--name`) or ad hoc (`--scope` or none).
    New(NewArgs),
    /// Change an agent: what you give replaces what it has.
    Edit {
        /// The agent's id.
        id: String,
        /// What changes.
        #[command(flatten)]
        settings: Settings,
    },
    /// Remove an agent (a project keeps at least one).
    #[command(alias = "remove")]
    Rm {
        /// The agent's id.
        id: String,
    },
    /// Show or change an agent's network: filtered, open or none; enforce or only log; its
    /// allow-list. The enforcement switches running sandboxes at once.
    Network {
        /// The agent's id.
        id: String,
        /// What changes (nothing: show it).
        #[command(flatten)]
        net: NetworkArgs,
        /// Refuse what no entry allows (filtered only; the default).
        #[arg(long, conflicts_with = "log_only")]
        enforce: bool,
        /// Remove an allow-list entry (HOST:PORT); repeatable.
        #[arg(long, value_name = "HOST:PORT")]
        disallow: Vec<String>,
    },
    /// Its state's seeds from your own settings (decision 0154): each seeded, changed on this
    /// host since, absent or new; `--apply` copies the new and the changed ones now.
    Seed {
        /// The agent's id.
        id: String,
        /// Copy what is new or changed (the agent's next sessions see it).
        #[arg(long)]
        apply: bool,
    },
    /// The built-in agents (the skill reviewer, the skill creator) and whether each is set up.
    Builtin,
    /// Start a run of an agent with an interface, wait for it, print its result.
    Run(super::runs::RunAgentArgs),
}

/// `handler agent new`.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// The project it is an agent of (its id); none: an ad-hoc agent.
    #[arg(long)]
    pub project: Option<String>,
    /// An ad-hoc agent's folder; none: each session gets a folder of its own.
    #[arg(long, conflicts_with = "project")]
    pub scope: Option<String>,
    /// Make it its project's default agent.
    #[arg(long, requires = "project")]
    pub default: bool,
    /// Set up this built-in agent (`handler agent builtin`): its defaults, with your model.
    #[arg(long, value_name = "NAME", conflicts_with = "project")]
    pub origin: Option<String>,
    /// Its settings.
    #[command(flatten)]
    pub settings: Settings,
}

/// The model an agent runs with, by default.
#[derive(Args, Debug, Default)]
pub struct ModelArgs {
    /// Run on this account.
    #[arg(long, conflicts_with = "provider")]
    pub account: Option<String>,
    /// Run on this provider (give --harness too).
    #[arg(long, requires = "harness")]
    pub provider: Option<String>,
    /// The harness (an account's own by default).
    #[arg(long)]
    pub harness: Option<String>,
    /// The model (default: the account's harness's or the provider's first).
    #[arg(long)]
    pub model: Option<String>,
}

/// How an agent's network is set.
#[derive(Args, Debug, Default)]
pub struct NetworkArgs {
    /// filtered (only the allow-list), open (any host, nothing filtered) or none.
    #[arg(long, value_name = "MODE", value_parser = ["filtered", "open", "none"])]
    pub network: Option<String>,
    /// Filtered only: let through what no entry allows, and only log it.
    #[arg(long)]
    pub log_only: bool,
    /// An allow-list entry, HOST:PORT or *.DOMAIN:PORT (a bare host is refused); repeatable.
    #[arg(long, value_name = "HOST:PORT")]
    pub allow: Vec<String>,
}

/// An agent's settings a command line sets.
#[derive(Args, Debug, Default)]
pub struct Settings {
    /// Its name (required for a project's agent).
    #[arg(long)]
    pub name: Option<String>,
    /// What it is for.
    #[arg(long)]
    pub description: Option<String>,
    /// Sent before a session's first request.
    #[arg(long)]
    pub instructions: Option<String>,
    /// Its model (replaces its models with this one).
    #[command(flatten)]
    pub model: ModelArgs,
    /// Its network.
    #[command(flatten)]
    pub net: NetworkArgs,
    /// Its sandboxes may run containers (nested confinement).
    #[arg(long)]
    pub containers: bool,
    /// Its sandboxes draw windows on this screen and share its clipboard (A.6).
    #[arg(long, conflicts_with = "no_display")]
    pub display: bool,
    /// Its sandboxes get no display (takes `--display` back).
    #[arg(long)]
    pub no_display: bool,
    /// Its starting permission mode: ask, accept-edits or bypass.
    #[arg(long, value_parser = ["ask", "accept-edits", "bypass"])]
    pub permissions: Option<String>,
    /// Start from my own settings: its state seeded once from your own harness settings
    /// (never a login); `handler agent seed ID` shows later changes and applies them.
    #[arg(long, conflicts_with = "no_seed_state")]
    pub seed_state: bool,
    /// Its state is not seeded from your settings (what was copied stays).
    #[arg(long)]
    pub no_seed_state: bool,
    /// Where its sessions run: a machine made for it (`handler machine create NAME --agent
    /// ID`), `disposable` or `disposable:PROFILE` (a machine of each session's own), or `none`
    /// (a sandbox each).
    #[arg(long, value_name = "NAME|disposable|disposable:PROFILE|none")]
    pub machine: Option<String>,
    /// With a disposable machine: seconds it is kept after its session (300).
    #[arg(long, value_name = "SECONDS")]
    pub disposable_delay: Option<u64>,
}

impl NetworkArgs {
    /// Writes the network fields into `body`; says on stderr what a widening flag gives.
    fn apply(&self, body: &mut Map<String, Value>) -> bool {
        let mut risky = false;
        if let Some(n) = &self.network {
            body.insert("network".into(), json!(n));
            if n == "open" {
                eprintln!(
                    "handler: --network open: its sandboxes reach any host; nothing is filtered, logged or injected past its secrets' hosts"
                );
                risky = true;
                body.remove("egress");
            }
            if n == "none" {
                body.remove("egress");
            }
        }
        if self.log_only {
            eprintln!(
                "handler: --log-only: what no allow-list entry allows goes through, and is only logged"
            );
            body.insert("egress".into(), json!("log-only"));
            risky = true;
        }
        if !self.allow.is_empty() {
            let mut allow: Vec<Value> = body
                .get("allow")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for a in &self.allow {
                if !allow.contains(&json!(a)) {
                    allow.push(json!(a));
                }
            }
            body.insert("allow".into(), Value::Array(allow));
        }
        risky
    }
}

impl Settings {
    /// Writes what was given into `body` (an agent request); true when it widens what the
    /// agent may do (the flag is the confirmation).
    fn apply(&self, body: &mut Map<String, Value>) -> bool {
        for (k, v) in [
            ("name", &self.name),
            ("description", &self.description),
            ("instructions", &self.instructions),
        ] {
            if let Some(v) = v {
                body.insert(k.into(), json!(v));
            }
        }
        let m = &self.model;
        if m.account.is_some() || m.provider.is_some() {
            let mut access = Map::new();
            for (k, v) in [
                ("account", &m.account),
                ("provider", &m.provider),
                ("harness", &m.harness),
                ("model", &m.model),
            ] {
                if let Some(v) = v {
                    access.insert(k.into(), json!(v));
                }
            }
            body.insert("models".into(), json!([access]));
        }
        let mut risky = self.net.apply(body);
        if self.containers {
            eprintln!(
                "handler: --containers: its sandboxes may run containers of their own (nested confinement), a wider kernel surface"
            );
            body.insert("confinement".into(), json!("nested"));
            risky = true;
        }
        if self.display {
            eprintln!(
                "handler: --display: its sandboxes draw on your screen and read and write your clipboard"
            );
            body.insert("display".into(), json!(true));
        }
        if self.no_display {
            body.insert("display".into(), json!(false));
        }
        if self.seed_state || self.no_seed_state {
            body.insert("seedState".into(), json!(self.seed_state));
        }
        match self.machine.as_deref() {
            Some("none") => {
                body.remove("machine");
                body.remove("disposableDelayMs");
            }
            Some(m) => {
                body.insert("machine".into(), json!(m));
                if !m.starts_with("disposable") {
                    body.remove("disposableDelayMs");
                }
            }
            None => {}
        }
        if let Some(s) = self.disposable_delay {
            body.insert("disposableDelayMs".into(), json!(s.saturating_mul(1000)));
        }
        if let Some(p) = &self.permissions {
            if p == "bypass" {
                eprintln!("handler: --permissions bypass: it acts without asking you first");
                risky = true;
            }
            body.insert("permissions".into(), json!(p));
        }
        if risky {
            body.insert("confirmRisks".into(), json!(true));
        }
        risky
    }
}

/// The keys of an Agent that a request takes back (the others are handlerd's own).
const REQUEST_KEYS: &[&str] = &[
    "network",
    "egress",
    "allow",
    "confinement",
    "permissions",
    "bindings",
    "knowledge",
    "display",
    "seedState",
    "askDeniedHosts",
    "gitGuard",
    "sessionTree",
    "machine",
    "disposableDelayMs",
    "interface",
    "name",
    "description",
    "instructions",
    "skills",
];

/// An agent as a request that replaces it (PUT): an AgentRequest or an AdHocAgentRequest.
fn request_of(agent: &Value) -> Map<String, Value> {
    let mut body = Map::new();
    for k in REQUEST_KEYS.iter().chain(if agent["projectId"].is_null() {
        ["scope", "origin"].iter()
    } else {
        [].iter()
    }) {
        if !agent[*k].is_null() {
            body.insert((*k).to_string(), agent[*k].clone());
        }
    }
    let models: Vec<Value> = agent["models"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let mut a = Map::new();
            for k in ["harness", "account", "provider", "model"] {
                if !m[k].is_null() {
                    a.insert(k.into(), m[k].clone());
                }
            }
            Value::Object(a)
        })
        .collect();
    body.insert("models".into(), json!(models));
    body
}

/// Runs `handler agent …`; returns the exit code.
pub(crate) async fn run(cmd: AgentCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        AgentCommand::List { project } => {
            let path = project.map_or("/v1/agents".into(), |p| {
                format!("/v1/agents?project={}", seg(&p))
            });
            let v = ctx.api.get(&path).await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["id", "name", "project", "models", "network", "folder"],
                    row,
                    "no agents (make one: handler agent new --account A)",
                );
            });
        }
        AgentCommand::Show { id } => {
            let v = ctx.api.get(&format!("/v1/agents/{}", seg(&id))).await?;
            ctx.show(&v, show);
        }
        AgentCommand::New(a) => new(&ctx, a).await?,
        AgentCommand::Seed { id, apply } => {
            let path = format!("/v1/agents/{}/seed", seg(&id));
            let v = if apply {
                ctx.api.post(&path, &json!({})).await?
            } else {
                ctx.api.get(&path).await?
            };
            ctx.show(&v, human_seeds);
            let changed = v
                .as_array()
                .into_iter()
                .flatten()
                .filter(|s| s["status"] == "changed" || s["status"] == "new")
                .count();
            if !apply && changed > 0 {
                eprintln!(
                    "handler: {changed} seed(s) new or changed on this host: `handler agent seed {id} --apply` copies them"
                );
            }
        }
        AgentCommand::Edit { id, settings } => {
            let path = format!("/v1/agents/{}", seg(&id));
            let mut body = request_of(&ctx.api.get(&path).await?);
            settings.apply(&mut body);
            let v = ctx.api.put(&path, &Value::Object(body)).await?;
            ctx.done(&v, &changed_line(&v));
        }
        AgentCommand::Rm { id } => {
            let v = ctx.api.delete(&format!("/v1/agents/{}", seg(&id))).await?;
            ctx.done(&v, &format!("agent {id} removed"));
        }
        AgentCommand::Network {
            id,
            net,
            enforce,
            disallow,
        } => network(&ctx, &id, &net, enforce, &disallow).await?,
        AgentCommand::Builtin => {
            let v = ctx.api.get("/v1/builtin-agents").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["name", "agent", "runs", "description"],
                    builtin_row,
                    "no built-in agents",
                );
            });
        }
        AgentCommand::Run(a) => return super::runs::run_agent(&ctx, a).await,
    }
    Ok(0)
}

async fn new(ctx: &Ctx, a: NewArgs) -> anyhow::Result<()> {
    if a.settings.model.account.is_none() && a.settings.model.provider.is_none() {
        return Err(Refused(
            "an agent needs a model: --account NAME, or --provider NAME --harness H".into(),
        )
        .into());
    }
    let mut body = Map::new();
    a.settings.apply(&mut body);
    let v = match &a.project {
        Some(p) => {
            if a.settings.name.is_none() {
                return Err(
                    Refused("--name: a project's agent needs a name (its goal)".into()).into(),
                );
            }
            if a.default {
                body.insert("default".into(), json!(true));
            }
            ctx.api
                .post(
                    &format!("/v1/projects/{}/agents", seg(p)),
                    &Value::Object(body),
                )
                .await?
        }
        None => {
            if let Some(s) = &a.scope {
                body.insert("scope".into(), json!(absolute(s)?));
            }
            if let Some(o) = &a.origin {
                body.insert("origin".into(), json!(o));
            }
            ctx.api.post("/v1/agents", &Value::Object(body)).await?
        }
    };
    ctx.done(
        &v,
        &format!("agent {} made{}", text(&v, "id"), problems(&v)),
    );
    Ok(())
}

/// A built-in agent's row: its name, the agent set up from it (or how to set it up), whether
/// it runs unattended (an interface) and what it is for.
fn builtin_row(b: &Value) -> Vec<String> {
    let agent = match b["agentId"].as_str() {
        Some(id) => id.to_string(),
        None => format!(
            "(set up: handler agent new --origin {} --account A)",
            text(b, "name")
        ),
    };
    let runs = if b["interface"].is_null() {
        "no"
    } else {
        "yes"
    };
    let mut description = text(b, "description");
    for f in b["fetches"].as_array().into_iter().flatten() {
        description.push_str(&format!(
            " (set-up fetches the skill {}, {}, from {})",
            text(f, "name"),
            text(f, "license"),
            text(f, "url")
        ));
    }
    vec![text(b, "name"), agent, runs.into(), description]
}

async fn network(
    ctx: &Ctx,
    id: &str,
    net: &NetworkArgs,
    enforce: bool,
    disallow: &[String],
) -> anyhow::Result<()> {
    let path = format!("/v1/agents/{}", seg(id));
    let agent = ctx.api.get(&path).await?;
    let only_egress = net.network.is_none() && net.allow.is_empty() && disallow.is_empty();
    let v = if only_egress && (enforce || net.log_only) {
        // The live switch (no confirmation asked by handlerd): the running sandboxes at once.
        if net.log_only {
            eprintln!(
                "handler: --log-only: what no allow-list entry allows goes through, and is only logged"
            );
        }
        let egress = if enforce { "enforce" } else { "log-only" };
        ctx.api
            .call("PATCH", &path, Some(&json!({"egress": egress})))
            .await?
    } else if only_egress {
        ctx.show(&agent, show_network);
        return Ok(());
    } else {
        let mut body = request_of(&agent);
        if net.apply(&mut body) {
            body.insert("confirmRisks".into(), json!(true));
        }
        if enforce {
            body.insert("egress".into(), json!("enforce"));
        }
        if let Some(allow) = body.get_mut("allow").and_then(Value::as_array_mut) {
            allow.retain(|a| !disallow.iter().any(|d| a.as_str() == Some(d)));
        }
        ctx.api.put(&path, &Value::Object(body)).await?
    };
    if ctx.json {
        super::out::print_json(&v);
    } else {
        show_network(&v);
    }
    Ok(())
}

fn absolute(p: &str) -> anyhow::Result<String> {
    let path = std::path::Path::new(p);
    Ok(if path.is_absolute() {
        p.to_string()
    } else {
        std::env::current_dir()?.join(path).display().to_string()
    })
}

fn models(a: &Value) -> String {
    a["models"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(model)
        .collect::<Vec<_>>()
        .join(",")
}

fn model(m: &Value) -> String {
    let who = if m["account"].is_null() {
        format!("provider {}", text(m, "provider"))
    } else {
        format!("account {}", text(m, "account"))
    };
    let model = if m["model"].is_null() {
        String::new()
    } else {
        format!(" {}", text(m, "model"))
    };
    format!("{who} ({}{model})", text(m, "harness"))
}

fn problems(a: &Value) -> String {
    let p: Vec<String> = a["models"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|m| !m["problem"].is_null())
        .map(|m| format!("; cannot start with {}: {}", model(m), text(m, "problem")))
        .collect();
    p.concat()
}

fn changed_line(a: &Value) -> String {
    let next = text(a, "nextSandbox");
    let next = if next.is_empty() {
        String::new()
    } else {
        format!("; its next sandbox gets: {next}")
    };
    format!("agent {} changed{next}{}", text(a, "id"), problems(a))
}

fn row(a: &Value) -> Vec<String> {
    let network = match (a["network"].as_str(), a["egress"].as_str()) {
        (Some("filtered"), Some("log-only")) => "filtered (log only)".into(),
        _ => text(a, "network"),
    };
    let folder = if a["scope"].is_null() {
        "(own per session)".into()
    } else {
        text(a, "scope")
    };
    vec![
        text(a, "id"),
        text(a, "name"),
        text(a, "projectId"),
        models(a),
        network,
        folder,
    ]
}

fn show(a: &Value) {
    print_fields(
        a,
        &[
            "id",
            "name",
            "projectId",
            "context",
            "description",
            "scope",
            "confinement",
            "permissions",
            "bindings",
            "knowledge",
            "skills",
            "acpUrl",
            "createdAt",
            "lastUsedAt",
        ],
    );
    for m in a["models"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let problem = if m["problem"].is_null() {
            String::new()
        } else {
            format!(" — cannot start: {}", text(m, "problem"))
        };
        println!("model: {}{problem}", model(m));
    }
    show_network(a);
    for c in a["connections"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        println!(
            "connection: {} {} since {}",
            text(c, "id"),
            text(c, "sandbox"),
            text(c, "since")
        );
    }
}

fn show_network(a: &Value) {
    let egress = if a["egress"].is_null() {
        String::new()
    } else {
        format!(" ({})", text(a, "egress"))
    };
    println!("network: {}{egress}", text(a, "network"));
    let allow = text(a, "allow");
    if !allow.is_empty() {
        println!("allow: {allow}");
    }
    let next = text(a, "nextSandbox");
    if !next.is_empty() {
        println!("next sandbox: {next}");
    }
}

/// The seeds as a table: state, slot, source, status, when copied.
fn human_seeds(v: &Value) {
    print_table(
        v,
        &["state", "slot", "source", "status", "seeded"],
        |s| {
            ["state", "slot", "source", "status", "seededAt"]
                .iter()
                .map(|k| s[*k].as_str().unwrap_or("-").to_string())
                .collect()
        },
        "no seed: its harnesses seed nothing",
    );
}

#[cfg(test)]
mod tests {
    use super::Settings;
    use serde_json::{Map, json};

    #[test]
    fn display_is_given_and_taken_back_by_its_flags() {
        let mut body = Map::new();
        Settings {
            display: true,
            ..Default::default()
        }
        .apply(&mut body);
        assert_eq!(body.get("display"), Some(&json!(true)));
        Settings {
            no_display: true,
            ..Default::default()
        }
        .apply(&mut body);
        assert_eq!(body.get("display"), Some(&json!(false)));
        let mut untouched = Map::new();
        Settings::default().apply(&mut untouched);
        assert!(!untouched.contains_key("display"));
    }

    #[test]
    fn seed_state_is_given_and_taken_back_and_an_edit_keeps_what_it_does_not_name() {
        let mut body = Map::new();
        Settings {
            seed_state: true,
            ..Default::default()
        }
        .apply(&mut body);
        assert_eq!(body.get("seedState"), Some(&json!(true)));
        Settings {
            no_seed_state: true,
            ..Default::default()
        }
        .apply(&mut body);
        assert_eq!(body.get("seedState"), Some(&json!(false)));
        // An agent's fields the flags do not name come back in the PUT an edit sends.
        let agent = json!({"id": "a_1", "models": [{"account": "perso", "harness": "x"}],
            "network": "none", "seedState": true, "machine": "box", "gitGuard": "open",
            "sessionTree": "copy", "askDeniedHosts": false, "disposableDelayMs": 5000,
            "connections": [], "warnings": []});
        let req = super::request_of(&agent);
        for k in [
            "seedState",
            "machine",
            "gitGuard",
            "sessionTree",
            "askDeniedHosts",
            "disposableDelayMs",
        ] {
            assert_eq!(req.get(k), Some(&agent[k]), "{k}");
        }
        assert!(!req.contains_key("connections") && !req.contains_key("id"));
    }

    #[test]
    fn machine_is_given_and_taken_back_by_its_flags() {
        let mut body = Map::new();
        Settings {
            machine: Some("disposable:scratch".into()),
            disposable_delay: Some(60),
            ..Default::default()
        }
        .apply(&mut body);
        assert_eq!(body.get("machine"), Some(&json!("disposable:scratch")));
        assert_eq!(body.get("disposableDelayMs"), Some(&json!(60_000)));
        Settings {
            machine: Some("box".into()),
            ..Default::default()
        }
        .apply(&mut body);
        assert_eq!(body.get("machine"), Some(&json!("box")));
        assert!(!body.contains_key("disposableDelayMs"));
        Settings {
            machine: Some("none".into()),
            ..Default::default()
        }
        .apply(&mut body);
        assert!(!body.contains_key("machine"));
    }
}
