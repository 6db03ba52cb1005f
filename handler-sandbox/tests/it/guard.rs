//! The git guard's decisions (issue 14): mounts, seed, refusals, the bundle's header, what
//! happens to each branch that comes back, and follow's condition. Golden where the output is a
//! document; asserted where it is one answer.

use handler_sandbox::guard::{
    self, Action, DotGit, Follow, FollowFacts, GuardError, Head, HostBranch, Layout, Link,
    RepoFacts,
};

const C1: &str = "1111111111111111111111111111111111111111";
const C2: &str = "2222222222222222222222222222222222222222";
const C3: &str = "3333333333333333333333333333333333333333";

fn main_checkout() -> RepoFacts {
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
        user_name: Some("Alice \"A\" Liddell".into()),
        user_email: Some("alice@example.org".into()),
    }
}

fn worktree() -> RepoFacts {
    RepoFacts {
        root: "/home/alice/wt".into(),
        layout: Layout::Worktree,
        git_dir: "/home/alice/proj/.git/worktrees/wt".into(),
        head: Head::Detached { commit: C2.into() },
        user_name: None,
        ..main_checkout()
    }
}

#[test]
fn a_main_checkout_gets_its_own_git_dir_over_dot_git_and_the_objects_read_only() {
    let m = guard::mounts(
        &main_checkout(),
        "/data/sessions/s1/git",
        "/data/sessions/s1/gitfile",
    );
    insta::assert_debug_snapshot!(m);
}

#[test]
fn a_worktree_gets_its_git_dir_at_a_fixed_path_and_a_read_only_gitfile() {
    let m = guard::mounts(
        &worktree(),
        "/data/sessions/s1/git",
        "/data/sessions/s1/gitfile",
    );
    insta::assert_debug_snapshot!(m);
    assert_eq!(guard::gitfile(), "gitdir: /opt/handler/git\n");
}

#[test]
fn the_seed_holds_the_branch_the_index_commit_and_only_user_name_and_email() {
    insta::assert_debug_snapshot!(guard::seed(&main_checkout()));
    let mut shallow = worktree();
    shallow.shallow = Some(format!("{C3}\n"));
    insta::assert_debug_snapshot!("seed_detached_shallow", guard::seed(&shallow));
    let mut unborn = main_checkout();
    unborn.head = Head::Branch {
        name: "main".into(),
        commit: None,
    };
    let s = guard::seed(&unborn);
    assert_eq!(s.index_from, None);
    assert!(s.files.iter().all(|(p, _)| p != "refs/heads/main"));
}

#[test]
fn links_and_alternates_refuse_naming_each_link_and_its_target() {
    assert_eq!(guard::check(&main_checkout()), Ok(()));
    let mut f = main_checkout();
    f.links = vec![
        Link {
            path: "/home/alice/proj/.git/refs/heads/evil".into(),
            target: "/home/alice/.bashrc".into(),
        },
        Link {
            path: "/home/alice/proj/.git/logs/HEAD".into(),
            target: "../../x".into(),
        },
    ];
    let e = guard::check(&f).unwrap_err();
    insta::assert_snapshot!(e.to_string());
    let mut a = main_checkout();
    a.alternates = Some("# comment\n\n".into());
    assert_eq!(
        guard::check(&a),
        Ok(()),
        "an alternates file naming nothing"
    );
    a.alternates = Some("/srv/shared/objects\n../other/objects\n".into());
    insta::assert_snapshot!("alternates", guard::check(&a).unwrap_err().to_string());
}

#[test]
fn host_git_always_carries_the_safety_options_first() {
    let a = guard::host_git(&["status", "--porcelain"]);
    assert_eq!(
        a,
        [
            "-c",
            "core.fsmonitor=",
            "-c",
            "submodule.recurse=false",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.attributesFile=/dev/null",
            "status",
            "--porcelain"
        ]
    );
    let branches = ["main".to_string(), "uncommitted".to_string()];
    insta::assert_debug_snapshot!(
        guard::fetch_argv("/data/s1/bring.bundle", "s1", &branches).unwrap()
    );
    assert!(matches!(
        guard::fetch_argv("b", "../x", &branches),
        Err(GuardError::RefName { .. })
    ));
    assert!(matches!(
        guard::fetch_argv("b", "s1", &["a..b".to_string()]),
        Err(GuardError::RefName { .. })
    ));
}

