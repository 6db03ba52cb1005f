//! Which agent `handler run`, `handler acp` and `handler terminal` open in a folder (the CLI's
//! resolution rules, with project contexts' `--anyway`), and what typed agent options differ from
//! that agent: pure functions of the folder, the words typed and the API's documents.

use clap::Args;
use handler_contracts::allow::AllowEntry;
use handler_contracts::control::{
    AccountInfo, AdHocAgentRequest, Agent, AgentOptions, AgentRequest, ModelAccess, NetworkMode,
    Project, ProviderInfo,
};
use handler_contracts::harness::PermissionMode;
use handler_contracts::sandbox::{Confinement, Enforcement};

/// The agent options `run`, `acp` and `terminal` share; a flag not typed changes nothing.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentFlags {
    /// Choose among the agent's models by harness (or the harness for a provider).
    #[arg(long)]
    pub harness: Option<String>,
    /// Choose among the agent's models by model (or the model to run with).
    #[arg(long)]
    pub model: Option<String>,
    /// Outside projects: the folder's ad-hoc agent of this name (refused in a project's folder).
    #[arg(long)]
    pub name: Option<String>,
    /// Its network: none, filtered or open (open is the confirmation of what it gives).
    #[arg(long, value_parser = ["none", "filtered", "open"])]
    pub network: Option<String>,
    /// Filtered, but only report what no entry allows (lets every host through).
    #[arg(long)]
    pub log_only: bool,
    /// Its sandboxes may run containers (nested confinement).
    #[arg(long)]
    pub containers: bool,
    /// Its sandboxes draw windows on this screen and share its clipboard (A.6: the host's
    /// Wayland display, found at each start).
    #[arg(long)]
    pub display: bool,
    /// Its starting permission mode: ask, accept-edits or bypass.
    #[arg(long, value_parser = ["ask", "accept-edits", "bypass"])]
    pub permissions: Option<String>,
    /// Add an allow-list entry (HOST:PORT, *.DOMAIN:PORT).
    #[arg(long = "allow", value_name = "ENTRY")]
    pub allow: Vec<String>,
    /// Add a binding (an addon's settings).
    #[arg(long = "binding", value_name = "NAME")]
    pub binding: Vec<String>,
    /// Add a knowledge folder, relative to the knowledge root.
    #[arg(long = "knowledge", value_name = "PATH")]
    pub knowledge: Vec<String>,
    /// Where its sessions run: a machine made for it (`handler machine create NAME --agent
    /// ID`), `disposable` (a machine of each session's own), or `none` (a sandbox each).
    #[arg(long, value_name = "NAME|disposable|none")]
    pub machine: Option<String>,
    /// With `--machine disposable`: seconds a session's machine is kept after it (300).
    #[arg(long, value_name = "SECONDS")]
    pub disposable_delay: Option<u64>,
    /// Start from my own settings: its state seeded once from your own harness settings
    /// (Claude's settings.json, CLAUDE.md, skills…; Codex's config.toml, AGENTS.md…), never a
    /// login (`handler agent seed ID` shows and applies later changes).
    #[arg(long)]
    pub seed_state: bool,
}

/// What the flags that widen an agent give, one line each: typing them is the confirmation
/// (D.8), so it is said on stderr when they are saved.
pub fn widening(f: &AgentFlags) -> Vec<&'static str> {
    let mut out = Vec::new();
    if f.network.as_deref() == Some("open") {
        out.push("--network open: its sandboxes reach every host, unfiltered");
    }
    if f.log_only {
        out.push("--log-only: every host is let through, only reported, to learn what it needs");
    }
    if f.containers {
        out.push("--containers: its sandboxes may run containers (nested confinement)");
    }
    if f.display {
        out.push("--display: its sandboxes draw on your screen and read and write your clipboard");
    }
    out
}

/// What the person typed before the resolution.
#[derive(Debug, Clone)]
pub struct Typed<'a> {
    /// The folder (absolute, without a trailing `/`).
    pub folder: &'a str,
    /// AGENT, ACCOUNT or PROVIDER, when typed.
    pub word: Option<&'a str>,
    /// The agent options.
    pub flags: &'a AgentFlags,
    /// `--anyway`: outside the project, after the typed yes.
    pub anyway: bool,
}

/// What the resolution reads: the API's lists.
#[derive(Debug, Clone, Copy)]
pub struct Known<'a> {
    /// `GET /v1/projects`.
    pub projects: &'a [Project],
    /// `GET /v1/agents` (ad hoc and of projects).
    pub agents: &'a [Agent],
    /// `GET /v1/accounts`.
    pub accounts: &'a [AccountInfo],
    /// `GET /v1/providers`.
    pub providers: &'a [ProviderInfo],
}

