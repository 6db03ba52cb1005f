//! What every resource verb shares: the client of handlerd, human tables or the API's JSON, the
//! no-echo reading of secret values, confirmations, and the exit codes.

use std::io::IsTerminal;

use anyhow::Context;
use comfy_table::{ContentArrangement, Table, presets};
use handler_core::client::Discovery;
use handler_core::client::api::{Api, ApiError};
use serde_json::Value;

/// The exit codes of `handler` (docs/cli.md).
pub mod exit {
    /// Done.
    pub const OK: i32 = 0;
    /// Failed: the one line on stderr says what and how to fix it.
    pub const FAILED: i32 = 1;
    /// Nothing done: the command line is wrong, or a confirmation it needs is missing.
    pub const USAGE: i32 = 2;
    /// handlerd cannot be reached (not started, or another port).
    pub const UNREACHABLE: i32 = 3;
}

/// A refusal before anything was done (exit 2): a missing confirmation or a wrong argument.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The exit code an error ends `handler` with.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    use handler_core::client::ClientError;
    for cause in e.chain() {
        if cause.downcast_ref::<Refused>().is_some() {
            return exit::USAGE;
        }
        if matches!(
            cause.downcast_ref::<ApiError>(),
            Some(ApiError::Unreachable { .. })
        ) || matches!(
            cause.downcast_ref::<ClientError>(),
            Some(ClientError::Token { .. })
        ) || cause
            .downcast_ref::<ClientError>()
            .is_some_and(|c| matches!(c, ClientError::Transport(t) if t.is_unreachable()))
        {
            return exit::UNREACHABLE;
        }
    }
    exit::FAILED
}

/// The error and its causes on one line (`what: why`), a cause left out when the message
/// before it already says it.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line.replace('\n', " ")
}

/// One resource verb's context: the client and whether to answer JSON.
pub struct Ctx {
    /// The Control API client.
    pub api: Api,
    /// `--json`: print the API's objects verbatim.
    pub json: bool,
}

impl Ctx {
    /// A context for the handlerd the environment names.
    pub fn new(json: bool) -> anyhow::Result<Ctx> {
        let discovery = Discovery::from_process_env()?;
        Ok(Ctx {
            api: Api::new(discovery),
            json,
        })
    }

    /// Prints `v` as JSON with `--json`, else runs `human`.
    pub fn show(&self, v: &Value, human: impl FnOnce(&Value)) {
        if self.json {
            print_json(v);
        } else {
            human(v);
        }
    }

    /// Says `line` on stderr unless `--json` (whose stdout is the API's object).
    pub fn done(&self, v: &Value, line: &str) {
        if self.json {
            print_json(v);
        } else {
            println!("{line}");
        }
    }
}

/// Pretty JSON on stdout.
pub fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// A table without borders, its columns aligned, never wrapped.
pub fn table(headers: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(headers.iter().map(|h| h.to_uppercase()));
    for r in rows {
        t.add_row(r);
    }
    let text = t.to_string();
    text.lines()
        .map(|l| l.trim_end().strip_prefix(' ').unwrap_or(l.trim_end()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Prints the table of the array `v` (or "none" when empty).
pub fn print_table(v: &Value, headers: &[&str], row: impl Fn(&Value) -> Vec<String>, none: &str) {
    let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
    if items.is_empty() {
        println!("{none}");
    } else {
        println!("{}", table(headers, items.iter().map(row)));
    }
}

/// `v[key]` as display text: a string, a list joined by commas, a number, or empty.
pub fn text(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(","),
        Value::Null => String::new(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_string(),
        other => other.to_string(),
    }
}

/// Prints `name: value` lines for the keys that have a value.
pub fn print_fields(v: &Value, keys: &[&str]) {
    for k in keys {
        let t = text(v, k);
        if !t.is_empty() {
            println!("{k}: {t}");
        }
    }
}

/// Reads a secret value: stdin's first line when it is not a terminal, else a prompt that does
/// not echo. Never from the command line.
pub fn read_secret(prompt: &str) -> anyhow::Result<String> {
    let value = if std::io::stdin().is_terminal() {
        rpassword::prompt_password(prompt).context("reading the value at the prompt")?
    } else {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the value from stdin")?;
        line
    };
    let value = value.trim_end_matches(['\n', '\r']).to_string();
    if value.is_empty() {
        return Err(Refused(
            "the value is empty: give it on stdin (`… < file`) or at the prompt".into(),
        )
        .into());
    }
    Ok(value)
}

/// Asks a yes/no question on the terminal (default no); without a terminal, no.
pub fn confirm(question: &str) -> bool {
    if !std::io::stdin().is_terminal() {
        return false;
    }
    eprint!("{question} [y/N] ");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok() && line.trim().eq_ignore_ascii_case("y")
}

/// A path segment, percent-encoded.
pub fn seg(s: &str) -> String {
    handler_core::client::api::encode(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_its_columns_without_borders() {
        let t = table(
            &["name", "harness"],
            [
                vec!["work".into(), "codex".into()],
                vec!["personal-long".into(), "vibe".into()],
            ],
        );
        assert_eq!(
            t,
            "NAME           HARNESS\nwork           codex\npersonal-long  vibe"
        );
    }

    #[test]
    fn the_exit_code_says_what_kind_of_failure() {
        let unreachable: anyhow::Error = ApiError::Unreachable {
            url: "u".into(),
            message: "m".into(),
        }
        .into();
        assert_eq!(exit_code(&unreachable), exit::UNREACHABLE);
        assert_eq!(exit_code(&Refused("x".into()).into()), exit::USAGE);
        assert_eq!(exit_code(&anyhow::anyhow!("x")), exit::FAILED);
        let e = anyhow::Error::new(std::io::Error::other("gone")).context("reading t: gone");
        assert_eq!(one_line(&e), "reading t: gone");
        let e = anyhow::Error::new(std::io::Error::other("gone")).context("reading t");
        assert_eq!(one_line(&e), "reading t: gone");
    }
}
