//! Golden render fixtures: the matrix of inputs in fixtures/render/inputs/ (each harness ×
//! account/provider × permission mode, and skills, MCP servers, terminal, caches, a model), each
//! rendered and snapshotted in fixtures/render/snapshots/. `INSTA_UPDATE=always` (the one golden
//! switch, docs/testing.md) rewrites the input files from the matrix built here and the snapshots.

use crate::common;

use std::path::PathBuf;

use handler_harness::{RenderRequest, render_json};

fn inputs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/render/inputs")
}

#[test]
fn the_input_files_are_the_matrix() {
    let dir = inputs_dir();
    let matrix = common::matrix();
    let mut names = vec![];
    let mut problems = vec![];
    for (name, req) in &matrix {
        let text = serde_json::to_string_pretty(req).unwrap() + "\n";
        let path = dir.join(format!("{name}.json"));
        problems.extend(test_support::golden::check_file(
            &path,
            &format!("fixtures/render/inputs/{name}.json"),
            &text,
        ));
        names.push(format!("{name}.json"));
    }
    test_support::golden::assert_none(&problems, "handler-harness");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    names.sort();
    assert_eq!(
        on_disk, names,
        "fixtures/render/inputs holds exactly the matrix"
    );
    assert!(matrix.len() >= 60, "the matrix has {} cases", matrix.len());
}

#[test]
fn every_input_renders_as_its_snapshot() {
    let mut entries: Vec<_> = std::fs::read_dir(inputs_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    assert!(!entries.is_empty());
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../../../fixtures/render/snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        for path in entries {
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            // the input parses as a request (the CLI's format) …
            let _: RenderRequest = serde_json::from_str(&text).unwrap();
            // … and renders to its snapshot (or its error, as text)
            let out = match render_json(&text) {
                Ok(json) => json,
                Err(e) => format!("error: {e}\n"),
            };
            for secret in [common::FAKE_TOKEN, common::FAKE_KEY] {
                let launch: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
                if let Some(argv) = launch["argv"].as_array() {
                    assert!(
                        argv.iter().all(|a| !a.as_str().unwrap().contains(secret)),
                        "{name}: secret in argv"
                    );
                }
            }
            insta::assert_snapshot!(name, out);
        }
    });
}
