//! Resolution and launch preparation (E, B.3, A.1): one of an agent's models (or any other,
//! C.1) checked again (E1, D.9, D.19), resolved to an AgentSpec, its secrets turned into
//! phantoms and injections towards the right hosts (E3, E5), its required hosts (E4), its state
//! folders made (E6), rendered (B.3) and composed into the SandboxSpec, with the policy
//! pipeline's configuration (C.4).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use axum::http::StatusCode;
use handler_contracts::allow::{AllowEntry, entry_for_url};
use handler_contracts::control::{ModelAccess, NetworkMode};
use handler_contracts::harness::{NeutralConfig, SlotKind};
use handler_contracts::sandbox::{Injection, Mount, MountKind};
use handler_contracts::validate::{AccessCatalog, check_model_access, expand_home};
use handler_contracts::{
    AgentSpec, FileSource, HarnessLaunch, RenderInput, SandboxSpec, SecretRef,
};
use handler_policy::{PolicyConfig, UnattendedMode};
use handler_sandbox::compose::{ComposeError, ComposeInput, compose};
use handler_sandbox::egress::phantom::{RandomSource, make_phantom_keeping};

use super::fsutil;
use super::launch::rules::{self as contexts, container_host, containment, required_hosts};
use super::problem::{ApiError, ApiResult};
use super::state::AppState;
use super::store::StoredAgent;
use super::store::accounts::{credential_path, login_state, token_secret_path};
use super::store::knowledge::{check_knowledge, knowledge_root};
use super::store::providers::key_secret_path;

/// Everything a connection needs to start its sandbox and its pipeline.
pub struct Prepared {
    pub spec: SandboxSpec,
    pub policy: PolicyConfig,
    pub access: ModelAccess,
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
            .finish_non_exhaustive()
    }
}

struct OsRandom;
impl RandomSource for OsRandom {
    fn next_u32(&mut self) -> u32 {
        rand::random()
    }
}

fn unusable(detail: impl Into<String>) -> ApiError {
    ApiError::bad_request("model access unusable", detail)
}

/// Reads a secret reference's value (E2) for a launch. The error names the reference, never a
/// value.
pub fn resolve_secret(app: &AppState, r: &SecretRef) -> Result<String, String> {
    let home = app.config.home.to_string_lossy().into_owned();
    match r {
        SecretRef::Secret(p) => app.secrets.value(p).map_err(|e| e.to_string()),
        SecretRef::Env(v) => {
            std::env::var(v).map_err(|_| format!("environment variable {v} is not set"))
        }
        SecretRef::File(f) => {
            let path = expand_home("file", f, &home).map_err(|e| e.to_string())?;
            super::secretref::read_file(&path).map_err(|e| e.to_string())
        }
        SecretRef::Command(argv) => {
            super::secretref::run_command(argv, app.config.secret_command_timeout)
                .map_err(|e| e.to_string())
        }
    }
    .and_then(|v| {
        if v.is_empty() {
            Err("the value is empty".to_string())
        } else {
            Ok(v)
        }
    })
}

/// One secret the sandbox gets (E3): what render sees, and maybe an injection.
pub(super) struct Delivered {
    /// What the process holds: a phantom, or the value when it cannot be injected.
    pub given: String,
    pub injection: Option<Injection>,
}

/// E3: a phantom and an injection towards `hosts`; a phantom alone without network; the value
/// itself when there is no host or it cannot be injected.
pub(super) fn deliver(
    name: &str,
    value: String,
    hosts: Vec<AllowEntry>,
    network: NetworkMode,
) -> Delivered {
    deliver_keeping(name, value, hosts, network, None)
}

