//! Fuzz target: every hand-written TOML document (accounts, providers, addons, bindings, harness
//! descriptors, mini app manifests, the toolbox manifest) read with `parse::from_toml` and, when
//! it reads, checked by its validator. Oracles: no panic; an error (of the reader or of the
//! validator) never quotes a secret-looking word of the input (12 or more of
//! `[A-Za-z0-9_+/=-]` with a letter and a digit, not an apiVersion's `account/v1`: an API key
//! pasted where a reference belongs),
//! and its line and column lie inside the document.
//!
//! Input: the first byte picks the document type (by value mod 7), the rest is the TOML text.
#![no_main]

use handler_contracts::access::{Account, Provider};
use handler_contracts::addon::{AddonManifest, Binding};
use handler_contracts::harness::{HarnessDescriptor, ToolboxManifest};
use handler_contracts::miniapp::MiniAppManifest;
use handler_contracts::parse::{DocumentError, from_toml};
use handler_contracts::validate;
use libfuzzer_sys::fuzz_target;

const ADDON: &str = include_str!("../../../fixtures/contracts/addon/github/addon.toml");

fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'/' | b'=' | b'-')
}

/// `account/v1`, the tail of an apiVersion (`handler.account/v1`): named in version errors.
fn api_version_tail(w: &str) -> bool {
    w.split_once("/v").is_some_and(|(c, m)| {
        !c.is_empty()
            && c.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            && !m.is_empty()
            && m.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The input's secret-looking words.
fn secret_words(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_ascii() || !word_byte(c as u8))
        .filter(|w| {
            w.len() >= 12
                && w.bytes().any(|b| b.is_ascii_alphabetic())
                && w.bytes().any(|b| b.is_ascii_digit())
                && !api_version_tail(w)
        })
        .collect()
}

fn check_quiet(what: &str, text: &str, message: &str) {
    for w in secret_words(text) {
        assert!(
            !message.contains(w),
            "{what} error quotes the input's {w:?}: {message}"
        );
    }
}

fn check_read(text: &str, e: &DocumentError) {
    let (line, column) = e.position();
    assert!(line >= 1 && column >= 1);
    assert!(
        line <= text.lines().count().max(1) + 1,
        "line {line} past the end"
    );
    check_quiet("reader", text, &e.to_string());
}

fn read<T: serde::de::DeserializeOwned>(text: &str) -> Option<T> {
    match from_toml::<T>("doc.toml", text) {
        Ok(v) => Some(v),
        Err(e) => {
            check_read(text, &e);
            None
        }
    }
}

fn validated(text: &str, r: Result<(), validate::ValidationError>) {
    if let Err(e) = r {
        check_quiet("validator", text, &e.to_string());
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match kind % 7 {
        0 => {
            if let Some(a) = read::<Account>(text) {
                validated(text, validate::validate_account(&a, None));
            }
        }
        1 => {
            if let Some(p) = read::<Provider>(text) {
                validated(text, validate::validate_provider(&p));
            }
        }
        2 => {
            if let Some(a) = read::<AddonManifest>(text) {
                validated(text, validate::validate_addon(&a, None));
            }
        }
        3 => {
            if let Some(b) = read::<Binding>(text) {
                let addon: AddonManifest = from_toml("addon.toml", ADDON).expect("fixture");
                validated(text, validate::validate_binding(&b, Some(Ok(&addon))));
            }
        }
        4 => {
            if let Some(d) = read::<HarnessDescriptor>(text) {
                validated(text, validate::validate_descriptor(&d));
            }
        }
        5 => {
            if let Some(m) = read::<MiniAppManifest>(text) {
                validated(text, validate::validate_miniapp(&m));
            }
        }
        _ => {
            let _ = read::<ToolboxManifest>(text);
        }
    }
});
