//! The pure step of a launch (E, B.3, A.1, C.4): what gather read comes in as plain values; one
//! of the agent's models is checked again (E1, D.19), resolved to an AgentSpec, its secrets
//! turned into phantoms and injections towards the right hosts (E3, E5), its required hosts
//! named (E4), its state mounts placed (E6), rendered (B.3) and composed into the SandboxSpec,
//! with the policy pipeline's configuration (C.4) — and what the launch is for placed in it
//! (issue 28, item 2): a session's slot (F.2) and run subject (D.18), a terminal's program
//! (D.16), the git guard's mounts or the copy's checkout in place of the scope (decision 0103).
//! The plan is whole when [`resolve`] returns; the start only makes what it names. No file
//! system, no environment, no clock: the phantoms' randomness is an argument
//! (docs/decisions/0052).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use handler_contracts::allow::{AllowEntry, entry_for_url};
use handler_contracts::containment::containment;
use handler_contracts::control::{AgentOptions, GitGuard, ModelAccess, NetworkMode};
use handler_contracts::harness::Login;
use handler_contracts::harness::{McpServer, NeutralConfig, SlotKind};
use handler_contracts::hosts::{container_host, required_hosts};
use handler_contracts::sandbox::{Injection, Mount, MountKind};
use handler_contracts::validate::{AccessCatalog, ResolvedAccess, check_model_access};
use handler_contracts::{
    Account, AgentSpec, FileSource, HarnessDescriptor, HarnessLaunch, Provider, RenderInput,
    SandboxSpec,
};
use handler_policy::{PolicyConfig, UnattendedMode};
use handler_sandbox::compose::{AddonPart, ComposeError, ComposeInput, compose};
use handler_sandbox::copytree::{self, CopyError, SessionTree};
use handler_sandbox::egress::phantom::{RandomSource, make_phantom_keeping};
use handler_sandbox::guard::{self, GuardError, RepoFacts};

/// What an agent's bindings add to one start (G4), as gather resolved them.
#[derive(Debug, Default)]
pub struct AddonLaunch {
    /// One part per selected binding.
    pub parts: Vec<AddonPart>,
    /// Their egress (E4), each with what requires it.
    pub egress: Vec<(AllowEntry, String)>,
    /// Their skills: name → folder.
    pub skills: Vec<(String, PathBuf)>,
    /// Their MCP servers (run inside the sandbox).
    pub mcp_servers: Vec<McpServer>,
    /// Their secrets given by the proxy (E3).
    pub injections: Vec<Injection>,
    /// Their secret values, named by store path (P5 redaction).
    pub secrets: Vec<(String, String)>,
}

/// The model's credential as gather found it.
#[derive(Clone)]
pub enum Credential {
    /// An account of a file login: the credential file Handler keeps for it (host path).
    LoginFile(String),
    /// An account of a token login: its token's store name and value (none: it has no token).
    Token(Option<(String, String)>),
    /// A provider: its key's store name and value (none: it has no key), and its files for
    /// this harness, their content read.
    Provider {
        /// `(store name, value)` of its apiKey.
        api_key: Option<(String, String)>,
        /// Slot → content.
        files: BTreeMap<String, FileSource>,
    },
}

