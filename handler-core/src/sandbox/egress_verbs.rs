//! `set-egress NAME enforce|log-only` and `set-allow NAME [ENTRY…]` (A.4). Entries are validated
//! as in A.3 (65 otherwise); until the egress proxy lands no sandbox is filtered, so both answer
//! 64 ("filtered networks are not available yet"). The egress work replaces the bodies.

use handler_contracts::AllowEntry;
use handler_contracts::sandbox::exit;

use super::log;

/// `set-egress NAME MODE`.
pub fn set_egress(name: &str, mode: &str) -> i32 {
    if mode != "enforce" && mode != "log-only" {
        log(&format!(
            "set-egress {name}: {mode:?} is neither enforce nor log-only"
        ));
        return exit::INVALID_SPEC;
    }
    log(&format!(
        "set-egress {name}: filtered networks are not available yet"
    ));
    exit::UNENFORCEABLE
}

/// `set-allow NAME ENTRY…`.
pub fn set_allow(name: &str, entries: &[String]) -> i32 {
    for e in entries {
        if let Err(err) = AllowEntry::parse(e) {
            log(&format!("set-allow {name}: {err}"));
            return exit::INVALID_SPEC;
        }
    }
    log(&format!(
        "set-allow {name}: filtered networks are not available yet"
    ));
    exit::UNENFORCEABLE
}
