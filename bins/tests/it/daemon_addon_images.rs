//! Addon images (G.4) against the real runtime, as the images tests run (handlerd as the test
//! user with handler-sandbox-podman, the toolbox a name of `localhost/handler-test-busybox`):
//! a multi-stage addon (built FROM the toolbox, its tree copied into a FROM scratch image) is
//! built without intermediate images, checked in the toolbox with it mounted, and switched;
//! one whose bin/ holds an extra command and one whose `check` exits 1 fail and leave `:latest`
//! alone; an image a container mounts is kept by the next switch; a toolbox rebuild rebuilds
//! the built addon; an agent with a binding of it runs its command from PATH in its sandbox;
//! an installed addon's image goes with it (G.5), not while a binding uses it.

use std::path::Path;
use std::time::{Duration, Instant};

use handler_contracts::addon::addon_image;
use serde_json::json;

use super::daemon_images::{
    BASE, Images, ONE_AT_A_TIME, descriptor, image_id, podman, ready, setup, start,
};

/// An addon folder: its manifest and a two-stage Containerfile writing `tools` (name → script
/// body) into bin/ and `version`; `commands` and `check` as given.
fn addon(im: &Images, name: &str, tools: &[(&str, &str)], commands: &[&str], check: &[&str]) {
    let dir = im.root.join("config/addons").join(name);
    addon_in(im, &dir, name, tools, commands, check);
}