/// [`deliver`], the phantom keeping `prefix` (the harness's `login.tokenPrefix`) too.
fn deliver_keeping(
    name: &str,
    value: String,
    hosts: Vec<AllowEntry>,
    network: NetworkMode,
    prefix: Option<&str>,
) -> Delivered {
    match make_phantom_keeping(&value, prefix, &mut OsRandom) {
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

/// E6: each state slot that is not a login file and not per-session, bound to
/// `<data>/agent-state/<agent>/<harness>@<account or provider>/<slot>`, made with its initial
/// content when missing, never rewritten.
fn state_mounts(
    app: &AppState,
    agent: &str,
    d: &handler_contracts::HarnessDescriptor,
    who: &str,
) -> ApiResult<Vec<Mount>> {
    let base = app
        .config
        .data_dir
        .join("agent-state")
        .join(agent)
        .join(format!("{}@{who}", d.name));
    let mut out = Vec::new();
    for (slot, s) in &d.state_slots {
        if s.credential || s.per_session {
            continue;
        }
        let p = base.join(slot);
        match s.kind {
            SlotKind::Dir => fsutil::create_dir_private(&p).map_err(ApiError::internal)?,
            SlotKind::File => {
                if !p.exists() {
                    let initial = s.initial.clone().unwrap_or_else(|| {
                        if s.target.ends_with(".json") {
                            "{}".into()
                        } else {
                            String::new()
                        }
                    });
                    fsutil::write_atomic(&p, initial.as_bytes(), 0o600)
                        .map_err(ApiError::internal)?;
                }
            }
        }
        out.push(Mount {
            source: p.display().to_string(),
            target: s.target.clone(),
            read_only: s.read_only,
            kind: MountKind::State,
        });
    }
    Ok(out)
}

/// A.6: the Wayland socket, found at each start.
fn wayland_socket() -> Result<String, String> {
    if let Ok(s) = std::env::var("HANDLER_WAYLAND_SOCKET") {
        return Ok(s);
    }
    let runtime = std::env::var("XDG_RUNTIME_DIR").ok();
    if let Ok(w) = std::env::var("WAYLAND_DISPLAY") {
        if w.starts_with('/') {
            return Ok(w);
        }
        if let Some(r) = &runtime {
            return Ok(format!("{r}/{w}"));
        }
    }
    let r = runtime.ok_or("no Wayland display: set HANDLER_WAYLAND_SOCKET")?;
    let found: Vec<String> = std::fs::read_dir(&r)
        .map_err(|e| format!("{r}: {e}"))?
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            (n.starts_with("wayland-") && !n.ends_with(".lock")).then(|| format!("{r}/{n}"))
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err("no Wayland socket in XDG_RUNTIME_DIR: set HANDLER_WAYLAND_SOCKET".into()),
        _ => Err("several Wayland sockets: choose one with HANDLER_WAYLAND_SOCKET".into()),
    }
}

/// The harness adapter's render (B.3).
pub fn render(
    input: &RenderInput,
    data_dir: &Path,
    agent: &StoredAgent,
) -> Result<HarnessLaunch, String> {
    let ctx = handler_harness::RenderContext {
        data_dir: data_dir.display().to_string(),
        agent_id: agent.id.clone(),
        instructions: agent.instructions.clone(),
    };
    handler_harness::render(input, &ctx).map_err(|e| e.to_string())
}

/// A provider's file for a harness, its content read now (render takes content only).
fn resolve_file(app: &AppState, slot: &str, f: &FileSource) -> Result<FileSource, String> {
    let home = app.config.home.to_string_lossy().into_owned();
    match f {
        FileSource::Content(_) => Ok(f.clone()),
        FileSource::Env(v) => std::env::var(v)
            .map(FileSource::Content)
            .map_err(|_| format!("files.{slot}: environment variable {v} is not set")),
        FileSource::File(p) => {
            let path = expand_home(slot, p, &home).map_err(|e| e.to_string())?;
            let meta =
                std::fs::metadata(&path).map_err(|e| format!("files.{slot}: {path}: {e}"))?;
            if meta.len() > 1024 * 1024 {
                return Err(format!("files.{slot}: {path} is larger than 1 MiB"));
            }
            std::fs::read_to_string(&path)
                .map(FileSource::Content)
                .map_err(|e| format!("files.{slot}: {path}: {e}"))
        }
    }
}

/// Resolves `access` for `agent`'s connection `conn` and builds its SandboxSpec (400 model
/// access unusable, 409 not for this project's context, 400 for what a start checks again).
pub fn prepare(
    app: &AppState,
    agent: &StoredAgent,
    access: &ModelAccess,
    conn: &str,
) -> ApiResult<Prepared> {
    let snap = app.snapshot();
    let project = agent
        .project_id
        .as_ref()
        .and_then(|p| app.agents.project(p));
    let context = project.as_ref().and_then(|p| p.context.clone());
    let resolved = check_model_access(access, &snap).map_err(|e| unusable(e.to_string()))?;
    if let Some(why) = contexts::check(&snap, context.as_deref(), access) {
        return Err(ApiError::conflict("not for this project's context", why));
    }
    let d = snap
        .descriptor(&resolved.harness)
        .ok_or_else(|| unusable(format!("unknown harness {:?}", resolved.harness)))?
        .clone();
    let (field, scope) = match (&project, &agent.scope) {
        (Some(p), _) => ("folder", p.folder.clone()),
        (None, Some(s)) => ("scope", s.clone()),
        (None, None) => {
            return Err(ApiError::bad_request(
                "works in sessions only",
                "this agent has no folder: open a session (F) instead",
            ));
        }
    };
    // Checked again now (D.13): what the stored folder resolves to may have changed since the
    // save (a sandbox that can write its parent can swap it for a link).
    let scope = super::store::folders::check_scope(&app.config, field, &scope)?
        .display()
        .to_string();
    let c = containment(&agent.options);
    let knowledge = check_knowledge(&app.config, &agent.options.knowledge)?;
    let kroot = knowledge_root(&app.config);
    let knowledge: Vec<String> = knowledge
        .iter()
        .map(|k| std::fs::canonicalize(kroot.join(k)).map(|p| p.display().to_string()))
        .collect::<Result<_, _>>()
        .map_err(|e| ApiError::bad_request("knowledge unusable", e.to_string()))?;
    // G4: what its bindings add (checked again: G2, G3).
    let addons = super::launch::addons::resolve_for_launch(app, agent, c.network)?;
    // D.17: its own skills and its project's from the library, then its addons'; names unique.
    let mut skill_dirs: BTreeMap<String, String> = BTreeMap::new();
    let project_skills = project
        .as_ref()
        .map(|p| p.skills.clone())
        .unwrap_or_default();
    for s in agent.skills.iter().chain(&project_skills) {
        let dir = super::skills::library_skill(&app.config.skills_dir, s)
            .map_err(|e| ApiError::bad_request("skill unusable", e))?;
        skill_dirs.insert(s.clone(), dir.display().to_string());
    }
    for (s, dir) in &addons.skills {
        if skill_dirs.contains_key(s) {
            return Err(ApiError::bad_request(
                "skill unusable",
                format!("skill '{s}': an addon brings a skill of the same name"),
            ));
        }
        skill_dirs.insert(s.clone(), dir.display().to_string());
    }
    // D.8: the toolbox's caches where its project keeps them (ad hoc: the global ones).
    let caches = super::caches::resolve(&app.config, project.as_ref())
        .map_err(|e| ApiError::bad_request("caches unusable", e))?;

    let mut secrets_for_render: BTreeMap<String, String> = BTreeMap::new();
    let mut injections = Vec::new();
    let mut policy_secrets: Vec<(String, String)> = Vec::new();
    let mut extra_mounts = Vec::new();
    let (spec, who) = if let Some(name) = &access.account {
        let acc = match snap.account(name) {
            Some(Ok(a)) => a.clone(),
            _ => return Err(unusable(format!("account {name:?} is unusable"))),
        };
        let login = d
            .login
            .clone()
            .ok_or_else(|| unusable(format!("{} has no login", d.name)))?;
        let (logged_in, _) = login_state(&app.config, &app.secrets, name, &acc, Some(&d));
        if !logged_in {
            return Err(unusable(format!("account {name:?} is not logged in")));
        }
        let mut account_login = None;
        if login.is_file_login() {
            let cred = credential_path(&app.config, name);
            account_login = Some(cred.display().to_string());
            if let Some((_, slot)) = d.state_slots.iter().find(|(_, s)| s.credential) {
                extra_mounts.push(Mount {
                    source: cred.display().to_string(),
                    target: slot.target.clone(),
                    read_only: slot.read_only,
                    kind: MountKind::State,
                });
            }
        } else if let Some(t) = &acc.token {
            let value = resolve_secret(app, t)
                .map_err(|e| unusable(format!("account {name:?}: token: {e}")))?;
            if let Some(prefix) = &login.token_prefix
                && !value.starts_with(prefix.as_str())
            {
                return Err(unusable(format!(
                    "account {name:?}: its token does not start with {prefix}"
                )));
            }
            let secret_name = token_secret_path(name);
            let dl = deliver_keeping(
                &secret_name,
                value.clone(),
                login.hosts.clone(),
                c.network,
                login.token_prefix.as_deref(),
            );
            secrets_for_render.insert("token".into(), dl.given);
            injections.extend(dl.injection);
            policy_secrets.push((secret_name, value));
        }
        let spec = AgentSpec {
            harness: d.name.clone(),
            account: Some(name.clone()),
            provider: None,
            account_login,
            account_plan: acc.plan.clone(),
            provider_spec: None,
            files: BTreeMap::new(),
            config: NeutralConfig {
                model: resolved.model.clone(),
                account_connectors: acc.connectors,
            },
        };
        (spec, name.clone())
    } else {
        let name = access.provider.clone().unwrap_or_default();
        let mut prov = match snap.provider(&name) {
            Some(Ok(p)) => p.clone(),
            _ => return Err(unusable(format!("provider {name:?} is unusable"))),
        };
        // The machine's loopback is the container host's name in a container (E4).
        for url in prov.endpoints.values_mut() {
            if let Some((host, _)) = entry_for_url(url) {
                let ch = container_host(&host);
                if ch != host {
                    *url = url.replacen(&host, &ch, 1);
                }
            }
        }
        if let Some(k) = &prov.api_key {
            let value = resolve_secret(app, k)
                .map_err(|e| unusable(format!("provider {name:?}: apiKey: {e}")))?;
            let hosts: Vec<AllowEntry> = prov
                .endpoints
                .values()
                .filter_map(|u| entry_for_url(u))
                .filter_map(|(h, p)| AllowEntry::parse(&format!("{h}:{p}")).ok())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let secret_name = key_secret_path(&name);
            let dl = deliver(&secret_name, value.clone(), hosts, c.network);
            secrets_for_render.insert("apiKey".into(), dl.given);
            injections.extend(dl.injection);
            policy_secrets.push((secret_name, value));
        }
        let files = prov
            .files
            .get(&d.name)
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|(slot, f)| resolve_file(app, slot, f).map(|c| (slot.clone(), c)))
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map_err(|e| unusable(format!("provider {name:?}: {e}")))?;
        let spec = AgentSpec {
            harness: d.name.clone(),
            account: None,
            provider: Some(name.clone()),
            account_login: None,
            account_plan: None,
            provider_spec: Some(prov),
            files,
            config: NeutralConfig {
                model: resolved.model.clone(),
                account_connectors: false,
            },
        };
        (spec, name)
    };

    let mut state = state_mounts(app, &agent.id, &d, &who)?;
    state.extend(extra_mounts);
    policy_secrets.extend(addons.secrets.iter().cloned());
    injections.extend(addons.injections.iter().cloned());
    let input = RenderInput {
        descriptor: d.clone(),
        agent: spec,
        scope: scope.clone(),
        secrets: secrets_for_render,
        skills: skill_dirs.into_values().collect(),
        mcp_servers: addons.mcp_servers.clone(),
        terminal: None,
        permission_mode: c.permissions,
        caches: caches.clone(),
    };
    let launch = render(&input, &app.config.data_dir, agent).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "render failed",
            format!("{}: {e}", d.name),
        )
    })?;
    let display = if agent.options.display {
        Some(wayland_socket().map_err(|e| ApiError::bad_request("display unusable", e))?)
    } else {
        None
    };
    let required: Vec<AllowEntry> = if c.network == NetworkMode::Filtered {
        required_hosts(&snap, access)
            .into_iter()
            .map(|r| r.host)
            .chain(addons.egress.iter().map(|(e, _)| e.clone()))
            .collect()
    } else {
        Vec::new()
    };
    let mut labels = BTreeMap::new();
    labels.insert("handler.agent".to_string(), agent.id.clone());
    labels.insert("handler.connection".to_string(), conn.to_string());
    let input = ComposeInput {
        name: format!("handler-{}-{conn}", agent.id.replace('_', "-")),
        scope: scope.clone(),
        network: c.network,
        enforcement: c.egress.unwrap_or_default(),
        allow: agent.options.allow.clone(),
        required,
        confinement: c.confinement,
        state,
        caches,
        knowledge,
        injections,
        display,
        labels,
        addons: addons.parts,
    };
    let spec = compose(&launch, &input).map_err(|e| match e {
        // A binding's variable clashing is the user's configuration, not a fault.
        ComposeError::EnvClash { .. } | ComposeError::AddonTwice(..) => {
            ApiError::bad_request("binding unusable", e.to_string())
        }
        _ => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "compose failed",
            e.to_string(),
        ),
    })?;
    let mut policy = PolicyConfig::new(scope, spec.network.clone());
    policy.secrets = policy_secrets;
    policy.session_defaults = launch.session_defaults.clone().unwrap_or_default();
    policy.max_message_bytes = app.config.max_message_bytes;
    if agent.options.interface.is_some() {
        policy.unattended = Some(UnattendedMode::Approve);
    }
    Ok(Prepared {
        spec,
        policy,
        access: access.clone(),
    })
}

