//! `GET|POST /v1/agents/{id}/seed` (issue 30 item 4, decision 0154): the seeds of each state
//! an agent's models give (a harness with its account or provider), as they stand; `POST`
//! copies every seed not copied yet or changed on the host since — the person's "yes" to what
//! `GET` offers. The reading and writing are `launch::seed`'s, here bounded in time.

use handler_contracts::control::SeedInfo;
use handler_contracts::harness::SlotKind;
use handler_harness::seed::Step;

use crate::daemon::fsutil;
use crate::daemon::launch::seed::{StatePlace, seed_place, state_base};
use crate::daemon::launch::sources::Sources as _;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

/// How long a request waits on the disk.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The states of agent `id` its models give (each harness with its account or provider).
fn places(app: &AppState, id: &str) -> ApiResult<Vec<StatePlace>> {
    let agent = app
        .agents
        .agent(id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    let catalog = app.catalog();
    let mut out: Vec<StatePlace> = Vec::new();
    for access in &agent.models {
        let Ok(r) = handler_contracts::validate::check_model_access(access, &*catalog) else {
            continue;
        };
        let Some(d) = catalog.descriptor(&r.harness) else {
            continue;
        };
        let who = access
            .account
            .clone()
            .or_else(|| access.provider.clone())
            .unwrap_or_default();
        let name = format!("{}@{who}", d.name);
        if out.iter().any(|p| p.name == name) {
            continue;
        }
        out.push(StatePlace {
            base: state_base(&app.config.data_dir, &agent.id, d, &who),
            name,
            descriptor: d.clone(),
        });
    }
    Ok(out)
}

/// `GET /v1/agents/{id}/seed` (`apply: false`) and `POST` (`apply: true`: every seed not
/// copied yet or changed since is copied now): each seed of each of its states, as it stands.
pub async fn seeds(app: &AppState, id: &str, apply: bool) -> ApiResult<Vec<SeedInfo>> {
    if apply && app.agents.agent(id).is_some_and(|a| !a.options.seed_state) {
        return Err(ApiError::conflict(
            "not seeded",
            format!(
                "seedState: agent {id:?} does not start from your own settings: set seedState (handler agent edit {id} --seed-state) first"
            ),
        ));
    }
    let places = places(app, id)?;
    let home = app.config.home.clone();
    let task = tokio::task::spawn_blocking(move || {
        let now = fsutil::now_rfc3339();
        let steps: &[Step] = if apply {
            &[Step::Copy, Step::Changed]
        } else {
            &[]
        };
        places
            .iter()
            .flat_map(|p| {
                if apply {
                    // Its folders may not exist yet (no session so far): made as a launch does.
                    let _ = fsutil::create_dir_private(&p.base);
                    for (slot, s) in &p.descriptor.state_slots {
                        if !s.seed.is_empty() && s.kind == SlotKind::Dir {
                            let _ = fsutil::create_dir_private(&p.base.join(slot));
                        }
                    }
                }
                seed_place(&home, p, steps, &now)
            })
            .collect::<Vec<_>>()
    });
    tokio::time::timeout(TIMEOUT, task)
        .await
        .map_err(|_| ApiError::internal("reading the seeds took longer than 60 s"))?
        .map_err(ApiError::internal)
}
