//! Preparing a launch (E, B.3, A.1, C.4): `gather` reads the world, [`resolve`] decides —
//! one of an agent's models checked again, resolved, its secrets made phantoms and injections,
//! rendered and composed into the SandboxSpec with the policy pipeline's configuration, the
//! git guard and the session's slot planned — and the start path makes what the plan names
//! and starts it.

use std::path::Path;

use handler_contracts::control::ModelAccess;

use super::agent::Place;
use super::gather::{OsRandom, gather, problem};
use super::resolve::{ResolveInput, resolve};
use crate::daemon::problem::ApiResult;
use crate::daemon::state::AppState;
use crate::daemon::store::StoredAgent;

pub(crate) use super::resolve::{GuardPlan, Prepared, Purpose};

/// Resolves `access` for `agent`'s sandbox at `place` (a session's or a connection's) for
/// `purpose` and builds its whole plan: the SandboxSpec with every mount it gets, the pipeline's
/// configuration, the git guard and the session slot to make (400 model access unusable, 409
/// not for this project's context or refused by the git guard, 400 for what a start checks
/// again). The catalog is read once. A session of a folderless agent works in its folder's
/// `work/` (F.2).
pub(crate) fn prepare(
    app: &AppState,
    agent: &StoredAgent,
    access: &ModelAccess,
    place: &Place,
    purpose: Purpose,
) -> ApiResult<Prepared> {
    let session = place.session.then_some(place.folder.as_path());
    let g = gather(app, agent, access, session, place.shared_state.as_deref())?;
    let data_dir = app.config.data_dir.display().to_string();
    let place_dir = place.folder.display().to_string();
    let skills_dir = app.config.skills_dir.display().to_string();
    let input = ResolveInput {
        catalog: &*g.catalog,
        access,
        context: g.context.as_deref(),
        agent: &g.agent,
        conn: &place.id,
        place_dir: &place_dir,
        purpose,
        guard: g.guard,
        skills_dir: &skills_dir,
        data_dir: &data_dir,
        max_message_bytes: app.config.max_message_bytes,
        scope: g.scope,
        knowledge: g.knowledge,
        addons: g.addons,
        skills: g.skills,
        caches: g.caches,
        credential: g.credential,
        display: g.display,
        shared_state: place.shared_state.as_deref(),
    };
    resolve(input, &mut OsRandom).map_err(problem)
}

/// P2's path resolution: the host's view, symbolic links followed. (The error is text because
/// `handler_policy::PathResolver` takes it so: it goes into a JSON-RPC error's message.)
pub(crate) fn canonicalize(path: &str) -> Result<String, String> {
    std::fs::canonicalize(Path::new(path))
        .map(|p| p.display().to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use handler_contracts::SandboxSpec;
    use handler_policy::PolicyConfig;

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
            harness: "fake".into(),
            harness_image: "localhost/handler-fake:latest".into(),
            model_hosts: Vec::new(),
            slot: None,
            guard: GuardPlan::None,
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
