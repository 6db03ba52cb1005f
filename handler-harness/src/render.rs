//! render (B.3): descriptor + AgentSpec + scope + secrets + skills + MCP servers + terminal +
//! permission mode + caches, and the explicit environment (data dir, agent id, instructions) →
//! HarnessLaunch. Pure and deterministic (B1): intent only, no Podman (B2); secrets only in env
//! and files (B3); whatever the harness cannot honour is an error naming it (B5).

use std::collections::{BTreeMap, BTreeSet};

use handler_contracts::access::{AgentSpec, FileSource};
use handler_contracts::allow::{AllowEntry, entry_for_url};
use handler_contracts::api_version::HarnessLaunchApiVersion;
use handler_contracts::harness::{
    HarnessLaunch, McpEnv, McpServer, NameValue, PermissionMapping, PermissionMode, RenderInput,
    SessionDefaults,
};
use handler_contracts::sandbox::{GeneratedFile, Mount, MountKind};
use handler_contracts::validate::validate_descriptor;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::descriptors::{SANDBOX_ENV_PATH, SANDBOX_ENV_SCRIPT};
use crate::error::RenderError;
use crate::paths::{absolute, expand, segment};
use crate::providers::{
    CONTAINER_HOST, ProviderArgs, container_url, is_loopback, pretty, write_provider,
};

/// The secret slot of an account's token (E3: `accounts/<name>/token`).
pub const SECRET_TOKEN: &str = "token";
/// The secret slot of a provider's key (E3: `providers/<name>/apiKey`).
pub const SECRET_API_KEY: &str = "apiKey";
/// Where a terminal's MCP servers are written (B8).
pub const TERMINAL_MCP_FILE: &str = "~/.handler/terminal-mcp.json";

/// What render needs from the machine besides B.3's input, given explicitly so render stays pure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenderContext {
    /// Handler's data folder, `<data>` (absolute): state slots live under
    /// `<data>/agent-state/<agentId>/<harness>@<account or provider>/<slot>` (E6).
    pub data_dir: String,
    /// The agent's id (a path segment).
    pub agent_id: String,
    /// The agent's instructions, for a terminal (B8): they need the terminal's instructionsFlag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The profile whose machines' agents share their state (decision 0170): its slots are
    /// then under `<data>/profile-state/<profile>/…` instead of the agent's own folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_state: Option<String>,
}

/// One render, as the CLI takes it: B.3's input and its context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderRequest {
    #[serde(flatten)]
    /// B.3's input: descriptor, AgentSpec, scope, secrets, skills, MCP servers, terminal, mode,
    /// caches.
    pub input: RenderInput,
    /// What render needs from the machine besides the input.
    pub context: RenderContext,
}

/// Renders a request given as JSON and answers the launch as pretty JSON (for
/// `handler harness render --input FILE`).
pub fn render_json(input_json: &str) -> Result<String, RenderError> {
    let req: RenderRequest = handler_contracts::parse::from_json("render input", input_json)?;
    let launch = render(&req.input, &req.context)?;
    let v = serde_json::to_value(&launch).map_err(|_| RenderError::Output)?;
    Ok(pretty(&v))
}

/// render (B.3): the launch of `input`'s agent, or the first rule it breaks. Each step below is
/// one section of contract B, in the order the errors are looked for.
pub fn render(input: &RenderInput, ctx: &RenderContext) -> Result<HarnessLaunch, RenderError> {
    check_input(input, ctx)?;
    let d = &input.descriptor;
    let mut out = Draft {
        env: d.env.clone(),
        ..Draft::default()
    };
    let mapping = permission_mapping(input, &mut out)?;
    let provider_files = provider_files(&input.agent)?;
    let (who, model_via_acp) = match (&input.agent.account, &input.agent.provider) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(RenderError::invalid(
                "agent",
                "exactly one of account and provider",
            ));
        }
        (Some(account), None) => (
            account_access(input, account, &provider_files, &mut out)?,
            true,
        ),
        (None, Some(name)) => (
            provider_access(input, name, &provider_files, &mut out)?,
            false,
        ),
    };
    let terminal_model = acp_model(input, model_via_acp, &mut out)?;
    state_mounts(input, ctx, &who, &mut out)?;
    skill_mounts(input, &mut out)?;
    cache_mounts(input, &mut out)?;
    let servers = mcp_servers(input, &mut out)?;
    let (argv, session_defaults) = match &input.terminal {
        None => acp_argv(input, mapping, servers, &mut out),
        Some(args) => (
            terminal_argv(
                input,
                ctx,
                args,
                terminal_model.as_deref(),
                &servers,
                &mut out,
            )?,
            None,
        ),
    };
    finish(input, out, argv, session_defaults)
}

