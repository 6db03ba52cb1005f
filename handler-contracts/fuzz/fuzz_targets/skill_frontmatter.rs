//! Fuzz target: a SKILL.md's frontmatter (`handler_contracts::skill::frontmatter`, as
//! `check_skill_dir` reads it at each start, D.17). Oracles: no panic on any text; a read
//! frontmatter has a description of 1 to 1024 characters, and a name and a description without a
//! line break unless they came from a `|` block; the skill-name check that follows never panics
//! either.
//!
//! Input: the SKILL.md text (UTF-8).
#![no_main]

use handler_contracts::skill::frontmatter;
use handler_contracts::validate::validate_skill_name;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(fm) = frontmatter(text) else {
        return;
    };
    let n = fm.description.chars().count();
    assert!((1..=1024).contains(&n), "description of {n} characters");
    if !text.contains('|') {
        assert!(!fm.name.contains('\n') && !fm.description.contains('\n'));
    }
    if let Err(e) = validate_skill_name(&fm.name) {
        let _ = e.to_string();
    }
});
