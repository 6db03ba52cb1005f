//! An agent's changes reaching its running sandboxes (A.4): after a PUT of the agent (or of a
//! binding it picked), each running filtered sandbox gets `set-allow` with the new allow-list,
//! so what the new list no longer allows is closed at once; what cannot change live (network
//! mode, confinement, mounts, the harness's settings) is named in the answer and applies to
//! the next sandbox (docs/decisions/0029-live-allow-list.md).

use std::collections::BTreeSet;

use axum::http::StatusCode;
use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::NetworkPolicy;
use serde_json::Value;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::{AppState, LiveAllow};
use crate::daemon::store::StoredAgent;

/// The answer's field naming what applies to the next sandbox only.
pub const NEXT_SANDBOX_FIELD: &str = "nextSandbox";

/// Fields of an Agent that change nothing in a running sandbox or are applied live.
const LIVE_OR_META: &[&str] = &[
    "id",
    "name",
    "description",
    "allow",
    "egress",
    "connections",
    "createdAt",
    "lastUsedAt",
    "acpUrl",
    "projectId",
    "origin",
    "context",
    NEXT_SANDBOX_FIELD,
];

fn sorted(it: impl IntoIterator<Item = AllowEntry>) -> Vec<AllowEntry> {
    it.into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The part of a launched allow-list that an agent's change leaves: the launched list without
/// the entries the agent's settings gave (its `allow`, its bindings' addons' egress), with the
/// hosts its model requires kept even when the agent also listed them.
pub fn base_entries(
    launched: &[AllowEntry],
    from_settings: &[AllowEntry],
    required: &[AllowEntry],
) -> Vec<AllowEntry> {
    sorted(
        launched
            .iter()
            .filter(|e| !from_settings.contains(e))
            .chain(required)
            .cloned(),
    )
}

/// The allow-list a running sandbox gets: its base and the agent's settings now.
pub fn live_entries(base: &[AllowEntry], from_settings: &[AllowEntry]) -> Vec<AllowEntry> {
    sorted(base.iter().chain(from_settings).cloned())
}

/// The top-level fields of an Agent's view that changed and cannot reach a running sandbox.
pub fn not_live_changes(old: &Value, new: &Value) -> Vec<String> {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return Vec::new();
    };
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    keys.into_iter()
        .filter(|k| !LIVE_OR_META.contains(&k.as_str()))
        .filter(|k| comparable(o.get(*k)) != comparable(n.get(*k)))
        .cloned()
        .collect()
}

/// A field without what the view derives from other fields (a model's `requiredHosts` follows
/// the network).
fn comparable(v: Option<&Value>) -> Option<Value> {
    let mut v = v?.clone();
    if let Some(models) = v.as_array_mut() {
        for m in models {
            if let Some(m) = m.as_object_mut() {
                m.remove("requiredHosts");
            }
        }
    }
    Some(v)
}

/// The entries an agent's settings give its allow-list: its `allow` and the egress of its
/// bindings' addons (read without resolving any secret).
pub fn from_settings(app: &AppState, agent: &StoredAgent) -> Vec<AllowEntry> {
    sorted(
        agent
            .options
            .allow
            .iter()
            .cloned()
            .chain(crate::daemon::store::addons::egress_of(&app.config, agent)),
    )
}

/// What sandbox `prepared` of `agent` starts with as its live allow-list: its model's and
/// harness's hosts fixed, the agent's settings on top (None unless its network is filtered).
pub fn allow_of(
    app: &AppState,
    agent: &StoredAgent,
    prepared: &crate::daemon::launch::prepare::Prepared,
) -> Option<LiveAllow> {
    at_launch(app, agent, &prepared.spec.network, &prepared.model_hosts)
}

/// What a connection being launched records (None unless its network is filtered).
pub fn at_launch(
    app: &AppState,
    agent: &StoredAgent,
    network: &NetworkPolicy,
    required: &[AllowEntry],
) -> Option<LiveAllow> {
    let NetworkPolicy::Filtered { allow, .. } = network else {
        return None;
    };
    Some(LiveAllow {
        base: base_entries(allow, &from_settings(app, agent), required),
        now: sorted(allow.iter().cloned()),
    })
}

/// Sends `set-allow` to each running filtered sandbox of `agent` whose list changes. A refusal
/// is 502 naming the sandbox (the agent is stored; the next sandbox gets the new list).
pub async fn apply_allow(app: &AppState, agent: &StoredAgent) -> ApiResult<()> {
    let settings = from_settings(app, agent);
    let todo: Vec<(String, Vec<AllowEntry>)> = {
        let m = app
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        m.get(&agent.id)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let l = c.allow.as_ref()?;
                let new = live_entries(&l.base, &settings);
                (new != l.now).then(|| (c.info.sandbox.clone(), new))
            })
            .collect()
    };
    for (sandbox, entries) in todo {
        if let Err(err) = app.launcher.set_allow(&sandbox, &entries).await {
            tracing::warn!(agent = %agent.id, %sandbox, error = %err, "set-allow failed");
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "set-allow failed",
                format!("sandbox {sandbox}: {err}"),
            ));
        }
        tracing::info!(agent = %agent.id, %sandbox, entries = entries.len(), "allow-list switched");
        let mut m = app
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = m
            .get_mut(&agent.id)
            .into_iter()
            .flatten()
            .find(|c| c.info.sandbox == sandbox)
            && let Some(l) = c.allow.as_mut()
        {
            l.now = entries;
        }
    }
    Ok(())
}