/// Names, never values.
impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::LoginFile(p) => write!(f, "LoginFile({p:?})"),
            Credential::Token(t) => write!(f, "Token({:?})", t.as_ref().map(|(n, _)| n)),
            Credential::Provider { api_key, files } => f
                .debug_struct("Provider")
                .field("api_key", &api_key.as_ref().map(|(n, _)| n))
                .field("files", &files.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// The agent a launch is for: the stored agent's fields resolve reads.
#[derive(Debug, Clone)]
pub struct AgentFacts {
    /// Its id.
    pub id: String,
    /// Its containment, allow-list, bindings, display, interface…
    pub options: AgentOptions,
    /// Its instructions (B8).
    pub instructions: Option<String>,
}

/// Everything resolve takes: the catalog, the agent and what gather read and checked.
pub struct ResolveInput<'a> {
    /// The descriptors, accounts and providers (E1's look-ups).
    pub catalog: &'a dyn AccessCatalog,
    /// The model asked for.
    pub access: &'a ModelAccess,
    /// Its project's context (D.19).
    pub context: Option<&'a str>,
    /// The agent.
    pub agent: &'a AgentFacts,
    /// The connection's (or session's) id.
    pub conn: &'a str,
    /// Its folder: a session's, or `<data>/connections/<id>` (the guard's is `guard/` in it).
    pub place_dir: &'a str,
    /// What the launch is for.
    pub purpose: Purpose,
    /// What gather read for the git guard.
    pub guard: GuardFacts,
    /// The skills library (a run's subject is one of its folders).
    pub skills_dir: &'a str,
    /// Handler's data folder (absolute).
    pub data_dir: &'a str,
    /// The largest ACP message (C.1).
    pub max_message_bytes: usize,
    /// The scope, checked and canonical (D.13).
    pub scope: String,
    /// The knowledge folders, checked and canonical (D.5).
    pub knowledge: Vec<String>,
    /// What its bindings add (G4).
    pub addons: AddonLaunch,
    /// Its own skills then its project's: name → canonical folder (D.17).
    pub skills: Vec<(String, String)>,
    /// The toolbox's caches: sandbox path → host folder (D.8).
    pub caches: BTreeMap<String, String>,
    /// The credential (E2, D.9).
    pub credential: Credential,
    /// The Wayland socket, when the agent has a display (A.6).
    pub display: Option<String>,
    /// The profile whose machines' agents share their state (decision 0170), if any.
    pub shared_state: Option<&'a str>,
}

impl ResolveInput<'_> {
    /// Whose the state slots are.
    fn state_owner(&self) -> StateOwner<'_> {
        match self.shared_state {
            Some(p) => StateOwner::Profile(p),
            None => StateOwner::Agent(&self.agent.id),
        }
    }
}

/// What a launch is for (issue 28, item 2): each gets its whole plan from [`resolve`].
#[derive(Debug, Clone)]
pub enum Purpose {
    /// An ACP connection (C.1).
    Connection,
    /// A session (F): its per-session state slot in its folder's `agent/` (F.2), and its run's
    /// subject skill (D.18), read-only at `/subject/<name>`.
    Session {
        /// The run's subject skill, by name.
        subject: Option<String>,
    },
    /// A terminal (D.16): the person's arguments for the harness's own program, which the
    /// sandbox runs on a terminal of its own (`tty`, reached through `attach`), and the
    /// terminal's variables (`TERM`, `COLORTERM`).
    Terminal {
        /// The program's arguments.
        args: Vec<String>,
        /// The terminal's environment.
        env: BTreeMap<String, String>,
    },
}

/// What gather read for the git guard (issue 14, decision 0103).
#[derive(Debug, Clone)]
pub struct GuardFacts {
    /// The agent's `sessionTree`.
    pub tree: SessionTree,
    /// The repository: under `shared` the scope's own (none when the scope is no repository's
    /// root, or under `gitGuard = "open"`), under `copy` the one the scope is in.
    pub repo: Option<RepoFacts>,
}

/// The git guard a start makes (its mounts are already in the spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardPlan {
    /// Nothing to guard: the scope is no repository's root.
    None,
    /// `gitGuard = "open"`: the host's `.git` writable (a risk confirmed at save).
    Open,
    /// The sandbox's own git directory, `<guard>/git`, over the repository's.
    GitDir {
        /// The repository.
        facts: RepoFacts,
        /// The guard's folder.
        dir: String,
    },
    /// `sessionTree = "copy"`: Handler's checkout `<guard>/tree` of `commit` in place of the
    /// scope, sparse to `rel` (the scope below the root; empty at the root).
    Copy {
        /// The repository the scope is in.
        facts: RepoFacts,
        /// The guard's folder.
        dir: String,
        /// The commit checked out.
        commit: String,
        /// The scope below the repository's root.
        rel: String,
    },
}

/// Everything a connection needs to start its sandbox and its pipeline.
pub struct Prepared {
    /// The sandbox (fd 3 of the launcher).
    pub spec: SandboxSpec,
    /// The ACP policy pipeline's configuration.
    pub policy: PolicyConfig,
    /// The model it runs with.
    pub access: ModelAccess,
    /// The harness it runs.
    pub harness: String,
    /// Its image, as its descriptor names it (`:latest`, B.6).
    pub harness_image: String,
    /// The hosts its model and harness require (E4; empty unless filtered): the live
    /// allow-list's fixed part.
    pub model_hosts: Vec<AllowEntry>,
    /// A session's per-session state slot, to be made before the start (its mount is in the spec).
    pub slot: Option<StateSlotPlan>,
    /// The git guard to make before the start.
    pub guard: GuardPlan,
}

