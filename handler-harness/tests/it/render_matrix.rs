//! Golden render fixtures: the matrix of inputs in fixtures/render/inputs/ (each harness ×
//! account/provider × permission mode, and skills, MCP servers, terminal, caches, a model), each
//! rendered and snapshotted in fixtures/render/snapshots/. HANDLER_UPDATE_FIXTURES=1 rewrites the
//! input files from the matrix built here (then review and `cargo insta review`).

mod common;

use std::path::PathBuf;

use handler_harness::{RenderRequest, render_json};

fn inputs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/render/inputs")
}

#[test]
fn the_input_files_are_the_matrix() {
    let dir = inputs_dir();
    let update = std::env::var_os("HANDLER_UPDATE_FIXTURES").is_some();
    if update {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let matrix = common::matrix();
    let mut names = vec![];
    for (name, req) in &matrix {
        let text = serde_json::to_string_pretty(req).unwrap() + "\n";
        let path = dir.join(format!("{name}.json"));
        if update {
            std::fs::write(&path, &text).unwrap();
        } else {
            let on_disk = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (HANDLER_UPDATE_FIXTURES=1)", path.display()));
            assert_eq!(
                on_disk, text,
                "{name}: the input file differs from the matrix"
            );
        }
        names.push(format!("{name}.json"));
    }
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
    settings.set_snapshot_path("../../fixtures/render/snapshots");
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
