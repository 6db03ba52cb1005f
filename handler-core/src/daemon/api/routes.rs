//! The Control API's routes, one table that builds both the router and /openapi.json, so no
//! route goes undescribed.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::MethodRouter;
use schemars::{JsonSchema, Schema, SchemaGenerator};

use super::caches;
use super::machines;
use super::remote;
use super::terminals;
use super::token;
use super::ui;
use super::{accounts, addons, agents, contexts, folders, harnesses, projects, providers, secrets};
use super::{app_origin, apps};
use super::{auth, openapi};
use super::{builds, images};
use super::{builtin_agents, knowledge, skills};
use super::{session_files, sessions};
use crate::daemon::problem::ApiError;
use crate::daemon::state::AppState;

/// A schema of a body.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

pub(super) fn s<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One route: how it is served and how /openapi.json describes it.
pub struct Route {
    /// The HTTP method (`GET`, `POST`…).
    pub method: &'static str,
    /// The router's path (`{*path}` for a rest-of-path parameter).
    pub path: &'static str,
    /// One line for /openapi.json.
    pub summary: &'static str,
    /// The request body's schema, if it takes one.
    pub request: Option<SchemaFn>,
    /// Success status and body.
    pub response: (u16, Option<SchemaFn>),
    /// Query parameters (name, description).
    pub query: &'static [(&'static str, &'static str)],
    /// A WebSocket upgrade: the only kind of route that may carry the token as the
    /// `bearer.<token>` subprotocol (C.1) instead of `Authorization: Bearer`.
    pub upgrade: bool,
    /// What serves it.
    pub handler: MethodRouter<AppState>,
}

pub(super) fn r(
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    request: Option<SchemaFn>,
    response: (u16, Option<SchemaFn>),
    handler: MethodRouter<AppState>,
) -> Route {
    Route {
        method,
        path,
        summary,
        request,
        response,
        query: &[],
        upgrade: false,
        handler,
    }
}

pub(super) const MODEL_QUERY: &[(&str, &str)] = &[
    ("account", "run with this account (a ModelAccess, C.1)"),
    ("provider", "run with this provider"),
    ("harness", "the harness (required with a provider)"),
    ("model", "the model"),
];

/// Every route of the Control API.
pub fn table() -> Vec<Route> {
    [
        openapi::routes(),
        harnesses::routes(),
        accounts::routes(),
        providers::routes(),
        secrets::routes(),
        addons::routes(),
        folders::routes(),
        contexts::routes(),
        agents::routes(),
        projects::routes(),
        builds::routes(),
        images::routes(),
        sessions::routes(),
        session_files::routes(),
        terminals::routes(),
        skills::routes(),
        knowledge::routes(),
        builtin_agents::routes(),
        caches::routes(),
        machines::routes(),
        apps::routes(),
        remote::routes(),
        token::routes(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The router: every route of the table behind the Host and Origin checks and the token check
/// (the subprotocol token only on the routes marked `upgrade`), problems for unknown routes and
/// methods; the web UI's files (`ui`) behind the Host and Origin checks only; a mini app's
/// origin (`<name>.localhost:<port>`) dispatched before all of them, to the app alone.
pub fn router(state: AppState) -> Router {
    let mut by_path: Vec<(&'static str, MethodRouter<AppState>)> = Vec::new();
    let mut upgrades = std::collections::HashSet::new();
    for route in table() {
        if route.upgrade {
            upgrades.insert((route.method, route.path));
        }
        match by_path.iter_mut().find(|(p, _)| *p == route.path) {
            Some((_, mr)) => *mr = std::mem::take(mr).merge(route.handler),
            None => by_path.push((route.path, route.handler)),
        }
    }
    let mut router = Router::new();
    for (path, mr) in by_path {
        router = router.route(path, mr.fallback(method_not_allowed));
    }
    router
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), std::sync::Arc::new(upgrades)),
            auth::require_token,
        ))
        .merge(ui::router())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::check_host_and_origin,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            app_origin::dispatch,
        ))
        .layer(axum::middleware::from_fn(log_request))
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route (GET /openapi.json lists them)")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed",
        "this route does not take that method (GET /openapi.json lists them)",
    )
}

async fn log_request(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let method = req.method().clone();
    // The path only: a query may name a model, never a secret, but keep logs short.
    let path = req.uri().path().to_string();
    let started = std::time::Instant::now();
    let res = next.run(req).await;
    tracing::info!(%method, %path, status = res.status().as_u16(), ms = started.elapsed().as_millis() as u64, "request");
    res
}
