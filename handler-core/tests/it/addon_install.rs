//! Installing addons through a real daemon (G.5): the catalog listed and installed; a folder
//! previewed then installed (its files, the lock file's entry, AddonInfo.source); content changed
//! after the preview refused (422); a link out of the folder refused; the user's own addon
//! neither replaced (422) nor removed (409); a built-in-free removal refused while a binding
//! uses it, then allowed.

use crate::daemon_support;

use std::path::Path;

use daemon_support::TestDaemon;
use serde_json::{Value, json};

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A valid addon `name` without image in `dir`: env, a setting, a secret slot, egress, a skill.
fn source(dir: &Path, name: &str) {
    write(
        &dir.join("addon.toml"),
        &format!(
            "apiVersion = \"handler.addon/v1\"\nname = \"{name}\"\ndescription = \"Notes\"\negress = [\"notes.example.org:443\"]\n\n[env]\nNOTES_FORMAT = \"md\"\n\n[settings.url]\nenv = \"NOTES_URL\"\nrequired = true\n\n[secretSlots.token]\nenv = \"NOTES_TOKEN\"\n"
        ),
    );
    write(
        &dir.join("skills/notes-howto/SKILL.md"),
        "---\nname: notes-howto\ndescription: How to file notes\n---\nUse notes.\n",
    );
}

async fn preview(d: &TestDaemon, src: &str) -> (u16, Value) {
    d.post("/v1/addons/preview", json!({"source": src})).await
}

#[tokio::test]
async fn a_folder_is_previewed_then_installed_and_recorded() {
    let d = TestDaemon::start().await;
    let src = d.home.path().join("src/notes");
    source(&src, "notes");
    let s = src.display().to_string();
    let (st, p) = preview(&d, &s).await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["name"], "notes");
    assert_eq!(
        p["env"],
        json!(["NOTES_FORMAT", "NOTES_TOKEN", "NOTES_URL"])
    );
    assert_eq!(p["egress"], json!(["notes.example.org:443"]));
    assert_eq!(p["skills"], json!(["notes-howto"]));
    assert_eq!(p["settings"][0]["name"], "url");
    assert_eq!(p["secretSlots"][0]["name"], "token");
    assert!(p.get("replaces").is_none(), "{p}");
    let digest = p["digest"].as_str().unwrap().to_string();
    assert!(
        d.home
            .path()
            .join(format!(
                ".local/state/handler-ai/addon-staging/{digest}/notes/addon.toml"
            ))
            .is_file(),
        "staged under its digest"
    );

    // Changed after the preview: refused, nothing installed.
    write(&src.join("extra.txt"), "more");
    let (st, e) = d
        .post("/v1/addons/install", json!({"source": s, "digest": digest}))
        .await;
    assert_eq!(st, 422, "{e}");
    assert!(e["detail"].as_str().unwrap().contains("digest"), "{e}");
    let addons = d.home.path().join(".config/handler-ai/addons");
    assert!(!addons.join("notes").exists());
    std::fs::remove_file(src.join("extra.txt")).unwrap();

    let (st, i) = d
        .post("/v1/addons/install", json!({"source": s, "digest": digest}))
        .await;
    assert_eq!(st, 201, "{i}");
    assert_eq!(i["addon"]["name"], "notes");
    assert_eq!(i["addon"]["source"], s.as_str());
    assert_eq!(i["addon"]["builtin"], false);
    assert!(i["addon"].get("error").is_none(), "{i}");
    assert!(i.get("build").is_none(), "no image, no build: {i}");
    assert!(addons.join("notes/skills/notes-howto/SKILL.md").is_file());
    let lock =
        std::fs::read_to_string(d.home.path().join(".config/handler-ai/addons.lock.toml")).unwrap();
    let lock: toml::Table = toml::from_str(&lock).unwrap();
    let e = &lock["addons"]["notes"];
    assert_eq!(e["source"].as_str(), Some(s.as_str()));
    assert_eq!(e["digest"].as_str(), Some(digest.as_str()));
    assert!(e["installedAt"].as_str().unwrap().contains('T'), "{e}");

    // Previewed again: it replaces the installed one (an update).
    let (_, p) = preview(&d, &s).await;
    assert_eq!(p["replaces"], "installed");

    // A binding uses it: removal refused; then allowed, folder and lock entry gone.
    let (st, b) = d
        .post(
            "/v1/bindings",
            json!({"name": "nb", "addon": "notes", "settings": {"url": "u"}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, e) = d.delete("/v1/addons/notes").await;
    assert_eq!(st, 409, "{e}");
    assert!(e["detail"].as_str().unwrap().contains("nb"), "{e}");
    assert_eq!(d.delete("/v1/bindings/nb").await.0, 204);
    let (st, e) = d.delete("/v1/addons/notes").await;
    assert_eq!(st, 204, "{e}");
    assert!(!addons.join("notes").exists());
    let lock =
        std::fs::read_to_string(d.home.path().join(".config/handler-ai/addons.lock.toml")).unwrap();
    assert!(!lock.contains("notes"), "{lock}");
}

#[tokio::test]
async fn the_catalog_is_listed_and_installed() {
    let d = TestDaemon::start().await;
    let (st, c) = d.get("/v1/addon-catalog").await;
    assert_eq!(st, 200, "{c}");
    let names: Vec<&str> = c
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["playwright", "shopify"]);
    assert!(
        c.as_array()
            .unwrap()
            .iter()
            .all(|e| e["installed"] == false)
    );
    let (_, all) = d.get("/v1/addons").await;
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .all(|a| a["name"] != "shopify"),
        "the catalog is not loaded: {all}"
    );
    let (st, p) = preview(&d, "catalog:shopify").await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["image"], "localhost/handler-ai-addon-shopify");
    assert_eq!(p["commands"], json!(["shopify"]));
    assert_eq!(p["skills"], json!(["shopify-theme"]));
    let (st, i) = d
        .post(
            "/v1/addons/install",
            json!({"source": "catalog:shopify", "digest": p["digest"]}),
        )
        .await;
    assert_eq!(st, 201, "{i}");
    assert_eq!(i["addon"]["source"], "catalog:shopify");
    assert_eq!(i["addon"]["updateAvailable"], false);
    assert!(i["addon"].get("error").is_none(), "{i}");
    let (_, c) = d.get("/v1/addon-catalog").await;
    let shop = c
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "shopify")
        .unwrap()
        .clone();
    assert_eq!(shop["installed"], true);
    // What is installed differs from what Handler ships: an update is available.
    write(
        &d.home.path().join(".config/handler-ai/addons.lock.toml"),
        &std::fs::read_to_string(d.home.path().join(".config/handler-ai/addons.lock.toml"))
            .unwrap()
            .replace(p["digest"].as_str().unwrap(), "0000"),
    );
    let (_, a) = d.get("/v1/addons/shopify").await;
    assert_eq!(a["updateAvailable"], true, "{a}");
    assert_eq!(preview(&d, "catalog:nope").await.0, 404);
}

