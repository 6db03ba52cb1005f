//! The Control API's routes, one table that builds both the router and /openapi.json, so no
//! route goes undescribed.

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use handler_contracts::control::{
    AdHocAgentRequest, AddonInfo, Agent, AgentRequest, BindingInfo, BindingRequest, ContextInfo,
    HarnessInfo, Project,
};
use schemars::{JsonSchema, Schema, SchemaGenerator};

use super::{
    accounts, acp, addons, agents, contexts, folders, harnesses, projects, providers, secrets,
};
use super::{auth, openapi};
use crate::daemon::problem::ApiError;
use crate::daemon::state::AppState;
use handler_contracts::control::{
    AccountInfo, AccountRequest, AgentPatch, ContextRequest, DuplicateRequest, EgressRecord,
    LoginFileRequest, ProjectPatch, ProjectRequest, ProviderInfo, ProviderRequest,
    ProviderTemplate, SecretInfo, SecretRequest, TokenInput, WorkFolders,
};

/// A schema of a body.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn s<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One route: how it is served and how /openapi.json describes it.
pub struct Route {
    pub method: &'static str,
    /// The router's path (`{*path}` for a rest-of-path parameter).
    pub path: &'static str,
    pub summary: &'static str,
    pub request: Option<SchemaFn>,
    /// Success status and body.
    pub response: (u16, Option<SchemaFn>),
    /// Query parameters (name, description).
    pub query: &'static [(&'static str, &'static str)],
    /// A WebSocket upgrade: the only kind of route that may carry the token as the
    /// `bearer.<token>` subprotocol (C.1) instead of `Authorization: Bearer`.
    pub upgrade: bool,
    pub handler: MethodRouter<AppState>,
}

