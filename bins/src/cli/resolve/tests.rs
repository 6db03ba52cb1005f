//! The resolution's rules, one case each.

use serde_json::{Value, json};

use super::*;

fn agent(id: &str, name: Option<&str>, project: Option<&str>, scope: &str, models: Value) -> Agent {
    serde_json::from_value(json!({
        "id": id, "name": name, "projectId": project, "scope": scope, "models": models,
        "network": "filtered", "egress": "enforce", "confinement": "strict", "permissions": "bypass",
        "acpUrl": "/v1/agents/x/acp", "createdAt": "2026-01-01T00:00:00Z",
    }))
    .unwrap()
}

fn on(account: &str) -> Value {
    json!({"harness": "claude-code", "account": account, "requiredHosts": []})
}

fn project(context: Option<&str>, agents: Vec<Agent>) -> Project {
    serde_json::from_value(json!({
        "id": "p_1", "name": "app", "folder": "/home/u/code/app", "caches": "project",
        "context": context, "agents": agents, "createdAt": "2026-01-01T00:00:00Z",
        "defaultAgent": agents[0].id,
    }))
    .unwrap()
}

fn account(name: &str, contexts: Option<&[&str]>) -> AccountInfo {
    serde_json::from_value(
        json!({"name": name, "harness": "claude-code", "loggedIn": true,
        "contexts": contexts}),
    )
    .unwrap()
}

struct World {
    projects: Vec<Project>,
    agents: Vec<Agent>,
    accounts: Vec<AccountInfo>,
}

fn world(context: Option<&str>) -> World {
    let dev = agent(
        "a_dev",
        Some("Dev"),
        Some("p_1"),
        "/home/u/code/app",
        json!([on("work")]),
    );
    let review = agent(
        "a_rev",
        Some("Review"),
        Some("p_1"),
        "/home/u/code/app",
        json!([on("work"), on("review-acct")]),
    );
    let adhoc = agent("a_tmp", None, None, "/home/u/tmp", json!([on("perso")]));
    World {
        projects: vec![project(context, vec![dev.clone(), review.clone()])],
        agents: vec![dev, review, adhoc],
        accounts: vec![
            account("work", Some(&["Work"])),
            account("review-acct", Some(&["Work"])),
            account("perso", Some(&["Personal"])),
            account("local", Some(&["any"])),
        ],
    }
}

fn go(
    w: &World,
    folder: &str,
    word: Option<&str>,
    flags: &AgentFlags,
    anyway: bool,
) -> Result<Resolution, ResolveError> {
    resolve(
        &Typed {
            folder,
            word,
            flags,
            anyway,
        },
        &Known {
            projects: &w.projects,
            agents: &w.agents,
            accounts: &w.accounts,
            providers: &[],
        },
    )
}

fn id_and_model(r: &Resolution) -> (String, Option<String>) {
    match &r.target {
        Target::Existing { agent, model } => (
            agent.id.clone(),
            model.as_ref().and_then(|m| m.account.clone()),
        ),
        Target::Create(req) => ("new".into(), req.models[0].account.clone()),
    }
}

#[test]
fn in_a_project_nothing_typed_is_its_default_agent() {
    let w = world(Some("Work"));
    let r = go(&w, "/home/u/code/app", None, &AgentFlags::default(), false).unwrap();
    assert_eq!(id_and_model(&r), ("a_dev".into(), None));
    // A folder below the project's is the project's too.
    let r = go(
        &w,
        "/home/u/code/app/src",
        None,
        &AgentFlags::default(),
        false,
    )
    .unwrap();
    assert_eq!(id_and_model(&r).0, "a_dev");
}

#[test]
fn an_agents_name_picks_it_case_insensitively() {
    let w = world(Some("Work"));
    let r = go(
        &w,
        "/home/u/code/app",
        Some("review"),
        &AgentFlags::default(),
        false,
    )
    .unwrap();
    assert_eq!(id_and_model(&r), ("a_rev".into(), None));
}

#[test]
fn an_account_an_agent_lists_picks_that_agent_with_that_model() {
    let w = world(Some("Work"));
    let r = go(
        &w,
        "/home/u/code/app",
        Some("review-acct"),
        &AgentFlags::default(),
        false,
    )
    .unwrap();
    assert_eq!(
        id_and_model(&r),
        ("a_rev".into(), Some("review-acct".into()))
    );
}

#[test]
fn an_account_no_agent_lists_runs_the_default_agent_when_made_for_the_context() {
    let w = world(Some("Work"));
    let r = go(
        &w,
        "/home/u/code/app",
        Some("local"),
        &AgentFlags::default(),
        false,
    )
    .unwrap();
    assert_eq!(id_and_model(&r), ("a_dev".into(), Some("local".into())));
    assert!(r.differs.is_empty() && r.saved.is_none());
}

#[test]
fn an_account_of_another_context_is_refused_saying_how_to_run_it_anyway() {
    let w = world(Some("Work"));
    let e = go(
        &w,
        "/home/u/code/app",
        Some("perso"),
        &AgentFlags::default(),
        false,
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, ResolveError::NotForContext { .. }), "{text}");
    assert!(
        text.contains("--anyway") && text.contains("\"Work\""),
        "{text}"
    );
    // --anyway: the folder's ad-hoc agent, made now, outside the project (the typed yes).
    let r = go(
        &w,
        "/home/u/code/app",
        Some("perso"),
        &AgentFlags::default(),
        true,
    )
    .unwrap();
    assert_eq!(id_and_model(&r), ("new".into(), Some("perso".into())));
    assert_eq!(r.outside_project.as_deref(), Some("app"));
    // A project without a context runs any account.
    let w = world(None);
    let r = go(
        &w,
        "/home/u/code/app",
        Some("perso"),
        &AgentFlags::default(),
        false,
    )
    .unwrap();
    assert_eq!(id_and_model(&r), ("a_dev".into(), Some("perso".into())));
}