#[tokio::test]
async fn a_link_out_of_the_folder_is_refused() {
    let d = TestDaemon::start().await;
    let src = d.home.path().join("src/linky");
    source(&src, "linky");
    std::os::unix::fs::symlink("../../../.config", src.join("out")).unwrap();
    let (st, e) = preview(&d, &src.display().to_string()).await;
    assert_eq!(st, 422, "{e}");
    assert!(e["detail"].as_str().unwrap().contains("out"), "{e}");
    std::fs::remove_file(src.join("out")).unwrap();
    std::os::unix::fs::symlink("skills/notes-howto/SKILL.md", src.join("inside")).unwrap();
    assert_eq!(preview(&d, &src.display().to_string()).await.0, 200);
    let (st, e) = preview(&d, "relative/path").await;
    assert_eq!(st, 400, "{e}");
    assert!(e["detail"].as_str().unwrap().starts_with("source:"), "{e}");
}

#[tokio::test]
async fn the_users_own_addon_is_neither_replaced_nor_removed() {
    let d = TestDaemon::start().await;
    let own = d.home.path().join(".config/handler-ai/addons/mine");
    source(&own, "mine");
    let src = d.home.path().join("src/mine");
    source(&src, "mine");
    write(&src.join("extra.txt"), "other content");
    let s = src.display().to_string();
    let (st, p) = preview(&d, &s).await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["replaces"], "own");
    let (st, e) = d
        .post(
            "/v1/addons/install",
            json!({"source": s, "digest": p["digest"]}),
        )
        .await;
    assert_eq!(st, 422, "{e}");
    assert!(!own.join("extra.txt").exists(), "not replaced");
    let (st, e) = d.delete("/v1/addons/mine").await;
    assert_eq!(st, 409, "{e}");
    assert!(own.join("addon.toml").is_file(), "not removed");
}
