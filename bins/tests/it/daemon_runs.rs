//! Runs (D.18) end to end in real rootless sandboxes: handlerd as the unprivileged test user
//! runs review runs of the scripted fake agent (fixtures/fake-agent, `answers`) in Podman on
//! the skill `pdf-tools`, mounted read-only at `/subject/pdf-tools`: a valid result block →
//! `output.valid`; an invalid one → one retry → `output.valid: false` with the error; a turn
//! past `timeoutSec` → `timed_out`, no output; a client's prompt → -32012; the reviewer
//! (ask-and-deny) asking to write is refused at once by the daemon, and a bypass run's write
//! into its subject fails on the read-only mount. Each run's sandbox is gone once it ended.
//! Missing podman or user FAILS, unless HANDLER_SKIP_PODMAN_TESTS=1.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::acp::open;
use test_support::user::User;

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

const TOKEN: &str = "fk-Runs0Token111aaaa2222bbbb3333cccc";
const SKILL: &str = "---\nname: pdf-tools\ndescription: Fills PDF forms.\n---\n# PDF\nUse https://pdf.example.com\n";

/// handlerd as the test user, the fake agent in its scope.
struct Daemon(TempDaemon);

impl std::ops::Deref for Daemon {
    type Target = TempDaemon;
    fn deref(&self) -> &TempDaemon {
        &self.0
    }
}

/// handlerd in `/tmp/hdr-<pid>` as the test user, the fake agent in its scope.
async fn start(u: User) -> Daemon {
    let l = Layout::new(&format!("hdr-{}", std::process::id()), false);
    l.fake_harness("");
    Daemon(l.spawn(u, &[]).await)
}

