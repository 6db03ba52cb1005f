//! The committed schemas in `schemas/` are exactly what the types generate: a type changed
//! without running `cargo run -p handler-contracts --bin gen-schemas` fails here, with the diff.

use std::path::Path;

#[test]
fn committed_schemas_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let mut problems = Vec::new();
    let all = handler_contracts::schema::all_schemas();
    for (name, schema) in &all {
        let file = dir.join(format!("{name}.schema.json"));
        let want = handler_contracts::schema::schema_file_text(schema);
        match std::fs::read_to_string(&file) {
            Err(_) => problems.push(format!("schemas/{name}.schema.json is missing")),
            Ok(have) if have != want => {
                let diff = similar::TextDiff::from_lines(&have, &want);
                let text = diff
                    .unified_diff()
                    .header("committed", "generated")
                    .to_string();
                problems.push(format!("schemas/{name}.schema.json drifted:\n{text}"));
            }
            Ok(_) => {}
        }
    }
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let n = entry.file_name().to_string_lossy().into_owned();
        if let Some(stem) = n.strip_suffix(".schema.json")
            && !all.iter().any(|(s, _)| *s == stem)
        {
            problems.push(format!("schemas/{n} belongs to no type"));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n\nregenerate with: cargo run -p handler-contracts --bin gen-schemas",
        problems.join("\n")
    );
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
