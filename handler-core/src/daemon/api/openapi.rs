//! /openapi.json: the Control API described from the route table and the contract types'
//! JSON Schemas (schemars), errors as RFC 9457 problems.

use axum::Json;
use handler_contracts::control::Problem;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::routes::{Route, r, table};
use axum::routing;

/// The document's path form of a router path: `{*path}` becomes `{path}`.
pub fn doc_path(router_path: &str) -> String {
    router_path.replace("{*", "{")
}

fn path_params(path: &str) -> Vec<String> {
    path.split('/')
        .filter_map(|seg| {
            seg.strip_prefix('{')?
                .strip_suffix('}')
                .map(|p| p.trim_start_matches('*').to_string())
        })
        .collect()
}

/// The whole description.
pub fn document() -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let problem_ref = generator.subschema_for::<Problem>();
    let problem_ref = serde_json::to_value(problem_ref).unwrap_or_default();
    let mut paths: Map<String, Value> = Map::new();
    for route in table() {
        let mut op = Map::new();
        op.insert("summary".into(), json!(route.summary));
        op.insert(
            "operationId".into(),
            json!(format!("{} {}", route.method, doc_path(route.path))),
        );
        let mut params: Vec<Value> = path_params(route.path)
            .into_iter()
            .map(|p| json!({"name": p, "in": "path", "required": true, "schema": {"type": "string", "minLength": 1}}))
            .collect();
        params.extend(route.query.iter().map(|(n, d)| json!({"name": n, "in": "query", "required": false, "description": d, "schema": {"type": "string"}})));
        if !params.is_empty() {
            op.insert("parameters".into(), Value::Array(params));
        }
        if let Some(req) = route.request {
            let schema = serde_json::to_value(req(&mut generator)).unwrap_or_default();
            op.insert(
                "requestBody".into(),
                json!({"required": true, "content": {"application/json": {"schema": schema}}}),
            );
        }
        let (status, body) = route.response;
        let mut ok = json!({"description": "success"});
        if let Some(b) = body {
            ok["content"] = json!({"application/json": {"schema": serde_json::to_value(b(&mut generator)).unwrap_or_default()}});
        } else if route.path == "/openapi.json" {
            ok["content"] = json!({"application/json": {"schema": {"type": "object"}}});
        }
        let mut responses = Map::new();
        responses.insert(status.to_string(), ok);
        responses.insert(
            "default".into(),
            json!({"description": "an error (RFC 9457)", "content": {"application/problem+json": {"schema": problem_ref.clone()}}}),
        );
        op.insert("responses".into(), Value::Object(responses));
        let entry = paths
            .entry(doc_path(route.path))
            .or_insert_with(|| json!({}));
        entry[route.method.to_lowercase()] = Value::Object(op);
    }
    let schemas = generator.take_definitions(true);
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Handler Control API (handler.control/v1)",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "handlerd's HTTP/JSON API on 127.0.0.1 (D). Every route needs Authorization: Bearer <token> (the token is in $HANDLER_CONFIG_DIR/token); only the ACP WebSocket (a GET upgrade) may carry it as the subprotocol bearer.<token> instead. A Host other than 127.0.0.1:<port>, localhost:<port> or [::1]:<port> is 421, an Origin outside the allow-list 403, before the token (401). Errors are application/problem+json (RFC 9457)."
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        }
    })
}

/// GET /openapi.json
pub async fn serve() -> Json<Value> {
    Json(document())
}

/// The openapi routes, in the order /openapi.json lists them.
pub(super) fn routes() -> Vec<Route> {
    vec![r(
        "GET",
        "/openapi.json",
        "This description",
        None,
        (200, None),
        routing::get(serve),
    )]
}
