//! The parts' catalog, order, Containerfiles and tags.

use super::*;
use crate::descriptors;

fn builtins() -> Vec<HarnessDescriptor> {
    descriptors::builtin_names()
        .map(|n| descriptors::builtin(n).unwrap().unwrap())
        .collect()
}

fn with_part(name: &str, part: &str) -> HarnessDescriptor {
    let mut d = builtins().remove(0);
    d.name = name.into();
    d.part = Some(toml::from_str(part).unwrap());
    d
}

#[test]
fn the_builtin_harnesses_npm_clis_are_parts_on_node() {
    let c = catalog(&builtins()).unwrap();
    assert_eq!(
        c.keys().collect::<Vec<_>>(),
        ["claude-code", "codex", "gemini", "node"],
        "vibe (Python) and pi (its own Node 22) run from their images only"
    );
    for (id, p) in &c {
        if id != NODE {
            assert_eq!(p.requires, [NODE], "{id}");
            assert_eq!(p.source, Source::Harness(id.clone()));
        }
    }
    assert_eq!(c[NODE].source, Source::Toolbox);
}

#[test]
fn requirements_come_first_each_once_and_an_unknown_part_is_named() {
    let c = catalog(&builtins()).unwrap();
    let order = closure(&c, &["codex".into(), "gemini".into(), "node".into()]).unwrap();
    assert_eq!(order, ["node", "codex", "gemini"]);
    let e = closure(&c, &["codex".into(), "goose".into()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "part \"goose\": no such part (there are: claude-code, codex, gemini, node)"
    );
}

#[test]
fn a_part_whose_requirement_failed_is_blocked_by_it() {
    let c = catalog(&builtins()).unwrap();
    let failed = BTreeSet::from(["node".to_string()]);
    assert_eq!(blocked_by(&c["codex"], &failed), Some("node"));
    assert_eq!(blocked_by(&c["node"], &failed), None);
    assert_eq!(blocked_by(&c["codex"], &BTreeSet::new()), None);
}

#[test]
fn a_descriptors_part_is_refused_naming_its_field() {
    for (part, want) in [
        (
            "bin = [\"a b\"]",
            "harness \"x\": part.bin: \"a b\" is not a command's name",
        ),
        (
            "bin = [\"..\"]",
            "harness \"x\": part.bin: \"..\" is not a command's name",
        ),
        (
            "bin = [\"x\"]\npackages = [\"it's\"]",
            "harness \"x\": part.packages: \"it's\" is not an npm package's name",
        ),
        (
            "bin = [\"x\"]\npackages = [\"@scope\"]",
            "harness \"x\": part.packages: \"@scope\" is not an npm package's name",
        ),
        (
            "bin = [\"x\"]\nrequires = [\"python\"]",
            "harness \"x\": part.requires: \"python\" is not another part",
        ),
        (
            "bin = [\"x\"]\nrequires = [\"x\"]",
            "harness \"x\": part.requires: \"x\" is not another part",
        ),
        (
            "bin = []",
            "harness \"x\": part.bin: \"\" is empty: a part puts at least one command on the PATH",
        ),
    ] {
        let e = catalog(&[with_part("x", part)]).unwrap_err();
        assert_eq!(e.to_string(), want, "{part}");
    }
}

#[test]
fn parts_requiring_each_other_in_a_circle_are_refused() {
    let a = with_part("a", "bin = [\"a\"]\nrequires = [\"b\"]");
    let b = with_part("b", "bin = [\"b\"]\nrequires = [\"a\"]");
    let c = catalog(&[a, b]).unwrap();
    assert!(matches!(
        closure(&c, &["a".into()]),
        Err(PartError::Cycle { .. })
    ));
}

#[test]
fn containerfiles() {
    let c = catalog(&builtins()).unwrap();
    insta::assert_snapshot!("node", containerfile(&c[NODE]));
    insta::assert_snapshot!("codex", containerfile(&c["codex"]));
    let plain = with_part("fakeh", "bin = [\"fake-acp-agent\"]");
    let c = catalog(&[plain]).unwrap();
    insta::assert_snapshot!("no_packages", containerfile(&c["fakeh"]));
}

#[test]
fn a_tag_is_the_version_and_the_recipes_hash() {
    assert_eq!(version_slug("Codex 0.5.1 (codex-acp 0.3.2)"), "0.5.1-0.3.2");
    assert_eq!(version_slug("v20.19.2\n"), "20.19.2");
    assert_eq!(
        version_slug("Claude Code 2.1.29 (claude-agent-acp 0.85.1)"),
        "2.1.29-0.85.1"
    );
    assert_eq!(version_slug("unknown"), "unversioned");
    assert_eq!(version_slug("Fake 1.0+build:7"), "1.0build7");
    let c = catalog(&builtins()).unwrap();
    let f = containerfile(&c["codex"]);
    let h = recipe_hash(&f);
    assert_eq!(h.len(), 12);
    assert_eq!(
        tag("codex", "Codex 0.5.1 (codex-acp 0.3.2)", &h),
        format!("localhost/handler-part-codex:0.5.1-0.3.2-{h}")
    );
    assert_ne!(
        recipe_hash(&containerfile(&c["gemini"])),
        h,
        "another recipe, another hash"
    );
}

#[test]
fn a_parts_version_line_is_one_plain_short_line() {
    assert_eq!(version_line("v20.19.2\n").as_deref(), Some("v20.19.2"));
    assert_eq!(
        version_line("Codex 0.5.1 (codex-acp 0.3.2)\nmore\n").as_deref(),
        Some("Codex 0.5.1 (codex-acp 0.3.2)")
    );
    assert_eq!(
        version_line("a,b@c\u{1b}[31m").as_deref(),
        Some("a b c[31m"),
        "no label separator, no escape"
    );
    assert_eq!(version_line(&"9".repeat(5000)).map(|v| v.len()), Some(120));
    assert_eq!(version_line("  \n"), None);
    assert_eq!(version_line(""), None);
}