/// The agent to open.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// An existing agent, with one of its models or another for this session only.
    Existing {
        /// The agent.
        agent: Box<Agent>,
        /// The model it runs with; none: its first.
        model: Option<ModelAccess>,
    },
    /// The folder's ad-hoc agent, made now with the options typed.
    Create(Box<AdHocAgentRequest>),
}

/// The outcome of the resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    /// The agent to open.
    pub target: Target,
    /// The project whose folder this is, when the agent runs outside it (`--anyway`): the
    /// person must type yes first.
    pub outside_project: Option<String>,
    /// What the typed options change in the existing agent ("network: filtered → open").
    pub differs: Vec<String>,
    /// The agent's settings with the typed options applied, to PUT when saved.
    pub saved: Option<serde_json::Value>,
}

/// Why nothing can be opened; each says what to type instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// `--name` in a project's folder.
    #[error(
        "--name: {folder} is project {project}'s folder: name one of its agents instead ({agents})"
    )]
    NameInProject {
        /// The folder.
        folder: String,
        /// The project's name.
        project: String,
        /// Its agents' names.
        agents: String,
    },
    /// The word names no agent, account or provider.
    #[error("{word:?} is neither an agent of {project} nor an account or a provider ({hint})")]
    Unknown {
        /// What was typed.
        word: String,
        /// Where it was looked up.
        project: String,
        /// What exists.
        hint: String,
    },
    /// An account or provider not made for the project's context (D.19).
    #[error(
        "{what} is not made for project {project}'s context {context:?}: run it outside the project with --anyway (an ad-hoc agent of this folder), or use an account made for {context:?}"
    )]
    NotForContext {
        /// `account "x"` or `provider "x"`.
        what: String,
        /// The project's name.
        project: String,
        /// Its context.
        context: String,
    },
    /// No agent yet, and nothing to make one with.
    #[error(
        "no agent works in {folder} yet: name the account or provider to make one with (handler run ACCOUNT)"
    )]
    NothingToRun {
        /// The folder.
        folder: String,
    },
    /// --harness/--model choose none of the agent's models.
    #[error("--harness/--model: agent {agent} has no such model (its models: {models})")]
    NoSuchModel {
        /// The agent's name or id.
        agent: String,
        /// Its models.
        models: String,
    },
    /// A typed option is invalid.
    #[error("--{flag}: {message}")]
    BadFlag {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A project without agents (cannot happen through the API).
    #[error("project {0} has no agent")]
    EmptyProject(String),
}

/// The project whose folder holds `folder` (the deepest).
pub fn project_of<'a>(projects: &'a [Project], folder: &str) -> Option<&'a Project> {
    projects
        .iter()
        .filter(|p| {
            let f = p.folder.trim_end_matches('/');
            folder == f || folder.starts_with(&format!("{f}/"))
        })
        .max_by_key(|p| p.folder.len())
}

/// D.16's resolution with D.19's context rule.
pub fn resolve(t: &Typed<'_>, k: &Known<'_>) -> Result<Resolution, ResolveError> {
    check_flags(t.flags)?;
    if let Some(p) = project_of(k.projects, t.folder) {
        if t.flags.name.is_some() {
            return Err(ResolveError::NameInProject {
                folder: t.folder.into(),
                project: p.name.clone(),
                agents: names(p),
            });
        }
        match in_project(t, k, p) {
            Err(ResolveError::NotForContext { .. }) if t.anyway => {
                let mut r = ad_hoc(t, k)?;
                r.outside_project = Some(p.name.clone());
                return Ok(r);
            }
            other => return other,
        }
    }
    ad_hoc(t, k)
}

