//! Runs (D.18) with the fake sandbox (the scripted fake agent on the host): an interface's
//! schemas checked when saved (400 `interface invalid` naming the field), a run's input checked
//! (400 `input invalid` naming the field, a missing or unexpected subject, an unknown skill,
//! a prompt), the first turn carrying the subject's path and digest, a valid result kept as
//! `output.valid`, an invalid one retried once then kept with its error, a turn past
//! `timeoutSec` ending `timed_out` with no output, a client's prompt refused -32012, the
//! ask-and-deny agent's request refused by the daemon, `?subject=skill:<name>` and the digest
//! a review saw against the skill's now; a run on an account whose vendor's terms refuse an
//! automation refused (B.1 `login.unattended`).

use std::time::{Duration, Instant};

use crate::daemon_support::{self, TestDaemon, assert_problem};
use handler_contracts::session::{SessionEventKind, TurnPhase, parse_log};
use serde_json::{Value, json};

const TOKEN: &str = "fk-RunsApi0Token111aaaa2222bbbb3333";

const SKILL: &str = "---\nname: pdf-tools\ndescription: Fills PDF forms. See https://pdf.example.com/docs\n---\n# PDF\n";

fn review_interface(timeout: u32) -> Value {
    json!({
        "fields": {"type": "object", "required": ["expectation"],
                   "properties": {"expectation": {"type": "string", "minLength": 1}}},
        "subject": "skill",
        "result": {"type": "object", "required": ["verdict"],
                   "properties": {"verdict": {"enum": ["no-concerns", "caution", "do-not-install"]}}},
        "timeoutSec": timeout,
    })
}

/// A daemon with the skill `pdf-tools` and the fake agent scripted to give `answers`.
async fn daemon(answers: &[&str]) -> TestDaemon {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    let (s, v) = d.post("/v1/skills", json!({"content": SKILL})).await;
    assert_eq!(s, 201, "{v}");
    std::fs::write(
        std::path::Path::new(&d.scope()).join(".fake-agent-script.json"),
        json!({"answers": answers}).to_string(),
    )
    .unwrap();
    d
}

fn input() -> Value {
    json!({"fields": {"expectation": "fills forms"}, "subject": {"skill": "pdf-tools"}})
}

fn block(v: Value) -> String {
    format!("Reviewed.\n```json handler-result\n{v}\n```\n")
}

/// Starts a run of `agent` and waits until it is stopped.
async fn run_to_end(d: &TestDaemon, agent: &Value) -> Value {
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": agent["id"], "origin": "ui", "input": input()}),
        )
        .await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    wait_stopped(d, v["id"].as_str().unwrap()).await
}

