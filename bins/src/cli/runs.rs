//! Runs from the terminal (D.18): `handler agent run AGENT [-f k=v] [-F k=json] [--skill NAME]`
//! starts an unattended run of an agent with an interface, follows it (a spinner on a terminal;
//! Ctrl-C cancels it) and prints its result; `handler skill review NAME` is the same run of the
//! built-in skill reviewer. The pure parts — the fields typed, the agent a word names, what a
//! ended run's session means — are functions with tests.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use handler_core::client::api::{Api, encode};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value, json};

use super::out::{self, Ctx, Refused};

/// The built-in skill reviewer's origin (D.18).
pub const SKILL_REVIEW: &str = "skill-review";

/// `handler agent run`.
#[derive(Args, Debug)]
pub struct RunAgentArgs {
    /// The agent: its id, or the name of the built-in agent it was set up from
    /// (`handler agent builtin`).
    pub agent: String,
    /// A field of the run's form as text: `-f expectation="fills PDF forms"`; repeatable.
    #[arg(short = 'f', long = "field", value_name = "KEY=TEXT")]
    pub fields: Vec<String>,
    /// A field as JSON (a number, a list, an object…): `-F pages=3`; repeatable.
    #[arg(short = 'F', long = "field-json", value_name = "KEY=JSON")]
    pub json_fields: Vec<String>,
    /// The skill of the library the run works on (for an agent whose subject is a skill).
    #[arg(long, value_name = "NAME")]
    pub skill: Option<String>,
    /// Start it and print its session's id, without waiting for its result.
    #[arg(long)]
    pub detach: bool,
}

/// The form's values from `-f` (text) and `-F` (JSON); a key given twice, a missing `=` or
/// JSON that does not parse is a refusal naming it.
pub fn fields(text: &[String], typed: &[String]) -> Result<Map<String, Value>, Refused> {
    let mut m = Map::new();
    let split = |s: &str, flag: &str| -> Result<(String, String), Refused> {
        match s.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(Refused(format!(
                "{flag} {s:?}: give KEY=VALUE (e.g. {flag} expectation=\"fills forms\")"
            ))),
        }
    };
    let mut put = |k: String, v: Value, flag: &str| {
        if m.insert(k.clone(), v).is_some() {
            return Err(Refused(format!("{flag} {k}: the field is given twice")));
        }
        Ok(())
    };
    for s in text {
        let (k, v) = split(s, "-f")?;
        put(k, Value::String(v), "-f")?;
    }
    for s in typed {
        let (k, v) = split(s, "-F")?;
        let parsed = serde_json::from_str(&v).map_err(|e| {
            Refused(format!(
                "-F {k}: not JSON ({e}); use -f {k}=… for text, or quote it: -F {k}='\"…\"'"
            ))
        })?;
        put(k, parsed, "-F")?;
    }
    Ok(m)
}

/// The agent a word names among `agents` (GET /v1/agents): one with that id, else the one
/// set up from the built-in agent of that name; a refusal saying how to set it up otherwise.
pub fn agent_named<'a>(agents: &'a [Value], word: &str) -> Result<&'a Value, Refused> {
    if let Some(a) = agents.iter().find(|a| a["id"] == word) {
        return Ok(a);
    }
    if let Some(a) = agents.iter().find(|a| a["origin"] == word) {
        return Ok(a);
    }
    Err(Refused(format!(
        "no agent {word:?}: give an agent's id (handler agent list), or set up the built-in \
         agent: handler agent new --origin {word} --account NAME"
    )))
}

/// The body of POST /v1/sessions for a run of `agent`.
pub fn request(agent: &Value, fields: Map<String, Value>, skill: Option<&str>) -> Value {
    let mut input = Map::new();
    if !fields.is_empty() {
        input.insert("fields".into(), Value::Object(fields));
    }
    if let Some(s) = skill {
        input.insert("subject".into(), json!({"skill": s}));
    }
    json!({"agentId": agent["id"], "origin": "cli", "input": input})
}

/// Whether a run's session has ended: stopped or failed, its turn over.
pub fn ended(s: &Value) -> bool {
    (s["state"] == "stopped" || s["state"] == "failed") && s["busy"] != true
}

/// What an ended run gave: the value to print (exit 0) or the line saying why there is none
/// or why it is not valid (exit 1).
pub fn outcome(s: &Value) -> Result<Value, String> {
    let id = s["id"].as_str().unwrap_or("");
    let read = format!("read it: handler session log {id}");
    match s.get("output").filter(|o| !o.is_null()) {
        Some(o) if o["valid"] == true => Ok(o["value"].clone()),
        Some(o) => Err(format!(
            "the run's result is not valid: {}; {read}",
            o["error"].as_str().unwrap_or("no reason given")
        )),
        None => {
            let why = match (s["state"].as_str(), s["lastStopReason"].as_str()) {
                (Some("failed"), _) => format!(
                    "the run failed: {}",
                    s["error"].as_str().unwrap_or("no reason given")
                ),
                (_, Some("timed_out")) => "the run timed out (the interface's timeoutSec)".into(),
                (_, Some("cancelled")) => "the run was cancelled".into(),
                (_, Some(r)) => format!("the run ended ({r}) without a result"),
                _ => "the run ended without a result".into(),
            };
            Err(format!("{why}; {read}"))
        }
    }
}