/// What render accumulates on its way, section by section.
#[derive(Default)]
struct Draft {
    env: BTreeMap<String, String>,
    files: Vec<GeneratedFile>,
    mounts: Vec<Mount>,
    egress: BTreeSet<AllowEntry>,
    /// The variables holding a secret (B6: dropped for stdio MCP servers).
    secret_envs: Vec<String>,
    /// ACP config options set at session start (the model of an account).
    config_options: BTreeMap<String, String>,
}

/// The input's own consistency: a valid descriptor for the agent's harness, absolute folders,
/// and only the secret slots this agent has (B3: they go to env, never argv).
fn check_input(input: &RenderInput, ctx: &RenderContext) -> Result<(), RenderError> {
    let d = &input.descriptor;
    validate_descriptor(d)
        .map_err(|e| RenderError::invalid(format!("descriptor.{}", e.path), e.message))?;
    let agent = &input.agent;
    if agent.harness != d.name {
        return Err(RenderError::invalid(
            "agent.harness",
            format!(
                "{:?} is not the descriptor's harness {:?}",
                agent.harness, d.name
            ),
        ));
    }
    absolute("context.dataDir", &ctx.data_dir)?;
    segment("context.agentId", &ctx.agent_id)?;
    if let Some(p) = &ctx.shared_state {
        segment("context.sharedState", p)?;
    }
    absolute("scope", &input.scope)?;
    for slot in input.secrets.keys() {
        let ok = (slot == SECRET_TOKEN && agent.account.is_some())
            || (slot == SECRET_API_KEY && agent.provider.is_some());
        if !ok {
            return Err(RenderError::invalid(
                format!("secrets.{slot}"),
                "not a secret of this agent (an account has `token`, a provider `apiKey`)",
            ));
        }
    }
    Ok(())
}

