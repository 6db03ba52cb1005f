//! Addons and bindings through a real daemon (G.1–G.4, D.15): the addons loaded and listed
//! (an invalid one with its error), bindings written through the API (secret values only to
//! the secret store, never returned), hand-written ones (unknown keys → an error with line and
//! column), rename and delete; agent saves enforcing G3; and at a start (G4, transport double +
//! real WebSocket client): the addon's image and PATH, env, settings, secrets (proxy → phantom
//! and injection towards the addon's egress, env → the value), egress in the allow-list, skills,
//! and its MCP server in every session/new (P8: a client's server of that name refused with
//! -32002 naming it); binding secrets redacted (P5) and never in logs or answers; automatic
//! updates rebuilding the built addon images, their scheduler given the time (D.4).

use crate::daemon_support;

use std::path::Path;

use daemon_support::TestDaemon;
use serde_json::{Value, json};

const TOKEN: &str = "fk-Addons0Token1111aaaa2222bbbb3333cc";
const NOTES_TOKEN: &str = "nt-NotesSecret0123456789abcdefABCDEF";
const SIGNING: &str = "sig-SigningKey-9876543210-zyxw";

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Addons `notes` (no image: env, a setting, two secret slots, egress, a skill), `tools` and
/// `tools2` (images declaring the same command; tools has an MCP server), `broken` (invalid).
fn write_addons(d: &TestDaemon) {
    let a = d.home.path().join(".config/handler-ai/addons");
    write(
        &a.join("notes/addon.toml"),
        r#"apiVersion = "handler.addon/v1"
name = "notes"
description = "A notes service"
egress = ["notes.example.org:443"]

[env]
NOTES_FORMAT = "markdown"

[settings.url]
env = "NOTES_URL"
required = true
description = "The notes server"

[secretSlots.token]
env = "NOTES_TOKEN"
required = true

[secretSlots.signing]
env = "NOTES_SIGNING_KEY"
delivery = "env"
"#,
    );
    write(
        &a.join("notes/skills/notes-howto/SKILL.md"),
        "---\nname: notes-howto\ndescription: How to file notes\n---\nUse notes.\n",
    );
    for (name, mcp) in [("tools", true), ("tools2", false)] {
        write(
            &a.join(format!("{name}/addon.toml")),
            &format!(
                "apiVersion = \"handler.addon/v1\"\nname = \"{name}\"\nimage = \"localhost/handler-ai-addon-{name}\"\ncommands = [\"tool\"]\n{}",
                if mcp {
                    "[mcp]\ncommand = [\"tool\", \"mcp\", \"--stdio\"]\n"
                } else {
                    ""
                }
            ),
        );
        write(
            &a.join(format!("{name}/Containerfile")),
            "FROM ${TOOLBOX_IMAGE}\n",
        );
    }
    write(
        &a.join("broken/addon.toml"),
        "apiVersion = \"handler.addon/v1\"\nname = \"broken\"\n[env]\nPATH = \"/x\"\n",
    );
}

fn bindings_dir(d: &TestDaemon) -> std::path::PathBuf {
    d.home.path().join(".config/handler-ai/bindings")
}

