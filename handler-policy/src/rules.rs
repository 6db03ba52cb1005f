//! The rules that look at one message, as pure functions over raw text: P1's capability
//! rewrite, P2's scope check, P3's MCP destinations, P4's method lists, P6's daemon-owned
//! names, P8's server merge and P9's choice of option.

use handler_contracts::acp;
use handler_contracts::allow::entry_for_url;
use handler_contracts::harness::McpServer;
use handler_contracts::sandbox::NetworkPolicy;
use serde_json::value::RawValue;

use crate::config::{PathResolver, UnattendedMode};
use crate::json::{self, Splice};

/// A policy's refusal: the JSON-RPC error a request gets (C.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The JSON-RPC error code answered (C.4).
    pub code: i64,
    /// The rule that refused, `P1` to `P9`.
    pub policy: &'static str,
    /// The error's message, naming what was refused.
    pub message: String,
    /// An extra `data` member besides `policy` (P8: the server's name).
    pub name: Option<String>,
}

impl Refusal {
    fn new(code: i64, policy: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            code,
            policy,
            message: message.into(),
            name: None,
        }
    }
    /// The error object's JSON text.
    pub fn error_json(&self) -> String {
        let mut data = serde_json::Map::new();
        data.insert("policy".into(), self.policy.into());
        if let Some(n) = &self.name {
            data.insert("name".into(), n.as_str().into());
        }
        serde_json::json!({"code": self.code, "message": self.message, "data": data}).to_string()
    }
}

/// P1: the initialize that reaches the agent offers neither `fs` nor `terminal`. Returns the
/// edits to make to `params` (empty when nothing is offered).
pub(crate) fn p1_initialize(frame: &[u8], params: Option<&RawValue>) -> Splice {
    let mut splice = Splice::new();
    let Some(params) = params.and_then(json::members) else {
        return splice;
    };
    for caps in params.all("clientCapabilities") {
        let Some(cm) = json::members(caps) else {
            if !json::is_false_or_null(caps) {
                splice.replace(
                    json::span(frame, caps.get()),
                    r#"{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}"#
                        .into(),
                );
            }
            continue;
        };
        for (k, v) in &cm.0 {
            match k.as_ref() {
                "terminal" if v.get() != "false" => {
                    splice.replace(json::span(frame, v.get()), "false".into());
                }
                "fs" => match json::members(v) {
                    Some(fs) => {
                        for (fk, fv) in &fs.0 {
                            if (fk == "readTextFile" || fk == "writeTextFile")
                                && fv.get() != "false"
                            {
                                splice.replace(json::span(frame, fv.get()), "false".into());
                            }
                        }
                    }
                    None if !json::is_false_or_null(v) => splice.replace(
                        json::span(frame, v.get()),
                        r#"{"readTextFile":false,"writeTextFile":false}"#.into(),
                    ),
                    None => {}
                },
                _ => {}
            }
        }
    }
    splice
}