/// "Allow always" for a host a session's sandbox was denied: the entry saved in the agent's own
/// allow-list (as a PUT of the agent would), then every running sandbox of the agent switched
/// ([`apply_allow`]).
pub async fn allow_always(app: &AppState, agent_id: &str, entry: &AllowEntry) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    let a = app.agents.update::<_, ApiError>(|agents, _| {
        let a = agents
            .iter_mut()
            .find(|x| x.id == agent_id)
            .ok_or_else(|| ApiError::not_found(format!("agent {agent_id:?}")))?;
        if !a.options.allow.contains(entry) {
            a.options.allow.push(entry.clone());
        }
        Ok(a.clone())
    })?;
    tracing::info!(agent = %agent_id, entry = %entry, "allow-list entry saved");
    apply_allow(app, &a).await
}

/// "Allow once": the entry added to one running sandbox only, unsaved; it stays in that
/// sandbox's base, so a later change of the agent's list keeps it there.
pub async fn allow_once(
    app: &AppState,
    agent_id: &str,
    sandbox: &str,
    entry: &AllowEntry,
) -> ApiResult<()> {
    let entries = {
        let mut m = app
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let l = m
            .get_mut(agent_id)
            .into_iter()
            .flatten()
            .find(|c| c.info.sandbox == sandbox)
            .and_then(|c| c.allow.as_mut())
            .ok_or_else(|| ApiError::not_found(format!("filtered sandbox {sandbox:?}")))?;
        l.base = sorted(l.base.iter().chain([entry]).cloned());
        sorted(l.now.iter().chain([entry]).cloned())
    };
    if let Err(err) = app.launcher.set_allow(sandbox, &entries).await {
        tracing::warn!(agent = %agent_id, %sandbox, error = %err, "set-allow failed");
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "set-allow failed",
            format!("sandbox {sandbox}: {err}"),
        ));
    }
    if let Some(l) = app
        .connections
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_mut(agent_id)
        .into_iter()
        .flatten()
        .find(|c| c.info.sandbox == sandbox)
        .and_then(|c| c.allow.as_mut())
    {
        l.now = entries;
    }
    tracing::info!(agent = %agent_id, %sandbox, entry = %entry, "allowed once in this sandbox");
    Ok(())
}

/// Marks an answer with what applies to the next sandbox only, when the agent has running
/// sandboxes and such fields changed.
pub fn mark_next_sandbox(answer: &mut Value, old: &Value, running: bool) {
    let changes = not_live_changes(old, answer);
    if running
        && !changes.is_empty()
        && let Some(o) = answer.as_object_mut()
    {
        o.insert(NEXT_SANDBOX_FIELD.to_string(), Value::from(changes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn e(s: &str) -> AllowEntry {
        AllowEntry::parse(s).unwrap()
    }

    #[test]
    fn the_base_keeps_the_models_hosts_and_drops_the_settings() {
        let launched = [
            e("api.fake.test:443"),
            e("crates.io:443"),
            e("pypi.org:443"),
        ];
        let settings = [e("crates.io:443"), e("api.fake.test:443")];
        let required = [e("api.fake.test:443")];
        let base = base_entries(&launched, &settings, &required);
        assert_eq!(base, vec![e("api.fake.test:443"), e("pypi.org:443")]);
        assert_eq!(
            live_entries(&base, &[e("github.com:443")]),
            vec![
                e("api.fake.test:443"),
                e("github.com:443"),
                e("pypi.org:443")
            ]
        );
        assert_eq!(live_entries(&base, &[]), base);
    }

    #[test]
    fn only_what_cannot_change_live_is_named() {
        let old = json!({"id": "a", "allow": ["x:443"], "network": "filtered", "scope": "/a", "name": "n"});
        let new = json!({"id": "a", "allow": ["y:443"], "network": "open", "scope": "/b", "name": "m", "knowledge": []});
        assert_eq!(
            not_live_changes(&old, &new),
            vec!["knowledge", "network", "scope"]
        );
        let mut answer = new.clone();
        mark_next_sandbox(&mut answer, &old, false);
        assert!(answer.get(NEXT_SANDBOX_FIELD).is_none());
        mark_next_sandbox(&mut answer, &old, true);
        assert_eq!(
            answer[NEXT_SANDBOX_FIELD],
            json!(["knowledge", "network", "scope"])
        );
        let mut same = old.clone();
        mark_next_sandbox(&mut same, &old, true);
        assert!(same.get(NEXT_SANDBOX_FIELD).is_none());
    }
}
