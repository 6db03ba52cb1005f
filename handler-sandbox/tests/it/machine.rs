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
fn a_machine_refuses_a_tty_a_secret_it_cannot_keep_apart_and_a_name_that_is_not_one() {
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
    let e = code(&machine(json!({
        "network": {"mode": "open"},
        "injections": [{"name": "providers/p/apiKey", "phantom": "PHANTOM-0001",
                        "value": "SECRET-00001", "hosts": ["api.example.com:443"]}]
    })));
    assert!(
        matches!(&e, SpecError::Unenforceable { field, .. } if field == "injections"),
        "{e}"
    );
    assert_eq!(e.exit_code(), 64);
    assert!(!e.to_string().contains("SECRET-00001"), "{e}");
    let e = code(&machine(json!({"name": "handler-a1-c1"})));
    assert!(
        matches!(&e, SpecError::Invalid { field, .. } if field == "name"),
        "{e}"
    );
}

/// A filtered machine (decision 0153): no route of its own, its forwarder wrapping its first
/// process, and a proxy kept with it — detached, labelled as the machine's proxy and with no
/// launcher's labels, its events in a bounded log, its configuration a staged file.
#[test]
fn a_filtered_machine_keeps_its_proxy_beside_it() {
    let s = machine(json!({
        "network": {"mode": "filtered", "allow": ["api.example.com:443"], "enforcement": "enforce"}
    }));
    let plan = plan_create(Engine::Podman, &validate_spec(&s).unwrap(), &facts()).unwrap();
    let a = &plan.args;
    assert!(a.windows(2).any(|w| w == ["--network", "none"]), "{a:?}");
    let i = a.iter().position(|x| x == "shim").expect("the forwarder");
    assert_eq!(&a[a.len() - 2..], ["sleep", "infinity"], "{a:?}");
    assert!(i < a.len() - 2);
    let p = plan.proxy.expect("a proxy");
    insta::assert_debug_snapshot!("filtered_machine_proxy_args", p.args);
    let args = &p.args;
    assert_eq!(
        &args[..4],
        ["run", "--detach", "--name", "handler-m-box-egress"]
    );
    assert!(!args.iter().any(|x| x == "--rm" || x == "-i"), "{args:?}");
    assert!(
        args.iter().any(|x| x == "handler.machine-proxy=box"),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|x| x.starts_with("handler.launcher.")),
        "{args:?}"
    );
    assert!(
        args.iter().any(|x| x == "--log-driver=k8s-file"),
        "{args:?}"
    );
    assert_eq!(
        &args[args.len() - 2..],
        ["--config", "/run/handler-egress/config.json"]
    );
    let config = p
        .stage
        .iter()
        .find_map(|st| match st {
            handler_sandbox::plan::Stage::File { path, content, .. }
                if path.ends_with("/egress/config.json") =>
            {
                Some(content.clone())
            }
            _ => None,
        })
        .expect("the configuration staged");
    let c: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(c["mode"], "filter");
    assert_eq!(c["settingsFile"], "/run/handler-egress/settings.json");
    assert_eq!(c["injections"], json!([]));
    // Decision 0166: each exec's keys come on the control socket, in a 0700 folder mounted into
    // the proxy only; the machine trusts the proxy's CA from the start (the bundle it writes).
    assert_eq!(
        c["controlSocket"], "/run/handler-egress-ctl/control.sock",
        "{c}"
    );
    assert_eq!(c["caBundleOut"], "/run/handler-ca/ca-bundle.pem", "{c}");
    assert!(p.stage.iter().any(|st| matches!(st,
        handler_sandbox::plan::Stage::Dir { path, mode: 0o700 } if path.ends_with("/egress-ctl"))));
    assert!(
        !a.iter().any(|x| x.contains("egress-ctl")),
        "the machine never mounts the control folder: {a:?}"
    );
    assert!(
        a.iter()
            .any(|x| x.ends_with("destination=/run/handler/ca-bundle.pem,ro=true")),
        "{a:?}"
    );
}
