//! `/v1/machines` (issue 29 item 2) through handlerd as the test user, on real rootless Podman:
//! a machine made from an allowed image (others refused, the field named), listed with its
//! state, its stats and status, stopped and started; still there and running after handlerd is
//! SIGKILLed and restarted; shown `missing` once its container is removed outside Handler;
//! deleted.

use serde_json::{Value, json};

use crate::temp_daemon::{IMAGE, Layout, TempDaemon};

async fn daemon(tag: &str) -> Option<TempDaemon> {
    let u = test_support::user::podman_user(IMAGE, "the machine API tests")?;
    let l = Layout::new(&format!("hdm-{}-{tag}", std::process::id()), true);
    l.fake_harness("");
    Some(
        l.spawn(
            u,
            &[(
                "HANDLER_MACHINE_IMAGES",
                "localhost/handler-test-busybox:*".to_string(),
            )],
        )
        .await,
    )
}

/// `handler ARGS` as the daemon's user, with its settings: (exit code, stdout, stderr).
fn handler(d: &TempDaemon, args: &[&str]) -> (i32, String, String) {
    let bin = d.root.join("bin/handler");
    let o = d
        .user
        .cmd(bin.to_str().unwrap(), args, &d.env)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

async fn post(d: &TempDaemon, path: &str, body: Value) -> (u16, Value) {
    d.call(reqwest::Method::POST, path, Some(body)).await
}

async fn get(d: &TempDaemon, path: &str) -> (u16, Value) {
    d.call(reqwest::Method::GET, path, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_is_made_listed_stopped_started_kept_across_a_restart_and_deleted() {
    let Some(mut d) = daemon("api").await else {
        return;
    };
    // Refusals name their field.
    for (body, field) in [
        (json!({"name": "box", "image": "node:22"}), "image"),
        (json!({"name": "box", "image": "-x"}), "image"),
        (json!({"name": "Box", "image": IMAGE}), "name"),
        (
            json!({"name": "box", "image": IMAGE, "network": "filtered"}),
            "network",
        ),
    ] {
        let (st, v) = post(&d, "/v1/machines", body.clone()).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert!(
            v["detail"].as_str().unwrap_or_default().starts_with(field),
            "{body}: {v}"
        );
    }
    let (st, v) = post(
        &d,
        "/v1/machines",
        json!({"name": "box", "image": IMAGE, "extra": 1}),
    )
    .await;
    assert_eq!(st, 422, "an unknown key: {v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with("extra"),
        "{v}"
    );
    // Made from the command line; listed there as JSON.
    let (code, out, err) = handler(&d, &["machine", "create", "box", "--image", IMAGE]);
    assert_eq!(code, 0, "{out}{err}: {}", d.log());
    assert!(out.contains("machine box made (running)"), "{out}");
    let (code, out, err) = handler(&d, &["--json", "machine", "ls"]);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[0]["id"], "box", "{listed}");
    assert_eq!(listed[0]["state"], "running", "{listed}");
    let (code, out, _) = handler(&d, &["machine", "stats", "box"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("cpu "), "{out}");
    let (st, v) = post(&d, "/v1/machines", json!({"name": "box", "image": IMAGE})).await;
    assert_eq!(st, 409, "{v}");
    let (_, list) = get(&d, "/v1/machines").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(list[0]["id"], "box");
    let (st, s) = get(&d, "/v1/machines/box/stats").await;
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["running"], true, "{s}");
    let (st, r) = get(&d, "/v1/machines/box/status").await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["Config"]["Labels"]["handler.machine"], "box", "{r}");
    let (st, _) = post(&d, "/v1/machines/box/stop", json!({})).await;
    assert_eq!(st, 204);
    let (_, m) = get(&d, "/v1/machines/box").await;
    assert_eq!(m["state"], "stopped", "{m}");
    let (_, s) = get(&d, "/v1/machines/box/stats").await;
    assert_eq!(s, json!({"running": false}));
    let (st, _) = post(&d, "/v1/machines/box/start", json!({})).await;
    assert_eq!(st, 204);
    // Machines are the person's: handlerd SIGKILLed and restarted finds it running.
    let bin = d.root.join("bin/handlerd");
    d.kill_and_start(&bin).await;
    let (_, m) = get(&d, "/v1/machines/box").await;
    assert_eq!(m["state"], "running", "{m}: {}", d.log());
    // Removed behind Handler's back: shown missing, never made again.
    let o = d
        .user
        .cmd(
            "podman",
            &["rm", "-f", "--time", "0", "handler-m-box"],
            &[("HOME", d.user.home())],
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (_, m) = get(&d, "/v1/machines/box").await;
    assert_eq!(m["state"], "missing", "{m}");
    let (st, _) = get(&d, "/v1/machines/box/status").await;
    assert_eq!(st, 404);
    let (st, _) = d
        .call(reqwest::Method::DELETE, "/v1/machines/box", None)
        .await;
    assert_eq!(st, 204);
    let (st, _) = get(&d, "/v1/machines/box").await;
    assert_eq!(st, 404);
    let (_, list) = get(&d, "/v1/machines").await;
    assert_eq!(list, json!([]));
    // Its name is free again: nothing it left holds it.
    let (st, m) = post(&d, "/v1/machines", json!({"name": "box", "image": IMAGE})).await;
    assert_eq!(st, 201, "{m}");
    let (code, out, err) = handler(&d, &["machine", "rm", "box"]);
    assert_eq!(code, 0, "{out}{err}");
    let (st, _) = get(&d, "/v1/machines/box").await;
    assert_eq!(st, 404);
}