/// [`addon`]'s folder written at `dir` (a source to install, G.5).
fn addon_in(
    im: &Images,
    dir: &Path,
    name: &str,
    tools: &[(&str, &str)],
    commands: &[&str],
    check: &[&str],
) {
    std::fs::create_dir_all(dir).unwrap();
    let q = |v: &[&str]| {
        v.iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let check = if check.is_empty() {
        String::new()
    } else {
        format!("check = [{}]\n", q(check))
    };
    std::fs::write(
        dir.join("addon.toml"),
        format!(
            "apiVersion = \"handler.addon/v1\"\nname = \"{name}\"\nimage = \"{}\"\ncommands = [{}]\n{check}",
            addon_image(name),
            q(commands)
        ),
    )
    .unwrap();
    let root = format!("/opt/addons/{name}");
    let mut run = format!("mkdir -p {root}/bin && echo '{name} 1.0' > {root}/version");
    for (t, body) in tools {
        run.push_str(&format!(
            " && printf '#!/bin/sh\\n{body}\\n' > {root}/bin/{t} && chmod 755 {root}/bin/{t}"
        ));
    }
    std::fs::write(
        dir.join("Containerfile"),
        format!(
            "ARG TOOLBOX_IMAGE\nFROM ${{TOOLBOX_IMAGE}} AS build\nLABEL handler.test.images={tag}\nRUN {run}\n\
             FROM scratch\nLABEL handler.test.images={tag}\nCOPY --from=build {root}/ /\n",
            tag = im.tag
        ),
    )
    .unwrap();
}

/// An addon's image is its own name's (G.1, decision 0134): this run's are told apart by their
/// label (`Images::left`), which their builds carry.
fn latest(_im: &Images, name: &str) -> String {
    format!("{}:latest", addon_image(name))
}

fn events(root: &Path, session: &str) -> String {
    std::fs::read_to_string(
        root.join("state/sessions")
            .join(session)
            .join("events.ndjson"),
    )
    .unwrap_or_default()
}

#[tokio::test]
async fn an_addon_is_built_checked_switched_rebuilt_with_the_toolbox_and_used_by_an_agent() {
    if !ready() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let im = setup("addon");
    let hello = "echo hello-from-addon";
    addon(
        &im,
        "hiaddon",
        &[("hi-addon-tool", hello)],
        &["hi-addon-tool"],
        &["hi-addon-tool"],
    );
    addon(
        &im,
        "extraaddon",
        &[("xa-tool", hello), ("xa-undeclared", hello)],
        &["xa-tool"],
        &[],
    );
    addon(
        &im,
        "failaddon",
        &[("fa-tool", "exit 1")],
        &["fa-tool"],
        &["fa-tool"],
    );
    let noimg = im.root.join("config/addons/noimg");
    std::fs::create_dir_all(&noimg).unwrap();
    std::fs::write(
        noimg.join("addon.toml"),
        "apiVersion = \"handler.addon/v1\"\nname = \"noimg\"\n",
    )
    .unwrap();
    let bad = im.root.join("config/addons/badaddon");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(
        bad.join("addon.toml"),
        "apiVersion = \"handler.addon/v1\"\nname = \"badaddon\"\nimage = \"x\"\n",
    )
    .unwrap();
    im.harness("addonharness", true, "");
    // The failing addon's :latest before (the base): its failed build must leave it.
    let fail_latest = latest(&im, "failaddon");
    assert!(podman(&["tag", BASE, &fail_latest]).0);
    let d = start(&im).await;

    for (target, says) in [
        ("addon:nope", "no such addon"),
        ("addon:noimg", "has no image"),
        ("addon:badaddon", "is invalid"),
    ] {
        let (s, p) = d
            .call(
                reqwest::Method::POST,
                "/v1/builds",
                Some(json!({"target": target})),
            )
            .await;
        assert_eq!(s, 422, "{target}: {p}");
        let detail = p["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(target) && detail.contains(says),
            "{target}: {p}"
        );
    }

    // Built, checked, switched; no intermediate image left (only the new :latest has the label).
    let id = d.build("addon:hiaddon").await;
    let b = d.ended(&id).await;
    let log = d.log(&id).await;
    assert_eq!(b["state"], "succeeded", "{b}\n{log}");
    assert_eq!(b["versions"]["addon:hiaddon"], "hiaddon 1.0", "{b}");
    assert!(log.contains("STEP 1/"), "{log}");
    assert!(log.contains("check addon:hiaddon: passed"), "{log}");
    let first = image_id(&latest(&im, "hiaddon")).expect("switched to :latest");
    let left = im.left();
    assert_eq!(left.len(), 1, "intermediate images left: {left:?}\n{log}");
    assert!(first.starts_with(&left[0]), "{left:?} {first}");

    // bin/ holds a command it does not declare: failed, nothing switched, its image removed.
    let id2 = d.build("addon:extraaddon").await;
    let b2 = d.ended(&id2).await;
    let log2 = d.log(&id2).await;
    assert_eq!(b2["state"], "failed", "{b2}\n{log2}");
    let err = b2["error"].as_str().unwrap();
    assert!(
        err.starts_with("check addon:extraaddon:") && err.contains("\"xa-undeclared\""),
        "{err}"
    );
    assert!(image_id(&latest(&im, "extraaddon")).is_none(), "{log2}");
    let built = log2
        .lines()
        .find_map(|l| l.strip_prefix("built "))
        .unwrap_or_else(|| panic!("{log2}"));
    assert!(
        image_id(built).is_none(),
        "the failed build's image is left"
    );

    // check exits 1: failed, :latest unchanged.
    let before = image_id(&fail_latest).unwrap();
    let id3 = d.build("addon:failaddon").await;
    let b3 = d.ended(&id3).await;
    let log3 = d.log(&id3).await;
    assert_eq!(b3["state"], "failed", "{b3}\n{log3}");
    assert!(b3["error"].as_str().unwrap().contains("exited 1"), "{b3}");
    assert_eq!(image_id(&fail_latest), Some(before), "{log3}");
    let _ = podman(&["rmi", &fail_latest]);

    // An agent with a binding of it: its command is on PATH in the sandbox (G4).
    let idh = d.build("addonharness").await;
    let bh = d.ended(&idh).await;
    assert_eq!(bh["state"], "succeeded", "{bh}\n{}", d.log(&idh).await);
    let (s, v) = d
        .call(reqwest::Method::POST, "/v1/accounts", Some(json!({"name": "perso", "harness": "addonharness", "token": {"value": "fk-AddonImagesToken0123456789abcdef"}})))
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = d
        .call(
            reqwest::Method::POST,
            "/v1/bindings",
            Some(json!({"name": "hi", "addon": "hiaddon"})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, a) = d
        .call(reqwest::Method::POST, "/v1/agents", Some(json!({"models": [{"account": "perso"}], "scope": im.root.join("home/code").display().to_string(), "network": "none", "bindings": ["hi"]})))
        .await;
    assert_eq!(s, 201, "{a}");
    let (s, sess) = d
        .call(reqwest::Method::POST, "/v1/sessions", Some(json!({"agentId": a["id"], "origin": "ui", "prompt": "sh: echo \"path=$PATH\"; hi-addon-tool"})))
        .await;
    assert_eq!(s, 201, "{sess}");
    let sid = sess["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let e = events(&im.root, &sid);
        if e.contains("hello-from-addon") {
            assert!(e.contains("/opt/addons/hiaddon/bin"), "{e}");
            assert!(e.contains("exit 0"), "{e}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the addon's command did not run: {e}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The agent's sandbox mounts :latest: the next switch keeps that image for it (the
    // runtime's image remove refuses, A.7); it goes once the sandbox is gone.
    let id4 = d.build("addon:hiaddon").await;
    let b4 = d.ended(&id4).await;
    let log4 = d.log(&id4).await;
    assert_eq!(b4["state"], "succeeded", "{b4}\n{log4}");
    let second = image_id(&latest(&im, "hiaddon")).unwrap();
    assert_ne!(first, second, "no cache: a new image");
    assert!(
        image_id(&first).is_some(),
        "the mounted image was removed\n{log4}"
    );
    assert!(log4.contains("still in use"), "{log4}");
    let (s, _) = d
        .call(
            reqwest::Method::DELETE,
            &format!("/v1/sessions/{sid}"),
            None,
        )
        .await;
    assert!(s < 300, "the session is removed: {s}");

    // A toolbox rebuild rebuilds and checks the built addon (the never-built ones are left).
    let id5 = d.build("toolbox").await;
    let b5 = d.until(&id5, 600, |b| b["state"] != "running").await;
    let log5 = d.log(&id5).await;
    assert_eq!(b5["state"], "succeeded", "{b5}\n{log5}");
    assert!(log5.contains("check addon:hiaddon: passed"), "{log5}");
    assert!(!log5.contains("addon:extraaddon"), "{log5}");
    assert_eq!(b5["versions"]["addon:hiaddon"], "hiaddon 1.0", "{b5}");
    let third = image_id(&latest(&im, "hiaddon")).unwrap();
    assert_ne!(second, third, "the toolbox rebuild switched the addon");
    assert!(
        image_id(&first).is_none(),
        "the image kept for the sandbox stays after it\n{log5}"
    );
}

/// G.5's removal with a real image: an addon installed from a folder gets its first build
/// (checked, switched to `:latest`); its removal is refused (409) while a binding uses it, the
/// image kept; once the binding is gone it answers 204 and the image is gone from the user's
/// store, with the addon's folder.
#[tokio::test]
async fn an_installed_addons_image_goes_with_it_once_no_binding_uses_it() {
    if !ready() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let im = setup("addonrm");
    let src = im.root.join("src/rmaddon");
    let tool = [("rm-addon-tool", "echo from-rm-addon")];
    addon_in(
        &im,
        &src,
        "rmaddon",
        &tool,
        &["rm-addon-tool"],
        &["rm-addon-tool"],
    );
    let d = start(&im).await;
    let post = reqwest::Method::POST;
    let source = json!({"source": src.display().to_string()});
    let (s, p) = d
        .call(post.clone(), "/v1/addons/preview", Some(source.clone()))
        .await;
    assert_eq!(s, 200, "{p}");
    let mut req = source.clone();
    req["digest"] = p["digest"].clone();
    let (s, i) = d.call(post.clone(), "/v1/addons/install", Some(req)).await;
    assert_eq!(s, 201, "{i}");
    let id = i["build"]["id"].as_str().expect("its first build started");
    let b = d.ended(id).await;
    assert_eq!(b["state"], "succeeded", "{b}\n{}", d.log(id).await);
    let image = latest(&im, "rmaddon");
    let built = image_id(&image).expect("built and switched to :latest");

    let binding = json!({"name": "rmbinding", "addon": "rmaddon"});
    let (s, v) = d.call(post, "/v1/bindings", Some(binding)).await;
    assert_eq!(s, 201, "{v}");
    let delete = |path: &'static str| d.call(reqwest::Method::DELETE, path, None);
    let (s, e) = delete("/v1/addons/rmaddon").await;
    assert_eq!(s, 409, "{e}");
    assert!(e["detail"].as_str().unwrap().contains("rmbinding"), "{e}");
    assert_eq!(image_id(&image).as_deref(), Some(built.as_str()), "kept");
    let installed = im.root.join("config/addons/rmaddon");
    assert!(installed.join("addon.toml").is_file());

    assert_eq!(delete("/v1/bindings/rmbinding").await.0, 204);
    let (s, e) = delete("/v1/addons/rmaddon").await;
    assert_eq!(s, 204, "{e}");
    assert!(
        !podman(&["image", "exists", &image]).0,
        "{image} is still in the user's store"
    );
    assert!(image_id(&built).is_none(), "the image {built} is left");
    assert!(!installed.exists(), "its folder goes");
}

/// A harness taking stdio MCP servers (`mcpEnv` as given) whose fake agent starts them.
fn mcp_harness(im: &Images, name: &str, mcp_env: &str) {
    im.harness(name, true, "");
    let d = descriptor(name, &im.image(name));
    let (top, tables) = d.split_once("\n[").unwrap();
    let text = format!(
        "{top}\nmcpTransports = [\"stdio\"]\nmcpEnv = \"{mcp_env}\"\n[env]\nFAKE_AGENT_START_MCP = \"1\"\n[{tables}"
    );
    std::fs::write(
        im.root
            .join("home/harnesses")
            .join(name)
            .join("harness.toml"),
        text,
    )
    .unwrap();
}

/// The harness check's MCP probe (D.4, B6): a harness giving its stdio servers its own
/// environment hands them the dummy token, and fails; one starting them through
/// handler-sandbox-env passes where the image can run it (python3), else its probe never
/// started and it fails saying so.
#[tokio::test]
async fn the_harness_check_passes_a_probe_stdio_mcp_server_that_must_not_see_the_secret() {
    if !ready() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().await;
    let im = setup("mcp");
    mcp_harness(&im, "mcpinherit", "inherit");
    mcp_harness(&im, "mcpsandbox", "sandbox");
    let d = start(&im).await;

    let id = d.build("mcpinherit").await;
    let b = d.ended(&id).await;
    let log = d.log(&id).await;
    assert_eq!(b["state"], "failed", "{b}\n{log}");
    let err = b["error"].as_str().unwrap();
    assert!(
        err.starts_with("check mcpinherit: ") && err.contains("saw the dummy secret in FAKE_TOKEN"),
        "{err}"
    );
    assert!(
        !err.contains("dummy-token-0000") && !log.contains("dummy-token-0000"),
        "the secret's value is shown: {log}"
    );
    assert!(image_id(&format!("{}:latest", im.image("mcpinherit"))).is_none());

    let (_, python) = podman(&[
        "run",
        "--rm",
        BASE,
        "sh",
        "-c",
        "command -v python3 || true",
    ]);
    let id2 = d.build("mcpsandbox").await;
    let b2 = d.ended(&id2).await;
    let log2 = d.log(&id2).await;
    if python.is_empty() {
        assert_eq!(b2["state"], "failed", "{b2}\n{log2}");
        assert!(
            b2["error"].as_str().unwrap().contains("did not start"),
            "{b2}"
        );
    } else {
        assert_eq!(b2["state"], "succeeded", "{b2}\n{log2}");
    }
}
