//! B.4: how a provider (E) is written into each harness's own configuration — one function per
//! harness with providerProtocols. The provider knows nothing of harnesses; the fields a harness
//! has no setting for are listed in docs/harnesses.md (B9), never silently assumed.

use std::collections::BTreeMap;

use handler_contracts::access::{Protocol, Provider, ProviderModel};
use handler_contracts::harness::HarnessDescriptor;
use handler_contracts::sandbox::GeneratedFile;
use serde_json::{Map, Value, json};

use crate::error::RenderError;
use crate::paths::expand;

/// The env var every generic-config harness (codex, pi, vibe) reads the provider's key from.
pub const PROVIDER_KEY_ENV: &str = "HANDLER_PROVIDER_API_KEY";
/// The compaction reserve when the model gives no maxOutput (B9).
pub const DEFAULT_RESERVE: u64 = 16384;
/// The name the container gives the machine's loopback (E4).
pub const CONTAINER_HOST: &str = "host.containers.internal";

/// What writing a provider gives the launch.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderWrite {
    /// The protocol of the provider's endpoint the harness talks (its first choice the provider
    /// has).
    pub protocol: Protocol,
    /// The endpoint as the harness reaches it (loopback rewritten, E4).
    pub endpoint: String,
    /// Environment the harness reads the provider's settings from (the key among them, by name).
    pub env: BTreeMap<String, String>,
    /// The harness's own configuration files, written for this provider and model.
    pub files: Vec<GeneratedFile>,
    /// The env var holding the key, when there is one (dropped from MCP servers, B6).
    pub key_env: Option<String>,
}

/// What a provider writer needs.
#[derive(Debug, Clone, Copy)]
pub struct ProviderArgs<'a> {
    /// The harness the provider is written for.
    pub descriptor: &'a HarnessDescriptor,
    /// The provider's name (its file stem).
    pub name: &'a str,
    /// The provider, as its document says.
    pub provider: &'a Provider,
    /// The model the agent runs with (one of the provider's).
    pub model: &'a ProviderModel,
    /// The provider's files for this harness, resolved: slot → content.
    pub files: &'a BTreeMap<String, String>,
    /// The key (a phantom, E3), when the provider has one.
    pub api_key: Option<&'a str>,
}

/// The compaction reserve of B9: maxOutput, else 16384, at most half the window.
pub fn reserve(model: &ProviderModel) -> Option<u64> {
    let window = model.context_window?;
    Some(model.max_output.unwrap_or(DEFAULT_RESERVE).min(window / 2))
}

/// The URL a sandboxed harness uses for a host URL: the machine's loopback is the container
/// host's name in a container (E4).
pub fn container_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let (host, port) = if hostport.starts_with('[') {
        match hostport.find(']') {
            Some(e) => (&hostport[..=e], &hostport[e + 1..]),
            None => (hostport, ""),
        }
    } else {
        match hostport.rfind(':') {
            Some(i) => (&hostport[..i], &hostport[i..]),
            None => (hostport, ""),
        }
    };
    if is_loopback(host) {
        format!("{scheme}://{userinfo}{CONTAINER_HOST}{port}{path}")
    } else {
        url.to_string()
    }
}

/// Whether a URL host names the machine's loopback.
pub fn is_loopback(host: &str) -> bool {
    let h = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    h == "localhost" || h == "::1" || h.starts_with("127.") || h.ends_with(".localhost")
}