#[test]
fn the_bundle_asks_for_every_branch_without_what_the_host_has() {
    insta::assert_debug_snapshot!(guard::bundle_argv(&[C1.into(), C2.into()]));
    assert!(!guard::bundle_argv(&[]).contains(&"--not".to_string()));
}

#[test]
fn a_bundle_header_gives_prerequisites_and_branches_checked() {
    let b = format!(
        "# v2 git bundle\n-{C1} base\n{C2} refs/heads/main\n{C3} refs/heads/feature/x\n{C3} refs/tags/t\n\nPACK..."
    );
    let h = guard::parse_bundle_header(b.as_bytes()).unwrap();
    assert_eq!(h.prerequisites, vec![C1.to_string()]);
    assert_eq!(
        h.branches,
        vec![
            ("main".to_string(), C2.to_string()),
            ("feature/x".to_string(), C3.to_string())
        ]
    );
    for bad in [
        format!("# v2 git bundle\n{C2} refs/heads/../../config\n\n"),
        "# v2 git bundle\nnothex refs/heads/main\n\n".to_string(),
        "PACK".to_string(),
        "# v9 git bundle\n\n".to_string(),
    ] {
        assert!(guard::parse_bundle_header(bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn ref_names_from_the_sandbox_are_checked() {
    for ok in ["main", "feature/x", "a-b_c.d", "s-0123"] {
        assert!(guard::check_ref_name("branch", ok).is_ok(), "{ok}");
    }
    for bad in [
        "", "a..b", "a/.b", "x.lock", "a b", "a\nb", "@", "a@{1}", "a//b", "/a", "a/", "a:b", "a.",
    ] {
        assert!(guard::check_ref_name("branch", bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        guard::hidden_ref("s1", "main").unwrap(),
        "refs/handler/sessions/s1/main"
    );
}

/// A branch named `uncommitted` (or in a folder of that name) never lands on, or under, the
/// copy's uncommitted ref: its first component gets one `_` more, one-to-one.
#[test]
fn no_branch_comes_back_to_the_uncommitted_ref() {
    let kept = handler_sandbox::copytree::uncommitted_ref("s1").unwrap();
    assert_eq!(kept, "refs/handler/sessions/s1/uncommitted");
    let cases = [
        ("uncommitted", "refs/handler/sessions/s1/uncommitted_"),
        ("uncommitted_", "refs/handler/sessions/s1/uncommitted__"),
        ("uncommitted/x", "refs/handler/sessions/s1/uncommitted_/x"),
        (
            "uncommitted__/y/z",
            "refs/handler/sessions/s1/uncommitted___/y/z",
        ),
        ("uncommitted-x", "refs/handler/sessions/s1/uncommitted-x"),
        ("uncommitted_x", "refs/handler/sessions/s1/uncommitted_x"),
        ("x/uncommitted", "refs/handler/sessions/s1/x/uncommitted"),
        (
            "handler-uncommitted",
            "refs/handler/sessions/s1/handler-uncommitted",
        ),
    ];
    let mut seen = std::collections::HashSet::new();
    for (branch, hidden) in cases {
        let h = guard::hidden_ref("s1", branch).unwrap();
        assert_eq!(h, hidden, "{branch}");
        assert!(h != kept && !h.starts_with(&format!("{kept}/")), "{branch}");
        assert!(seen.insert(h), "{branch}: two branches on one hidden ref");
    }
}

#[test]
fn each_branch_is_fast_forwarded_created_or_waits() {
    let ff = HostBranch {
        commit: C1.into(),
        ancestor_of_fetched: true,
    };
    let moved = HostBranch {
        commit: C3.into(),
        ancestor_of_fetched: false,
    };
    let same = HostBranch {
        commit: C2.into(),
        ancestor_of_fetched: true,
    };
    let cases = [
        (
            "main, checked out, clean",
            guard::decide("main", C2, Some(&ff), Some("main"), false),
        ),
        (
            "main, checked out, staged",
            guard::decide("main", C2, Some(&ff), Some("main"), true),
        ),
        (
            "other, staged elsewhere",
            guard::decide("other", C2, Some(&ff), Some("main"), true),
        ),
        ("new", guard::decide("new", C2, None, Some("main"), true)),
        (
            "host moved",
            guard::decide("main", C2, Some(&moved), Some("main"), false),
        ),
        (
            "already there",
            guard::decide("main", C2, Some(&same), Some("main"), false),
        ),
    ];
    insta::assert_debug_snapshot!(cases);
    assert_eq!(cases[0].1, Action::FastForward { reset_index: true });
}

#[test]
fn follow_only_where_the_sandbox_holds_nothing_unfetched() {
    let base = FollowFacts {
        sandbox: Some(("main".into(), C1.into())),
        fetched: None,
        seeded: C1.into(),
        host: Some(C2.into()),
        host_leads_on: true,
    };
    assert_eq!(guard::follow(&base), Follow::To(C2.into()));
    let fetched = FollowFacts {
        sandbox: Some(("main".into(), C3.into())),
        fetched: Some(C3.into()),
        ..base.clone()
    };
    assert_eq!(guard::follow(&fetched), Follow::To(C2.into()));
    let unfetched = FollowFacts {
        sandbox: Some(("main".into(), C3.into())),
        ..base.clone()
    };
    let diverged = FollowFacts {
        host_leads_on: false,
        ..base.clone()
    };
    let same = FollowFacts {
        host: Some(C1.into()),
        ..base.clone()
    };
    let detached = FollowFacts {
        sandbox: None,
        ..base.clone()
    };
    let no_host = FollowFacts {
        host: None,
        ..base.clone()
    };
    assert_eq!(guard::follow(&same), Follow::Nothing);
    assert_eq!(guard::follow(&detached), Follow::Nothing);
    assert_eq!(guard::follow(&no_host), Follow::Nothing);
    insta::assert_debug_snapshot!((guard::follow(&unfetched), guard::follow(&diverged)));
}

#[test]
fn the_helper_container_reads_both_folders_read_only_with_no_network_as_the_host_user() {
    use handler_sandbox::plan::{DockerFacts, Engine};
    let known = vec![C1.to_string()];
    let l = handler_sandbox::facts::LauncherId {
        pid: 4242,
        start: 7,
        boot: "b00t".into(),
    };
    let me = ("handler-git-4242-1", &l);
    let a = guard::helper_run_args(
        Engine::Podman,
        (1000, 1000),
        me,
        "localhost/toolbox:latest",
        "/data/sessions/s1/git",
        "/home/alice/proj/.git/objects",
        &known,
    )
    .unwrap();
    insta::assert_debug_snapshot!(a);
    let rootful = DockerFacts {
        rootless: false,
        allow_rootful: false,
        oci_runtime: None,
        filter_image_id: None,
        image_mounts: false,
    };
    assert!(
        guard::helper_run_args(
            Engine::Docker(&rootful),
            (1000, 1000),
            me,
            "i",
            "/g",
            "/o",
            &[]
        )
        .is_err()
    );
    let rootless = DockerFacts {
        rootless: true,
        ..rootful
    };
    assert!(
        guard::helper_run_args(Engine::Podman, (1, 1), ("-x", &l), "i", "/g", "/o", &[]).is_err()
    );
    let d = guard::helper_run_args(
        Engine::Docker(&rootless),
        (1000, 1000),
        me,
        "i",
        "/g",
        "/o",
        &[],
    )
    .unwrap()
    .join(" ");
    assert!(
        d.contains("--user 0:0") && d.contains("--entrypoint  --mount") && d.contains(" i git "),
        "{d}"
    );
}

#[test]
fn follow_moves_the_branch_by_compare_and_swap_then_reads_the_index() {
    let [a, b] = guard::follow_argvs("main", C1, C2).unwrap();
    assert_eq!(
        a[guard::HOST_GIT_SAFETY.len() + 1..],
        [
            "--git-dir",
            "/opt/handler/git",
            "update-ref",
            "refs/heads/main",
            C2,
            C1
        ]
    );
    assert_eq!(
        b[guard::HOST_GIT_SAFETY.len() + 1..],
        ["--git-dir", "/opt/handler/git", "read-tree", C2]
    );
    assert!(guard::follow_argvs("../x", C1, C2).is_err());
    assert!(guard::follow_argvs("main", "HEAD", C2).is_err());
}

/// Security F1: what a folder's `.git` was at first sight is kept as one line and read back.
#[test]
fn a_dot_git_record_reads_back_what_was_written() {
    for d in [
        DotGit::Absent,
        DotGit::Other,
        DotGit::Dir {
            dev: 64769,
            ino: 42,
        },
        DotGit::File {
            dev: 1,
            ino: 2,
            target: "/home/alice/proj/.git/worktrees/w t".into(),
        },
    ] {
        assert_eq!(DotGit::parse(&format!("{}\n", d.to_line())), Some(d));
    }
    for bad in ["", "dir 1", "dir x 2", "absent 1", "file 1 2", "folder 1 2"] {
        assert_eq!(DotGit::parse(bad), None, "{bad:?}");
    }
}

/// Security F1: a `.git` that appeared, changed kind, inode or target since the first start is
/// refused naming the path, both states and the record; unchanged or gone is no refusal.
#[test]
fn a_dot_git_that_appeared_or_changed_since_the_first_start_is_refused() {
    let dir = DotGit::Dir { dev: 1, ino: 7 };
    let file = |t: &str| DotGit::File {
        dev: 1,
        ino: 9,
        target: t.into(),
    };
    let ok = |a: &DotGit, b: &DotGit| guard::check_seen("/p/.git", a, b, "/rec");
    assert!(ok(&DotGit::Absent, &DotGit::Absent).is_ok());
    assert!(ok(&dir, &dir).is_ok());
    assert!(ok(&dir, &DotGit::Absent).is_ok());
    assert!(ok(&file("../x"), &file("../x")).is_ok());
    for (first, now) in [
        (DotGit::Absent, dir.clone()),
        (DotGit::Absent, file("/other/repo/.git")),
        (dir.clone(), DotGit::Dir { dev: 1, ino: 8 }),
        (dir.clone(), file("/other/repo/.git")),
        (file("/a/.git/worktrees/w"), file("/b/.git")),
        (DotGit::Absent, DotGit::Other),
    ] {
        let e = ok(&first, &now).unwrap_err();
        assert!(matches!(e, GuardError::DotGitChanged { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("/p/.git") && text.contains("remove /rec"),
            "{text}"
        );
    }
    insta::assert_snapshot!(
        "dot_git_appeared",
        ok(&DotGit::Absent, &file("/other/repo/.git"))
            .unwrap_err()
            .to_string()
    );
}

/// Security F1: a gitfile is followed only to a worktree entry whose `gitdir` names it back and
/// whose `commondir` is relative.
#[test]
fn a_gitfile_is_followed_only_to_a_worktree_pointing_back() {
    let wt = "/home/alice/proj/.git/worktrees/wt";
    let me = "/home/alice/wt/.git";
    assert!(guard::check_worktree(me, wt, Some("../.."), Some(me)).is_ok());
    for (git_dir, common, back) in [
        ("/srv/other/.git", Some("../.."), Some(me)),
        (wt, Some("../.."), Some("/home/alice/elsewhere/.git")),
        (wt, Some("../.."), None),
        (wt, Some("/srv/other/.git"), Some(me)),
        (wt, None, Some(me)),
    ] {
        let e = guard::check_worktree(me, git_dir, common, back).unwrap_err();
        assert!(matches!(e, GuardError::NotAWorktree { .. }), "{e}");
        assert!(e.to_string().starts_with(me), "{e}");
    }
}
