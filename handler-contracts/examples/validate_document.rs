//! Parses and validates three provider documents — a valid one, one whose TOML names a field
//! wrongly, one with no model — and prints, for each refusal, the field's path, its line and
//! column when the reader knows them, and the reason.
//!
//! `cargo run -p handler-contracts --example validate_document`
#![allow(
    unreachable_pub,
    reason = "its items are also a module of the crate's test binary"
)]

use handler_contracts::Provider;
use handler_contracts::parse::from_toml;
use handler_contracts::validate::validate_provider;

/// (name, document).
const DOCUMENTS: &[(&str, &str)] = &[
    (
        "ollama.toml",
        r#"apiVersion = "handler.provider/v1"
apiKey = { env = "OLLAMA_KEY" }
[endpoints]
openai-chat = "http://192.168.1.20:11434/v1"
[[models]]
id = "gpt-oss:20b"
"#,
    ),
    (
        "typo.toml",
        r#"apiVersion = "handler.provider/v1"
[endpoints]
openai-chat = "http://192.168.1.20:11434/v1"
[[models]]
id = "gpt-oss:20b"
contextWindw = 131072
"#,
    ),
    (
        "no-model.toml",
        r#"apiVersion = "handler.provider/v1"
models = []
[endpoints]
openai-chat = "http://192.168.1.20:11434/v1"
"#,
    ),
];

/// What each document gets: `NAME: valid` or `NAME: refused at PATH[ (line L, column C)]: WHY`.
pub fn run() -> Vec<String> {
    DOCUMENTS
        .iter()
        .map(|(name, text)| match from_toml::<Provider>(name, text) {
            Err(e) => {
                let (line, column) = e.position();
                format!(
                    "{name}: refused at {} (line {line}, column {column}): {}",
                    e.path(),
                    e.message()
                )
            }
            Ok(p) => match validate_provider(&p) {
                Ok(()) => format!("{name}: valid"),
                Err(e) => format!("{name}: refused at {}: {}", e.path, e.message),
            },
        })
        .collect()
}

fn main() {
    for line in run() {
        println!("{line}");
    }
}
