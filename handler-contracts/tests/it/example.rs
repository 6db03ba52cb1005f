//! The `validate_document` example parses, validates and names the field of each refusal, so it
//! cannot rot.

#[allow(dead_code, reason = "the example's main is not called here")]
#[path = "../../examples/validate_document.rs"]
mod shown;

#[test]
fn the_example_names_the_field_of_each_refusal() {
    let lines = shown::run();
    assert_eq!(lines[0], "ollama.toml: valid");
    assert!(
        lines[1].starts_with("typo.toml: refused at models[0].contextWindw (line 6, column 1)"),
        "{}",
        lines[1]
    );
    assert!(lines[1].contains("contextWindw"), "{}", lines[1]);
    assert_eq!(
        lines[2],
        "no-model.toml: refused at models: at least one model"
    );
}
