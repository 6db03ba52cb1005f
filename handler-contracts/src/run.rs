//! Runs of an agent with an interface (D.18), as pure functions: an interface's schemas checked
//! as JSON Schema draft 2020-12 (the `jsonschema` crate, default features off: it resolves no
//! remote or file `$ref`, so it does no I/O; decision 0113), a run's input checked against its
//! interface, the first turn's text, and the result taken from the agent's final message (the
//! last `json handler-result` fenced block) and judged against the interface's `result`.

use serde_json::Value;

use crate::control::{AgentInterface, SessionInput, SessionOutput, SkillScan};

/// The meta-schema every interface schema is read as.
pub const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";
/// The fenced block's info string a final message ends with.
pub const RESULT_BLOCK: &str = "json handler-result";
/// The most validator errors one message names.
const MAX_ERRORS: usize = 3;

/// Why a schema is not one an interface can use (its `Display` is the reason the API names).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// Not a JSON object.
    #[error("not a JSON Schema object")]
    NotAnObject,
    /// `$schema` names another draft.
    #[error("$schema: only {DRAFT_2020_12}")]
    OtherDraft,
    /// The meta-schema refuses it; `at` is `<path>: ` or empty.
    #[error("not a JSON Schema (draft 2020-12): {at}{reason}")]
    NotDraft202012 {
        /// Where in the schema, `<path>: `, empty at its root.
        at: String,
        /// The validator's words.
        reason: String,
    },
    /// It cannot be compiled: an unresolvable `$ref`, a bad pattern.
    #[error("not usable: {0}")]
    NotUsable(String),
    /// `fields` must describe an object.
    #[error("an object schema (\"type\": \"object\")")]
    NotAnObjectSchema,
}

/// Whether `schema` is a JSON Schema (draft 2020-12) this validator can use; `object`: it must
/// also describe an object (`"type": "object"`, for `fields`). The reason otherwise.
pub fn check_schema(schema: &Value, object: bool) -> Result<(), SchemaError> {
    if !schema.is_object() {
        return Err(SchemaError::NotAnObject);
    }
    if let Some(d) = schema.get("$schema")
        && d.as_str() != Some(DRAFT_2020_12)
    {
        return Err(SchemaError::OtherDraft);
    }
    if let Err(e) = jsonschema::draft202012::meta::validate(schema) {
        return Err(SchemaError::NotDraft202012 {
            at: at(&e),
            reason: e.to_string(),
        });
    }
    // Compiling finds what the meta-schema cannot: an unresolvable `$ref`, a bad pattern.
    if let Err(e) = jsonschema::draft202012::new(schema) {
        return Err(SchemaError::NotUsable(e.to_string()));
    }
    if object && schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(SchemaError::NotAnObjectSchema);
    }
    Ok(())
}

/// `<path>: ` of a validator error's place in the document, nothing at its root.
fn at(e: &jsonschema::ValidationError<'_>) -> String {
    let p = e.instance_path().to_string();
    if p.is_empty() { p } else { format!("{p}: ") }
}

/// The first errors of `instance` against `schema`, each with its path under `root`; `None`
/// when it is valid.
fn errors(schema: &Value, instance: &Value, root: &str) -> Option<String> {
    let v = match jsonschema::draft202012::new(schema) {
        Ok(v) => v,
        Err(e) => return Some(format!("{root}: the schema is not usable: {e}")),
    };
    let found: Vec<String> = v
        .iter_errors(instance)
        .take(MAX_ERRORS)
        .map(|e| format!("{root}{}: {e}", e.instance_path()))
        .collect();
    (!found.is_empty()).then(|| found.join("; "))
}

/// Why a run's input is refused (400 `input invalid`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The form does not match the interface's `fields`.
    #[error("input.{0}")]
    Fields(String),
    /// The interface takes a subject and none was given.
    #[error("input.subject: this agent's runs work on a skill: required")]
    MissingSubject,
    /// A subject given to an interface that takes none.
    #[error("input.subject: this agent's runs take no subject")]
    UnexpectedSubject,
}