/// A review's result as a person reads it: the verdict and summary, then each finding with
/// where it is. Other results: pretty JSON.
pub fn human(value: &Value) -> String {
    let Some(verdict) = value["verdict"].as_str() else {
        return serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    };
    let mut out = format!("verdict: {verdict}\n");
    for k in ["summary", "whenUsed", "expectation"] {
        if let Some(t) = value[k].as_str() {
            out.push_str(&format!("{k}: {t}\n"));
        }
    }
    let caps = &value["capabilities"];
    for k in ["commands", "hosts", "files", "env"] {
        let list = out::text(caps, k);
        if !list.is_empty() {
            out.push_str(&format!("{k}: {list}\n"));
        }
    }
    for m in value["mismatches"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "mismatch: {}\n",
            m.as_str().unwrap_or(&m.to_string())
        ));
    }
    for f in value["findings"].as_array().into_iter().flatten() {
        let w = &f["where"];
        let lines = match w["lines"].as_array().map(Vec::as_slice) {
            Some([a, b]) if a == b => format!(":{a}"),
            Some([a, b]) => format!(":{a}-{b}"),
            _ => String::new(),
        };
        out.push_str(&format!(
            "[{}] {}{lines}: {}\n",
            f["severity"].as_str().unwrap_or("?"),
            w["path"].as_str().unwrap_or("?"),
            f["text"].as_str().unwrap_or("")
        ));
    }
    out
}

/// Runs `handler agent run`; the exit code.
pub async fn run_agent(ctx: &Ctx, a: RunAgentArgs) -> anyhow::Result<i32> {
    let fields = fields(&a.fields, &a.json_fields)?;
    start_and_follow(ctx, &a.agent, fields, a.skill.as_deref(), a.detach).await
}

/// Runs `handler skill review NAME [--expect TEXT]` with the built-in reviewer.
pub async fn review(ctx: &Ctx, skill: &str, expect: Option<String>) -> anyhow::Result<i32> {
    let mut fields = Map::new();
    if let Some(e) = expect {
        fields.insert("expectation".into(), Value::String(e));
    }
    start_and_follow(ctx, SKILL_REVIEW, fields, Some(skill), false).await
}

async fn start_and_follow(
    ctx: &Ctx,
    word: &str,
    fields: Map<String, Value>,
    skill: Option<&str>,
    detach: bool,
) -> anyhow::Result<i32> {
    let agents = ctx.api.get("/v1/agents").await?;
    let agents = agents.as_array().map(Vec::as_slice).unwrap_or_default();
    let agent = agent_named(agents, word)?;
    if agent["interface"].is_null() {
        return Err(Refused(format!(
            "agent {word:?} has no interface: chat with it instead (handler run, or handler attach)"
        ))
        .into());
    }
    let s = ctx
        .api
        .post("/v1/sessions", &request(agent, fields, skill))
        .await?;
    let id = s["id"].as_str().unwrap_or_default().to_string();
    if detach {
        ctx.done(&s, &id);
        return Ok(out::exit::OK);
    }
    let s = follow(&ctx.api, &id).await?;
    match outcome(&s) {
        Ok(value) => {
            if ctx.json {
                out::print_json(&s);
            } else {
                print!("{}", human(&value));
            }
            Ok(out::exit::OK)
        }
        Err(why) => {
            if ctx.json {
                out::print_json(&s);
            }
            eprintln!("handler: {why}");
            Ok(out::exit::FAILED)
        }
    }
}

