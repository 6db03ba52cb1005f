//! "Start from my own settings" (issue 30 item 4, decision 0154): each built-in harness's seeds
//! applied to a person's real-shaped settings (fixtures/harness/seed/<harness>/) — what reaches
//! the agent's state slot, as golden files. Every value the fixtures mark `NEVER-SEEDED` (a key,
//! a token, a header, an account) must be gone; the slot's own keys (the onboarding flags) stay.

use std::path::PathBuf;

use handler_contracts::harness::SlotKind;
use handler_harness::builtin;
use handler_harness::seed::filter;

fn fixture(harness: &str, name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/harness/seed")
        .join(harness)
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The seed of `harness`'s slot `slot` whose source is `source`, applied to fixture `file`
/// (over the slot's initial content for a file slot).
fn seeded(harness: &str, slot: &str, source: &str, file: &str) -> String {
    let d = builtin(harness).unwrap().unwrap();
    let s = &d.state_slots[slot];
    let seed = s
        .seed
        .iter()
        .find(|x| x.source == source)
        .unwrap_or_else(|| panic!("{harness}.{slot}: no seed {source}"));
    let current = (s.kind == SlotKind::File).then(|| s.initial.clone().unwrap_or_default());
    let out = filter(
        seed,
        s.kind,
        &fixture(harness, file),
        current.as_deref().map(str::as_bytes),
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("NEVER-SEEDED"), "{harness} {source}: {text}");
    text
}

#[test]
fn claude_settings_without_keys_and_its_json_with_only_mcp_servers() {
    let settings = seeded(
        "claude-code",
        "config_dir",
        "~/.claude/settings.json",
        "settings.json",
    );
    insta::assert_snapshot!("claude_settings", settings);
    let json = seeded("claude-code", "settings", "~/.claude.json", "claude.json");
    assert!(
        json.contains("hasCompletedOnboarding"),
        "the slot's own: {json}"
    );
    insta::assert_snapshot!("claude_json", json);
}

#[test]
fn codex_config_without_tokens_or_headers() {
    insta::assert_snapshot!(
        "codex_config",
        seeded("codex", "codex_home", "~/.codex/config.toml", "config.toml")
    );
}

#[test]
fn gemini_settings_keep_the_login_type_and_add_mcp_servers() {
    let s = seeded(
        "gemini",
        "settings",
        "~/.gemini/settings.json",
        "settings.json",
    );
    assert!(
        s.contains("oauth-personal"),
        "Handler's login type, not the person's: {s}"
    );
    insta::assert_snapshot!("gemini_settings", s);
}

#[test]
fn no_builtin_seed_is_a_credential_or_a_login_slot() {
    for name in handler_harness::builtin_names() {
        let d = builtin(name).unwrap().unwrap();
        for (slot, s) in &d.state_slots {
            if s.credential {
                assert!(s.seed.is_empty(), "{name}.{slot}");
            }
            for seed in &s.seed {
                let file = seed.source.rsplit('/').next().unwrap();
                assert!(
                    !handler_contracts::harness::is_credential_name(file),
                    "{name}.{slot}: {}",
                    seed.source
                );
            }
        }
    }
}
