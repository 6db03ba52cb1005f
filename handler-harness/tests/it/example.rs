//! The `render_launch` example renders and shows what B.3 promises, so it cannot rot.

#[allow(dead_code, reason = "the example's main is not called here")]
#[path = "../../examples/render_launch.rs"]
mod shown;

#[test]
fn the_example_renders_a_provider_launch() {
    let lines = shown::run().unwrap();
    let text = lines.join("\n");
    assert!(text.contains("image: "), "{text}");
    assert!(text.contains("argv: "), "{text}");
    // B3: the key is in env (shown hidden), never in argv.
    assert!(text.contains("[secret apiKey]"), "{text}");
    assert!(!text.contains("sk-FAKE"), "{text}");
    // E4: the provider's host is the sandbox's egress, as the container sees the machine.
    assert!(text.lines().any(|l| l.starts_with("egress: ")), "{text}");
}