/// D.18: `input` checked against `iface`: its fields (an absent form is an empty object)
/// against `fields` (none allowed without it), a subject exactly when the interface takes one.
/// Whether the subject skill is usable is the caller's (it reads the library).
pub fn check_input(iface: &AgentInterface, input: &SessionInput) -> Result<(), InputError> {
    let form = Value::Object(input.fields.clone().unwrap_or_default());
    match &iface.fields {
        Some(schema) => {
            if let Some(e) = errors(schema, &form, "fields") {
                return Err(InputError::Fields(e));
            }
        }
        None if input.fields.as_ref().is_some_and(|f| !f.is_empty()) => {
            return Err(InputError::Fields(
                "fields: this agent's runs take no fields".into(),
            ));
        }
        None => {}
    }
    match (iface.subject.is_some(), input.subject.is_some()) {
        (true, false) => Err(InputError::MissingSubject),
        (false, true) => Err(InputError::UnexpectedSubject),
        _ => Ok(()),
    }
}

/// The subject as the first turn describes it.
#[derive(Debug, Clone, Copy)]
pub struct SubjectView<'a> {
    /// The skill's name.
    pub name: &'a str,
    /// Where it is mounted, read-only.
    pub path: &'a str,
    /// Its digest when the run started.
    pub digest: &'a str,
    /// handlerd's scan of its files (D.17).
    pub scan: &'a SkillScan,
}

/// What the first turn of a run is made of (D.18).
#[derive(Debug, Clone, Copy)]
pub struct FirstTurn<'a> {
    /// The agent's instructions.
    pub instructions: Option<&'a str>,
    /// The run's input, its subject's digest set.
    pub input: &'a SessionInput,
    /// The subject, when the interface takes one.
    pub subject: Option<SubjectView<'a>>,
    /// The interface's `result` schema.
    pub result: &'a Value,
}

/// `text` in a fenced block tagged `info`, its fence longer than any backtick run inside.
fn fenced(info: &str, text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}{info}\n{text}\n{fence}")
}

fn pretty(v: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// The rule that ends every run's turn.
fn result_rule() -> String {
    format!(
        "End your final message with one fenced block `{RESULT_BLOCK}` holding the result: \
         a JSON value valid against the result schema. Only the last such block counts."
    )
}

/// D.18: the first turn of a run: the agent's instructions, the input as JSON, where the
/// subject is with handlerd's scan of it, the result's schema and the rule.
pub fn first_turn(t: &FirstTurn<'_>) -> String {
    let mut parts = Vec::new();
    if let Some(i) = t.instructions.map(str::trim).filter(|i| !i.is_empty()) {
        parts.push(i.to_owned());
    }
    parts.push(format!(
        "## Input\n\nThis is an unattended run: no one answers questions. Its input:\n\n{}",
        fenced("json", &pretty(t.input))
    ));
    if let Some(s) = t.subject {
        parts.push(format!(
            "## Subject\n\nThe skill `{}` is mounted read-only at `{}` (digest {}). What \
             handlerd's scan of its files found (no model involved; ≤ 100 of each):\n\n{}",
            s.name,
            s.path,
            s.digest,
            fenced("json", &pretty(s.scan))
        ));
    }
    parts.push(format!(
        "## Result\n\n{}\n\nThe result schema (JSON Schema draft 2020-12):\n\n{}",
        result_rule(),
        fenced("json", &pretty(t.result))
    ));
    parts.join("\n\n")
}

/// D.18: the one more turn sent when the result is missing or invalid.
pub fn retry_turn(error: &str) -> String {
    format!(
        "Your final message did not give a valid result: {error}\n\n{} The result schema is the \
         one given in the first message.",
        result_rule()
    )
}

/// Whether `line` opens a fence (≥ 3 backticks) tagged `json handler-result`: its length.
fn opening(line: &str) -> Option<usize> {
    let t = line.trim_start();
    let n = t.chars().take_while(|c| *c == '`').count();
    let info: Vec<&str> = t[n..].split_whitespace().collect();
    (n >= 3 && info == ["json", "handler-result"]).then_some(n)
}

/// The text of the last closed `json handler-result` fenced block of `answer`.
pub fn last_result_block(answer: &str) -> Option<String> {
    let mut last = None;
    let mut open: Option<(usize, Vec<&str>)> = None;
    for line in answer.lines() {
        match &mut open {
            None => open = opening(line).map(|n| (n, Vec::new())),
            Some((n, body)) => {
                let t = line.trim();
                if t.len() >= *n && t.chars().all(|c| c == '`') {
                    last = Some(body.join("\n"));
                    open = None;
                } else {
                    body.push(line);
                }
            }
        }
    }
    last
}

/// D.18: the result of a run's final message `answer`: its last `json handler-result` block,
/// parsed and checked against `schema`.
pub fn judge(answer: &str, schema: &Value) -> SessionOutput {
    let invalid = |value, error: String| SessionOutput {
        valid: false,
        value,
        error: Some(error),
    };
    let Some(block) = last_result_block(answer) else {
        return invalid(
            None,
            format!("the final message has no `{RESULT_BLOCK}` fenced block"),
        );
    };
    let value: Value = match serde_json::from_str(&block) {
        Ok(v) => v,
        Err(e) => return invalid(None, format!("the `{RESULT_BLOCK}` block is not JSON: {e}")),
    };
    match errors(schema, &value, "result") {
        Some(e) => invalid(Some(value), e),
        None => SessionOutput {
            valid: true,
            value: Some(value),
            error: None,
        },
    }
}

/// Whether a run may use an account of a harness whose login is `login` (B.1 `login.unattended`,
/// D.18, decision 0151): the vendor's terms decide whether an automation may run an agent on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnattendedUse {
    /// The terms allow it.
    Allowed,
    /// Allowed, with this warning: the terms are unclear or not read yet.
    Warn(String),
    /// Refused, for this reason.
    Refused(String),
}