fn r(
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

const MODEL_QUERY: &[(&str, &str)] = &[
    ("account", "run with this account (a ModelAccess, C.1)"),
    ("provider", "run with this provider"),
    ("harness", "the harness (required with a provider)"),
    ("model", "the model"),
];

/// Every route of the Control API.
pub fn table() -> Vec<Route> {
    vec![
        r(
            "GET",
            "/openapi.json",
            "This description",
            None,
            (200, None),
            get(openapi::serve),
        ),
        r(
            "GET",
            "/v1/harnesses",
            "The harnesses (D.1 HarnessInfo)",
            None,
            (200, Some(s::<Vec<HarnessInfo>>)),
            get(harnesses::list),
        ),
        r(
            "GET",
            "/v1/harnesses/{name}",
            "One harness",
            None,
            (200, Some(s::<HarnessInfo>)),
            get(harnesses::get),
        ),
        r(
            "GET",
            "/v1/accounts",
            "The accounts (D.9)",
            None,
            (200, Some(s::<Vec<AccountInfo>>)),
            get(accounts::list),
        ),
        r(
            "POST",
            "/v1/accounts",
            "Create an account",
            Some(s::<AccountRequest>),
            (201, Some(s::<AccountInfo>)),
            post(accounts::create),
        ),
        r(
            "GET",
            "/v1/accounts/{name}",
            "One account",
            None,
            (200, Some(s::<AccountInfo>)),
            get(accounts::get),
        ),
        r(
            "PUT",
            "/v1/accounts/{name}",
            "Replace an account (its token kept unless given)",
            Some(s::<AccountRequest>),
            (200, Some(s::<AccountInfo>)),
            put(accounts::replace),
        ),
        r(
            "DELETE",
            "/v1/accounts/{name}",
            "Remove an account, its token and credential file",
            None,
            (204, None),
            delete(accounts::delete),
        ),
        r(
            "PUT",
            "/v1/accounts/{name}/token",
            "Set a token login's token: pasted (to the secret store) or a reference",
            Some(s::<TokenInput>),
            (200, Some(s::<AccountInfo>)),
            put(accounts::set_token),
        ),
        r(
            "PUT",
            "/v1/accounts/{name}/login",
            "Keep a file login's credential file (0600)",
            Some(s::<LoginFileRequest>),
            (200, Some(s::<AccountInfo>)),
            put(accounts::set_login_file),
        ),
        r(
            "GET",
            "/v1/provider-templates",
            "Provider templates (D.12)",
            None,
            (200, Some(s::<Vec<ProviderTemplate>>)),
            get(providers::list_templates),
        ),
        r(
            "GET",
            "/v1/providers",
            "The providers (D.12)",
            None,
            (200, Some(s::<Vec<ProviderInfo>>)),
            get(providers::list),
        ),
        r(
            "POST",
            "/v1/providers",
            "Create a provider (its key to the secret store)",
            Some(s::<ProviderRequest>),
            (201, Some(s::<ProviderInfo>)),
            post(providers::create),
        ),
        r(
            "GET",
            "/v1/providers/{name}",
            "One provider",
            None,
            (200, Some(s::<ProviderInfo>)),
            get(providers::get),
        ),
        r(
            "PUT",
            "/v1/providers/{name}",
            "Replace a provider (a hand-written key reference kept unless a key is given)",
            Some(s::<ProviderRequest>),
            (200, Some(s::<ProviderInfo>)),
            put(providers::replace),
        ),
        r(
            "DELETE",
            "/v1/providers/{name}",
            "Remove a provider and its stored key",
            None,
            (204, None),
            delete(providers::delete),
        ),
        r(
            "GET",
            "/v1/secrets",
            "The secret store's paths and descriptions (D.14), never values",
            None,
            (200, Some(s::<Vec<SecretInfo>>)),
            get(secrets::list),
        ),
        r(
            "GET",
            "/v1/secrets/{*path}",
            "One secret's description, never its value",
            None,
            (200, Some(s::<SecretInfo>)),
            get(secrets::get),
        ),
        r(
            "PUT",
            "/v1/secrets/{*path}",
            "Set a secret (not under accounts/)",
            Some(s::<SecretRequest>),
            (200, Some(s::<SecretInfo>)),
            put(secrets::put),
        ),
        r(
            "DELETE",
            "/v1/secrets/{*path}",
            "Remove a secret",
            None,
            (204, None),
            delete(secrets::delete),
        ),
        r(
            "GET",
            "/v1/addons",
            "The addons, built-in and the user's (G.1)",
            None,
            (200, Some(s::<Vec<AddonInfo>>)),
            get(addons::list_addons),
        ),
        r(
            "GET",
            "/v1/addons/{name}",
            "One addon",
            None,
            (200, Some(s::<AddonInfo>)),
            get(addons::get_addon),
        ),
        r(
            "GET",
            "/v1/bindings",
            "The bindings (G.2): secret slot names only, never references or values",
            None,
            (200, Some(s::<Vec<BindingInfo>>)),
            get(addons::list_bindings),
        ),
        r(
            "POST",
            "/v1/bindings",
            "Create a binding (D.15): its secret values to the secret store",
            Some(s::<BindingRequest>),
            (201, Some(s::<BindingInfo>)),
            post(addons::create_binding),
        ),
        r(
            "GET",
            "/v1/bindings/{name}",
            "One binding",
            None,
            (200, Some(s::<BindingInfo>)),
            get(addons::get_binding),
        ),
        r(
            "PUT",
            "/v1/bindings/{name}",
            "Replace (and rename) a binding; a secret slot left out keeps its own",
            Some(s::<BindingRequest>),
            (200, Some(s::<BindingInfo>)),
            put(addons::replace_binding),
        ),
        r(
            "DELETE",
            "/v1/bindings/{name}",
            "Remove a binding no agent picked, and its stored secrets",
            None,
            (204, None),
            delete(addons::delete_binding),
        ),
        r(
            "GET",
            "/v1/folders",
            "The work folders (D.13)",
            None,
            (200, Some(s::<WorkFolders>)),
            get(folders::get),
        ),
        r(
            "PUT",
            "/v1/folders",
            "Replace the work folders",
            Some(s::<WorkFolders>),
            (200, Some(s::<WorkFolders>)),
            put(folders::put),
        ),
        r(
            "GET",
            "/v1/contexts",
            "The project contexts (D.19)",
            None,
            (200, Some(s::<Vec<ContextInfo>>)),
            get(contexts::list),
        ),
        r(
            "POST",
            "/v1/contexts",
            "Create a context",
            Some(s::<ContextRequest>),
            (201, Some(s::<ContextInfo>)),
            post(contexts::create),
        ),
        r(
            "GET",
            "/v1/contexts/{name}",
            "One context",
            None,
            (200, Some(s::<ContextInfo>)),
            get(contexts::get),
        ),
        r(
            "PUT",
            "/v1/contexts/{name}",
            "Change a context's colour",
            Some(s::<ContextRequest>),
            (200, Some(s::<ContextInfo>)),
            put(contexts::replace),
        ),
        r(
            "DELETE",
            "/v1/contexts/{name}",
            "Remove a context no project is in",
            None,
            (204, None),
            delete(contexts::delete),
        ),
        Route {
            query: &[("project", "only this project's agents")],
            ..r(
                "GET",
                "/v1/agents",
                "Every agent, ad hoc and of projects (D.1)",
                None,
                (200, Some(s::<Vec<Agent>>)),
                get(agents::list),
            )
        },
        r(
            "POST",
            "/v1/agents",
            "Create an ad-hoc agent (409 risks not confirmed unless confirmRisks)",
            Some(s::<AdHocAgentRequest>),
            (201, Some(s::<Agent>)),
            post(agents::create),
        ),
        r(
            "GET",
            "/v1/agents/{id}",
            "One agent",
            None,
            (200, Some(s::<Agent>)),
            get(agents::get),
        ),
        r(
            "PUT",
            "/v1/agents/{id}",
            "Replace an agent: an AdHocAgentRequest, or an AgentRequest for a project's",
            Some(s::<AdHocAgentRequest>),
            (200, Some(s::<Agent>)),
            put(agents::replace),
        ),
        r(
            "PATCH",
            "/v1/agents/{id}",
            "Switch its egress live (A.4), rename it",
            Some(s::<AgentPatch>),
            (200, Some(s::<Agent>)),
            patch(agents::patch),
        ),
        r(
            "DELETE",
            "/v1/agents/{id}",
            "Remove an agent (its sandboxes stop)",
            None,
            (204, None),
            delete(agents::delete),
        ),
        r(
            "POST",
            "/v1/agents/{id}/duplicate",
            "A new agent with its settings (D.8)",
            Some(s::<DuplicateRequest>),
            (201, Some(s::<Agent>)),
            post(agents::duplicate),
        ),
        r(
            "GET",
            "/v1/agents/{id}/egress-events",
            "Its sandboxes' egress events (A.3), oldest first",
            None,
            (200, Some(s::<Vec<EgressRecord>>)),
            get(acp::egress_events),
        ),
        Route {
            query: MODEL_QUERY,
            upgrade: true,
            ..r(
                "GET",
                "/v1/agents/{id}/acp",
                "ACP over WebSocket (C.1): subprotocols acp.v1 and bearer.<token>",
                None,
                (101, None),
                get(acp::connect),
            )
        },
        r(
            "GET",
            "/v1/projects",
            "The projects (D.8)",
            None,
            (200, Some(s::<Vec<Project>>)),
            get(projects::list),
        ),
        r(
            "POST",
            "/v1/projects",
            "Create a project and its first agent (a preset)",
            Some(s::<ProjectRequest>),
            (201, Some(s::<Project>)),
            post(projects::create),
        ),
        r(
            "GET",
            "/v1/projects/{id}",
            "One project",
            None,
            (200, Some(s::<Project>)),
            get(projects::get),
        ),
        r(
            "PATCH",
            "/v1/projects/{id}",
            "Change a project (a new context is checked against its agents)",
            Some(s::<ProjectPatch>),
            (200, Some(s::<Project>)),
            patch(projects::patch),
        ),
        r(
            "DELETE",
            "/v1/projects/{id}",
            "Remove a project and its agents",
            None,
            (204, None),
            delete(projects::delete),
        ),
        r(
            "POST",
            "/v1/projects/{id}/agents",
            "Add an agent to a project",
            Some(s::<AgentRequest>),
            (201, Some(s::<Agent>)),
            post(projects::create_agent),
        ),
    ]
}

/// The router: every route of the table behind the Host and Origin checks and the token check
/// (the subprotocol token only on the routes marked `upgrade`), problems for unknown routes and
/// methods.
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
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::check_host_and_origin,
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
