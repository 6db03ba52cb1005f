//! `sessionTree = "copy"` (decision 0103): the option, the refusals, the copy's mounts and
//! checkout, ff-only vs wait when the work comes back, and the uncommitted ref.

use handler_sandbox::copytree::{self, CopyError, SessionTree, TreeFacts};
use handler_sandbox::guard::{Action, GuardError, Head, HostBranch, Layout, Link, RepoFacts};

const C1: &str = "1111111111111111111111111111111111111111";
const C2: &str = "2222222222222222222222222222222222222222";

fn repo() -> RepoFacts {
    RepoFacts {
        root: "/home/alice/proj".into(),
        layout: Layout::Main,
        git_dir: "/home/alice/proj/.git".into(),
        common_dir: "/home/alice/proj/.git".into(),
        head: Head::Branch {
            name: "main".into(),
            commit: Some(C1.into()),
        },
        links: vec![],
        alternates: None,
        shallow: None,
        user_name: Some("Alice".into()),
        user_email: Some("alice@example.org".into()),
    }
}

fn ff() -> HostBranch {
    HostBranch {
        commit: C1.into(),
        ancestor_of_fetched: true,
    }
}

fn tree(changed: &[&str], writes: &[&str]) -> TreeFacts {
    TreeFacts {
        head: Some("main".into()),
        host_changed: changed.iter().map(ToString::to_string).collect(),
        agent_writes: writes.iter().map(ToString::to_string).collect(),
        scope: String::new(),
    }
}

/// Below the root (decision 0121), a fast-forward whose commits write outside the scope waits,
/// naming the paths; inside it, it merges.
#[test]
fn below_the_root_a_commit_writing_outside_the_scope_waits() {
    let mut t = tree(&[], &["sub/a.txt", "top.txt", "subway/b"]);
    t.scope = "sub".into();
    match copytree::decide("main", C2, Some(&ff()), &t) {
        Action::Wait { reason } => assert_eq!(
            reason,
            "the agent's commit writes top.txt, subway/b outside its scope sub: the work waits"
        ),
        other => panic!("{other:?}"),
    }
    t.agent_writes = vec!["sub/a.txt".into(), "sub/x/y".into()];
    assert_eq!(
        copytree::decide("main", C2, Some(&ff()), &t),
        Action::MergeFfOnly
    );
    assert_eq!(copytree::decide("side", C2, None, &t), Action::Create);
}

#[test]
fn the_option_defaults_to_shared_and_names_itself_when_wrong() {
    assert_eq!(SessionTree::parse(None).unwrap(), SessionTree::Shared);
    assert_eq!(
        SessionTree::parse(Some("shared")).unwrap(),
        SessionTree::Shared
    );
    assert_eq!(SessionTree::parse(Some("copy")).unwrap(), SessionTree::Copy);
    let err = SessionTree::parse(Some("clone")).unwrap_err();
    assert!(err.to_string().starts_with("sessionTree:"), "{err}");
}