/// Waits for the run to end (a spinner on a terminal); Ctrl-C cancels it and goes on waiting
/// for its end, a second one leaves it running.
async fn follow(api: &Api, id: &str) -> anyhow::Result<Value> {
    let path = format!("/v1/sessions/{}", encode(id));
    let spin = std::io::stderr().is_terminal().then(|| {
        let p = ProgressBar::new_spinner();
        p.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("template"));
        p.enable_steady_tick(Duration::from_millis(120));
        p.set_message(format!("run {id}"));
        p
    });
    let mut interrupts = 0;
    let s = loop {
        let s = api.get(&path).await?;
        if ended(&s) {
            break s;
        }
        if let Some(p) = &spin {
            p.set_message(format!("run {id}: {}", s["state"].as_str().unwrap_or("")));
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
            r = tokio::signal::ctrl_c() => {
                r?;
                interrupts += 1;
                if interrupts > 1 {
                    if let Some(p) = &spin { p.finish_and_clear(); }
                    eprintln!("handler: run {id} goes on (handler session show {id})");
                    return Ok(s);
                }
                eprintln!("handler: cancelling run {id} (Ctrl-C again leaves it running)");
                api.post(&format!("{path}/cancel"), &Value::Null).await?;
            }
        }
    };
    if let Some(p) = spin {
        p.finish_and_clear();
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn fields_are_text_or_json_and_each_is_given_once() {
        let m = fields(
            &strs(&["expectation=fills forms", "eq=a=b"]),
            &strs(&["n=3", "l=[1]"]),
        )
        .unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"expectation": "fills forms", "eq": "a=b", "n": 3, "l": [1]})
        );
        let e = fields(&strs(&["noequals"]), &[]).unwrap_err().0;
        assert!(e.starts_with("-f \"noequals\": give KEY=VALUE"), "{e}");
        let e = fields(&strs(&["a=1"]), &strs(&["a=2"])).unwrap_err().0;
        assert_eq!(e, "-F a: the field is given twice");
        let e = fields(&[], &strs(&["a=not json"])).unwrap_err().0;
        assert!(e.starts_with("-F a: not JSON"), "{e}");
    }

    #[test]
    fn an_agent_is_named_by_its_id_or_its_built_in_origin() {
        let agents = [
            json!({"id": "a_1", "name": "x"}),
            json!({"id": "a_2", "origin": "skill-review"}),
        ];
        assert_eq!(agent_named(&agents, "a_1").unwrap()["id"], "a_1");
        assert_eq!(agent_named(&agents, "skill-review").unwrap()["id"], "a_2");
        let e = agent_named(&agents, "skill-creator").unwrap_err().0;
        assert!(
            e.contains("handler agent new --origin skill-creator --account NAME"),
            "{e}"
        );
    }

    #[test]
    fn a_runs_request_carries_its_input_and_origin_cli() {
        let mut f = Map::new();
        f.insert("expectation".into(), json!("x"));
        let r = request(&json!({"id": "a_2"}), f, Some("pdf-tools"));
        assert_eq!(
            r,
            json!({"agentId": "a_2", "origin": "cli", "input": {
                "fields": {"expectation": "x"}, "subject": {"skill": "pdf-tools"}}})
        );
        let r = request(&json!({"id": "a_2"}), Map::new(), None);
        assert_eq!(r["input"], json!({}));
    }

    #[test]
    fn an_ended_run_gives_its_value_or_says_why_not() {
        let base = json!({"id": "s_1", "state": "stopped", "busy": false});
        let with = |k: &str, v: Value| {
            let mut s = base.clone();
            s[k] = v;
            s
        };
        assert!(ended(&base) && !ended(&with("busy", json!(true))));
        assert!(!ended(&with("state", json!("running"))));
        let ok = with(
            "output",
            json!({"valid": true, "value": {"verdict": "caution"}}),
        );
        assert_eq!(outcome(&ok), Ok(json!({"verdict": "caution"})));
        let bad = with(
            "output",
            json!({"valid": false, "error": "result/verdict: bad"}),
        );
        assert_eq!(
            outcome(&bad),
            Err("the run's result is not valid: result/verdict: bad; read it: handler session log s_1".into())
        );
        let slow = with("lastStopReason", json!("timed_out"));
        assert!(outcome(&slow).unwrap_err().starts_with("the run timed out"));
        let failed = with("state", json!("failed"));
        let failed = {
            let mut f = failed;
            f["error"] = json!("image missing");
            f
        };
        assert!(
            outcome(&failed)
                .unwrap_err()
                .starts_with("the run failed: image missing;")
        );
    }

    #[test]
    fn a_review_reads_as_its_verdict_and_findings() {
        let v = json!({
            "verdict": "caution", "summary": "Fills forms.", "whenUsed": "PDF work",
            "capabilities": {"commands": ["pdftk"], "hosts": ["pdf.example.com"], "files": [], "env": []},
            "mismatches": ["it uploads the file"],
            "findings": [
                {"severity": "high", "where": {"path": "SKILL.md", "lines": [5, 5]}, "text": "a host"},
                {"severity": "low", "where": {"path": "run.sh", "lines": [1, 3]}, "text": "curl"}
            ]
        });
        insta::assert_snapshot!(human(&v), @r"
        verdict: caution
        summary: Fills forms.
        whenUsed: PDF work
        commands: pdftk
        hosts: pdf.example.com
        mismatch: it uploads the file
        [high] SKILL.md:5: a host
        [low] run.sh:1-3: curl
        ");
        assert_eq!(human(&json!({"n": 1})), "{\n  \"n\": 1\n}");
    }
}