fn in_project(t: &Typed<'_>, k: &Known<'_>, p: &Project) -> Result<Resolution, ResolveError> {
    let default = p
        .default_agent
        .as_ref()
        .and_then(|id| p.agents.iter().find(|a| &a.id == id))
        .or_else(|| p.agents.first())
        .ok_or_else(|| ResolveError::EmptyProject(p.name.clone()))?;
    let Some(word) = t.word else {
        return existing(t, default, None);
    };
    if let Some(a) = p.agents.iter().find(|a| {
        a.name
            .as_deref()
            .is_some_and(|n| n.eq_ignore_ascii_case(word))
    }) {
        return existing(t, a, None);
    }
    let access = access_named(k, word).ok_or_else(|| ResolveError::Unknown {
        word: word.into(),
        project: p.name.clone(),
        hint: format!(
            "its agents: {}; accounts: {}; providers: {}",
            names(p),
            join(k.accounts.iter().map(|a| a.name.as_str())),
            join(k.providers.iter().map(|a| a.name.as_str()))
        ),
    })?;
    if let Some(a) = p.agents.iter().find(|a| lists(a, &access)) {
        return existing(t, a, Some(&access));
    }
    if let Some(ctx) = &p.context
        && !made_for(k, &access, ctx)
    {
        return Err(ResolveError::NotForContext {
            what: describe(&access),
            project: p.name.clone(),
            context: ctx.clone(),
        });
    }
    let mut model = access;
    model.harness = t.flags.harness.clone().or(model.harness);
    model.model = t.flags.model.clone();
    let mut r = existing_with(t, default, Some(model))?;
    r.outside_project = None;
    Ok(r)
}

/// The folder's ad-hoc agent (by `--name`, else its folder's name), made when missing.
fn ad_hoc(t: &Typed<'_>, k: &Known<'_>) -> Result<Resolution, ResolveError> {
    let base = t.folder.rsplit('/').next().unwrap_or(t.folder);
    let want = t.flags.name.as_deref().unwrap_or(base);
    let found = k.agents.iter().find(|a| {
        a.project_id.is_none()
            && a.scope.as_deref().map(|s| s.trim_end_matches('/')) == Some(t.folder)
            && a.name.as_deref().unwrap_or(base).eq_ignore_ascii_case(want)
    });
    let access = match t.word {
        None => None,
        Some(w) => Some(access_named(k, w).ok_or_else(|| ResolveError::Unknown {
            word: w.into(),
            project: "no project".into(),
            hint: format!(
                "accounts: {}; providers: {}",
                join(k.accounts.iter().map(|a| a.name.as_str())),
                join(k.providers.iter().map(|a| a.name.as_str()))
            ),
        })?),
    };
    let with_flags = |mut m: ModelAccess| {
        m.harness = t.flags.harness.clone().or(m.harness);
        m.model = t.flags.model.clone().or(m.model);
        m
    };
    if let Some(a) = found {
        return match access {
            Some(m) if lists(a, &m) => existing(t, a, Some(&m)),
            Some(m) => existing_with(t, a, Some(with_flags(m))),
            None => existing(t, a, None),
        };
    }
    let Some(model) = access else {
        return Err(ResolveError::NothingToRun {
            folder: t.folder.into(),
        });
    };
    let mut options = AgentOptions::default();
    apply(t.flags, &mut options);
    let req = AdHocAgentRequest {
        models: vec![with_flags(model)],
        options,
        scope: Some(t.folder.into()),
        name: t.flags.name.clone(),
        description: None,
        instructions: None,
        origin: None,
        skills: vec![],
        remote_start: false,
        confirm_risks: true,
    };
    Ok(Resolution {
        target: Target::Create(Box::new(req)),
        outside_project: None,
        differs: vec![],
        saved: None,
    })
}

/// An existing agent, its model chosen by `listed` (an account or provider it lists) and
/// `--harness`/`--model` among its models.
fn existing(
    t: &Typed<'_>,
    a: &Agent,
    listed: Option<&ModelAccess>,
) -> Result<Resolution, ResolveError> {
    let f = t.flags;
    if listed.is_none() && f.harness.is_none() && f.model.is_none() {
        return existing_with(t, a, None);
    }
    let pick = a.models.iter().find(|m| {
        listed.is_none_or(|l| same_access(m.account.as_ref(), m.provider.as_ref(), l))
            && f.harness.as_ref().is_none_or(|h| &m.harness == h)
            && f.model.as_ref().is_none_or(|x| m.model.as_ref() == Some(x))
    });
    let Some(m) = pick else {
        return Err(ResolveError::NoSuchModel {
            agent: a.name.clone().unwrap_or_else(|| a.id.clone()),
            models: join(a.models.iter().map(model_line)),
        });
    };
    let access = ModelAccess {
        harness: Some(m.harness.clone()),
        account: m.account.clone(),
        provider: m.provider.clone(),
        model: m.model.clone(),
    };
    let first = a.models.first() == Some(m);
    existing_with(t, a, (!first).then_some(access))
}

/// An agent named by its id: what the typed options change in it.
pub fn for_agent(flags: &AgentFlags, a: &Agent) -> Resolution {
    let mut options = options_of(a);
    let before = options.clone();
    apply(flags, &mut options);
    let differs = differences(&before, &options);
    let saved = (!differs.is_empty()).then(|| save_body(a, options));
    Resolution {
        target: Target::Existing {
            agent: Box::new(a.clone()),
            model: None,
        },
        outside_project: None,
        differs,
        saved,
    }
}

