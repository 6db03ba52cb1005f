//! The runnable example (`examples/plan.rs`) runs here too, so it cannot rot.

#[path = "../../examples/plan.rs"]
#[allow(dead_code)]
mod plan_example;

#[test]
fn the_plan_example_plans_a_filtered_sandbox_with_its_proxy() {
    let text = plan_example::plan_text().expect("the example's spec plans");
    assert!(text.starts_with("podman run --rm --interactive"), "{text}");
    assert!(text.contains("--network none"), "{text}");
    assert!(
        text.contains("proxy: podman run --rm -i --name handler-demo-egress"),
        "{text}"
    );
    // The spec's env value reaches podman by name only.
    assert!(
        text.contains("\"API_KEY\"") && !text.contains("not-in-argv"),
        "{text}"
    );
}
