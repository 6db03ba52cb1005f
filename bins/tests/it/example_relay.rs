//! handler-core's `launch_and_relay` example (launch a sandbox and relay ACP with handler-core as
//! a library), run as the unprivileged test user against real rootless Podman, so the SDK's
//! example cannot rot. Runs only as root (it switches to the test user); otherwise skipped when
//! `HANDLER_SKIP_PODMAN_TESTS=1`.

use std::path::PathBuf;
use std::process::Command;

use test_support::user::{USER, is_root, process_dir, setpriv};

#[allow(dead_code, reason = "the example's main is not called here")]
#[path = "../../../handler-core/examples/launch_and_relay.rs"]
mod shown;

const IMAGE: &str = "localhost/handler-test-busybox:latest";

fn ready() -> bool {
    if is_root() {
        return true;
    }
    if std::env::var("HANDLER_SKIP_PODMAN_TESTS").as_deref() == Ok("1") {
        eprintln!("podman tests skipped (HANDLER_SKIP_PODMAN_TESTS=1)");
        return false;
    }
    panic!(
        "these tests run as root (they start sandboxes as {USER}); or HANDLER_SKIP_PODMAN_TESTS=1"
    );
}

/// handler-sandbox-podman where the test user can run it.
fn launcher() -> PathBuf {
    let d = process_dir("example-relay-");
    let p = d.join("handler-sandbox-podman");
    std::fs::copy(env!("CARGO_BIN_EXE_handler-sandbox-podman"), &p).unwrap();
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&d)
        .status()
        .unwrap();
    p
}

#[tokio::test]
async fn the_example_launches_a_sandbox_and_relays_acp_through_the_pipeline() {
    if !ready() {
        return;
    }
    let mut command = setpriv();
    command.push(launcher().display().to_string());
    let (answer, code) = shown::run(command, IMAGE).await.unwrap();
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["protocolVersion"], 1, "{answer}");
    assert_eq!(code, Some(0), "the sandbox ends when its stdin closes");
}