#[test]
fn a_scope_outside_git_is_refused_naming_session_tree() {
    let err = copytree::check("/home/alice/notes", None).unwrap_err();
    assert!(matches!(err, CopyError::NotARepository { .. }));
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn a_repository_without_a_commit_or_with_links_is_refused() {
    let mut r = repo();
    r.head = Head::Branch {
        name: "main".into(),
        commit: None,
    };
    assert!(matches!(
        copytree::check("/home/alice/proj", Some(&r)),
        Err(CopyError::NoCommit { .. })
    ));
    let mut r = repo();
    r.links = vec![Link {
        path: "/home/alice/proj/.git/hooks".into(),
        target: "/tmp/x".into(),
    }];
    let err = copytree::check("/home/alice/proj", Some(&r)).unwrap_err();
    assert!(matches!(err, CopyError::Guard(GuardError::Links { .. })));
    assert!(err.to_string().starts_with("sessionTree:"));
    assert_eq!(
        copytree::check("/home/alice/proj/src", Some(&repo())).unwrap(),
        C1
    );
}

#[test]
fn the_copy_is_mounted_at_the_root_and_only_objects_of_the_host_read_only() {
    let m = copytree::mounts(
        &repo(),
        "/var/lib/handler/sessions/s1/tree",
        "/home/alice/proj/",
    )
    .unwrap();
    insta::assert_debug_snapshot!(m);
    assert!(
        m.iter()
            .all(|m| m.read_only || !m.source.starts_with("/home/alice")),
        "nothing of the host's is writable"
    );
}

/// A scope below the root (decision 0121): only the checkout's part at the scope's path, its
/// `.git` at the root's, a sparse checkout of that folder alone; a scope outside the
/// repository gets no mounts.
#[test]
fn a_scope_below_the_root_binds_only_its_part_of_a_sparse_checkout() {
    let checkout = "/var/lib/handler/sessions/s1/guard/tree";
    let m = copytree::mounts(&repo(), checkout, "/home/alice/proj/sub/x").unwrap();
    let got: Vec<(&str, &str, bool)> = m
        .iter()
        .map(|m| (m.source.as_str(), m.target.as_str(), m.read_only))
        .collect();
    assert_eq!(
        got,
        [
            (
                "/var/lib/handler/sessions/s1/guard/tree/sub/x",
                "/home/alice/proj/sub/x",
                false
            ),
            (
                "/var/lib/handler/sessions/s1/guard/tree/.git",
                "/home/alice/proj/.git",
                false
            ),
            (
                "/home/alice/proj/.git/objects",
                handler_sandbox::guard::HOST_OBJECTS,
                true
            ),
        ]
    );
    for outside in [
        "/home/alice/project",
        "/home/alice",
        "/home/alice/proj/../x",
    ] {
        assert!(
            copytree::mounts(&repo(), checkout, outside).is_none(),
            "{outside}"
        );
    }
    assert_eq!(
        copytree::scope_below_root(&repo(), "/home/alice/proj").unwrap(),
        ""
    );
    assert_eq!(copytree::sparse(""), None);
    let (pattern, config) = copytree::sparse("sub/a b*[1]").unwrap();
    assert_eq!(pattern, "/sub/a\\ b\\*\\[1\\]/\n");
    assert_eq!(config, "[core]\n\tsparseCheckout = true\n");
}

#[test]
fn the_checkout_is_a_hard_reset_with_the_host_safety_options() {
    insta::assert_debug_snapshot!(copytree::checkout_argvs(
        "/var/lib/handler/sessions/s1/tree",
        C1
    ));
}

#[test]
fn a_fast_forward_of_the_checked_out_branch_merges_ff_only() {
    let t = tree(&["README"], &["src/lib.rs"]);
    assert_eq!(
        copytree::decide("main", C2, Some(&ff()), &t),
        Action::MergeFfOnly
    );
    insta::assert_debug_snapshot!(copytree::merge_argv("/home/alice/proj", "s1", "main").unwrap());
}

#[test]
fn a_host_change_to_a_file_the_commit_writes_makes_the_work_wait() {
    let t = tree(&["src/lib.rs", "README"], &["src/lib.rs"]);
    let a = copytree::decide("main", C2, Some(&ff()), &t);
    insta::assert_debug_snapshot!(a);
    assert!(matches!(a, Action::Wait { .. }));
}

#[test]
fn other_branches_move_the_ref_or_are_created_and_a_moved_host_waits() {
    let t = tree(&["src/lib.rs"], &["src/lib.rs"]);
    assert_eq!(
        copytree::decide("feature", C2, Some(&ff()), &t),
        Action::FastForward { reset_index: false }
    );
    assert_eq!(copytree::decide("feature", C2, None, &t), Action::Create);
    let same = HostBranch {
        commit: C2.into(),
        ancestor_of_fetched: true,
    };
    assert_eq!(
        copytree::decide("main", C2, Some(&same), &t),
        Action::Unchanged
    );
    let moved = HostBranch {
        commit: C1.into(),
        ancestor_of_fetched: false,
    };
    assert!(matches!(
        copytree::decide("main", C2, Some(&moved), &tree(&[], &[])),
        Action::Wait { .. }
    ));
}

#[test]
fn uncommitted_work_has_its_own_ref_and_script() {
    assert_eq!(
        copytree::uncommitted_ref("s1").unwrap(),
        "refs/handler/sessions/s1/uncommitted"
    );
    assert!(copytree::uncommitted_ref("a..b").is_err());
    assert!(copytree::merge_argv("/r", "s1", "../x").is_err());
    insta::assert_snapshot!(copytree::uncommitted_script("/work/it's"));
}

/// The plan of a copy sandbox: the spec's mounts are [`copytree::mounts`] (no host tree), and
/// `gitWritable` is set — the checkout's `.git` is Handler's, not the host's, and read-only it
/// would stop the agent committing (decision 0031 guards the host's git, which is not mounted).
#[test]
fn the_copy_plan_binds_the_checkout_writable_and_the_host_objects_read_only() {
    use handler_sandbox::facts::{GitEntryKind, GitPath, GitRepo};
    use handler_sandbox::{PathKind, plan_launch, validate_spec};
    let checkout = "/home/alice/.local/state/handler-ai/sessions/s1/tree";
    let mut f = crate::plan::facts();
    f.paths.insert(checkout.into(), PathKind::Directory);
    f.canonical_sources.insert(checkout.into(), checkout.into());
    let dot_git = format!("{checkout}/.git");
    f.paths.insert(dot_git.clone(), PathKind::Directory);
    f.canonical_sources.insert(dot_git.clone(), dot_git);
    f.paths
        .insert("/home/alice/proj/.git/objects".into(), PathKind::Directory);
    f.git = vec![GitRepo {
        entry: format!("{checkout}/.git"),
        kind: GitEntryKind::Dir,
        paths: vec![GitPath {
            what: "gitdir".into(),
            path: format!("{checkout}/.git"),
            exists: true,
        }],
    }];
    let mounts =
        serde_json::to_value(copytree::mounts(&repo(), checkout, "/home/alice/proj")).unwrap();
    let copy = crate::plan::with(serde_json::json!({"mounts": mounts, "gitWritable": true}));
    let plan = plan_launch(&validate_spec(&copy).unwrap(), &f).unwrap();
    let binds: Vec<&String> = plan
        .args
        .iter()
        .filter(|a| a.starts_with("type=bind"))
        .collect();
    insta::assert_debug_snapshot!(binds);
    assert!(!binds.iter().any(|b| b.contains("source=/home/alice/proj,")));
    let shared_git = crate::plan::with(serde_json::json!({"mounts": mounts}));
    let plan = plan_launch(&validate_spec(&shared_git).unwrap(), &f).unwrap();
    assert!(
        plan.args
            .iter()
            .any(|a| a.ends_with("destination=/home/alice/proj/.git,ro=true")),
        "without gitWritable the copy's .git would be read-only"
    );
}
