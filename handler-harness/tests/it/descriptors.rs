//! The platform descriptors parse and validate, and every ACP session mode they map and their
//! model option exist in the real agent's session/new answer (fixtures/harness/<name>/).
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test that reads fixtures: the I/O is outside the pure library"
)]

use crate::common;

use std::path::PathBuf;

use handler_contracts::validate::validate_descriptor;
use handler_harness::descriptors::{TOOLBOX_CONTAINERFILE, descriptor_text, toolbox_manifest};
use handler_harness::{builtin_names, containerfile};
use serde_json::Value;

fn session_new(name: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/harness")
        .join(name)
        .join("session-new.json");
    serde_json::from_str(
        &std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap()
}

fn mode_ids(sn: &Value) -> Vec<String> {
    sn["modes"]["availableModes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| m["id"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn five_platform_harnesses() {
    assert_eq!(
        builtin_names().collect::<Vec<_>>(),
        ["claude-code", "codex", "gemini", "pi", "vibe"]
    );
}

#[test]
fn every_descriptor_parses_validates_and_names_itself() {
    for name in builtin_names() {
        let d = common::descriptor(name);
        assert_eq!(d.name, name);
        validate_descriptor(&d).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            descriptor_text(name)
                .unwrap()
                .contains("apiVersion = \"handler.harness/v1\"")
        );
        assert!(
            d.image.starts_with("localhost/handler-ai-"),
            "{name}: {}",
            d.image
        );
    }
}

#[test]
fn every_mapped_mode_exists_in_the_real_agents_session_new() {
    for name in builtin_names() {
        let d = common::descriptor(name);
        let sn = session_new(name);
        let ids = mode_ids(&sn);
        for (mode, mapping) in &d.permissions {
            if let Some(m) = &mapping.session_mode {
                assert!(
                    ids.contains(m),
                    "{name}: {} maps to {m:?}, not among {ids:?}",
                    mode.as_str()
                );
            }
        }
    }
}

#[test]
fn every_model_option_exists_in_the_real_agents_session_new() {
    for name in builtin_names() {
        let d = common::descriptor(name);
        let sn = session_new(name);
        let options: Vec<&str> = sn["configOptions"]
            .as_array()
            .map(|a| a.iter().filter_map(|o| o["id"].as_str()).collect())
            .unwrap_or_default();
        match &d.model_option {
            Some(opt) => {
                let entry = sn["configOptions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["id"] == opt.as_str());
                let entry = entry
                    .unwrap_or_else(|| panic!("{name}: modelOption {opt:?} not among {options:?}"));
                assert_eq!(
                    entry["category"], "model",
                    "{name}: {opt:?} is not the model option"
                );
            }
            // gemini answers no model config option: the descriptor must not claim one
            None => assert!(
                !sn["configOptions"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|o| o["category"] == "model")),
                "{name}"
            ),
        }
    }
}

#[test]
fn a_mode_mapped_only_through_env_is_one_the_agent_has_no_acp_mode_for() {
    // decision 4: env only when no ACP mode exists; pi's only mapping (bypass) is its default
    for name in builtin_names() {
        let d = common::descriptor(name);
        for (mode, mapping) in &d.permissions {
            if mapping.session_mode.is_none() {
                assert_eq!(name, "pi", "{name}: {} has no sessionMode", mode.as_str());
            }
        }
    }
}

#[test]
fn every_containerfile_builds_from_the_toolbox_and_records_its_version() {
    for name in builtin_names() {
        let c = containerfile(name).unwrap();
        assert!(
            c.contains("ARG TOOLBOX_IMAGE\nFROM ${TOOLBOX_IMAGE}"),
            "{name}"
        );
        assert!(c.contains(handler_contracts::IMAGE_VERSION_FILE), "{name}");
        assert!(
            c.contains("set -eu"),
            "{name}: a version that cannot be read must fail the build"
        );
    }
}

#[test]
fn the_default_toolbox_has_node_python_uv_jq_and_declares_its_caches() {
    for tool in ["nodejs", "npm", "python3", "uv", "jq"] {
        assert!(TOOLBOX_CONTAINERFILE.contains(tool), "{tool}");
    }
    let m = toolbox_manifest().unwrap();
    assert_eq!(m.caches["npm"].target, "~/.npm");
    assert_eq!(
        m.caches["podman"].target,
        "~/.local/share/containers/storage"
    );
    assert!(m.caches["cache"].general);
}

#[test]
fn every_transcript_line_is_a_json_object_with_a_direction() {
    for name in builtin_names() {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/harness")
            .join(name)
            .join("transcript.jsonl");
        let text = std::fs::read_to_string(&p).unwrap();
        let mut methods = vec![];
        for line in text.lines() {
            let e: Value = serde_json::from_str(line).unwrap();
            assert!(e["dir"] == "client" || e["dir"] == "agent");
            let msg: Value = serde_json::from_str(e["line"].as_str().unwrap()).unwrap();
            if let Some(m) = msg["method"].as_str() {
                methods.push(m.to_string());
            }
        }
        for m in [
            "initialize",
            "session/new",
            "session/set_mode",
            "session/prompt",
        ] {
            assert!(methods.iter().any(|x| x == m), "{name}: no {m}");
        }
    }
}