/// Permission mode (B5: one the descriptor maps); its env goes to the launch.
fn permission_mapping<'a>(
    input: &'a RenderInput,
    out: &mut Draft,
) -> Result<&'a PermissionMapping, RenderError> {
    let d = &input.descriptor;
    let mode = input.permission_mode;
    let Some(mapping) = d.permissions.get(&mode) else {
        let mapped: Vec<_> = d.permissions.keys().map(|m| m.as_str()).collect();
        return Err(RenderError::unsupported(
            &d.name,
            "permissionMode",
            format!(
                "{:?} is not a mode it has (it maps: {})",
                mode.as_str(),
                mapped.join(", ")
            ),
        ));
    };
    if let Some(menv) = &mapping.env {
        out.env
            .extend(menv.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    Ok(mapping)
}

/// The provider's files for this harness: resolved content only.
fn provider_files(agent: &AgentSpec) -> Result<BTreeMap<String, String>, RenderError> {
    let mut provider_files = BTreeMap::new();
    for (slot, src) in &agent.files {
        match src {
            FileSource::Content(c) => {
                provider_files.insert(slot.clone(), c.clone());
            }
            FileSource::File(_) | FileSource::Env(_) => {
                return Err(RenderError::invalid(
                    format!("agent.files.{slot}"),
                    "an unresolved file source: the control plane gives render its content",
                ));
            }
        }
    }
    Ok(provider_files)
}

/// An account (E1, D.9): its token in env or its credential file mounted, its plan, its
/// connectors, its login's hosts. Returns who the state slots belong to.
fn account_access(
    input: &RenderInput,
    account: &str,
    provider_files: &BTreeMap<String, String>,
    out: &mut Draft,
) -> Result<String, RenderError> {
    let d = &input.descriptor;
    let h = d.name.as_str();
    let agent = &input.agent;
    segment("agent.account", account)?;
    let Some(login) = &d.login else {
        return Err(RenderError::unsupported(
            h,
            "agent.account",
            "it has no login: it runs on providers only",
        ));
    };
    if !provider_files.is_empty() {
        return Err(RenderError::invalid(
            "agent.files",
            "an account's agent has no provider files",
        ));
    }
    if let Some(var) = &login.token {
        let Some(token) = input.secrets.get(SECRET_TOKEN) else {
            return Err(RenderError::invalid(
                "secrets.token",
                format!("account {account:?} has no token (not logged in)"),
            ));
        };
        out.env.insert(var.clone(), token.clone());
        out.secret_envs.push(var.clone());
        if agent.account_login.is_some() {
            return Err(RenderError::invalid(
                "agent.accountLogin",
                "a token login has no login file",
            ));
        }
    }
    if login.file.is_some() {
        credential_mounts(input, account, out)?;
    }
    if let Some(plan) = &agent.account_plan {
        match (&login.plans, &login.plan_env) {
            (Some(plans), Some(var)) if plans.contains(plan) => {
                out.env.insert(var.clone(), plan.clone());
            }
            (Some(plans), Some(_)) => {
                return Err(RenderError::invalid(
                    "agent.accountPlan",
                    format!("{plan:?} is not one of {}", plans.join(", ")),
                ));
            }
            _ => {
                return Err(RenderError::unsupported(
                    h,
                    "agent.accountPlan",
                    "its login has no plans",
                ));
            }
        }
    }
    if agent.config.account_connectors && !d.account_connectors {
        return Err(RenderError::unsupported(
            h,
            "agent.config.accountConnectors",
            "it has no account connectors",
        ));
    }
    account_env(h, agent.config.account_connectors, &mut out.env);
    for host in &login.hosts {
        out.egress.insert(host.clone());
    }
    Ok(account.to_string())
}

/// A file login (D.9): the credential file Handler keeps, mounted on each credential slot.
fn credential_mounts(
    input: &RenderInput,
    account: &str,
    out: &mut Draft,
) -> Result<(), RenderError> {
    let d = &input.descriptor;
    let Some(cred) = &input.agent.account_login else {
        return Err(RenderError::invalid(
            "agent.accountLogin",
            format!("account {account:?} is not logged in (no credential file)"),
        ));
    };
    absolute("agent.accountLogin", cred)?;
    for (name, slot) in &d.state_slots {
        if slot.credential {
            out.mounts.push(Mount {
                source: cred.clone(),
                target: expand(
                    &format!("descriptor.stateSlots.{name}.target"),
                    &slot.target,
                    &d.home,
                )?,
                read_only: slot.read_only,
                kind: MountKind::State,
            });
        }
    }
    Ok(())
}

/// A provider (E, B.4): its model, its key, what the harness's writer makes of it, its
/// endpoint's host. Returns who the state slots belong to.
fn provider_access(
    input: &RenderInput,
    pname: &str,
    provider_files: &BTreeMap<String, String>,
    out: &mut Draft,
) -> Result<String, RenderError> {
    let d = &input.descriptor;
    let agent = &input.agent;
    segment("agent.provider", pname)?;
    let Some(p) = &agent.provider_spec else {
        return Err(RenderError::invalid(
            "agent.providerSpec",
            format!("provider {pname:?} is not resolved"),
        ));
    };
    if agent.config.account_connectors {
        return Err(RenderError::invalid(
            "agent.config.accountConnectors",
            "a provider has no account connectors",
        ));
    }
    let model = match &agent.config.model {
        Some(id) => p.models.iter().find(|m| m.id == *id).ok_or_else(|| {
            RenderError::invalid(
                "agent.config.model",
                format!("{id:?} is not one of provider {pname:?}'s models"),
            )
        })?,
        None => p
            .models
            .first()
            .ok_or_else(|| RenderError::invalid("agent.providerSpec.models", "no model"))?,
    };
    let api_key = input.secrets.get(SECRET_API_KEY).map(String::as_str);
    if p.api_key.is_some() && api_key.is_none() {
        return Err(RenderError::invalid(
            "secrets.apiKey",
            format!("provider {pname:?} has a key but none was given"),
        ));
    }
    if p.api_key.is_none() && api_key.is_some() {
        return Err(RenderError::invalid(
            "secrets.apiKey",
            format!("provider {pname:?} has no key"),
        ));
    }
    let w = write_provider(&ProviderArgs {
        descriptor: d,
        name: pname,
        provider: p,
        model,
        files: provider_files,
        api_key,
    })?;
    out.env.extend(w.env);
    out.files.extend(w.files);
    out.secret_envs.extend(w.key_env);
    out.egress.insert(url_entry(
        "agent.providerSpec.endpoints",
        &p.endpoints[&w.protocol],
    )?);
    Ok(pname.to_string())
}

/// The model chosen over ACP (an account's): needs modelOption (B5), except in a terminal, which
/// takes it on its command line. Returns the model a terminal must be given.
fn acp_model(
    input: &RenderInput,
    model_via_acp: bool,
    out: &mut Draft,
) -> Result<Option<String>, RenderError> {
    let d = &input.descriptor;
    let terminal_model = if model_via_acp {
        input.agent.config.model.clone()
    } else {
        None
    };
    if let Some(model) = &terminal_model
        && input.terminal.is_none()
    {
        let Some(opt) = &d.model_option else {
            return Err(RenderError::unsupported(
                &d.name,
                "agent.config.model",
                format!("{model:?} cannot be chosen: it has no modelOption"),
            ));
        };
        out.config_options.insert(opt.clone(), model.clone());
    }
    Ok(terminal_model)
}

/// The folder of the state slots of harness `harness` logged in as `who` (E6): the agent's own,
/// `<data>/agent-state/<agent>/<harness>@<who>`, or, in the machines of a profile that shares
/// its agents' state, `<data>/profile-state/<profile>/<harness>@<who>` (decision 0170). The
/// one place the daemon and the render take it from.
pub fn state_root(
    data_dir: &str,
    agent_id: &str,
    shared_state: Option<&str>,
    harness: &str,
    who: &str,
) -> String {
    let owner = match shared_state {
        Some(profile) => format!("profile-state/{profile}"),
        None => format!("agent-state/{agent_id}"),
    };
    format!("{}/{owner}/{harness}@{who}", data_dir.trim_end_matches('/'))
}

/// State slots (E6): the agent's own, per model; credential and per-session ones elsewhere.
fn state_mounts(
    input: &RenderInput,
    ctx: &RenderContext,
    who: &str,
    out: &mut Draft,
) -> Result<(), RenderError> {
    let d = &input.descriptor;
    let state_root = state_root(
        &ctx.data_dir,
        &ctx.agent_id,
        ctx.shared_state.as_deref(),
        &d.name,
        who,
    );
    for (name, slot) in &d.state_slots {
        if slot.credential || slot.per_session {
            continue;
        }
        out.mounts.push(Mount {
            source: format!("{state_root}/{name}"),
            target: expand(
                &format!("descriptor.stateSlots.{name}.target"),
                &slot.target,
                &d.home,
            )?,
            read_only: slot.read_only,
            kind: MountKind::State,
        });
    }
    Ok(())
}

/// Skills (D.17, G4): read-only at <skillsDir>/<folder name>, names unique.
fn skill_mounts(input: &RenderInput, out: &mut Draft) -> Result<(), RenderError> {
    if input.skills.is_empty() {
        return Ok(());
    }
    let d = &input.descriptor;
    let Some(dir) = &d.skills_dir else {
        return Err(RenderError::unsupported(
            &d.name,
            "skills",
            "it has no skillsDir",
        ));
    };
    let dir = expand("descriptor.skillsDir", dir, &d.home)?;
    let mut names = BTreeSet::new();
    for (i, s) in input.skills.iter().enumerate() {
        absolute(&format!("skills[{i}]"), s)?;
        let name = s
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default();
        segment(&format!("skills[{i}]"), name)?;
        if !names.insert(name.to_string()) {
            return Err(RenderError::invalid(
                format!("skills[{i}]"),
                format!("a second skill named {name:?}"),
            ));
        }
        out.mounts.push(Mount {
            source: s.clone(),
            target: format!("{dir}/{name}"),
            read_only: true,
            kind: MountKind::Config,
        });
    }
    Ok(())
}

/// Caches (B.6, D.8): read-write at their home path.
fn cache_mounts(input: &RenderInput, out: &mut Draft) -> Result<(), RenderError> {
    let d = &input.descriptor;
    for (target, host) in &input.caches {
        absolute(&format!("caches.{target}"), host)?;
        out.mounts.push(Mount {
            source: host.clone(),
            target: expand(&format!("caches.{target}"), target, &d.home)?,
            read_only: false,
            kind: MountKind::Cache,
        });
    }
    Ok(())
}

/// MCP servers (B.3, B5, B6, B7): names unique, transports the harness accepts, remote hosts
/// allowed, stdio servers wrapped when the harness starts them in the sandbox's env, and the
/// harness's own MCP config file. Returns the servers as the harness gets them.
fn mcp_servers(input: &RenderInput, out: &mut Draft) -> Result<Vec<McpServer>, RenderError> {
    let d = &input.descriptor;
    let mut names = BTreeSet::new();
    for (i, s) in input.mcp_servers.iter().enumerate() {
        if !names.insert(s.name()) {
            return Err(RenderError::invalid(
                format!("mcpServers[{i}].name"),
                format!("{:?} is given twice", s.name()),
            ));
        }
        let t = s.transport();
        if !d.mcp_transports.contains(&t) {
            let accepted: Vec<_> = d
                .mcp_transports
                .iter()
                .map(|t| format!("{t:?}").to_lowercase())
                .collect();
            return Err(RenderError::unsupported(
                &d.name,
                format!("mcpServers[{i}]"),
                format!(
                    "server {:?} uses transport {}, not one it accepts ({})",
                    s.name(),
                    format!("{t:?}").to_lowercase(),
                    if accepted.is_empty() {
                        "none".to_string()
                    } else {
                        accepted.join(", ")
                    }
                ),
            ));
        }
        if let McpServer::Remote { url, .. } = s {
            out.egress
                .insert(url_entry(&format!("mcpServers[{i}].url"), url)?);
        }
    }
    let servers: Vec<McpServer> = input
        .mcp_servers
        .iter()
        .map(|s| {
            let s = remote_in_container(s);
            if d.mcp_env == McpEnv::Sandbox {
                wrap_stdio(&s, &out.secret_envs)
            } else {
                s
            }
        })
        .collect();
    if d.mcp_env == McpEnv::Sandbox && servers.iter().any(|s| matches!(s, McpServer::Stdio { .. }))
    {
        out.files.push(GeneratedFile {
            target: SANDBOX_ENV_PATH.to_string(),
            content: SANDBOX_ENV_SCRIPT.to_string(),
            mode: Some("0755".into()),
            seed: false,
        });
    }
    if let Some(path) = &d.mcp_config_file {
        out.files.push(GeneratedFile {
            target: expand("descriptor.mcpConfigFile", path, &d.home)?,
            content: pretty(&mcp_config_file(&servers)),
            mode: None,
            seed: false,
        });
    }
    Ok(servers)
}

/// argv over ACP: the descriptor's ACP command, and the session defaults (mode, options, MCP
/// servers) the policy applies at session start (P7, P8), none when there are none.
fn acp_argv(
    input: &RenderInput,
    mapping: &PermissionMapping,
    servers: Vec<McpServer>,
    out: &mut Draft,
) -> (Vec<String>, Option<SessionDefaults>) {
    let sd = SessionDefaults {
        mode_id: mapping.session_mode.clone(),
        config_options: std::mem::take(&mut out.config_options),
        mcp_servers: servers,
    };
    let empty = sd.mode_id.is_none() && sd.config_options.is_empty() && sd.mcp_servers.is_empty();
    (
        input.descriptor.acp_command.clone(),
        if empty { None } else { Some(sd) },
    )
}

/// argv of the harness's own terminal program (B8): its command, its flags for the mode, the
/// model, the MCP servers, the instructions, then the person's arguments.
fn terminal_argv(
    input: &RenderInput,
    ctx: &RenderContext,
    args: &[String],
    model: Option<&str>,
    servers: &[McpServer],
    out: &mut Draft,
) -> Result<Vec<String>, RenderError> {
    let d = &input.descriptor;
    let h = d.name.as_str();
    let mode = input.permission_mode;
    let Some(t) = &d.terminal else {
        return Err(RenderError::unsupported(
            h,
            "terminal",
            "it has no terminal program",
        ));
    };
    let mut argv = t.command.clone();
    let Some(flags) = t.permissions.get(&mode) else {
        return Err(RenderError::unsupported(
            h,
            "permissionMode",
            format!("its terminal has no flags for {:?}", mode.as_str()),
        ));
    };
    argv.extend(flags.iter().cloned());
    if let Some(model) = model {
        match (&t.model_flag, &t.model_env) {
            (Some(flag), _) => argv.extend([flag.clone(), model.to_string()]),
            (None, Some(var)) => {
                out.env.insert(var.clone(), model.to_string());
            }
            (None, None) => {
                return Err(RenderError::unsupported(
                    h,
                    "agent.config.model",
                    format!("its terminal cannot take a model ({model:?})"),
                ));
            }
        }
    }
    if !servers.is_empty() {
        match (&t.mcp_config_flag, &t.mcp_servers_env) {
            (Some(flag), _) => {
                let target = expand("terminal-mcp", TERMINAL_MCP_FILE, &d.home)?;
                out.files.push(GeneratedFile {
                    target: target.clone(),
                    content: pretty(&terminal_mcp_file(servers)),
                    mode: None,
                    seed: false,
                });
                argv.extend([flag.clone(), target]);
            }
            (None, Some(var)) => {
                out.env.insert(var.clone(), terminal_mcp_env(h, servers)?);
            }
            (None, None) => {
                return Err(RenderError::unsupported(
                    h,
                    "mcpServers",
                    "its terminal cannot take MCP servers",
                ));
            }
        }
    }
    if let Some(text) = &ctx.instructions {
        let Some(flag) = &t.instructions_flag else {
            return Err(RenderError::unsupported(
                h,
                "context.instructions",
                "its terminal has no instructionsFlag: an agent with instructions has no terminal",
            ));
        };
        argv.extend([flag.clone(), text.clone()]);
    }
    argv.extend(args.iter().cloned());
    Ok(argv)
}

/// The launch (B.3's output): writable paths expanded, files and mounts in a stable order (B1),
/// one file per target, and B3 checked rather than assumed: no secret value in argv.
fn finish(
    input: &RenderInput,
    out: Draft,
    argv: Vec<String>,
    session_defaults: Option<SessionDefaults>,
) -> Result<HarnessLaunch, RenderError> {
    let d = &input.descriptor;
    let writable_paths = d
        .writable_paths
        .iter()
        .enumerate()
        .map(|(i, p)| expand(&format!("descriptor.writablePaths[{i}]"), p, &d.home))
        .collect::<Result<Vec<_>, _>>()?;
    let Draft {
        env,
        mut files,
        mut mounts,
        egress,
        ..
    } = out;
    files.sort_by(|a, b| a.target.cmp(&b.target));
    for w in files.windows(2) {
        if w[0].target == w[1].target {
            return Err(RenderError::invalid(
                "files",
                format!("two files for {}", w[0].target),
            ));
        }
    }
    mounts.sort_by(|a, b| (&a.target, &a.source).cmp(&(&b.target, &b.source)));
    let launch = HarnessLaunch {
        api_version: HarnessLaunchApiVersion,
        image: format!("{}:latest", d.image),
        argv,
        env,
        home: d.home.clone(),
        files,
        mounts,
        writable_paths,
        egress: egress.into_iter().collect(),
        session_defaults,
    };
    for v in input.secrets.values() {
        if !v.is_empty() && launch.argv.iter().any(|a| a.contains(v.as_str())) {
            return Err(RenderError::invalid(
                "argv",
                "a secret would appear in argv (B3): refused",
            ));
        }
    }
    Ok(launch)
}

/// Per-harness env of an account that no descriptor field says: claude-code hides the account's
/// claude.ai connectors unless the agent uses them (B.2 accountConnectors).
fn account_env(harness: &str, connectors: bool, env: &mut BTreeMap<String, String>) {
    if harness == "claude-code" && !connectors {
        env.insert("ENABLE_CLAUDEAI_MCP_SERVERS".into(), "false".into());
    }
}

/// The allow-list entry of a URL, the machine's loopback as the container host (E4).
fn url_entry(field: &str, url: &str) -> Result<AllowEntry, RenderError> {
    let Some((host, port)) = entry_for_url(url) else {
        return Err(RenderError::invalid(
            field,
            format!("{url:?} is not an http(s) URL"),
        ));
    };
    let host = if is_loopback(&host) {
        CONTAINER_HOST.to_string()
    } else {
        host
    };
    AllowEntry::parse(&format!("{host}:{port}"))
        .map_err(|e| RenderError::invalid(field, e.to_string()))
}

fn remote_in_container(s: &McpServer) -> McpServer {
    match s {
        McpServer::Remote {
            transport,
            name,
            url,
            headers,
        } => McpServer::Remote {
            transport: *transport,
            name: name.clone(),
            url: container_url(url),
            headers: headers.clone(),
        },
        other => other.clone(),
    }
}

/// B6: a stdio server run through handler-sandbox-env, the harness's secrets dropped, the entry's
/// own env kept by name (values never in argv).
fn wrap_stdio(s: &McpServer, secret_envs: &[String]) -> McpServer {
    match s {
        McpServer::Stdio {
            name,
            command,
            args,
            env,
        } => {
            let mut a = vec![];
            for v in secret_envs {
                a.extend(["--drop".to_string(), v.clone()]);
            }
            for nv in env {
                a.extend(["--keep".to_string(), nv.name.clone()]);
            }
            a.push("--".into());
            a.push(command.clone());
            a.extend(args.iter().cloned());
            McpServer::Stdio {
                name: name.clone(),
                command: SANDBOX_ENV_PATH.into(),
                args: a,
                env: env.clone(),
            }
        }
        other => other.clone(),
    }
}

fn pairs(v: &[NameValue]) -> Value {
    Value::Object(
        v.iter()
            .map(|nv| (nv.name.clone(), json!(nv.value)))
            .collect(),
    )
}

/// B7: the common mcp.json format, for pi-mcp-adapter.
fn mcp_config_file(servers: &[McpServer]) -> Value {
    let mut m = Map::new();
    for s in servers {
        let e = match s {
            McpServer::Stdio {
                command, args, env, ..
            } => {
                json!({"command": command, "args": args, "env": pairs(env), "directTools": true})
            }
            McpServer::Remote { url, headers, .. } => {
                json!({"url": url, "headers": pairs(headers), "directTools": true})
            }
        };
        m.insert(s.name().to_string(), e);
    }
    json!({"mcpServers": m, "settings": {"allowInstall": false, "scriptMode": false}})
}

/// B8: ~/.handler/terminal-mcp.json.
fn terminal_mcp_file(servers: &[McpServer]) -> Value {
    let mut m = Map::new();
    for s in servers {
        let e = match s {
            McpServer::Stdio {
                command, args, env, ..
            } => {
                json!({"type": "stdio", "command": command, "args": args, "env": pairs(env)})
            }
            McpServer::Remote {
                transport,
                url,
                headers,
                ..
            } => {
                json!({"type": transport, "url": url, "headers": pairs(headers)})
            }
        };
        m.insert(s.name().to_string(), e);
    }
    json!({"mcpServers": m})
}

/// B8: Vibe's mcp_servers list, stdio only.
fn terminal_mcp_env(harness: &str, servers: &[McpServer]) -> Result<String, RenderError> {
    let mut list = vec![];
    for (i, s) in servers.iter().enumerate() {
        match s {
            McpServer::Stdio { name, command, args, env } => list.push(json!({
                "name": name, "transport": "stdio", "command": command, "args": args, "env": pairs(env)
            })),
            McpServer::Remote { name, .. } => {
                return Err(RenderError::unsupported(
                    harness,
                    format!("mcpServers[{i}]"),
                    format!("its terminal takes only stdio MCP servers, not {name:?}"),
                ));
            }
        }
    }
    Ok(Value::Array(list).to_string())
}

/// The permission modes, for callers iterating the matrix.
pub const MODES: [PermissionMode; 3] = PermissionMode::ALL;