/// Normalizes an absolute path lexically: `.` and empty components removed. `None` for a
/// relative path, a `..` component or a NUL.
pub fn lexical_normalize(path: &str) -> Option<String> {
    if !path.starts_with('/') || path.contains('\0') {
        return None;
    }
    let mut out = String::with_capacity(path.len());
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => return None,
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// Whether `path` (normalized) is `scope` (normalized) or inside it.
pub fn inside(scope: &str, path: &str) -> bool {
    scope == "/" || path == scope || path.strip_prefix(scope).is_some_and(|r| r.starts_with('/'))
}

/// P2: `cwd` and every `additionalDirectories` entry are the scope or inside it.
pub(crate) fn p2_scope(
    scope: &str,
    resolver: Option<&dyn PathResolver>,
    params: &json::Members<'_>,
) -> Result<(), Refusal> {
    let refuse = |m: String| Err(Refusal::new(acp::ERR_CWD_OUTSIDE_SCOPE, "P2", m));
    let mut paths: Vec<(&str, String)> = Vec::new();
    match params.get("cwd").map(|v| (v, json::string(v))) {
        Some((_, Some(cwd))) => paths.push(("cwd", cwd.into_owned())),
        Some((_, None)) => return refuse("cwd must be a string".into()),
        None => return refuse("cwd is missing".into()),
    }
    if params.0.iter().filter(|(k, _)| k == "cwd").count() > 1 {
        return refuse("cwd is given twice".into());
    }
    for dirs in params.all("additionalDirectories") {
        if dirs.get() == "null" {
            continue;
        }
        let Some(list) = json::elements(dirs) else {
            return refuse("additionalDirectories must be a list of paths".into());
        };
        for d in list.0 {
            match json::string(d) {
                Some(d) => paths.push(("additionalDirectories", d.into_owned())),
                None => return refuse("additionalDirectories must be a list of paths".into()),
            }
        }
    }
    for (field, p) in paths {
        let Some(lexical) = lexical_normalize(&p) else {
            return refuse(format!(
                "{field} {p:?} must be an absolute path without `..`"
            ));
        };
        if !inside(scope, &lexical) {
            return refuse(format!(
                "{field} {p:?} is outside the agent's folder {scope}"
            ));
        }
        if let Some(r) = resolver {
            let canonical = match r.canonicalize(&lexical) {
                Ok(c) => c,
                Err(why) => return refuse(format!("{field} {p:?} cannot be resolved: {why}")),
            };
            match lexical_normalize(&canonical) {
                Some(c) if inside(scope, &c) => {}
                _ => {
                    return refuse(format!(
                        "{field} {p:?} resolves to {canonical:?}, outside the agent's folder {scope}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A client's MCP server entry, as far as the rules need it.
pub(crate) struct ServerView {
    pub name: Option<String>,
    /// `None` for stdio (no `type`, or `"stdio"`).
    pub remote: Option<(String, Option<String>)>,
}

pub(crate) fn server_view(raw: &RawValue) -> Option<ServerView> {
    let m = json::members(raw)?;
    let name = m
        .get("name")
        .and_then(json::string)
        .map(std::borrow::Cow::into_owned);
    let ty = m.get("type").map(|t| {
        json::string(t)
            .map(std::borrow::Cow::into_owned)
            .unwrap_or_default()
    });
    let remote = match ty.as_deref() {
        None | Some("stdio") => None,
        Some(t) => Some((
            t.to_owned(),
            m.get("url")
                .and_then(json::string)
                .map(std::borrow::Cow::into_owned),
        )),
    };
    Some(ServerView { name, remote })
}

/// P3: every http/sse (any non-stdio) MCP server's URL is allowed by the sandbox's network.
pub(crate) fn p3_mcp(network: &NetworkPolicy, params: &json::Members<'_>) -> Result<(), Refusal> {
    let refuse = |m: String| Err(Refusal::new(acp::ERR_MCP_NOT_ALLOWED, "P3", m));
    for servers in params.all("mcpServers") {
        if servers.get() == "null" {
            continue;
        }
        let Some(list) = json::elements(servers) else {
            return refuse("mcpServers must be a list".into());
        };
        for s in list.0 {
            let Some(view) = server_view(s) else {
                return refuse("an mcpServers entry must be an object".into());
            };
            let Some((ty, url)) = view.remote else {
                continue;
            };
            let name = view.name.unwrap_or_default();
            let Some(url) = url else {
                return refuse(format!("MCP server {name:?} ({ty}) has no url"));
            };
            // Messages name host:port only: a URL may carry credentials.
            let dest = entry_for_url(&url);
            let allowed = match (network, &dest) {
                (NetworkPolicy::Open, _) => true,
                (NetworkPolicy::None, _) => false,
                (NetworkPolicy::Filtered { allow, .. }, Some((host, port))) => {
                    allow.iter().any(|a| a.allows(host, *port))
                }
                (NetworkPolicy::Filtered { .. }, None) => false,
            };
            if !allowed {
                return refuse(match (network, dest) {
                    (_, None) => {
                        format!("MCP server {name:?}: its url is not an http(s) or ws(s) URL")
                    }
                    (NetworkPolicy::None, Some((h, p))) => {
                        format!(
                            "MCP server {name:?}: {h}:{p} is not reachable, the sandbox has no network"
                        )
                    }
                    (_, Some((h, p))) => {
                        format!("MCP server {name:?}: {h}:{p} is not in the sandbox's allow-list")
                    }
                });
            }
        }
    }
    Ok(())
}

/// ACP's agent methods (what a client may call), besides `_`-extensions (P4).
pub const AGENT_METHODS: &[&str] = &[
    "initialize",
    "authenticate",
    "logout",
    "session/new",
    "session/load",
    "session/resume",
    "session/list",
    "session/delete",
    "session/close",
    "session/fork",
    "session/set_mode",
    "session/set_config_option",
    "session/set_model",
    "session/prompt",
    "session/cancel",
];

/// Client methods an agent may call through the daemon (P4): fs/* and terminal/* are not
/// among them.
pub const AGENT_TO_CLIENT_REQUESTS: &[&str] = &["session/request_permission", "elicitation/create"];

/// Methods that name a session they open rather than one the connection owns (P4).
pub(crate) const OPENING_METHODS: &[&str] = &["session/load", "session/resume"];

/// P6: a method that belongs to the daemon.
pub(crate) fn is_daemon_method(method: &str) -> bool {
    method.starts_with(acp::DAEMON_METHOD_PREFIX)
}

/// P6: whether a (decoded) string id is in the daemon's own namespace (`handler-…`).
pub(crate) fn is_daemon_id(id: &str) -> bool {
    id.starts_with(acp::DAEMON_ID_PREFIX)
}

/// P6: edits removing every `handler.dev/*` key from every `_meta` object in `raw` (a value of
/// `frame`). `Err` when the value nests deeper than [`json::MAX_DEPTH`].
pub(crate) fn p6_strip_meta(
    frame: &[u8],
    raw: &RawValue,
    splice: &mut Splice,
    depth: usize,
) -> Result<usize, ()> {
    if depth > json::MAX_DEPTH {
        return Err(());
    }
    let mut removed = 0;
    match raw.get().as_bytes().first() {
        Some(b'{') => {
            let Some(m) = json::members(raw) else {
                return Ok(0);
            };
            for (k, v) in &m.0 {
                if k == "_meta" {
                    if let Some(meta) = json::members(v) {
                        let keep: Vec<_> = meta
                            .0
                            .iter()
                            .filter(|(mk, _)| !mk.starts_with(acp::DAEMON_META_PREFIX))
                            .collect();
                        if keep.len() != meta.0.len() {
                            removed += meta.0.len() - keep.len();
                            let body: Vec<String> = keep
                                .iter()
                                .map(|(mk, mv)| format!("{}:{}", json::quote(mk), mv.get()))
                                .collect();
                            splice.replace(
                                json::span(frame, v.get()),
                                format!("{{{}}}", body.join(",")),
                            );
                            continue;
                        }
                    }
                }
                removed += p6_strip_meta(frame, v, splice, depth + 1)?;
            }
        }
        Some(b'[') => {
            let Some(e) = json::elements(raw) else {
                return Ok(0);
            };
            for v in e.0 {
                removed += p6_strip_meta(frame, v, splice, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(removed)
}

/// P8: the names of the client's servers that clash with the defaults', and the text of the
/// `mcpServers` list with the defaults added.
pub(crate) fn p8_merge(
    defaults: &[McpServer],
    existing: Option<&RawValue>,
) -> Result<String, Refusal> {
    let mut items: Vec<String> = Vec::new();
    if let Some(list) = existing.and_then(json::elements) {
        for s in list.0 {
            if let Some(name) = server_view(s).and_then(|v| v.name) {
                if defaults.iter().any(|d| d.name() == name) {
                    let mut r = Refusal::new(
                        acp::ERR_MCP_NOT_ALLOWED,
                        "P8",
                        format!(
                            "MCP server {name:?} is provided by the agent's settings; a client's server cannot replace it"
                        ),
                    );
                    r.name = Some(name);
                    return Err(r);
                }
            }
            items.push(s.get().to_owned());
        }
    }
    for d in defaults {
        items.push(serde_json::to_string(d).unwrap_or_default());
    }
    Ok(format!("[{}]", items.join(",")))
}

/// P9: the answer to a permission request's `options`.
pub(crate) fn p9_choose(mode: UnattendedMode, options: Option<&RawValue>) -> (String, String) {
    let kinds: &[&str] = match mode {
        UnattendedMode::Approve => &["allow_once", "allow_always"],
        UnattendedMode::AskAndDeny => &["reject_once", "reject_always"],
    };
    let opts: Vec<(String, String)> = options
        .and_then(json::elements)
        .map(|e| {
            e.0.iter()
                .filter_map(|o| {
                    let m = json::members(o)?;
                    let id = m.get("optionId").and_then(json::string)?.into_owned();
                    let kind = m
                        .get("kind")
                        .and_then(json::string)
                        .map(std::borrow::Cow::into_owned)
                        .unwrap_or_default();
                    Some((id, kind))
                })
                .collect()
        })
        .unwrap_or_default();
    for k in kinds {
        if let Some((id, _)) = opts.iter().find(|(_, kind)| kind == k) {
            return (
                format!(
                    r#"{{"outcome":{{"outcome":"selected","optionId":{}}}}}"#,
                    json::quote(id)
                ),
                format!("selected {id} ({k})"),
            );
        }
    }
    (
        r#"{"outcome":{"outcome":"cancelled"}}"#.into(),
        "cancelled".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical() {
        assert_eq!(lexical_normalize("/a//b/./c/").as_deref(), Some("/a/b/c"));
        assert_eq!(lexical_normalize("/"), Some("/".into()));
        assert!(lexical_normalize("a/b").is_none());
        assert!(lexical_normalize("/a/../b").is_none());
        assert!(inside("/w/p", "/w/p"));
        assert!(inside("/w/p", "/w/p/x"));
        assert!(!inside("/w/p", "/w/px"));
        assert!(!inside("/w/p", "/w"));
        assert!(inside("/", "/etc"));
    }
}