/// Names, never values: the spec's env and files and the policy's secrets hold secret values.
impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.spec;
        f.debug_struct("Prepared")
            .field("name", &s.name)
            .field("image", &s.image)
            .field("argv", &s.argv)
            .field("env", &s.env.keys().collect::<Vec<_>>())
            .field("mounts", &s.mounts)
            .field(
                "files",
                &s.files.iter().map(|f| &f.target).collect::<Vec<_>>(),
            )
            .field("network", &s.network)
            .field(
                "injections",
                &s.injections.iter().map(|i| &i.name).collect::<Vec<_>>(),
            )
            .field("scope", &self.policy.scope)
            .field(
                "policy_secrets",
                &self
                    .policy
                    .secrets
                    .iter()
                    .map(|(n, _)| n)
                    .collect::<Vec<_>>(),
            )
            .field("access", &self.access)
            .field("harness", &self.harness)
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

/// Why a launch cannot be resolved; each variant is one API problem (see `prepare`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// 400 model access unusable.
    #[error("{0}")]
    Unusable(String),
    /// 409 not for this project's context.
    #[error(transparent)]
    Context(#[from] handler_contracts::context::NotForContext),
    /// 400 works in sessions only.
    #[error("this agent has no folder: open a session (F) instead")]
    NoFolder,
    /// 400 skill unusable.
    #[error("skill '{0}': an addon brings a skill of the same name")]
    SkillTwice(String),
    /// 500 render failed.
    #[error("{harness}: {error}")]
    Render {
        /// The harness.
        harness: String,
        /// What render said.
        error: handler_harness::RenderError,
    },
    /// 400 binding unusable: a binding's variable clashes, or an addon is bound twice.
    #[error(transparent)]
    Binding(ComposeError),
    /// 500 compose failed.
    #[error(transparent)]
    Compose(ComposeError),
    /// 409 git guard refused the scope (links, alternates, a `.git` that changed).
    #[error("git guard: {0}")]
    Guard(#[from] GuardError),
    /// 409 sessionTree refused (no repository, no commit, a guard refusal).
    #[error("git guard: {0}")]
    Copy(#[from] CopyError),
    /// 409 sessionTree refused: the sandbox has no scope.
    #[error("sessionTree: \"copy\" needs a scope to check out, and the agent has none")]
    CopyWithoutScope,
}

fn unusable(detail: impl Into<String>) -> ResolveError {
    ResolveError::Unusable(detail.into())
}

/// E1 and D.19 for `access`, and its harness's descriptor.
pub fn access<'c>(
    catalog: &'c dyn AccessCatalog,
    access: &ModelAccess,
    context: Option<&str>,
) -> Result<(ResolvedAccess, &'c HarnessDescriptor), ResolveError> {
    let resolved = check_model_access(access, catalog).map_err(|e| unusable(e.to_string()))?;
    handler_contracts::context::check(catalog, context, access)?;
    let d = catalog
        .descriptor(&resolved.harness)
        .ok_or_else(|| unusable(format!("unknown harness {:?}", resolved.harness)))?;
    Ok((resolved, d))
}

/// Which folder the agent works in: its project's, else its own scope (the field named).
pub fn scope_source(
    project_folder: Option<&str>,
    scope: Option<&str>,
) -> Result<(&'static str, String), ResolveError> {
    match (project_folder, scope) {
        (Some(f), _) => Ok(("folder", f.to_string())),
        (None, Some(s)) => Ok(("scope", s.to_string())),
        (None, None) => Err(ResolveError::NoFolder),
    }
}

/// The account `name` usable with descriptor `d`, and `d`'s login.
pub fn account<'c>(
    catalog: &'c dyn AccessCatalog,
    name: &str,
    d: &HarnessDescriptor,
) -> Result<(&'c Account, Login), ResolveError> {
    let acc = match catalog.account(name) {
        Some(Ok(a)) => a,
        _ => return Err(unusable(format!("account {name:?} is unusable"))),
    };
    let login = d
        .login
        .clone()
        .ok_or_else(|| unusable(format!("{} has no login", d.name)))?;
    Ok((acc, login))
}

/// The provider `name`.
pub fn provider<'c>(
    catalog: &'c dyn AccessCatalog,
    name: &str,
) -> Result<&'c Provider, ResolveError> {
    match catalog.provider(name) {
        Some(Ok(p)) => Ok(p),
        _ => Err(unusable(format!("provider {name:?} is unusable"))),
    }
}

