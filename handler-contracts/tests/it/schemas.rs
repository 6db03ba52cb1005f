//! The committed schemas in `schemas/` are exactly what the types generate: a type changed
//! without regenerating them fails here, with the diff. `INSTA_UPDATE=always` (the one golden
//! switch, docs/testing.md) rewrites them, as `cargo run -p handler-contracts --bin gen-schemas`.

use std::path::Path;

use test_support::golden;

#[test]
fn committed_schemas_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let mut problems = Vec::new();
    let all = handler_contracts::schema::all_schemas();
    for (name, schema) in &all {
        let file = dir.join(format!("{name}.schema.json"));
        let want = handler_contracts::schema::schema_file_text(schema);
        problems.extend(golden::check_file(
            &file,
            &format!("schemas/{name}.schema.json"),
            &want,
        ));
    }
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let n = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = n.strip_suffix(".schema.json")
            && !all.iter().any(|(s, _)| *s == stem)
        {
            problems.extend(golden::check_orphan(&entry.path(), &format!("schemas/{n}")));
        }
    }
    golden::assert_none(&problems, "handler-contracts");
}

#[test]
fn every_schema_is_draft_2020_12_and_compiles() {
    for (name, schema) in handler_contracts::schema::all_schemas() {
        assert_eq!(
            schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{name}"
        );
        jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
