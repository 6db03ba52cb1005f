//! The Control API (the api layer): the route table, auth, OpenAPI, docs/api.md's route list
//! (`api_md`) and one thin handler module per resource — parse, call the service, answer. No
//! rule lives here.

pub mod accounts;
pub mod acp;
pub mod addons;
pub mod agents;
pub mod api_md;
pub mod app_origin;
pub mod apps;
pub mod auth;
pub mod builds;
pub mod builtin_agents;
pub mod caches;
pub mod contexts;
pub mod folders;
pub mod harnesses;
pub mod images;
pub mod knowledge;
pub mod machines;
pub mod openapi;
pub mod projects;
pub mod providers;
pub mod remote;
pub mod routes;
pub mod secrets;
pub mod session_files;
pub mod sessions;
pub mod skills;
pub mod terminals;
pub mod token;
pub mod ui;
pub mod upgrade;
