//! "Start from my own settings" (issue 30 item 4, decision 0154) through handlerd as the test
//! user, on real rootless Podman, with the fake harness given seeds as a real harness's are: a
//! folder slot seeded from the person's settings file (a key dropped), instructions file and
//! skills folder (its credential file and its link left out), a file slot seeded with only its
//! MCP servers over the slot's own content; the agent's session sees them; a change on the host
//! is offered, not copied, until the person applies it; an agent without `seedState` gets
//! nothing and cannot be applied to.

use std::time::Duration;

use serde_json::{Value, json};

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

const TOKEN: &str = "fk-Seeds0Token111aaaa2222bbbb3333cccc";

async fn post(d: &TempDaemon, path: &str, body: Value) -> (u16, Value) {
    d.call(reqwest::Method::POST, path, Some(body)).await
}

async fn get(d: &TempDaemon, path: &str) -> (u16, Value) {
    d.call(reqwest::Method::GET, path, None).await
}

/// Waits (60 s at most) until session `id`'s log contains `text`; answers the log.
async fn said(d: &TempDaemon, id: &str, text: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let log =
            std::fs::read_to_string(d.root.join("state/sessions").join(id).join("events.ndjson"))
                .unwrap_or_default();
        if log.contains(text) {
            return log;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{text:?} not in session {id}'s log: {log}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each seed's status by its source.
fn statuses(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|s| {
            (
                s["source"].as_str().unwrap().to_string(),
                s["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_starts_from_the_persons_own_settings_never_a_credential() {
    let Some(u) = test_support::user::podman_user(IMAGE, "the seed tests") else {
        return;
    };
    // The person's files, in the test user's home, under a folder of this run's own.
    let dot = format!(".hseed-{}", std::process::id());
    let host = std::path::PathBuf::from(u.home()).join(&dot);
    let _ = std::fs::remove_dir_all(&host);
    std::fs::create_dir_all(host.join("skills/one")).unwrap();
    std::fs::write(
        host.join("settings.json"),
        r#"{"theme": "dark", "env": {"FAKE_API_KEY": "NEVER-SEEDED"}}"#,
    )
    .unwrap();
    std::fs::write(host.join("NOTES.md"), "be brief\n").unwrap();
    std::fs::write(host.join("skills/one/SKILL.md"), "skill one\n").unwrap();
    std::fs::write(host.join("skills/.credentials.json"), "NEVER-SEEDED").unwrap();
    std::fs::write(host.join(".credentials.json"), "NEVER-SEEDED").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", host.join("skills/hostname")).unwrap();
    std::fs::write(
        host.join("fake.json"),
        r#"{"mcpServers": {"m": {"command": "mcp", "env": {"T": "NEVER-SEEDED"}}}, "oauthAccount": "NEVER-SEEDED"}"#,
    )
    .unwrap();
    u.give(&host);

    let l = Layout::new(&format!("hds-{}", std::process::id()), true);
    l.fake_harness(&format!(
        "[[stateSlots.history.seed]]\nsource = \"~/{dot}/settings.json\"\ndrop = [\"env\"]\n\
         [[stateSlots.history.seed]]\nsource = \"~/{dot}/NOTES.md\"\n\
         [[stateSlots.history.seed]]\nsource = \"~/{dot}/skills\"\n\
         [stateSlots.conf]\ntarget = \"~/.fake.json\"\nkind = \"file\"\nrequired = true\n\
         initial = '{{\"own\": true}}'\n\
         [[stateSlots.conf.seed]]\nsource = \"~/{dot}/fake.json\"\nkeep = [\"mcpServers\"]\n\
         drop = [\"mcpServers.*.env\"]\n"
    ));
    let d = l.spawn(u, &[]).await;
    let (st, v) = post(
        &d,
        "/v1/accounts",
        json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
    )
    .await;
    assert_eq!(st, 201, "{v}");
    let body = |seed: bool| {
        json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none",
            "permissions": "bypass", "confirmRisks": true, "seedState": seed})
    };
    let (st, a) = post(&d, "/v1/agents", body(true)).await;
    assert_eq!(st, 201, "{a}");
    assert_eq!(a["seedState"], true, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    let (st, v) = get(&d, &format!("/v1/agents/{agent}/seed")).await;
    assert_eq!(st, 200, "{v}");
    let src = |f: &str| format!("~/{dot}/{f}");
    assert_eq!(
        statuses(&v),
        [
            (src("fake.json"), "new".into()),
            (src("settings.json"), "new".into()),
            (src("NOTES.md"), "new".into()),
            (src("skills"), "new".into()),
        ],
        "{v}"
    );

    // The first session seeds them; the agent sees them in its sandbox.
    let (st, s) = post(
        &d,
        "/v1/sessions",
        json!({"agentId": agent, "origin": "ui",
            "prompt": "sh: cat ~/.fake/history/settings.json ~/.fake/history/NOTES.md ~/.fake.json; ls -a ~/.fake/history/skills"}),
    )
    .await;
    assert_eq!(st, 201, "{s}: {}", d.log());
    let log = said(&d, s["id"].as_str().unwrap(), "exit 0").await;
    assert!(log.contains("dark") && log.contains("be brief"), "{log}");
    assert!(
        log.contains("\\\"own\\\": true") && log.contains("mcp"),
        "{log}"
    );
    assert!(
        !log.contains("NEVER-SEEDED"),
        "a key reached the sandbox: {log}"
    );
    let slot = d
        .root
        .join("data/agent-state")
        .join(&agent)
        .join("fake@perso/history");
    assert_eq!(
        std::fs::read_to_string(slot.join("skills/one/SKILL.md")).unwrap(),
        "skill one\n"
    );
    assert!(!slot.join("skills/.credentials.json").exists());
    assert!(!slot.join(".credentials.json").exists());
    assert!(std::fs::symlink_metadata(slot.join("skills/hostname")).is_err());
    let (_, v) = get(&d, &format!("/v1/agents/{agent}/seed")).await;
    assert!(statuses(&v).iter().all(|(_, s)| s == "seeded"), "{v}");

    // A change on the host: offered, not copied by the next launch.
    std::fs::write(host.join("settings.json"), r#"{"theme": "light"}"#).unwrap();
    let (_, v) = get(&d, &format!("/v1/agents/{agent}/seed")).await;
    assert!(
        statuses(&v).contains(&(src("settings.json"), "changed".into())),
        "{v}"
    );
    let (st, s2) = post(
        &d,
        "/v1/sessions",
        json!({"agentId": agent, "origin": "ui", "prompt": "sh: cat ~/.fake/history/settings.json"}),
    )
    .await;
    assert_eq!(st, 201, "{s2}");
    let log = said(&d, s2["id"].as_str().unwrap(), "exit 0").await;
    assert!(log.contains("dark") && !log.contains("light"), "{log}");
    // Applied: copied now.
    let (st, v) = post(&d, &format!("/v1/agents/{agent}/seed"), json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert!(statuses(&v).iter().all(|(_, s)| s == "seeded"), "{v}");
    assert!(
        std::fs::read_to_string(slot.join("settings.json"))
            .unwrap()
            .contains("light")
    );

    // An agent that does not ask for it: nothing seeded, and applying is refused.
    let (st, b) = post(&d, "/v1/agents", body(false)).await;
    assert_eq!(st, 201, "{b}");
    let other = b["id"].as_str().unwrap().to_string();
    let (st, v) = post(&d, &format!("/v1/agents/{other}/seed"), json!({})).await;
    assert_eq!(st, 409, "{v}");
    assert!(
        v["detail"].as_str().unwrap().starts_with("seedState"),
        "{v}"
    );
    let (st, v) = get(&d, "/v1/agents/a_nope/seed").await;
    assert_eq!(st, 404, "{v}");
    let _ = std::fs::remove_dir_all(&host);
}