impl Daemon {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }
    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }
    /// The fake agent's script for the next sandbox: the final messages of its prompts.
    fn answers(&self, answers: &[&str]) {
        let p = self.scope_dir().join(".fake-agent-script.json");
        std::fs::write(&p, json!({"answers": answers}).to_string()).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    /// A review agent (no network, strict) with `permissions` and `instructions`.
    async fn agent(
        &self,
        name: &str,
        permissions: &str,
        instructions: &str,
        timeout: u32,
    ) -> String {
        let iface = json!({
            "fields": {"type": "object", "required": ["expectation"],
                       "properties": {"expectation": {"type": "string"}}},
            "subject": "skill",
            "result": {"type": "object", "required": ["verdict"],
                       "properties": {"verdict": {"enum": ["no-concerns", "caution", "do-not-install"]}}},
            "timeoutSec": timeout,
        });
        let (s, a) = self
            .post(
                "/v1/agents",
                json!({"name": name, "models": [{"account": "perso"}], "scope": self.scope,
                       "network": "none", "permissions": permissions, "instructions": instructions,
                       "interface": iface, "confirmRisks": true}),
            )
            .await;
        assert_eq!(s, 201, "{a}");
        a["id"].as_str().unwrap().to_string()
    }
    async fn start_run(&self, agent: &str) -> Value {
        let input =
            json!({"fields": {"expectation": "fills forms"}, "subject": {"skill": "pdf-tools"}});
        let (s, v) = self
            .post(
                "/v1/sessions",
                json!({"agentId": agent, "origin": "ui", "input": input}),
            )
            .await;
        assert_eq!(s, 201, "{v}: {}", self.log());
        v
    }
    async fn ended(&self, session: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (_, v) = self.get(&format!("/v1/sessions/{session}")).await;
            if v["state"] == "stopped" || v["state"] == "failed" {
                assert_eq!(v["state"], "stopped", "{v}: {}", self.log());
                self.no_container(session).await;
                return v;
            }
            assert!(Instant::now() < deadline, "still {v}: {}", self.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    async fn run(&self, agent: &str) -> Value {
        let v = self.start_run(agent).await;
        self.ended(v["id"].as_str().unwrap()).await
    }
    async fn no_container(&self, session: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let filter = format!("label=handler.connection={session}");
            let o = self
                .user
                .cmd(
                    "podman",
                    &["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"],
                    &[("HOME", self.user.home())],
                )
                .output()
                .unwrap();
            if String::from_utf8_lossy(&o.stdout).trim().is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "a run's sandbox is left");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

fn block(v: Value) -> String {
    format!("Reviewed.\n```json handler-result\n{v}\n```\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_runs_end_to_end_in_a_sandbox() {
    let Some(u) = test_support::user::podman_user(IMAGE, "the runs tests") else {
        return;
    };
    let d = start(u).await;
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = d.post("/v1/skills", json!({"content": SKILL})).await;
    assert_eq!(s, 201, "{v}");
    let skill_md = d.root.join("config/skills/pdf-tools/SKILL.md");

    // Valid: output.valid, the digest it saw recorded.
    let good = block(json!({"verdict": "no-concerns"}));
    d.answers(&[&good]);
    let a = d
        .agent("reviewer", "bypass", "Review the skill.", 120)
        .await;
    let v = d.run(&a).await;
    assert_eq!(
        v["output"],
        json!({"valid": true, "value": {"verdict": "no-concerns"}}),
        "{v}"
    );
    assert_eq!(v["lastStopReason"], "end_turn", "{v}");
    let (_, skill) = d.get("/v1/skills/pdf-tools").await;
    assert_eq!(v["input"]["subject"]["digest"], skill["digest"], "{v}");

    // Invalid: one retry, then output.valid false with the error.
    d.answers(&["no block", &block(json!({"verdict": "great"}))]);
    let v = d.run(&a).await;
    assert_eq!(v["output"]["valid"], false, "{v}");
    assert_eq!(v["output"]["value"], json!({"verdict": "great"}), "{v}");
    let err = v["output"]["error"].as_str().unwrap();
    assert!(err.starts_with("result/verdict: "), "{err}");
    let id = v["id"].as_str().unwrap();
    let turns =
        std::fs::read_to_string(d.root.join("state/sessions").join(id).join("events.ndjson"))
            .unwrap()
            .matches(r#""phase":"start""#)
            .count();
    assert_eq!(turns, 2, "the first turn and one retry");

    // A turn past its timeout: timed_out, no output.
    d.answers(&["<hang>"]);
    let slow = d.agent("slow", "bypass", "Review the skill.", 2).await;
    let v = d.run(&slow).await;
    assert_eq!(v["lastStopReason"], "timed_out", "{v}");
    assert!(v.get("output").is_none(), "{v}");

    // A client attached to a run: its prompt is refused -32012.
    d.answers(&["<hang>"]);
    let watched = d.agent("watched", "bypass", "Review the skill.", 120).await;
    let v = d.start_run(&watched).await;
    let url = format!(
        "ws://127.0.0.1:{}/v1/sessions/{}/acp",
        d.port,
        v["id"].as_str().unwrap()
    );
    let mut c = open(
        &url,
        &["acp.v1".into(), format!("bearer.{}", d.token)],
        None,
    )
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
    assert_eq!(
        (r["error"]["code"].clone(), r["error"]["message"].clone()),
        (json!(-32012), json!("unattended")),
        "{r}"
    );
    let id = v["id"].as_str().unwrap();
    let (s, _) = d
        .post(&format!("/v1/sessions/{id}/cancel"), json!({}))
        .await;
    assert_eq!(s, 200);
    let v = d.ended(id).await;
    assert!(v.get("output").is_none(), "{v}");

    // The reviewer (ask-and-deny) asking to write is refused at once by the daemon.
    d.answers(&[&block(json!({"verdict": "caution"}))]);
    let ask = d
        .agent(
            "asker",
            "ask",
            "ask: write /subject/pdf-tools/SKILL.md",
            120,
        )
        .await;
    let v = d.run(&ask).await;
    let answer = v["answer"].as_str().unwrap();
    assert!(answer.ends_with("answered \"no\""), "{answer}");
    assert_eq!(v["output"]["valid"], true, "{v}");
    assert!(
        d.log().contains("reject_once"),
        "the daemon's answer logged"
    );

    // Even in bypass, the subject is read-only in the sandbox.
    d.answers(&[&block(json!({"verdict": "caution"}))]);
    let sh = d
        .agent(
            "writer",
            "bypass",
            "sh: echo changed > /subject/pdf-tools/SKILL.md; exit 3",
            120,
        )
        .await;
    let v = d.run(&sh).await;
    let answer = v["answer"].as_str().unwrap();
    assert!(answer.contains("exit 3"), "the shell ran: {answer}");
    assert!(answer.to_lowercase().contains("read-only"), "{answer}");
    assert_eq!(std::fs::read_to_string(&skill_md).unwrap(), SKILL);
    assert!(Path::new(&skill_md).is_file());
}