/// P2's path resolution: the host's view, symbolic links followed.
pub fn canonicalize(path: &str) -> Result<String, String> {
    std::fs::canonicalize(Path::new(path))
        .map(|p: PathBuf| p.display().to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepared_debug_names_secrets_never_their_values() {
        let spec: SandboxSpec = serde_json::from_value(serde_json::json!({
            "apiVersion": "handler.sandbox/v1",
            "name": "handler-a1-c1",
            "image": "localhost/handler-fake:latest",
            "argv": ["agent"],
            "env": {"API_KEY": "envSecretValue0001"},
            "workdir": "/w",
            "user": {"mode": "host-user", "home": "/home/agent"},
            "mounts": [],
            "files": [{"target": "/home/agent/auth.json", "content": "fileSecretValue0002"}],
            "writablePaths": [],
            "network": {"mode": "filtered", "allow": ["api.example.com:443"], "enforcement": "enforce"},
            "injections": [{"name": "providers/p/apiKey", "phantom": "phantomValue0000003",
                "value": "injectedSecretVal03", "hosts": ["api.example.com:443"]}]
        }))
        .unwrap();
        let mut policy = PolicyConfig::new("/w", spec.network.clone());
        policy.secrets = vec![("accounts/a/token".into(), "policySecretValue04".into())];
        let p = Prepared {
            spec,
            policy,
            access: ModelAccess::default(),
        };
        let shown = format!("{p:?}");
        for secret in [
            "envSecretValue0001",
            "fileSecretValue0002",
            "injectedSecretVal03",
            "policySecretValue04",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        for name in [
            "API_KEY",
            "/home/agent/auth.json",
            "providers/p/apiKey",
            "accounts/a/token",
        ] {
            assert!(shown.contains(name), "{name} not in {shown}");
        }
    }
}