#[test]
fn name_is_refused_in_a_projects_folder_and_unknown_words_say_what_exists() {
    let w = world(None);
    let flags = AgentFlags {
        name: Some("x".into()),
        ..Default::default()
    };
    let e = go(&w, "/home/u/code/app", None, &flags, false)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--name") && e.contains("Dev, Review"), "{e}");
    let e = go(
        &w,
        "/home/u/code/app",
        Some("nope"),
        &AgentFlags::default(),
        false,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"nope\"") && e.contains("accounts: work"),
        "{e}"
    );
}

#[test]
fn outside_projects_the_folders_ad_hoc_agent_is_found_or_made() {
    let w = world(None);
    let r = go(&w, "/home/u/tmp", None, &AgentFlags::default(), false).unwrap();
    assert_eq!(id_and_model(&r), ("a_tmp".into(), None));
    // Another account: for this session only.
    let r = go(
        &w,
        "/home/u/tmp",
        Some("local"),
        &AgentFlags::default(),
        false,
    )
    .unwrap();
    assert_eq!(id_and_model(&r), ("a_tmp".into(), Some("local".into())));
    // Another folder: made with the options typed.
    let flags = AgentFlags {
        network: Some("none".into()),
        name: Some("scratch".into()),
        ..Default::default()
    };
    let r = go(&w, "/home/u/other", Some("perso"), &flags, false).unwrap();
    let Target::Create(req) = &r.target else {
        panic!("{r:?}")
    };
    assert_eq!(req.scope.as_deref(), Some("/home/u/other"));
    assert_eq!(req.name.as_deref(), Some("scratch"));
    assert_eq!(req.options.network, Some(NetworkMode::None));
    let e = go(&w, "/home/u/other", None, &AgentFlags::default(), false).unwrap_err();
    assert!(matches!(e, ResolveError::NothingToRun { .. }), "{e}");
}

#[test]
fn options_that_differ_are_listed_and_the_save_body_carries_them() {
    let w = world(None);
    let flags = AgentFlags {
        network: Some("open".into()),
        allow: vec!["example.com:443".into()],
        binding: vec!["gh".into()],
        permissions: Some("bypass".into()),
        display: true,
        ..Default::default()
    };
    let r = go(&w, "/home/u/code/app", Some("Dev"), &flags, false).unwrap();
    assert_eq!(
        r.differs,
        vec![
            "network: filtered → open",
            "display: off → on",
            "allow: + example.com:443",
            "bindings: + gh"
        ]
    );
    let body = r.saved.unwrap();
    assert_eq!(body["network"], "open");
    assert_eq!(body["display"], true);
    assert_eq!(body["name"], "Dev");
    assert_eq!(body["confirmRisks"], true);
    assert_eq!(body["bindings"], json!(["gh"]));
    // The same options as the agent's: nothing differs, nothing to save.
    let same = AgentFlags {
        network: Some("filtered".into()),
        permissions: Some("bypass".into()),
        ..Default::default()
    };
    let r = go(&w, "/home/u/code/app", Some("Dev"), &same, false).unwrap();
    assert!(r.differs.is_empty() && r.saved.is_none(), "{:?}", r.differs);
}

#[test]
fn harness_and_model_choose_among_the_agents_models() {
    let w = world(None);
    let flags = AgentFlags {
        model: Some("opus".into()),
        ..Default::default()
    };
    let e = go(&w, "/home/u/code/app", Some("Review"), &flags, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("claude-code on work"), "{e}");
    let bad = AgentFlags {
        allow: vec!["http://x".into()],
        ..Default::default()
    };
    let e = go(&w, "/home/u/code/app", None, &bad, false)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--allow"), "{e}");
}

#[test]
fn the_flags_that_widen_an_agent_say_what_they_give() {
    let f = AgentFlags {
        network: Some("open".into()),
        containers: true,
        display: true,
        ..Default::default()
    };
    let w = widening(&f);
    assert_eq!(w.len(), 3);
    assert!(
        w[0].starts_with("--network open")
            && w[1].starts_with("--containers")
            && w[2].starts_with("--display"),
        "{w:?}"
    );
    assert!(
        widening(&AgentFlags {
            network: Some("none".into()),
            ..Default::default()
        })
        .is_empty()
    );
}

#[test]
fn machine_flags_set_where_sessions_run_and_none_takes_it_back() {
    let mut o = AgentOptions::default();
    apply(
        &AgentFlags {
            machine: Some("disposable".into()),
            disposable_delay: Some(30),
            ..Default::default()
        },
        &mut o,
    );
    assert_eq!(
        (o.machine.as_deref(), o.disposable_delay_ms),
        (Some("disposable"), Some(30_000))
    );
    // A named machine drops the disposable delay; none clears both.
    apply(
        &AgentFlags {
            machine: Some("box".into()),
            ..Default::default()
        },
        &mut o,
    );
    assert_eq!(
        (o.machine.as_deref(), o.disposable_delay_ms),
        (Some("box"), None)
    );
    apply(
        &AgentFlags {
            machine: Some("none".into()),
            ..Default::default()
        },
        &mut o,
    );
    assert_eq!((o.machine, o.disposable_delay_ms), (None, None));
}