/// Writes the provider into the harness's configuration (dispatch on the harness's name).
pub fn write_provider(a: &ProviderArgs<'_>) -> Result<ProviderWrite, RenderError> {
    let d = a.descriptor;
    let Some(protocol) = d
        .provider_protocols
        .iter()
        .copied()
        .find(|p| a.provider.endpoints.contains_key(p))
    else {
        let accepted: Vec<_> = d.provider_protocols.iter().map(|p| p.as_str()).collect();
        return Err(if accepted.is_empty() {
            RenderError::unsupported(
                &d.name,
                "agent.provider",
                "it runs only on an account, not on a provider",
            )
        } else {
            RenderError::unsupported(
                &d.name,
                "agent.providerSpec.endpoints",
                format!(
                    "provider {:?} has no endpoint for a protocol it speaks ({})",
                    a.name,
                    accepted.join(", ")
                ),
            )
        });
    };
    let endpoint = container_url(&a.provider.endpoints[&protocol]);
    for slot in a.files.keys() {
        if !d.config_files.contains_key(slot) {
            return Err(RenderError::unsupported(
                &d.name,
                format!("agent.files.{slot}"),
                format!(
                    "no config file slot {slot:?} (it has: {})",
                    d.config_files
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    match d.name.as_str() {
        "claude-code" => claude_code(a, protocol, endpoint),
        "codex" => codex(a, protocol, endpoint),
        "pi" => pi(a, protocol, endpoint),
        "vibe" => vibe(a, protocol, endpoint),
        other => Err(RenderError::unsupported(
            other,
            "agent.provider",
            "Handler has no provider writer for this harness (B.4): give it no providerProtocols or add one",
        )),
    }
}

fn native<'m>(model: &'m ProviderModel, harness: &str) -> Option<&'m Map<String, Value>> {
    model.native.get(harness)
}

fn scalar(field: &str, v: &Value) -> Result<String, RenderError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(RenderError::invalid(
            field,
            "claude-code takes env values: a string, number or boolean",
        )),
    }
}

fn file(
    d: &HarnessDescriptor,
    slot: &str,
    content: String,
    seed: bool,
) -> Result<GeneratedFile, RenderError> {
    let target = &d.config_files[slot].target;
    Ok(GeneratedFile {
        target: expand(&format!("configFiles.{slot}.target"), target, &d.home)?,
        content,
        mode: None,
        seed,
    })
}

/// claude-code: all in env (ANTHROPIC_*), its settings files untouched.
fn claude_code(
    a: &ProviderArgs<'_>,
    protocol: Protocol,
    endpoint: String,
) -> Result<ProviderWrite, RenderError> {
    let m = a.model;
    let mut env = BTreeMap::new();
    env.insert("ANTHROPIC_BASE_URL".into(), endpoint.clone());
    // Without a key (a local server) the SDK still wants one: a visible placeholder, not a secret.
    env.insert(
        "ANTHROPIC_API_KEY".into(),
        a.api_key.unwrap_or("no-key").to_string(),
    );
    for var in [
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
    ] {
        env.insert(var.into(), m.id.clone());
    }
    if let Some(w) = m.context_window {
        let r = reserve(m).unwrap_or(DEFAULT_RESERVE);
        env.insert("CLAUDE_CODE_AUTO_COMPACT_WINDOW".into(), w.to_string());
        // compact once the conversation passes window − reserve, as a percentage (rounded down)
        env.insert(
            "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE".into(),
            ((w - r) * 100 / w).max(1).to_string(),
        );
    }
    if let Some(o) = m.max_output {
        env.insert("CLAUDE_CODE_MAX_OUTPUT_TOKENS".into(), o.to_string());
    }
    if m.reasoning == Some(false) {
        env.insert("MAX_THINKING_TOKENS".into(), "0".into());
    }
    if let Some(n) = native(m, "claude-code") {
        for (k, v) in n {
            env.insert(
                k.clone(),
                scalar(&format!("models.native.claude-code.{k}"), v)?,
            );
        }
    }
    Ok(ProviderWrite {
        protocol,
        endpoint,
        env,
        files: vec![],
        key_env: Some("ANTHROPIC_API_KEY".into()),
    })
}

fn parse_toml(field: &str, text: Option<&String>) -> Result<toml::Table, RenderError> {
    match text {
        None => Ok(toml::Table::new()),
        Some(t) => toml::from_str(t)
            .map_err(|e| RenderError::invalid(field, format!("not valid TOML: {}", e.message()))),
    }
}

fn json_to_toml(field: &str, v: &Value) -> Result<toml::Value, RenderError> {
    toml::Value::try_from(v)
        .map_err(|_| RenderError::invalid(field, "cannot be written in TOML (a null?)"))
}

/// codex: `~/.codex/config.toml` (its own provider table, wire_api responses); the provider's
/// config_toml is the base, instructions_md becomes model_instructions_file.
fn codex(
    a: &ProviderArgs<'_>,
    protocol: Protocol,
    endpoint: String,
) -> Result<ProviderWrite, RenderError> {
    let d = a.descriptor;
    let m = a.model;
    let mut cfg = parse_toml("agent.files.config_toml", a.files.get("config_toml"))?;
    let mut provider = toml::Table::new();
    provider.insert("name".into(), a.name.into());
    provider.insert("base_url".into(), endpoint.clone().into());
    provider.insert("wire_api".into(), "responses".into());
    let mut env = BTreeMap::new();
    if let Some(k) = a.api_key {
        provider.insert("env_key".into(), PROVIDER_KEY_ENV.into());
        env.insert(PROVIDER_KEY_ENV.to_string(), k.to_string());
    }
    let providers = cfg
        .entry("model_providers")
        .or_insert_with(|| toml::Table::new().into());
    let Some(providers) = providers.as_table_mut() else {
        return Err(RenderError::invalid(
            "agent.files.config_toml",
            "model_providers is not a table",
        ));
    };
    providers.insert("handler".into(), provider.into());
    cfg.insert("model".into(), m.id.clone().into());
    cfg.insert("model_provider".into(), "handler".into());
    if let Some(w) = m.context_window {
        cfg.insert("model_context_window".into(), (w as i64).into());
        cfg.insert(
            "model_auto_compact_token_limit".into(),
            ((w - reserve(m).unwrap_or(0)) as i64).into(),
        );
    }
    if let Some(r) = m.reasoning {
        cfg.insert("model_supports_reasoning_summaries".into(), r.into());
        if !r {
            cfg.insert("model_reasoning_effort".into(), "none".into());
        }
    }
    let mut files = vec![];
    if let Some(text) = a.files.get("instructions_md") {
        let f = file(d, "instructions_md", text.clone(), false)?;
        cfg.insert("model_instructions_file".into(), f.target.clone().into());
        files.push(f);
    }
    if let Some(n) = native(m, "codex") {
        for (k, v) in n {
            cfg.insert(
                k.clone(),
                json_to_toml(&format!("models.native.codex.{k}"), v)?,
            );
        }
    }
    let text = toml::to_string(&cfg)
        .map_err(|e| RenderError::invalid("codex config.toml", e.to_string()))?;
    files.push(file(d, "config_toml", text, false)?);
    let key_env = a.api_key.map(|_| PROVIDER_KEY_ENV.to_string());
    Ok(ProviderWrite {
        protocol,
        endpoint,
        env,
        files,
        key_env,
    })
}

/// pi: `~/.pi/agent/models.json` (every model of the provider) and settings.json (the default
/// model, the compaction reserve, pi-mcp-adapter as a package), each merged over the provider's.
fn pi(
    a: &ProviderArgs<'_>,
    protocol: Protocol,
    endpoint: String,
) -> Result<ProviderWrite, RenderError> {
    let d = a.descriptor;
    let api = match protocol {
        Protocol::OpenaiChat => "openai-completions",
        Protocol::Anthropic => "anthropic-messages",
        Protocol::Responses => "openai-responses",
    };
    let models = a.provider.models.iter().map(pi_model).collect();
    let mut entry = Map::new();
    entry.insert("baseUrl".into(), json!(endpoint));
    entry.insert("api".into(), json!(api));
    // pi interpolates `$NAME` in apiKey (a bare name is a literal since pi 1.x); a local
    // server without a key gets a placeholder
    entry.insert(
        "apiKey".into(),
        json!(if a.api_key.is_some() {
            format!("${PROVIDER_KEY_ENV}")
        } else {
            "no-key".to_string()
        }),
    );
    entry.insert("models".into(), Value::Array(models));
    let mut doc = parse_json("agent.files.models_json", a.files.get("models_json"))?;
    let providers = doc.entry("providers").or_insert_with(|| json!({}));
    let Some(providers) = providers.as_object_mut() else {
        return Err(RenderError::invalid(
            "agent.files.models_json",
            "providers is not an object",
        ));
    };
    providers.insert(a.name.to_string(), Value::Object(entry));

    let settings = pi_settings(a)?;
    let mut env = BTreeMap::new();
    if let Some(k) = a.api_key {
        env.insert(PROVIDER_KEY_ENV.to_string(), k.to_string());
    }
    let files = vec![
        file(d, "models_json", pretty(&Value::Object(doc)), false)?,
        file(d, "settings_json", pretty(&Value::Object(settings)), true)?,
    ];
    Ok(ProviderWrite {
        protocol,
        endpoint,
        env,
        files,
        key_env: a.api_key.map(|_| PROVIDER_KEY_ENV.to_string()),
    })
}

/// One model in pi's models.json.
fn pi_model(m: &ProviderModel) -> Value {
    let mut e = Map::new();
    e.insert("id".into(), json!(m.id));
    if let Some(n) = &m.name {
        e.insert("name".into(), json!(n));
    }
    if let Some(r) = m.reasoning {
        e.insert("reasoning".into(), json!(r));
    }
    if let Some(i) = m.images {
        e.insert(
            "input".into(),
            if i {
                json!(["text", "image"])
            } else {
                json!(["text"])
            },
        );
    }
    if let Some(w) = m.context_window {
        e.insert("contextWindow".into(), json!(w));
    }
    if let Some(o) = m.max_output {
        e.insert("maxTokens".into(), json!(o));
    }
    if let Some(n) = native(m, "pi") {
        for (k, v) in n {
            e.insert(k.clone(), v.clone());
        }
    }
    Value::Object(e)
}

/// pi's settings.json over the provider's: the default provider and model, a quiet start, the
/// compaction reserve, pi-mcp-adapter among the packages.
fn pi_settings(a: &ProviderArgs<'_>) -> Result<Map<String, Value>, RenderError> {
    let mut settings = parse_json("agent.files.settings_json", a.files.get("settings_json"))?;
    settings.insert("defaultProvider".into(), json!(a.name));
    settings.insert("defaultModel".into(), json!(a.model.id));
    settings.entry("quietStartup").or_insert(json!(true));
    if let Some(r) = reserve(a.model) {
        let c = settings.entry("compaction").or_insert_with(|| json!({}));
        if let Some(c) = c.as_object_mut() {
            c.insert("enabled".into(), json!(true));
            c.insert("reserveTokens".into(), json!(r));
        }
    }
    let pkgs = settings.entry("packages").or_insert_with(|| json!([]));
    if let Some(p) = pkgs.as_array_mut() {
        let adapter = json!(PI_MCP_ADAPTER);
        if !p.contains(&adapter) {
            p.push(adapter);
        }
    }
    Ok(settings)
}

/// Where the pi image installs pi-mcp-adapter (its Containerfile: npm install -g).
pub const PI_MCP_ADAPTER: &str = "/usr/local/lib/node_modules/pi-mcp-adapter";

/// vibe: `~/.vibe/config.toml`, a [[providers]] entry and a [[models]] entry per model, merged
/// over the provider's config_toml.
fn vibe(
    a: &ProviderArgs<'_>,
    protocol: Protocol,
    endpoint: String,
) -> Result<ProviderWrite, RenderError> {
    let d = a.descriptor;
    let mut cfg = parse_toml("agent.files.config_toml", a.files.get("config_toml"))?;
    let mut p = toml::Table::new();
    p.insert("name".into(), a.name.into());
    p.insert("api_base".into(), endpoint.clone().into());
    p.insert(
        "api_key_env_var".into(),
        if a.api_key.is_some() {
            PROVIDER_KEY_ENV
        } else {
            ""
        }
        .into(),
    );
    p.insert("api_style".into(), "openai".into());
    push_array(&mut cfg, "providers", p.into())?;
    for m in &a.provider.models {
        let mut e = toml::Table::new();
        e.insert("name".into(), m.id.clone().into());
        e.insert("provider".into(), a.name.into());
        e.insert("alias".into(), m.id.clone().into());
        if let Some(n) = &m.name {
            e.insert("display_name".into(), n.clone().into());
        }
        if let Some(t) = m.temperature {
            e.insert("temperature".into(), t.into());
        }
        if let Some(o) = m.max_output {
            e.insert("max_output_tokens".into(), (o as i64).into());
        }
        if let Some(w) = m.context_window {
            e.insert("max_context_length".into(), (w as i64).into());
            e.insert(
                "auto_compact_threshold".into(),
                ((w - reserve(m).unwrap_or(0)) as i64).into(),
            );
        }
        if let Some(i) = m.images {
            e.insert("supports_images".into(), i.into());
        }
        if m.reasoning == Some(false) {
            e.insert("thinking".into(), "off".into());
            e.insert(
                "thinking_levels".into(),
                toml::Value::Array(vec!["off".into()]),
            );
        }
        if let Some(n) = native(m, "vibe") {
            for (k, v) in n {
                e.insert(
                    k.clone(),
                    json_to_toml(&format!("models.native.vibe.{k}"), v)?,
                );
            }
        }
        push_array(&mut cfg, "models", e.into())?;
    }
    cfg.insert("active_model".into(), a.model.id.clone().into());
    let text = toml::to_string(&cfg)
        .map_err(|e| RenderError::invalid("vibe config.toml", e.to_string()))?;
    let mut env = BTreeMap::new();
    if let Some(k) = a.api_key {
        env.insert(PROVIDER_KEY_ENV.to_string(), k.to_string());
    }
    Ok(ProviderWrite {
        protocol,
        endpoint,
        env,
        files: vec![file(d, "config_toml", text, false)?],
        key_env: a.api_key.map(|_| PROVIDER_KEY_ENV.to_string()),
    })
}

fn push_array(cfg: &mut toml::Table, key: &str, v: toml::Value) -> Result<(), RenderError> {
    let arr = cfg.entry(key).or_insert_with(|| toml::Value::Array(vec![]));
    match arr.as_array_mut() {
        Some(a) => {
            a.push(v);
            Ok(())
        }
        None => Err(RenderError::invalid(
            format!("agent.files.config_toml.{key}"),
            "is not an array",
        )),
    }
}

fn parse_json(field: &str, text: Option<&String>) -> Result<Map<String, Value>, RenderError> {
    match text {
        None => Ok(Map::new()),
        Some(t) => match serde_json::from_str::<Value>(t) {
            Ok(Value::Object(o)) => Ok(o),
            Ok(_) => Err(RenderError::invalid(field, "not a JSON object")),
            Err(e) => Err(RenderError::invalid(field, format!("not valid JSON: {e}"))),
        },
    }
}

/// Pretty JSON with a final newline (files people read).
pub fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}
