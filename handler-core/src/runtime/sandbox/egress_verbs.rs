//! `set-egress NAME enforce|log-only` and `set-allow NAME [ENTRY…]` (A.4). Entries are validated
//! as in A.3 (65 otherwise); the instance's settings file is rewritten and its proxy reads it for
//! the next request (handler-core's `egress::launch::apply_change`); a machine's are in its
//! staged folder (decision 0153).

use handler_contracts::AllowEntry;
use handler_contracts::sandbox::{Enforcement, exit};

use crate::runtime::egress::launch::{Change, ChangeError, apply_change};

use super::log;

/// `set-egress NAME MODE`.
pub fn set_egress(name: &str, mode: &str) -> i32 {
    let e = match mode {
        "enforce" => Enforcement::Enforce,
        "log-only" => Enforcement::LogOnly,
        _ => {
            log(&format!(
                "set-egress {name}: {mode:?} is neither enforce nor log-only"
            ));
            return exit::INVALID_SPEC;
        }
    };
    apply(name, Change::Enforcement(e))
}

/// `set-allow NAME ENTRY…`.
pub fn set_allow(name: &str, entries: &[String]) -> i32 {
    let mut parsed = Vec::new();
    for e in entries {
        match AllowEntry::parse(e) {
            Ok(a) => parsed.push(a),
            Err(err) => {
                log(&format!("set-allow {name}: {err}"));
                return exit::INVALID_SPEC;
            }
        }
    }
    apply(name, Change::Allow(parsed))
}

/// Rewrites the instance's settings (waiting for one still starting, 60 s at most).
fn apply(name: &str, change: Change) -> i32 {
    let base = match super::host::runtime_base(nix::unistd::getuid().as_raw()) {
        Ok(b) => b,
        Err(e) => {
            log(&e.to_string());
            return 1;
        }
    };
    let mut dir = base.join(name);
    if name.starts_with("handler-m-") && !dir.exists() {
        // A machine's (decision 0153): its settings live with its staged files.
        match super::machine::machines_dir() {
            Ok(d) if d.join(name).exists() => {
                dir = d.join(name);
                if !dir.join("egress").join("settings.json").exists() {
                    log(&ChangeError::NotFiltered(name.to_string()).to_string());
                    return exit::UNENFORCEABLE;
                }
            }
            _ => {}
        }
    }
    match apply_change(&dir, name, change) {
        Ok(_) => 0,
        Err(e) => {
            log(&e.to_string());
            e.exit_code()
        }
    }
}