/// [`UnattendedUse`] of `account` (a `product` account) for a run.
#[must_use]
pub fn unattended_use(
    account: &str,
    product: &str,
    login: &crate::harness::Login,
) -> UnattendedUse {
    use crate::harness::Unattended;
    let read = login
        .checked
        .as_deref()
        .map_or_else(|| "not read yet".to_string(), |d| format!("read {d}"));
    match login.unattended {
        Unattended::Allowed => UnattendedUse::Allowed,
        Unattended::CheckTerms => UnattendedUse::Warn(format!(
            "account {account:?}: whether {product}'s terms let an automation run an agent on it is unclear ({read}): read {} before its runs",
            login.terms
        )),
        Unattended::Refused => UnattendedUse::Refused(format!(
            "account {account:?}: {product}'s terms ({}) do not let an automation run an agent on it: give this agent's runs a provider or another account",
            login.terms
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_runs_account_is_used_as_its_vendors_terms_say() {
        use super::{UnattendedUse, unattended_use};
        use crate::harness::{Login, Unattended};
        let login = |u: Unattended, checked: Option<&str>| -> Login {
            let mut l: Login = serde_json::from_value(serde_json::json!({
                "unattended": "allowed", "terms": "https://example.com/terms",
                "subscription": "Pro", "token": "T", "hosts": ["api.example.com:443"]
            }))
            .unwrap();
            l.unattended = u;
            l.checked = checked.map(String::from);
            l
        };
        assert_eq!(
            unattended_use("a", "X", &login(Unattended::Allowed, None)),
            UnattendedUse::Allowed
        );
        let UnattendedUse::Warn(w) = unattended_use("a", "X", &login(Unattended::CheckTerms, None))
        else {
            panic!("check-terms warns")
        };
        assert!(
            w.contains("not read yet") && w.contains("https://example.com/terms"),
            "{w}"
        );
        let UnattendedUse::Warn(w) =
            unattended_use("a", "X", &login(Unattended::CheckTerms, Some("2026-10-05")))
        else {
            panic!("check-terms warns")
        };
        assert!(w.contains("read 2026-10-05"), "{w}");
        let UnattendedUse::Refused(r) = unattended_use("a", "X", &login(Unattended::Refused, None))
        else {
            panic!("refused refuses")
        };
        assert!(
            r.starts_with("account \"a\": X's terms (https://example.com/terms)"),
            "{r}"
        );
    }

    use super::*;
    use crate::control::{ScanHit, SubjectRef};
    use serde_json::json;

    fn iface(v: Value) -> AgentInterface {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn schemas_are_draft_2020_12_and_fields_an_object() {
        assert_eq!(check_schema(&json!({"type": "object"}), true), Ok(()));
        assert_eq!(check_schema(&json!({"type": "string"}), false), Ok(()));
        let e = check_schema(&json!({"type": "strin"}), false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("not a JSON Schema (draft 2020-12)"), "{e}");
        let e = check_schema(&json!({"properties": {"a": {"minLength": -1}}}), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/properties/a/minLength"), "{e}");
        assert_eq!(
            check_schema(&json!({"type": "string"}), true),
            Err(SchemaError::NotAnObjectSchema)
        );
        assert_eq!(
            check_schema(&json!([1]), false),
            Err(SchemaError::NotAnObject)
        );
        let e = check_schema(
            &json!({"$schema": "http://json-schema.org/draft-07/schema#"}),
            false,
        )
        .unwrap_err();
        assert_eq!(e, SchemaError::OtherDraft);
        assert!(e.to_string().starts_with("$schema"), "{e}");
        // No retriever: a remote reference is refused, never fetched.
        let e = check_schema(&json!({"$ref": "https://example.com/s.json"}), false).unwrap_err();
        assert!(matches!(e, SchemaError::NotUsable(_)), "{e}");
    }

    #[test]
    fn an_input_matches_its_interface() {
        let i = iface(json!({
            "fields": {"type": "object", "required": ["expectation"],
                       "properties": {"expectation": {"type": "string", "minLength": 1}}},
            "subject": "skill", "result": {"type": "object"}}));
        let input = |fields: Value, subject: bool| SessionInput {
            fields: fields.as_object().cloned(),
            subject: subject.then(|| SubjectRef {
                skill: "pdf".into(),
                digest: None,
            }),
        };
        assert_eq!(
            check_input(&i, &input(json!({"expectation": "x"}), true)),
            Ok(())
        );
        let e = check_input(&i, &input(json!({}), true))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "input.fields: \"expectation\" is a required property");
        let e = check_input(&i, &input(json!({"expectation": 3}), true))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("input.fields/expectation: "), "{e}");
        assert_eq!(
            check_input(&i, &input(json!({"expectation": "x"}), false)),
            Err(InputError::MissingSubject)
        );
        let bare = iface(json!({"result": {}}));
        assert_eq!(
            check_input(&bare, &input(json!({}), true)),
            Err(InputError::UnexpectedSubject)
        );
        let e = check_input(&bare, &input(json!({"a": 1}), false)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input.fields: this agent's runs take no fields"
        );
    }

    #[test]
    fn the_last_closed_result_block_counts() {
        let a = "first\n```json handler-result\n{\"a\": 1}\n```\nthen\n````json handler-result\n\
                 {\"a\": \"```\"}\n````\n```json handler-result\n{\"unclosed\": 1}";
        assert_eq!(last_result_block(a).as_deref(), Some("{\"a\": \"```\"}"));
        assert_eq!(last_result_block("```json\n{}\n```"), None);
    }

    #[test]
    fn a_result_is_judged_against_its_schema() {
        let schema = json!({"type": "object", "required": ["verdict"],
            "properties": {"verdict": {"enum": ["ok", "bad"]}}});
        let ok = judge(
            "Done.\n```json handler-result\n{\"verdict\": \"ok\"}\n```\n",
            &schema,
        );
        assert_eq!(
            ok,
            SessionOutput {
                valid: true,
                value: Some(json!({"verdict": "ok"})),
                error: None
            }
        );
        let bad = judge(
            "```json handler-result\n{\"verdict\": \"meh\"}\n```",
            &schema,
        );
        assert!(!bad.valid);
        assert_eq!(bad.value, Some(json!({"verdict": "meh"})));
        assert!(bad.error.unwrap().starts_with("result/verdict: "));
        let none = judge("no block", &schema);
        assert_eq!(none.value, None);
        assert!(none.error.unwrap().contains("no `json handler-result`"));
        let nojson = judge("```json handler-result\n{oops\n```", &schema);
        assert!(nojson.error.unwrap().contains("is not JSON"));
    }

    #[test]
    fn the_first_turn_says_everything_a_run_needs() {
        let input = SessionInput {
            fields: json!({"expectation": "fills PDF forms"})
                .as_object()
                .cloned(),
            subject: Some(SubjectRef {
                skill: "pdf".into(),
                digest: Some("sha256:abc".into()),
            }),
        };
        let scan = SkillScan {
            hosts: vec![ScanHit {
                path: "SKILL.md".into(),
                line: 3,
                text: "example.com".into(),
            }],
            ..Default::default()
        };
        let t = first_turn(&FirstTurn {
            instructions: Some("Review the skill.\n"),
            input: &input,
            subject: Some(SubjectView {
                name: "pdf",
                path: "/subject/pdf",
                digest: "sha256:abc",
                scan: &scan,
            }),
            result: &json!({"type": "object", "description": "has ``` inside"}),
        });
        insta::assert_snapshot!(t);
        insta::assert_snapshot!("retry", retry_turn("result/verdict: \"meh\" is not one of"));
    }
}
