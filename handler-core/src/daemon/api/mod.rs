//! The Control API (the api layer): the route table, auth, OpenAPI and one thin handler module
//! per resource — parse, call the service, answer. No rule lives here.

pub mod auth;
pub mod openapi;
pub mod routes;