fn existing_with(
    t: &Typed<'_>,
    a: &Agent,
    model: Option<ModelAccess>,
) -> Result<Resolution, ResolveError> {
    let mut r = for_agent(t.flags, a);
    if let Target::Existing { model: m, .. } = &mut r.target {
        *m = model;
    }
    Ok(r)
}

/// The agent's options as an [`AgentOptions`].
pub fn options_of(a: &Agent) -> AgentOptions {
    AgentOptions {
        network: Some(a.network),
        egress: a.egress,
        allow: a.allow.clone(),
        confinement: Some(a.confinement),
        permissions: Some(a.permissions),
        bindings: a.bindings.clone(),
        knowledge: a.knowledge.clone(),
        display: a.display,
        seed_state: a.seed_state,
        interface: a.interface.clone(),
        ask_denied_hosts: a.ask_denied_hosts,
        git_guard: a.git_guard,
        session_tree: a.session_tree.clone(),
        machine: a.machine.clone(),
        disposable_delay_ms: a.disposable_delay_ms,
    }
}

/// The typed flags applied to `o`: a flag not typed changes nothing; lists are added to.
fn apply(f: &AgentFlags, o: &mut AgentOptions) {
    if let Some(n) = &f.network {
        o.network = Some(parse_enum(n).unwrap_or(NetworkMode::Filtered));
        if o.network != Some(NetworkMode::Filtered) {
            o.egress = None;
        }
    }
    if f.log_only {
        o.network = Some(NetworkMode::Filtered);
        o.egress = Some(Enforcement::LogOnly);
    }
    if f.containers {
        o.confinement = Some(Confinement::Nested);
    }
    if f.display {
        o.display = true;
    }
    if let Some(p) = &f.permissions {
        o.permissions = parse_enum::<PermissionMode>(p).or(o.permissions);
    }
    for e in &f.allow {
        if let Ok(e) = AllowEntry::parse(e)
            && !o.allow.contains(&e)
        {
            o.allow.push(e);
        }
    }
    add_all(&mut o.bindings, &f.binding);
    add_all(&mut o.knowledge, &f.knowledge);
    match f.machine.as_deref() {
        Some("none") => {
            o.machine = None;
            o.disposable_delay_ms = None;
        }
        Some(m) => {
            o.machine = Some(m.to_string());
            if m != handler_contracts::machine::DISPOSABLE {
                o.disposable_delay_ms = None;
            }
        }
        None => {}
    }
    if let Some(s) = f.disposable_delay {
        o.disposable_delay_ms = Some(s.saturating_mul(1000));
    }
    if f.seed_state {
        o.seed_state = true;
    }
}

fn add_all(list: &mut Vec<String>, more: &[String]) {
    for m in more {
        if !list.contains(m) {
            list.push(m.clone());
        }
    }
    list.sort();
}

fn check_flags(f: &AgentFlags) -> Result<(), ResolveError> {
    for e in &f.allow {
        AllowEntry::parse(e).map_err(|err| ResolveError::BadFlag {
            flag: "allow",
            message: format!("{e:?}: {err}"),
        })?;
    }
    if f.log_only && f.network.as_deref().is_some_and(|n| n != "filtered") {
        return Err(ResolveError::BadFlag {
            flag: "log-only",
            message: "only a filtered network logs; drop --network or make it filtered".into(),
        });
    }
    Ok(())
}

fn parse_enum<T: serde::de::DeserializeOwned>(s: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(s.into())).ok()
}

fn word_of<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// What differs between an agent's options and the typed ones, one line each.
pub fn differences(old: &AgentOptions, new: &AgentOptions) -> Vec<String> {
    let mut out = Vec::new();
    let mut one = |what: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{what}: {a} → {b}"));
        }
    };
    one(
        "network",
        old.network.as_ref().map(word_of).unwrap_or_default(),
        new.network.as_ref().map(word_of).unwrap_or_default(),
    );
    one(
        "egress",
        old.egress.as_ref().map_or("enforce".into(), word_of),
        new.egress.as_ref().map_or("enforce".into(), word_of),
    );
    one(
        "confinement",
        old.confinement.as_ref().map(word_of).unwrap_or_default(),
        new.confinement.as_ref().map(word_of).unwrap_or_default(),
    );
    one(
        "permissions",
        old.permissions.as_ref().map(word_of).unwrap_or_default(),
        new.permissions.as_ref().map(word_of).unwrap_or_default(),
    );
    let on_off = |b: bool| if b { "on" } else { "off" }.to_string();
    one("display", on_off(old.display), on_off(new.display));
    let added = |what: &str, a: Vec<String>, b: Vec<String>| {
        let more: Vec<String> = b.into_iter().filter(|x| !a.contains(x)).collect();
        (!more.is_empty()).then(|| format!("{what}: + {}", more.join(", ")))
    };
    let strs = |v: &[AllowEntry]| v.iter().map(|e| e.as_str().to_string()).collect::<Vec<_>>();
    out.extend(added("allow", strs(&old.allow), strs(&new.allow)));
    out.extend(added(
        "bindings",
        old.bindings.clone(),
        new.bindings.clone(),
    ));
    out.extend(added(
        "knowledge",
        old.knowledge.clone(),
        new.knowledge.clone(),
    ));
    out
}

