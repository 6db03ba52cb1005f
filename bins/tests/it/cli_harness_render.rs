//! `handler harness render --input FILE` prints exactly what the library renders, and fails with
//! render's error (exit 1, the reason on stderr) for an input the harness cannot honour.

use std::path::PathBuf;

use assert_cmd::Command;

fn inputs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/render/inputs")
}

#[test]
fn renders_the_matrix_inputs_as_the_library_does() {
    let mut rendered = 0;
    for entry in std::fs::read_dir(inputs()).unwrap().flatten().take(12) {
        let path = entry.path();
        let text = std::fs::read_to_string(&path).unwrap();
        let out = Command::cargo_bin("handler")
            .unwrap()
            .args(["harness", "render", "--input"])
            .arg(&path)
            .output()
            .unwrap();
        match handler_harness::render_json(&text) {
            Ok(want) => {
                assert!(
                    out.status.success(),
                    "{}: {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
                assert_eq!(
                    String::from_utf8(out.stdout).unwrap(),
                    want,
                    "{}",
                    path.display()
                );
                rendered += 1;
            }
            Err(e) => {
                assert_eq!(out.status.code(), Some(1), "{}", path.display());
                assert!(
                    String::from_utf8_lossy(&out.stderr).contains(&e.to_string()),
                    "{}",
                    path.display()
                );
            }
        }
    }
    assert!(rendered > 0);
}

#[test]
fn an_input_the_harness_cannot_honour_fails_naming_it() {
    let path = inputs().join("gemini__account__bypass__model.json");
    let out = Command::cargo_bin("handler")
        .unwrap()
        .args(["harness", "render", "--input"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn reads_stdin_and_names_a_missing_file() {
    let out = Command::cargo_bin("handler")
        .unwrap()
        .args(["harness", "render", "--input", "/nonexistent/in.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/in.json"));
    let text =
        std::fs::read_to_string(inputs().join("codex__provider__bypass__plain.json")).unwrap();
    let out = Command::cargo_bin("handler")
        .unwrap()
        .args(["harness", "render", "--input", "-"])
        .write_stdin(text.clone())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        handler_harness::render_json(&text).unwrap()
    );
}
