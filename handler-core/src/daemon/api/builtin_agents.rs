//! The built-in agents' route (D.18): parse, call the service, answer.

use axum::Json;
use axum::extract::State;
use axum::routing;
use handler_contracts::control::BuiltinAgent;

use super::routes::{Route, r, s};
use crate::daemon::problem::ApiResult;
use crate::daemon::services::builtin_agents;
use crate::daemon::state::AppState;

/// GET /v1/builtin-agents
pub async fn list(State(app): State<AppState>) -> ApiResult<Json<Vec<BuiltinAgent>>> {
    Ok(Json(builtin_agents::list(&app).await?))
}

/// The built-in agents' route.
pub(super) fn routes() -> Vec<Route> {
    vec![r(
        "GET",
        "/v1/builtin-agents",
        "The built-in agents, their defaults and the agent set up from each (D.18)",
        None,
        (200, Some(s::<Vec<BuiltinAgent>>)),
        routing::get(list),
    )]
}