/// The PUT /v1/agents/{id} body: the agent as it is with `options`, its risks confirmed (the
/// person said yes, or typed --save).
fn save_body(a: &Agent, options: AgentOptions) -> serde_json::Value {
    let models = a
        .models
        .iter()
        .map(|m| ModelAccess {
            harness: Some(m.harness.clone()),
            account: m.account.clone(),
            provider: m.provider.clone(),
            model: m.model.clone(),
        })
        .collect();
    let r = if a.project_id.is_some() {
        serde_json::to_value(AgentRequest {
            models,
            options,
            name: a.name.clone().unwrap_or_default(),
            description: a.description.clone(),
            instructions: a.instructions.clone(),
            default: false,
            remote_start: a
                .extra
                .get("remoteStart")
                .and_then(serde_json::Value::as_bool)
                == Some(true),
            skills: a.skills.clone(),
            confirm_risks: true,
        })
    } else {
        serde_json::to_value(AdHocAgentRequest {
            models,
            options,
            scope: a.scope.clone(),
            name: a.name.clone(),
            description: a.description.clone(),
            instructions: a.instructions.clone(),
            origin: a.origin.clone(),
            skills: a.skills.clone(),
            remote_start: false,
            confirm_risks: true,
        })
    };
    r.unwrap_or_default()
}

/// The account or provider of that name (accounts first).
fn access_named(k: &Known<'_>, word: &str) -> Option<ModelAccess> {
    if let Some(a) = k.accounts.iter().find(|a| a.name == word) {
        return Some(ModelAccess {
            harness: a.harness.clone(),
            account: Some(a.name.clone()),
            provider: None,
            model: None,
        });
    }
    k.providers
        .iter()
        .find(|p| p.name == word)
        .map(|p| ModelAccess {
            harness: None,
            account: None,
            provider: Some(p.name.clone()),
            model: None,
        })
}

fn made_for(k: &Known<'_>, m: &ModelAccess, ctx: &str) -> bool {
    let contexts = if let Some(a) = &m.account {
        k.accounts
            .iter()
            .find(|x| &x.name == a)
            .and_then(|x| x.contexts.clone())
    } else {
        k.providers
            .iter()
            .find(|x| Some(&x.name) == m.provider.as_ref())
            .and_then(|x| x.contexts.clone())
    };
    contexts
        .unwrap_or_default()
        .iter()
        .any(|c| c == "any" || c == ctx)
}

fn lists(a: &Agent, m: &ModelAccess) -> bool {
    a.models
        .iter()
        .any(|x| same_access(x.account.as_ref(), x.provider.as_ref(), m))
}

fn same_access(account: Option<&String>, provider: Option<&String>, m: &ModelAccess) -> bool {
    (m.account.is_some() && account == m.account.as_ref())
        || (m.provider.is_some() && provider == m.provider.as_ref())
}

fn describe(m: &ModelAccess) -> String {
    match (&m.account, &m.provider) {
        (Some(a), _) => format!("account {a:?}"),
        (_, Some(p)) => format!("provider {p:?}"),
        _ => "this model".into(),
    }
}

fn model_line(m: &handler_contracts::control::AgentModel) -> String {
    let on = m.account.as_ref().or(m.provider.as_ref()).cloned();
    let mut s = format!("{} on {}", m.harness, on.unwrap_or_default());
    if let Some(x) = &m.model {
        s.push_str(&format!(" ({x})"));
    }
    s
}

fn names(p: &Project) -> String {
    join(p.agents.iter().filter_map(|a| a.name.as_deref()))
}

fn join<S: AsRef<str>>(it: impl Iterator<Item = S>) -> String {
    let v: Vec<String> = it.map(|s| s.as_ref().to_string()).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests;