async fn wait_stopped(d: &TestDaemon, id: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let (_, v) = d.get(&format!("/v1/sessions/{id}")).await;
        if v["state"] == "stopped" || v["state"] == "failed" {
            return v;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "never stopped: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn turns(d: &TestDaemon, id: &str) -> Vec<Option<String>> {
    let path = d.state.sessions.folder(id).join("events.ndjson");
    let text = std::fs::read_to_string(path).unwrap();
    parse_log(&text)
        .events
        .into_iter()
        .filter_map(|e| match e.kind {
            SessionEventKind::Turn {
                phase: TurnPhase::End,
                stop_reason,
            } => Some(stop_reason),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_interface_is_checked_as_json_schema_when_saved() {
    let d = daemon(&[]).await;
    let body = |iface: Value, perm: &str| json!({"models": [{"account": "perso"}], "scope": d.scope(), "permissions": perm, "interface": iface});
    let (s, v) = d
        .post(
            "/v1/agents",
            body(json!({"fields": {"type": "array"}, "result": {}}), "bypass"),
        )
        .await;
    assert_problem(s, &v, 400, "interface invalid");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .starts_with("interface.fields: "),
        "{v}"
    );
    let (s, v) = d
        .post("/v1/agents", body(json!({"result": {"type": 7}}), "bypass"))
        .await;
    assert_problem(s, &v, 400, "interface invalid");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .starts_with("interface.result: "),
        "{v}"
    );
    // Accept-edits (which the fake harness does not offer) is refused by the unit test of
    // `settings::check_interface`: `permissions: …`.
    let (s, v) = d
        .post("/v1/agents", body(review_interface(60), "bypass"))
        .await;
    assert_eq!(s, 201, "{v}");
    d.stop().await;
}

#[tokio::test]
async fn a_runs_input_is_checked_against_its_interface() {
    let d = daemon(&[]).await;
    let run = d
        .fake_agent(
            "perso",
            json!({"permissions": "bypass", "interface": review_interface(60)}),
        )
        .await;
    let chat = d.fake_agent("perso", json!({"name": "chat"})).await;
    let post = |agent: &Value, extra: Value| {
        let mut b = json!({"agentId": agent["id"], "origin": "ui"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        d.post("/v1/sessions", b)
    };
    let cases = [
        (json!({}), "input: required"),
        (
            json!({"input": {"subject": {"skill": "pdf-tools"}}}),
            "input.fields: \"expectation\"",
        ),
        (
            json!({"input": {"fields": {"expectation": 1}, "subject": {"skill": "pdf-tools"}}}),
            "input.fields/expectation: ",
        ),
        (
            json!({"input": {"fields": {"expectation": "x"}}}),
            "input.subject: ",
        ),
        (
            json!({"input": {"fields": {"expectation": "x"}, "subject": {"skill": "nope"}}}),
            "input.subject.skill: no skill",
        ),
        (json!({"input": input(), "prompt": "hi"}), "prompt: "),
    ];
    for (extra, want) in cases {
        let (s, v) = post(&run, extra.clone()).await;
        assert_problem(s, &v, 400, "input invalid");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.starts_with(want), "{extra}: {detail}");
    }
    let (s, v) = post(&chat, json!({"input": input()})).await;
    assert_problem(s, &v, 400, "input invalid");
    assert_eq!(d.get("/v1/sessions").await.1, json!([]), "nothing made");
    d.stop().await;
}

#[tokio::test]
async fn a_valid_result_is_kept_and_the_run_stops() {
    let good = block(json!({"verdict": "no-concerns"}));
    let d = daemon(&[&good]).await;
    let agent = d
        .fake_agent(
            "perso",
            json!({"name": "reviewer", "instructions": "Review the skill.", "permissions": "bypass", "interface": review_interface(60)}),
        )
        .await;
    let v = run_to_end(&d, &agent).await;
    assert_eq!(v["state"], "stopped", "{v}");
    assert_eq!(v["lastStopReason"], "end_turn", "{v}");
    assert_eq!(
        v["output"],
        json!({"valid": true, "value": {"verdict": "no-concerns"}}),
        "{v}"
    );
    assert!(v["answer"].as_str().unwrap().ends_with(&good), "{v}");
    assert_eq!(v["title"], "reviewer (pdf-tools)");
    // The digest the run saw, the skill's now; the first turn says where the subject is.
    let (_, skill) = d.get("/v1/skills/pdf-tools").await;
    let seen = v["input"]["subject"]["digest"].clone();
    assert_eq!(seen, skill["digest"], "{v}");
    let answer = v["answer"].as_str().unwrap();
    assert!(
        answer.starts_with("Review the skill."),
        "the echoed first turn: {answer}"
    );
    assert!(answer.contains("`/subject/pdf-tools`"), "{answer}");
    assert!(
        answer.contains("pdf.example.com"),
        "the scan's host: {answer}"
    );
    assert!(
        d.sandbox_log().contains("/subject/pdf-tools"),
        "{}",
        d.sandbox_log()
    );
    assert_eq!(turns(&d, v["id"].as_str().unwrap()).len(), 1);
    // Listed by its subject; an edit of the skill makes it "changed since review".
    let (_, l) = d.get("/v1/sessions?subject=skill:pdf-tools").await;
    assert_eq!(l.as_array().unwrap().len(), 1, "{l}");
    let (_, l) = d.get("/v1/sessions?subject=skill:other").await;
    assert_eq!(l, json!([]));
    let edited = SKILL.replace("# PDF", "# PDF, edited");
    let (s, e) = d
        .put("/v1/skills/pdf-tools", json!({"content": edited}))
        .await;
    assert_eq!(s, 200, "{e}");
    let (_, skill) = d.get("/v1/skills/pdf-tools").await;
    assert_ne!(seen, skill["digest"], "changed since review");
    d.stop().await;
}

#[tokio::test]
async fn an_invalid_result_is_retried_once_then_kept_with_its_error() {
    let bad = block(json!({"verdict": "fine"}));
    let d = daemon(&["no block here", &bad]).await;
    let agent = d
        .fake_agent(
            "perso",
            json!({"permissions": "bypass", "interface": review_interface(60)}),
        )
        .await;
    let v = run_to_end(&d, &agent).await;
    let id = v["id"].as_str().unwrap();
    assert_eq!(
        turns(&d, id),
        vec![Some("end_turn".into()), Some("end_turn".into())]
    );
    assert_eq!(v["output"]["valid"], false, "{v}");
    assert_eq!(v["output"]["value"], json!({"verdict": "fine"}), "{v}");
    let err = v["output"]["error"].as_str().unwrap();
    assert!(err.starts_with("result/verdict: "), "{err}");
    let answer = v["answer"].as_str().unwrap();
    assert!(
        answer.starts_with(
            "Your final message did not give a valid result: the final message has no"
        ),
        "the retry turn: {answer}"
    );
    d.stop().await;
}

#[tokio::test]
async fn a_turn_past_its_timeout_ends_timed_out_without_output() {
    let d = daemon(&["<hang>"]).await;
    let agent = d
        .fake_agent(
            "perso",
            json!({"permissions": "bypass", "interface": review_interface(1)}),
        )
        .await;
    let v = run_to_end(&d, &agent).await;
    assert_eq!(v["state"], "stopped", "{v}");
    assert_eq!(v["lastStopReason"], "timed_out", "{v}");
    assert!(v.get("output").is_none(), "{v}");
    d.stop().await;
}

#[tokio::test]
async fn a_clients_prompt_to_a_run_is_refused_unattended() {
    let d = daemon(&["<hang>"]).await;
    let agent = d
        .fake_agent(
            "perso",
            json!({"permissions": "bypass", "interface": review_interface(600)}),
        )
        .await;
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": agent["id"], "origin": "ui", "input": input()}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().unwrap();
    let mut c = daemon_support::acp::open(v["acpUrl"].as_str().unwrap(), &d.protocols(), None)
        .await
        .unwrap();
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    let sid = v["acpSessionId"].as_str().unwrap();
    let r = c
        .request(
            "session/load",
            json!({"sessionId": sid, "cwd": v["scope"], "mcpServers": []}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let r = c
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32012, "{r}");
    assert_eq!(r["error"]["message"], "unattended", "{r}");
    // Cancelled, the run ends with no output.
    let (s, _) = d
        .post(&format!("/v1/sessions/{id}/cancel"), json!({}))
        .await;
    assert_eq!(s, 200);
    let v = wait_stopped(&d, id).await;
    assert_eq!(v["lastStopReason"], "cancelled", "{v}");
    assert!(v.get("output").is_none(), "{v}");
    d.stop().await;
}

#[tokio::test]
async fn an_ask_and_deny_agents_request_is_refused_at_once() {
    let good = block(json!({"verdict": "caution"}));
    let d = daemon(&[&good]).await;
    // Its harness asks before writing (the fake agent's `ask:`); the daemon answers reject.
    let agent = d
        .fake_agent(
            "perso",
            json!({"instructions": "ask: write /subject/pdf-tools/SKILL.md", "permissions": "ask", "interface": review_interface(60)}),
        )
        .await;
    let v = run_to_end(&d, &agent).await;
    let answer = v["answer"].as_str().unwrap();
    assert!(answer.ends_with("answered \"no\""), "rejected: {answer}");
    assert_eq!(v["output"]["valid"], true, "{v}");
    assert_eq!(v["pendingPermissions"], 0, "{v}");
    d.stop().await;
}

#[tokio::test]
async fn the_built_in_agents_are_set_up_at_most_once_each() {
    let d = daemon(&[]).await;
    let (s, l) = d.get("/v1/builtin-agents").await;
    assert_eq!(s, 200, "{l}");
    let names: Vec<&str> = l
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["skill-creator", "skill-review"]);
    let review = &l[1];
    assert_eq!(review["interface"]["subject"], "skill", "{review}");
    assert_eq!(
        review["interface"]["result"]["properties"]["verdict"]["enum"],
        json!(["no-concerns", "caution", "do-not-install"])
    );
    assert_eq!(
        (
            &review["network"],
            &review["egress"],
            &review["confinement"],
            &review["permissions"]
        ),
        (
            &json!("filtered"),
            &json!("enforce"),
            &json!("strict"),
            &json!("ask")
        )
    );
    assert!(review.get("agentId").is_none());
    assert_eq!(l[0]["skills"], json!(["handler-skills", "skill-creator"]));
    assert!(l[0].get("interface").is_none());
    // Anthropic's skill-creator is fetched at set-up, pinned (decision 0123).
    let up = &l[0]["fetches"][0];
    assert_eq!(up["name"], "skill-creator");
    assert_eq!(
        up["url"],
        "https://github.com/anthropics/skills/tree/9d2f1ae187231d8199c64b5b762e1bdf2244733d/skills/skill-creator"
    );
    assert_eq!(up["license"], "Apache-2.0");
    assert!(
        up["digest"].as_str().unwrap().starts_with("sha256:"),
        "{up}"
    );

    let models = json!([{"account": "perso"}]);
    let (s, v) = d
        .post("/v1/agents", json!({"origin": "nope", "models": models}))
        .await;
    assert_problem(s, &v, 400, "unknown built-in agent");
    // skill-review: its defaults filled in (its interface is valid: ask-and-deny).
    let (s, a) = d
        .post(
            "/v1/agents",
            json!({"origin": "skill-review", "models": models}),
        )
        .await;
    assert_eq!(s, 201, "{a}");
    assert_eq!(a["origin"], "skill-review");
    assert_eq!(a["name"], "Skill reviewer");
    assert_eq!(a["permissions"], "ask");
    assert_eq!(a["network"], "filtered");
    assert_eq!(a["interface"]["subject"], "skill");
    assert!(a["instructions"].as_str().unwrap().contains("read-only"));
    let (s, v) = d
        .post(
            "/v1/agents",
            json!({"origin": "skill-review", "models": models}),
        )
        .await;
    assert_problem(s, &v, 409, "built-in agent already set up");
    let (_, l) = d.get("/v1/builtin-agents").await;
    assert_eq!(l[1]["agentId"], a["id"]);
    let path = format!("/v1/agents/{}", a["id"].as_str().unwrap());
    let (s, v) = d
        .put(&path, json!({"origin": "skill-creator", "models": models, "permissions": "ask", "interface": a["interface"]}))
        .await;
    assert_problem(s, &v, 409, "origin cannot change");
    let (s, v) = d
        .put(
            &path,
            json!({"models": models, "permissions": "ask", "interface": a["interface"]}),
        )
        .await;
    assert_problem(s, &v, 409, "origin cannot change");
    let (s, v) = d.delete(&path).await;
    assert!(s == 204 || s == 200, "{v}");
    let (s, a) = d
        .post(
            "/v1/agents",
            json!({"origin": "skill-review", "models": models}),
        )
        .await;
    assert_eq!(s, 201, "set up again once deleted: {a}");

    // skill-creator: its skill installed in the library, unless one of that name is there (its
    // upstream skill is there: no fetch, builtin_upstream:: fetches it).
    let upstream = "---\nname: skill-creator\ndescription: a copy\n---\ncopy\n";
    let (s, v) = d.post("/v1/skills", json!({"content": upstream})).await;
    assert_eq!(s, 201, "{v}");
    let own = "---\nname: handler-skills\ndescription: the user's own\n---\nmine\n";
    let (s, v) = d.post("/v1/skills", json!({"content": own})).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = d.delete("/v1/skills/handler-skills").await;
    assert!(s == 204 || s == 200, "{v}");
    let (s, c) = d
        .post(
            "/v1/agents",
            json!({"origin": "skill-creator", "models": models, "permissions": "bypass"}),
        )
        .await;
    assert_eq!(s, 201, "{c}");
    assert_eq!(
        c["skills"],
        json!(["handler-skills", "skill-creator"]),
        "{c}"
    );
    assert!(c.get("interface").is_none());
    let (_, sk) = d.get("/v1/skills/handler-skills").await;
    assert!(
        sk["content"].as_str().unwrap().contains("Save to library"),
        "{sk}"
    );
    assert!(sk.get("error").is_none(), "{sk}");
    d.stop().await;
}

#[tokio::test]
async fn a_built_in_agents_skill_never_replaces_the_users() {
    let d = daemon(&[]).await;
    let own = "---\nname: handler-skills\ndescription: the user's own\n---\nmine\n";
    let (s, v) = d.post("/v1/skills", json!({"content": own})).await;
    assert_eq!(s, 201, "{v}");
    let upstream = "---\nname: skill-creator\ndescription: the user's own\n---\nmine too\n";
    let (s, v) = d.post("/v1/skills", json!({"content": upstream})).await;
    assert_eq!(s, 201, "{v}");
    let (s, c) = d
        .post(
            "/v1/agents",
            json!({"origin": "skill-creator", "models": [{"account": "perso"}], "permissions": "bypass"}),
        )
        .await;
    assert_eq!(s, 201, "{c}");
    let (_, sk) = d.get("/v1/skills/handler-skills").await;
    assert_eq!(sk["content"], own, "kept: {sk}");
    let (_, sk) = d.get("/v1/skills/skill-creator").await;
    assert_eq!(sk["content"], upstream, "kept, nothing fetched: {sk}");
    d.stop().await;
}

#[tokio::test]
async fn a_folderless_session_starts_from_a_skill_and_goes_back_to_the_library() {
    let d = daemon(&[]).await;
    let (s, a) = d
        .post("/v1/agents", json!({"models": [{"account": "perso"}]}))
        .await;
    assert_eq!(s, 201, "{a}");
    let with_folder = d.fake_agent("perso", json!({"name": "foldered"})).await;
    let post = |agent: &Value, skill: &str| {
        d.post(
            "/v1/sessions",
            json!({"agentId": agent["id"], "origin": "ui", "fromSkill": skill}),
        )
    };
    let (s, v) = post(&with_folder, "pdf-tools").await;
    assert_problem(s, &v, 400, "fromSkill invalid");
    let (s, v) = post(&a, "nope").await;
    assert_problem(s, &v, 400, "skill unusable");
    let (s, v) = post(&a, "pdf-tools").await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    let id = v["id"].as_str().unwrap();
    let work = std::path::PathBuf::from(v["scope"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(work.join("SKILL.md")).unwrap(),
        SKILL
    );
    // The agent's edits, a hidden file and a link: back as an archive's import.
    let edited = SKILL.replace("# PDF", "# PDF, edited");
    std::fs::write(work.join("SKILL.md"), &edited).unwrap();
    std::fs::create_dir_all(work.join("scripts")).unwrap();
    std::fs::write(work.join("scripts/fill.sh"), "echo fill\n").unwrap();
    std::fs::write(work.join(".secret"), "x").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", work.join("passwd")).unwrap();
    let path = format!("/v1/skills/import-session/{id}");
    let (s, v) = d.post(&path, json!(null)).await;
    assert_problem(s, &v, 409, "skill exists");
    // The agent's SKILL.md chose the name: replace=true alone replaces nothing (security F3).
    let (s, v) = d.post(&format!("{path}?replace=true"), json!(null)).await;
    assert_problem(s, &v, 409, "skill exists");
    assert!(
        v["detail"].as_str().unwrap().contains("name=pdf-tools"),
        "{v}"
    );
    let (s, v) = d
        .post(&format!("{path}?replace=true&name=other"), json!(null))
        .await;
    assert_problem(s, &v, 409, "skill exists");
    let (s, v) = d
        .post(&format!("{path}?replace=true&name=pdf-tools"), json!(null))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["content"], edited, "{v}");
    let files: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["scripts/fill.sh"], "no hidden file, no link: {v}");
    // A session with a scope has no folder of its own to import.
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": with_folder["id"], "origin": "ui"}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = d
        .post(
            &format!("/v1/skills/import-session/{}", v["id"].as_str().unwrap()),
            json!(null),
        )
        .await;
    assert_problem(s, &v, 409, "session has a scope");
    let (s, v) = d
        .post("/v1/skills/import-session/s_0000000000000000", json!(null))
        .await;
    assert_eq!(s, 404, "{v}");
    d.stop().await;
}

/// B.1 `login.unattended` (decision 0151): a run on an account whose vendor's terms forbid an
/// automation is refused before anything starts (400 naming the terms), said beforehand in the
/// agent's warnings; terms not read yet (`check-terms`) are a warning and the run goes on; a
/// conversation of the same agent settings is never refused.
#[tokio::test]
async fn a_run_on_an_account_its_vendors_terms_refuse_is_refused_with_the_reason() {
    let good = block(json!({"verdict": "no-concerns"}));
    let d = daemon(&[&good]).await;
    let harness = |unattended: &str| {
        let f = daemon_support::fakes();
        let text = daemon_support::fake_descriptor(&f.agent)
            .replacen("name = \"fake\"", "name = \"strictfake\"", 1)
            .replacen(
                "product = \"Fake ACP agent\"",
                "product = \"Strict Fake\"",
                1,
            )
            .replacen(
                "unattended = \"allowed\"",
                &format!("unattended = \"{unattended}\""),
                1,
            );
        assert!(text.contains(&format!("unattended = \"{unattended}\"")));
        let dir = d.home.path().join("harnesses/strictfake");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("harness.toml"), text).unwrap();
    };
    harness("refused");
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "strict", "harness": "strictfake", "token": {"value": TOKEN}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let agent = d
        .fake_agent(
            "strict",
            json!({"name": "reviewer", "permissions": "bypass", "interface": review_interface(60)}),
        )
        .await;
    let id = agent["id"].as_str().unwrap().to_string();
    let (_, a) = d.get(&format!("/v1/agents/{id}")).await;
    let warnings = a["warnings"].to_string();
    assert!(
        warnings.contains("its runs are refused") && warnings.contains("https://example.com/terms"),
        "{a}"
    );
    let start = json!({"agentId": id, "origin": "ui", "input": input()});
    let (s, v) = d.post("/v1/sessions", start.clone()).await;
    assert_problem(s, &v, 400, "model access unusable");
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("Strict Fake's terms (https://example.com/terms) do not let an automation"),
        "{v}"
    );
    let (_, sessions) = d.get("/v1/sessions").await;
    assert_eq!(sessions, json!([]), "nothing started");
    // A conversation on that account is the person's own use: never refused.
    let chat = d
        .fake_agent("strict", json!({"name": "chat", "permissions": "bypass"}))
        .await;
    let (_, c) = d
        .get(&format!("/v1/agents/{}", chat["id"].as_str().unwrap()))
        .await;
    assert!(c.get("warnings").is_none(), "{c}");
    // Terms not read yet: warned, and the run goes on.
    harness("check-terms");
    let (_, a) = d.get(&format!("/v1/agents/{id}")).await;
    assert!(a["warnings"].to_string().contains("not read yet"), "{a}");
    let v = run_to_end(&d, &agent).await;
    assert_eq!(v["state"], "stopped", "{v}");
    assert_eq!(v["output"]["valid"], true, "{v}");
    assert!(
        daemon_support::logs().contains("a run: account \\\"strict\\\"")
            || daemon_support::logs().contains("a run: account \"strict\""),
        "the warning is logged"
    );
}
