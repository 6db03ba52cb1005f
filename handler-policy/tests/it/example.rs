//! The `run_transcript` example runs and shows each rule it is about, so it cannot rot.

#[allow(dead_code, reason = "the example's main is not called here")]
#[path = "../../examples/run_transcript.rs"]
mod shown;

#[test]
fn the_example_shows_p2_p4_and_p5() {
    let lines = shown::run().unwrap();
    let text = lines.join("\n");
    // P2: a session outside the scope is refused, inside it goes to the agent.
    assert!(text.contains("-32001"), "{text}");
    // P5: the token never reaches a client nor the log (only the input lines show it).
    let actions: Vec<&String> = lines.iter().filter(|l| l.starts_with("    ")).collect();
    assert!(
        actions.iter().all(|l| !l.contains("ghp_0123456789abcdef")),
        "{text}"
    );
    assert!(text.contains("[secret GITHUB_TOKEN]"), "{text}");
    // P4: the agent may not read a host file; the daemon answers it.
    assert!(
        text.contains("to the agent: {\"jsonrpc\":\"2.0\",\"id\":7,\"error\""),
        "{text}"
    );
}
