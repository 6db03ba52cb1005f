//! `machine create`'s plan (issue 29, decision 0142): the launch's hardening on a container
//! that is created and kept, labelled as the machine and with no launcher's labels; and what a
//! machine refuses.

use handler_sandbox::machine::plan_create;
use handler_sandbox::plan::Engine;
use handler_sandbox::{SpecError, validate_spec};
use serde_json::json;

use crate::plan::{facts, with};

fn machine(patch: serde_json::Value) -> handler_contracts::SandboxSpec {
    let mut p = json!({"name": "handler-m-box", "argv": ["sleep", "infinity"], "env": {}});
    for (k, v) in patch.as_object().unwrap() {
        p[k] = v.clone();
    }
    with(p)
}

#[test]
fn a_machine_is_created_kept_hardened_and_labelled_as_itself() {
    let s = machine(json!({}));
    let plan = plan_create(Engine::Podman, &validate_spec(&s).unwrap(), &facts()).unwrap();
    insta::assert_debug_snapshot!(plan.args);
    let a = &plan.args;
    assert_eq!(&a[..2], ["create", "--log-driver=none"]);
    assert!(!a.iter().any(|x| x == "--rm" || x == "--interactive"));
    for hard in [
        "--read-only",
        "--init",
        "--userns=keep-id",
        "no-new-privileges",
    ] {
        assert!(a.iter().any(|x| x == hard), "{hard} in {a:?}");
    }
    assert!(a.windows(2).any(|w| w == ["--cap-drop", "all"]), "{a:?}");
    assert!(a.iter().any(|x| x == "handler.machine=box"), "{a:?}");
    assert!(
        !a.iter().any(|x| x.starts_with("handler.launcher.")),
        "{a:?}"
    );
}

#[test]
fn a_machine_refuses_a_tty_a_filter_it_cannot_keep_and_a_name_that_is_not_one() {
    let code = |s: &handler_contracts::SandboxSpec| {
        let v = validate_spec(s).unwrap();
        plan_create(Engine::Podman, &v, &facts())
            .map(|_| ())
            .unwrap_err()
    };
    let e = code(&machine(json!({"tty": true})));
    assert!(
        matches!(&e, SpecError::Invalid { field, .. } if field == "tty"),
        "{e}"
    );
    let e = code(&machine(
        json!({"network": {"mode": "filtered", "allow": ["api.example.com:443"], "enforcement": "enforce"}}),
    ));
    assert!(
        matches!(&e, SpecError::Unenforceable { field, .. } if field == "network"),
        "{e}"
    );
    assert_eq!(e.exit_code(), 64);
    let e = code(&machine(json!({"name": "handler-a1-c1"})));
    assert!(
        matches!(&e, SpecError::Invalid { field, .. } if field == "name"),
        "{e}"
    );
}