async fn setup() -> TestDaemon {
    let d = TestDaemon::start().await;
    d.fake_account("perso", TOKEN).await;
    write_addons(&d);
    let (s, v) = d
        .post(
            "/v1/bindings",
            json!({"name": "nb", "addon": "notes", "description": "Team notes",
                "settings": {"url": "https://notes.example.org"},
                "secrets": {"token": NOTES_TOKEN, "signing": SIGNING}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let b = bindings_dir(&d);
    write(
        &b.join("tb.toml"),
        "apiVersion = \"handler.binding/v1\"\naddon = \"tools\"\n",
    );
    write(
        &b.join("tb2.toml"),
        "apiVersion = \"handler.binding/v1\"\naddon = \"tools2\"\n",
    );
    write(
        &b.join("nb2.toml"),
        "# by hand\napiVersion = \"handler.binding/v1\"\naddon = \"notes\"\n[settings]\nurl = \"https://other.example.org\"\n[secrets]\ntoken = { env = \"NB2_TOKEN\" }\n",
    );
    write(
        &b.join("bad.toml"),
        "apiVersion = \"handler.binding/v1\"\naddon = \"notes\"\ncolour = \"red\"\n",
    );
    d
}

fn assert_no_secret(text: &str, what: &str) {
    for v in [NOTES_TOKEN, SIGNING] {
        assert!(!text.contains(v), "a binding secret reached {what}");
    }
}

#[tokio::test]
async fn addons_and_bindings_through_the_api() {
    let d = setup().await;
    // G.1: the addons, an invalid one listed with its error.
    let (s, list) = d.get("/v1/addons").await;
    assert_eq!(s, 200, "{list}");
    let by = |n: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("no addon {n}: {list}"))
    };
    let notes = by("notes");
    assert_eq!(notes["skills"], json!(["notes-howto"]));
    assert_eq!(notes["egress"], json!(["notes.example.org:443"]));
    assert_eq!(
        notes["settings"],
        json!([{"name": "url", "required": true, "description": "The notes server"}])
    );
    assert_eq!(
        notes["secretSlots"],
        json!([{"name": "signing", "required": false}, {"name": "token", "required": true}])
    );
    assert_eq!(notes["builtin"], false);
    assert!(notes.get("error").is_none(), "{notes}");
    assert_eq!(by("tools")["commands"], json!(["tool"]));
    // The built-in `miniapp` addon (G.1, issue 31 item 7): Deno and its two tools, its skill.
    let miniapp = by("miniapp");
    assert_eq!(miniapp["builtin"], true, "{miniapp}");
    assert_eq!(
        miniapp["commands"],
        json!(["deno", "miniapp-new", "miniapp-test"])
    );
    assert_eq!(miniapp["skills"], json!(["miniapp"]));
    assert!(miniapp.get("error").is_none(), "{miniapp}");
    assert!(
        by("broken")["error"].as_str().unwrap().contains("PATH"),
        "{list}"
    );
    let (s, _) = d.get("/v1/addons/ghost").await;
    assert_eq!(s, 404);

    // D.15: secret slot names only; the file holds references to the store, the store the values.
    let (s, nb) = d.get("/v1/bindings/nb").await;
    assert_eq!(s, 200);
    assert_eq!(nb["addon"], "notes");
    assert_eq!(nb["secrets"], json!(["signing", "token"]));
    assert_eq!(nb["handWritten"], json!([]));
    assert_eq!(nb["settings"], json!({"url": "https://notes.example.org"}));
    let file = std::fs::read_to_string(bindings_dir(&d).join("nb.toml")).unwrap();
    assert!(file.contains("secret = \"bindings/nb/token\""), "{file}");
    assert_no_secret(&file, "the binding's file");
    let (_, secrets) = d.get("/v1/secrets").await;
    let tok = secrets
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"] == "bindings/nb/token")
        .unwrap_or_else(|| panic!("{secrets}"));
    assert_eq!(tok["hosts"], json!(["notes.example.org:443"]));
    // Hand-written: its env reference is named, never shown; a file with an unknown key has an
    // error with its line and column and cannot be selected.
    let (_, all) = d.get("/v1/bindings").await;
    let nb2 = all
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "nb2")
        .unwrap();
    assert_eq!(nb2["handWritten"], json!(["token"]));
    assert!(
        !all.to_string().contains("NB2_TOKEN"),
        "a reference was shown: {all}"
    );
    let bad = all
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "bad")
        .unwrap();
    let e = bad["error"].as_str().unwrap();
    assert!(
        e.contains("colour") && e.contains("line 3, column 1"),
        "{e}"
    );

    // Refusals.
    let (s, v) = d
        .post("/v1/bindings", json!({"name": "x", "addon": "ghost", "settings": {}, "secrets": {}, "removeSecrets": []}))
        .await;
    daemon_support::assert_problem(s, &v, 400, "binding invalid");
    let (s, v) = d
        .post("/v1/bindings", json!({"name": "x", "addon": "notes", "settings": {}, "secrets": {"token": "abcdefgh1234"}}))
        .await;
    daemon_support::assert_problem(s, &v, 400, "binding invalid");
    assert!(
        v["detail"].as_str().unwrap().contains("settings.url"),
        "{v}"
    );
    let (s, v) = d
        .post("/v1/bindings", json!({"name": "x", "addon": "notes", "settings": {"url": "u"}, "secrets": {"token": "abcdefgh1234", "nope": "x"}}))
        .await;
    daemon_support::assert_problem(s, &v, 400, "binding invalid");
    let (s, v) = d
        .post("/v1/bindings", json!({"name": "nb", "addon": "notes", "settings": {"url": "u"}, "secrets": {"token": "abcdefgh1234"}}))
        .await;
    daemon_support::assert_problem(s, &v, 409, "binding exists");
    let (s, v) = d
        .post("/v1/bindings", json!({"name": "x", "addon": "broken"}))
        .await;
    daemon_support::assert_problem(s, &v, 400, "binding invalid");

    // An agent picks nb; a rename follows to the agent and moves the stored secrets.
    let a = d.fake_agent("perso", json!({"bindings": ["nb"]})).await;
    let id = a["id"].as_str().unwrap().to_string();
    let (_, nb) = d.get("/v1/bindings/nb").await;
    assert_eq!(nb["usedBy"], json!([format!("ad-hoc/{id}")]));
    let (s, v) = d
        .put(
            "/v1/bindings/nb",
            json!({"name": "notes-main", "addon": "notes", "settings": {"url": "https://notes.example.org/v2"}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["secrets"], json!(["signing", "token"]));
    assert!(!bindings_dir(&d).join("nb.toml").exists());
    let (_, agent) = d.get(&format!("/v1/agents/{id}")).await;
    assert_eq!(agent["bindings"], json!(["notes-main"]));
    let (_, secrets) = d.get("/v1/secrets").await;
    let paths: Vec<&str> = secrets
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"bindings/notes-main/token"), "{paths:?}");
    assert!(
        !paths.iter().any(|p| p.starts_with("bindings/nb/")),
        "{paths:?}"
    );
    assert_eq!(
        d.state.secrets.value("bindings/notes-main/token").unwrap(),
        NOTES_TOKEN
    );
    // A new value replaces the stored one at the same path.
    let (s, v) = d
        .put(
            "/v1/bindings/notes-main",
            json!({"name": "notes-main", "addon": "notes", "settings": {"url": "u"}, "secrets": {"token": "nt-Replaced0123456789"}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        d.state.secrets.value("bindings/notes-main/token").unwrap(),
        "nt-Replaced0123456789"
    );
    assert_eq!(
        d.state
            .secrets
            .value("bindings/notes-main/signing")
            .unwrap(),
        SIGNING
    );
    // removeSecrets drops a slot and its stored value.
    let (s, v) = d
        .put(
            "/v1/bindings/notes-main",
            json!({"name": "notes-main", "addon": "notes", "settings": {"url": "u"}, "removeSecrets": ["signing"]}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["secrets"], json!(["token"]));
    assert!(!d.state.secrets.is_set("bindings/notes-main/signing"));
    // Delete: refused while picked, then its secrets go with it.
    let (s, v) = d.delete("/v1/bindings/notes-main").await;
    daemon_support::assert_problem(s, &v, 409, "binding in use");
    let (s, _) = d.delete(&format!("/v1/agents/{id}")).await;
    assert_eq!(s, 204);
    let (s, _) = d.delete("/v1/bindings/notes-main").await;
    assert_eq!(s, 204);
    assert!(!d.state.secrets.is_set("bindings/notes-main/token"));
    let (s, _) = d.get("/v1/bindings/notes-main").await;
    assert_eq!(s, 404);

    assert_no_secret(&daemon_support::bodies(), "an API answer");
    assert_no_secret(&daemon_support::logs(), "the daemon's log");
    d.stop().await;
}

#[tokio::test]
async fn agent_saves_enforce_g3() {
    let d = setup().await;
    for (bindings, why) in [
        (json!(["ghost"]), "no binding \"ghost\""),
        (json!(["bad"]), "is invalid"),
        (json!(["nb", "nb2"]), "both use addon notes"),
        (json!(["tb", "tb2"]), "both declare the command \"tool\""),
    ] {
        let (s, v) = d
            .post(
                "/v1/agents",
                json!({"models": [{"account": "perso"}], "scope": d.scope(), "bindings": bindings}),
            )
            .await;
        daemon_support::assert_problem(s, &v, 400, "binding unusable");
        assert!(v["detail"].as_str().unwrap().contains(why), "{v}");
    }
    let a = d
        .fake_agent("perso", json!({"bindings": ["tb", "nb"]}))
        .await;
    assert_eq!(a["bindings"], json!(["nb", "tb"]));
    // E4: the addon's hosts are among the model's required hosts.
    let req = &a["models"][0]["requiredHosts"];
    assert!(
        req.as_array()
            .unwrap()
            .contains(&json!({"host": "notes.example.org:443", "by": "addon notes: nb"})),
        "{req}"
    );
    d.stop().await;
}

#[tokio::test]
async fn g4_at_launch_and_p8_through_the_socket() {
    let d = setup().await;
    let a = d
        .fake_agent("perso", json!({"bindings": ["nb", "tb"]}))
        .await;
    let id = a["id"].as_str().unwrap().to_string();
    let mut c = d.acp(&id).await;
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    // P8: the addon's server reaches session/new; a client's server of that name is refused.
    let r = c
        .request(
            "session/new",
            json!({"cwd": d.scope(), "mcpServers": [{"name": "tools", "command": "/bin/evil", "args": [], "env": []}]}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("tools"),
        "{r}"
    );
    let r = c
        .request(
            "session/new",
            json!({"cwd": d.scope(), "mcpServers": [{"name": "mine", "command": "/bin/true", "args": [], "env": []}]}),
        )
        .await;
    let sid = r["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let servers = &r["result"]["_meta"]["fake/received"]["mcpServers"];
    assert!(
        servers.as_array().unwrap().contains(
            &json!({"name": "tools", "command": "tool", "args": ["mcp", "--stdio"], "env": []})
        ),
        "{servers}"
    );
    assert!(
        servers
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "mine"),
        "{servers}"
    );

    // The spec: image, PATH, env, injections, allow-list, skills.
    let log = d.sandbox_log();
    let spec: Value = serde_json::from_str(
        log.lines()
            .find(|l| l.starts_with("launch "))
            .unwrap()
            .trim_start_matches("launch "),
    )
    .unwrap();
    assert_eq!(
        spec["imageMounts"],
        json!([{"image": "localhost/handler-ai-addon-tools:latest", "target": "/opt/addons/tools"}])
    );
    assert_eq!(spec["pathAppend"], json!(["/opt/addons/tools/bin"]));
    assert_eq!(spec["env"]["NOTES_URL"], "https://notes.example.org");
    assert_eq!(spec["env"]["NOTES_FORMAT"], "markdown");
    // env delivery: the value itself; proxy delivery: a phantom, and an injection.
    assert_eq!(spec["env"]["NOTES_SIGNING_KEY"], SIGNING);
    let phantom = spec["env"]["NOTES_TOKEN"].as_str().unwrap().to_string();
    assert_ne!(phantom, NOTES_TOKEN);
    assert_eq!(phantom.len(), NOTES_TOKEN.len());
    let inj = spec["injections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "bindings/nb/token")
        .unwrap_or_else(|| panic!("{spec}"));
    assert_eq!(inj["phantom"], phantom.as_str());
    assert_eq!(inj["hosts"], json!(["notes.example.org:443"]));
    let allow = spec["network"]["allow"].as_array().unwrap();
    assert!(allow.contains(&json!("notes.example.org:443")), "{spec}");
    assert!(allow.contains(&json!("api.fake.test:443")), "{spec}");
    assert!(
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["target"] == "/home/agent/.fake/skills/notes-howto" && m["readOnly"] == true),
        "{spec}"
    );
    // The process holds the phantom.
    let r = c.request("_fake/env", json!({"name": "NOTES_TOKEN"})).await;
    assert_eq!(r["result"]["value"], phantom.as_str());
    // P5: the binding's values said by the agent are replaced.
    c.request(
        "_fake/say",
        json!({"sessionId": sid, "text": format!("{NOTES_TOKEN} and {SIGNING}")}),
    )
    .await;
    let said = c
        .seen
        .iter()
        .rev()
        .find(|m| m["method"] == "session/update")
        .unwrap();
    assert_eq!(
        said["params"]["update"]["content"]["text"],
        "[secret bindings/nb/token] and [secret bindings/nb/signing]"
    );
    // Its stderr, logged, is redacted too.
    c.request(
        "_fake/stderr",
        json!({"line": format!("tool says {NOTES_TOKEN}")}),
    )
    .await;
    drop(c);
    // A binding broken since the save fails the start.
    std::fs::write(
        bindings_dir(&d).join("tb.toml"),
        "apiVersion = \"handler.binding/v1\"\naddon = \"tools\"\nextra = 1\n",
    )
    .unwrap();
    match daemon_support::acp::open(&d.acp_url(&id, ""), &d.protocols(), None).await {
        Err(e) => assert_eq!(daemon_support::acp::refused_status(&e), Some(400)),
        Ok(_) => panic!("a start with an invalid binding"),
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !log.contains(NOTES_TOKEN),
        "the injection value reached the sandbox log"
    );
    assert_no_secret(&daemon_support::logs(), "the daemon's log");
    assert_no_secret(&daemon_support::bodies(), "an API answer");
    d.stop().await;
}

#[tokio::test]
async fn a_binding_variable_the_harness_sets_fails_the_start() {
    let d = setup().await;
    // An addon whose static env names the harness's token variable (G1 cannot know it).
    write(
        &d.home
            .path()
            .join(".config/handler-ai/addons/clash/addon.toml"),
        "apiVersion = \"handler.addon/v1\"\nname = \"clash\"\n[env]\nFAKE_TOKEN = \"x\"\n",
    );
    write(
        &bindings_dir(&d).join("cl.toml"),
        "apiVersion = \"handler.binding/v1\"\naddon = \"clash\"\n",
    );
    let a = d.fake_agent("perso", json!({"bindings": ["cl"]})).await;
    match daemon_support::acp::open(
        &d.acp_url(a["id"].as_str().unwrap(), ""),
        &d.protocols(),
        None,
    )
    .await
    {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            assert_eq!(r.status().as_u16(), 400);
            let body: Value = serde_json::from_slice(r.body().as_ref().unwrap()).unwrap();
            assert_eq!(body["title"], "binding unusable", "{body}");
            assert!(
                body["detail"]
                    .as_str()
                    .unwrap()
                    .contains("FAKE_TOKEN is also set by the harness"),
                "{body}"
            );
        }
        other => panic!("the start was not refused: {:?}", other.map(|_| ())),
    }
    d.stop().await;
}

#[tokio::test]
async fn a_binding_changed_under_a_running_sandbox_changes_its_allow_list_live() {
    let d = setup().await;
    let a = d.fake_agent("perso", json!({"bindings": ["nb"]})).await;
    let id = a["id"].as_str().unwrap().to_string();
    let _c = d.acp(&id).await;
    let (_, a) = d.get(&format!("/v1/agents/{id}")).await;
    let sandbox = a["connections"][0]["sandbox"].as_str().unwrap().to_string();
    assert!(
        d.sandbox_log().contains("notes.example.org:443"),
        "{}",
        d.sandbox_log()
    );
    // The binding now takes an addon without egress: notes.example.org goes, the model's host
    // stays.
    let (s, v) = d
        .put("/v1/bindings/nb", json!({"name": "nb", "addon": "tools"}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(
        d.sandbox_log()
            .contains(&format!("set-allow {sandbox} api.fake.test:443\n")),
        "{}",
        d.sandbox_log()
    );
    d.stop().await;
}

/// F10 (issue 27, decision 0134): a slot names only the binding's own paths and the paths the
/// person made: never a provider's key nor another binding's value (a person's values outside
/// `accounts/`, `providers/`, `bindings/` stay free, the binding's own under its old name too).
#[tokio::test]
async fn a_binding_slot_never_names_a_providers_key_or_another_bindings_value() {
    let d = setup().await;
    let (s, v) = d
        .post(
            "/v1/providers",
            json!({"name": "or", "endpoints": {"openai-chat": "https://openrouter.ai/api/v1"},
                "models": [{"id": "m"}], "apiKey": "sk-or-v1-ProviderKey0123456789abcdef"}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert!(d.state.secrets.is_set("providers/or/apiKey"));
    assert!(d.state.secrets.is_set("bindings/nb/token"));
    for (path, why) in [
        ("providers/or/apiKey", "is a provider's key"),
        ("bindings/nb/token", "is another binding's value"),
        ("bindings/nb/signing", "is another binding's value"),
    ] {
        let (s, v) = d
            .post(
                "/v1/bindings",
                json!({"name": "thief", "addon": "notes", "settings": {"url": "u"},
                    "secretPaths": {"token": path}}),
            )
            .await;
        daemon_support::assert_problem(s, &v, 400, "binding invalid");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("secretPaths.token: ") && detail.contains(why),
            "{path}: {v}"
        );
    }
    // The env-delivered slot too (the value itself would reach the sandbox).
    let (s, v) = d
        .post(
            "/v1/bindings",
            json!({"name": "thief", "addon": "notes", "settings": {"url": "u"},
                "secretPaths": {"signing": "providers/or/apiKey"}}),
        )
        .await;
    daemon_support::assert_problem(s, &v, 400, "binding invalid");
    assert!(!bindings_dir(&d).join("thief.toml").exists());
    // Its own paths stay nameable.
    let (s, v) = d
        .put(
            "/v1/bindings/nb",
            json!({"name": "nb", "addon": "notes", "settings": {"url": "u"},
                "secretPaths": {"token": "bindings/nb/token"}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["secretPaths"]["token"], "bindings/nb/token", "{v}");
    d.stop().await;
}

/// Decision 0109: a secret slot may name a value the secret store already holds (chosen from
/// its list); the binding shows that path, never the value; bad paths are 400 naming the field.
#[tokio::test]
async fn a_binding_slot_names_a_secret_of_the_store() {
    let d = setup().await;
    let shared = "nt-SharedStoreValue0123456789";
    let (s, v) = d
        .put("/v1/secrets/team/notes-token", json!({"value": shared}))
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, nb) = d.get("/v1/bindings/nb").await;
    assert_eq!(
        nb["secretPaths"],
        json!({"signing": "bindings/nb/signing", "token": "bindings/nb/token"})
    );
    for (paths, why) in [
        (
            json!({"token": "team/missing"}),
            "secretPaths.token: the secret store has no value",
        ),
        (
            json!({"token": "accounts/perso/token"}),
            "secretPaths.token: \"accounts/perso/token\" is an account's token",
        ),
        (
            json!({"ghost": "team/notes-token"}),
            "secretPaths.ghost: addon notes declares no secret slot",
        ),
    ] {
        let (s, v) = d
            .put(
                "/v1/bindings/nb",
                json!({"name": "nb", "addon": "notes", "settings": {"url": "u"}, "secretPaths": paths}),
            )
            .await;
        daemon_support::assert_problem(s, &v, 400, "binding invalid");
        assert!(v["detail"].as_str().unwrap().contains(why), "{v}");
    }
    // Its own stored path named again: left as it is; another path: its own value goes.
    let (s, v) = d
        .put(
            "/v1/bindings/nb",
            json!({"name": "nb", "addon": "notes", "settings": {"url": "u"},
                "secretPaths": {"token": "team/notes-token", "signing": "bindings/nb/signing"}}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["secretPaths"],
        json!({"signing": "bindings/nb/signing", "token": "team/notes-token"})
    );
    assert!(!d.state.secrets.is_set("bindings/nb/token"));
    assert_eq!(
        d.state.secrets.value("bindings/nb/signing").unwrap(),
        SIGNING
    );
    let text = std::fs::read_to_string(bindings_dir(&d).join("nb.toml")).unwrap();
    assert!(
        text.contains("token = { secret = \"team/notes-token\" }"),
        "{text}"
    );
    // A new binding may name it too; the value is never in an answer.
    let (s, v) = d
        .post(
            "/v1/bindings",
            json!({"name": "nb3", "addon": "notes", "settings": {"url": "u"},
                "secretPaths": {"token": "team/notes-token"}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["secretPaths"], json!({"token": "team/notes-token"}));
    assert!(v["error"].is_null(), "{v}");
    assert!(
        !daemon_support::bodies().contains(shared),
        "the value in an answer"
    );
    d.stop().await;
}

/// D.4 automatic updates (issue 33 item 8): the scheduler's look at a time given to it — not due
/// a day after the first start, due after a week — runs the network filter, then each harness
/// image already built, then each addon image already built (`addon:<name>`), one after the
/// other; the never-built ones are left; the run's time then counts. (The fake runtime fails
/// every build: each is recorded as failed, in that order.)
#[tokio::test]
async fn automatic_updates_rebuild_the_built_harness_and_addon_images_when_due() {
    use handler_core::daemon::services::images::updates;
    use std::time::{Duration, SystemTime};
    let d = TestDaemon::start().await;
    write_addons(&d);
    // Built: the fake harness's image and the `tools` addon's; `tools2`'s never was.
    let images = format!("{}.images", d.home.path().join("sandbox.log").display());
    std::fs::write(
        &images,
        "localhost/handler-test-busybox:latest\nlocalhost/handler-ai-addon-tools:latest\n",
    )
    .unwrap();
    let (s, u) = d.get("/v1/image-updates").await;
    assert_eq!((s, &u["schedule"]), (200, &json!("weekly")), "{u}");
    let day = Duration::from_secs(86_400);
    let now = SystemTime::now();
    assert!(
        !updates::tick(&d.state, now + day).await,
        "not due after a day"
    );
    assert!(u.get("lastRun").is_none(), "{u}");
    // (The network filter's build this daemon starts with must have ended: one build at a time.)
    let t0 = std::time::Instant::now();
    while d
        .get("/v1/builds")
        .await
        .1
        .to_string()
        .contains("\"running\"")
    {
        assert!(t0.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        updates::tick(&d.state, now + 8 * day).await,
        "due after a week"
    );
    let (_, u) = d.get("/v1/image-updates").await;
    assert!(u["lastRun"].is_string(), "{u}");
    assert_eq!(
        u["lastFailed"],
        json!(["network-filter", "fake", "addon:tools"]),
        "{u}: {}",
        d.sandbox_log()
    );
    let (_, builds) = d.get("/v1/builds").await;
    let targets: Vec<&str> = builds
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["target"].as_str())
        .collect();
    assert!(
        targets.contains(&"addon:tools") && !targets.contains(&"addon:tools2"),
        "{builds}"
    );
    // The run's time counts now: not due the next day.
    assert!(!updates::tick(&d.state, SystemTime::now() + day).await);
    d.stop().await;
}