/// One state slot of a launch (E6): where it lives on the host and what it starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSlotPlan {
    /// The host folder or file.
    pub path: String,
    /// A folder or a file.
    pub kind: SlotKind,
    /// A file's content when it is made (never rewritten).
    pub initial: String,
    /// Its mount.
    pub mount: Mount,
}

/// F.2: a harness's per-session state slot, bound to `<session folder>/agent` (the agent sees
/// only its own session's history); `None` when the harness declares none.
pub fn session_slot(session_dir: &str, d: &HarnessDescriptor) -> Option<StateSlotPlan> {
    let (_, s) = d.state_slots.iter().find(|(_, s)| s.per_session)?;
    let path = PathBuf::from(session_dir)
        .join("agent")
        .display()
        .to_string();
    let target = match s.target.strip_prefix("~/") {
        Some(rest) => format!("{}/{rest}", d.home.trim_end_matches('/')),
        None => s.target.clone(),
    };
    Some(StateSlotPlan {
        mount: Mount {
            source: path.clone(),
            target,
            read_only: false,
            kind: MountKind::State,
        },
        path,
        kind: s.kind,
        initial: s.initial.clone().unwrap_or_default(),
    })
}

/// Whose a sandbox's state slots are (decision 0170).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateOwner<'a> {
    /// The agent's own (`<data>/agent-state/<agent>`): every sandbox's but those below.
    Agent(&'a str),
    /// Shared by the agents of one harness and login in the machines of a profile whose
    /// `stateScope` is `shared` (`<data>/profile-state/<profile>`).
    Profile(&'a str),
}

/// E6: each state slot that is not a login file and not per-session, at
/// `<data>/agent-state/<agent>/<harness>@<account or provider>/<slot>` (decision 0170: at
/// `<data>/profile-state/<profile>/…` when a profile shares it).
pub fn state_slots(
    data_dir: &str,
    owner: StateOwner<'_>,
    d: &HarnessDescriptor,
    who: &str,
) -> Vec<StateSlotPlan> {
    let (agent, shared) = match owner {
        StateOwner::Agent(agent) => (agent, None),
        StateOwner::Profile(profile) => ("", Some(profile)),
    };
    let base = PathBuf::from(handler_harness::render::state_root(
        data_dir, agent, shared, &d.name, who,
    ));
    d.state_slots
        .iter()
        .filter(|(_, s)| !s.credential && !s.per_session)
        .map(|(slot, s)| {
            let path = base.join(slot).display().to_string();
            let initial = s.initial.clone().unwrap_or_else(|| {
                if s.target.ends_with(".json") {
                    "{}".into()
                } else {
                    String::new()
                }
            });
            StateSlotPlan {
                mount: Mount {
                    source: path.clone(),
                    target: s.target.clone(),
                    read_only: s.read_only,
                    kind: MountKind::State,
                },
                path,
                kind: s.kind,
                initial,
            }
        })
        .collect()
}

/// One secret the sandbox gets (E3): what render sees, and maybe an injection.
#[derive(Debug)]
pub struct Delivered {
    /// What the process holds: a phantom, or the value when it cannot be injected.
    pub given: String,
    /// The proxy's swap, when there is one.
    pub injection: Option<Injection>,
}

/// E3: a phantom and an injection towards `hosts`; a phantom alone without network; the value
/// itself when there is no host or it cannot be injected. The phantom keeps `prefix` (a
/// harness's `login.tokenPrefix`) too.
pub fn deliver(
    name: &str,
    value: String,
    hosts: Vec<AllowEntry>,
    network: NetworkMode,
    prefix: Option<&str>,
    rng: &mut dyn RandomSource,
) -> Delivered {
    match make_phantom_keeping(&value, prefix, rng) {
        Ok(phantom) if network == NetworkMode::None => Delivered {
            given: phantom,
            injection: None,
        },
        Ok(phantom) if !hosts.is_empty() => Delivered {
            given: phantom.clone(),
            injection: Some(Injection {
                name: name.to_string(),
                phantom,
                value,
                hosts,
                body: false,
            }),
        },
        // No host to give it to, or not injectable: the sandbox gets the value itself (E3).
        _ => Delivered {
            given: value,
            injection: None,
        },
    }
}

/// What the credential gives render and the sandbox.
#[derive(Default)]
struct Secrets {
    for_render: BTreeMap<String, String>,
    injections: Vec<Injection>,
    policy: Vec<(String, String)>,
    mounts: Vec<Mount>,
}

impl Secrets {
    fn add(&mut self, slot: &str, name: &str, value: String, dl: Delivered) {
        self.for_render.insert(slot.into(), dl.given);
        self.injections.extend(dl.injection);
        self.policy.push((name.to_string(), value));
    }
}

/// The account's AgentSpec and what its login gives (D.9, E3).
fn account_spec(
    input: &ResolveInput<'_>,
    d: &HarnessDescriptor,
    model: Option<String>,
    name: &str,
    rng: &mut dyn RandomSource,
) -> Result<(AgentSpec, Secrets), ResolveError> {
    let (acc, login) = account(input.catalog, name, d)?;
    let network = containment(&input.agent.options).network;
    let mut secrets = Secrets::default();
    let mut account_login = None;
    match &input.credential {
        Credential::LoginFile(cred) => {
            account_login = Some(cred.clone());
            if let Some((_, slot)) = d.state_slots.iter().find(|(_, s)| s.credential) {
                secrets.mounts.push(Mount {
                    source: cred.clone(),
                    target: slot.target.clone(),
                    read_only: slot.read_only,
                    kind: MountKind::State,
                });
            }
        }
        Credential::Token(Some((secret_name, value))) => {
            if let Some(prefix) = &login.token_prefix
                && !value.starts_with(prefix.as_str())
            {
                return Err(unusable(format!(
                    "account {name:?}: its token does not start with {prefix}"
                )));
            }
            let prefix = login.token_prefix.as_deref();
            let dl = deliver(
                secret_name,
                value.clone(),
                login.hosts.clone(),
                network,
                prefix,
                rng,
            );
            secrets.add("token", secret_name, value.clone(), dl);
        }
        Credential::Token(None) | Credential::Provider { .. } => {}
    }
    let spec = AgentSpec {
        harness: d.name.clone(),
        account: Some(name.to_string()),
        provider: None,
        account_login,
        account_plan: acc.plan.clone(),
        provider_spec: None,
        files: BTreeMap::new(),
        config: NeutralConfig {
            model,
            account_connectors: acc.connectors,
        },
    };
    Ok((spec, secrets))
}

/// The provider's AgentSpec and what its key gives (E3, E4).
fn provider_spec(
    input: &ResolveInput<'_>,
    d: &HarnessDescriptor,
    model: Option<String>,
    name: &str,
    rng: &mut dyn RandomSource,
) -> Result<(AgentSpec, Secrets), ResolveError> {
    let mut prov = provider(input.catalog, name)?.clone();
    let network = containment(&input.agent.options).network;
    // The machine's loopback is the container host's name in a container (E4).
    for url in prov.endpoints.values_mut() {
        if let Some((host, _)) = entry_for_url(url) {
            let ch = container_host(&host);
            if ch != host {
                *url = url.replacen(&host, &ch, 1);
            }
        }
    }
    let mut secrets = Secrets::default();
    let mut files = BTreeMap::new();
    if let Credential::Provider { api_key, files: f } = &input.credential {
        files = f.clone();
        if let Some((secret_name, value)) = api_key {
            let hosts: Vec<AllowEntry> = prov
                .endpoints
                .values()
                .filter_map(|u| entry_for_url(u))
                .filter_map(|(h, p)| AllowEntry::parse(&format!("{h}:{p}")).ok())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let dl = deliver(secret_name, value.clone(), hosts, network, None, rng);
            secrets.add("apiKey", secret_name, value.clone(), dl);
        }
    }
    let spec = AgentSpec {
        harness: d.name.clone(),
        account: None,
        provider: Some(name.to_string()),
        account_login: None,
        account_plan: None,
        provider_spec: Some(prov),
        files,
        config: NeutralConfig {
            model,
            account_connectors: false,
        },
    };
    Ok((spec, secrets))
}

/// D.17: the agent's and its project's skills, then its addons'; names unique.
fn skill_dirs(input: &ResolveInput<'_>) -> Result<Vec<String>, ResolveError> {
    let mut dirs: BTreeMap<String, String> = input.skills.iter().cloned().collect();
    for (s, dir) in &input.addons.skills {
        if dirs.contains_key(s) {
            return Err(ResolveError::SkillTwice(s.clone()));
        }
        dirs.insert(s.clone(), dir.display().to_string());
    }
    Ok(dirs.into_values().collect())
}

/// Resolves the launch: E1–E6, render (B.3), compose (A.1) and the pipeline's configuration.
pub fn resolve(
    input: ResolveInput<'_>,
    rng: &mut dyn RandomSource,
) -> Result<Prepared, ResolveError> {
    let (resolved, d) = access(input.catalog, input.access, input.context)?;
    let c = containment(&input.agent.options);
    let skills = skill_dirs(&input)?;
    let (spec, who, mut secrets) = match (&input.access.account, &input.access.provider) {
        (Some(name), _) => {
            let (s, sec) = account_spec(&input, d, resolved.model.clone(), name, rng)?;
            (s, name.clone(), sec)
        }
        (None, p) => {
            let name = p.clone().unwrap_or_default();
            let (s, sec) = provider_spec(&input, d, resolved.model.clone(), &name, rng)?;
            (s, name, sec)
        }
    };
    let mut state: Vec<Mount> = state_slots(input.data_dir, input.state_owner(), d, &who)
        .into_iter()
        .map(|s| s.mount)
        .collect();
    state.append(&mut secrets.mounts);
    secrets.policy.extend(input.addons.secrets.iter().cloned());
    secrets
        .injections
        .extend(input.addons.injections.iter().cloned());
    let render_input = RenderInput {
        descriptor: d.clone(),
        agent: spec,
        scope: input.scope.clone(),
        secrets: std::mem::take(&mut secrets.for_render),
        skills,
        mcp_servers: input.addons.mcp_servers.clone(),
        terminal: match &input.purpose {
            Purpose::Terminal { args, .. } => Some(args.clone()),
            _ => None,
        },
        permission_mode: c.permissions,
        caches: input.caches.clone(),
    };
    let ctx = handler_harness::RenderContext {
        data_dir: input.data_dir.to_string(),
        agent_id: input.agent.id.clone(),
        instructions: input.agent.instructions.clone(),
        shared_state: input.shared_state.map(String::from),
    };
    let launch =
        handler_harness::render(&render_input, &ctx).map_err(|error| ResolveError::Render {
            harness: d.name.clone(),
            error,
        })?;
    let slot = match input.purpose {
        Purpose::Session { .. } => session_slot(input.place_dir, d),
        _ => None,
    };
    let mut p = compose_and_configure(input, &launch, state, secrets, slot)?;
    p.harness = d.name.clone();
    p.harness_image = d.image.clone();
    Ok(p)
}

/// A.1 and C.4: the rendered launch composed with the agent's settings into the SandboxSpec,
/// what the launch is for placed in it (a session's `slot`, its run's subject, a terminal's
/// tty, the git guard), and the pipeline's configuration.
fn compose_and_configure(
    input: ResolveInput<'_>,
    launch: &HarnessLaunch,
    state: Vec<Mount>,
    secrets: Secrets,
    slot: Option<StateSlotPlan>,
) -> Result<Prepared, ResolveError> {
    let agent = input.agent;
    let c = containment(&agent.options);
    let model_hosts: Vec<AllowEntry> = if c.network == NetworkMode::Filtered {
        required_hosts(input.catalog, input.access)
            .into_iter()
            .map(|r| r.host)
            .collect()
    } else {
        Vec::new()
    };
    let required: Vec<AllowEntry> = model_hosts
        .iter()
        .cloned()
        .chain(input.addons.egress.iter().map(|(e, _)| e.clone()))
        .filter(|_| c.network == NetworkMode::Filtered)
        .collect();
    let labels = BTreeMap::from([
        ("handler.agent".to_string(), agent.id.clone()),
        ("handler.connection".to_string(), input.conn.to_string()),
    ]);
    let compose_input = ComposeInput {
        name: format!("handler-{}-{}", agent.id.replace('_', "-"), input.conn),
        scope: input.scope.clone(),
        network: c.network,
        enforcement: c.egress.unwrap_or_default(),
        allow: agent.options.allow.clone(),
        required,
        confinement: c.confinement,
        state,
        caches: input.caches,
        knowledge: input.knowledge,
        injections: secrets.injections,
        display: input.display,
        labels,
        addons: input.addons.parts,
    };
    let mut spec = compose(launch, &compose_input).map_err(|e| match e {
        // A binding's variable clashing is the user's configuration, not a fault.
        ComposeError::EnvClash { .. } | ComposeError::AddonTwice(..) => ResolveError::Binding(e),
        _ => ResolveError::Compose(e),
    })?;
    spec.mounts.extend(slot.as_ref().map(|s| s.mount.clone()));
    if let Purpose::Terminal { env, .. } = &input.purpose {
        spec.tty = true;
        spec.env.extend(env.clone());
    }
    if let Purpose::Session {
        subject: Some(name),
    } = &input.purpose
    {
        spec.mounts.push(subject_mount(input.skills_dir, name));
    }
    // Issue 14, item 5: `gitGuard = "open"` (a risk confirmed at save) lifts decision 0031.
    spec.git_writable = agent.options.git_guard == Some(GitGuard::Open);
    let guard = plan_guard(&mut spec, input.guard, input.place_dir)?;
    let mut policy = PolicyConfig::new(input.scope, spec.network.clone());
    policy.secrets = secrets.policy;
    policy.session_defaults = launch.session_defaults.clone().unwrap_or_default();
    policy.max_message_bytes = input.max_message_bytes;
    if agent.options.interface.is_some() {
        // D.18: bypass is approved; ask is ask-and-deny (skill-review): every request refused.
        policy.unattended = Some(if c.permissions == handler_contracts::PermissionMode::Ask {
            UnattendedMode::AskAndDeny
        } else {
            UnattendedMode::Approve
        });
    }
    Ok(Prepared {
        spec,
        policy,
        access: input.access.clone(),
        harness: String::new(),
        harness_image: String::new(),
        model_hosts,
        slot,
        guard,
    })
}

/// Where a run's subject skill is mounted (D.18).
pub fn subject_path(name: &str) -> String {
    format!("/subject/{name}")
}

/// The read-only mount of a run's subject skill `name` from the library `skills_dir`.
fn subject_mount(skills_dir: &str, name: &str) -> Mount {
    Mount {
        source: PathBuf::from(skills_dir).join(name).display().to_string(),
        target: subject_path(name),
        read_only: true,
        kind: MountKind::Subject,
    }
}

/// The git guard of a sandbox (issue 14, decision 0103) whose folder is `place_dir`: under
/// `sessionTree = "copy"` Handler's checkout replaces the scope's mount (nothing of the host's
/// tree bound, its git writable, below the root the environment its git needs); else for a
/// scope at a repository's root its own git directory over the repository's — unless
/// `gitGuard = "open"`. Refused (409) for what the guard refuses.
fn plan_guard(
    spec: &mut SandboxSpec,
    g: GuardFacts,
    place_dir: &str,
) -> Result<GuardPlan, ResolveError> {
    let dir = PathBuf::from(place_dir).join("guard").display().to_string();
    let scope = spec
        .mounts
        .iter()
        .find(|m| m.kind == MountKind::Scope)
        .map(|m| m.source.clone());
    match (g.tree, g.repo) {
        (SessionTree::Copy, repo) => {
            let scope = scope.ok_or(ResolveError::CopyWithoutScope)?;
            let not_one = || CopyError::NotARepository {
                scope: scope.clone(),
            };
            let commit = copytree::check(&scope, repo.as_ref())?.to_string();
            let facts = repo.ok_or_else(not_one)?;
            let rel = copytree::scope_below_root(&facts, &scope).ok_or_else(not_one)?;
            let checkout = format!("{dir}/tree");
            let mounts = copytree::mounts(&facts, &checkout, &scope).ok_or_else(not_one)?;
            spec.mounts.retain(|m| m.kind != MountKind::Scope);
            spec.mounts.extend(mounts);
            spec.git_writable = true;
            if !rel.is_empty() {
                spec.env.extend(copytree::below_root_env(&facts.root));
            }
            Ok(GuardPlan::Copy {
                facts,
                dir,
                commit,
                rel,
            })
        }
        (SessionTree::Shared, _) if spec.git_writable => Ok(GuardPlan::Open),
        (SessionTree::Shared, None) => Ok(GuardPlan::None),
        (SessionTree::Shared, Some(facts)) => {
            guard::check(&facts)?;
            spec.mounts.extend(guard::mounts(
                &facts,
                &format!("{dir}/git"),
                &format!("{dir}/gitfile"),
            ));
            Ok(GuardPlan::GitDir { facts, dir })
        }
    }
}

#[cfg(test)]
mod tests;
