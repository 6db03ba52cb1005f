//! The git guard (issue 14) against real rootless Podman: handlerd as the unprivileged test user
//! runs the scripted fake agent in `localhost/handler-test-git` (busybox with git) on a scope that
//! is a repository's root. A hostile agent writes a hook, sets `core.fsmonitor` and plants a
//! link under `refs/` — all in the session's own git directory, so the host repository has none
//! of it and the host's `git status`/`checkout` run nothing; its commits come back by bundle: the
//! tree's branch fast-forwarded, a new branch created, a branch the host moved left waiting under
//! `refs/handler/sessions/<id>/`. A planted link in the host's git directory refuses the start
//! (409) naming it. Missing podman or user FAILS, unless HANDLER_SKIP_PODMAN_TESTS=1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::user::User;

use crate::temp_daemon::{HostGit, Layout, TempDaemon};

const IMAGE: &str = "localhost/handler-test-git";
const TOKEN: &str = "fk-GitGuard0Token111aaaa2222bbbb3333";

fn user() -> Option<User> {
    test_support::user::podman_user(IMAGE, "the git guard tests")
}

/// handlerd as the test user, its scope a repository.
struct Daemon {
    d: TempDaemon,
    scope: PathBuf,
}

impl std::ops::Deref for Daemon {
    type Target = TempDaemon;
    fn deref(&self) -> &TempDaemon {
        &self.d
    }
}

/// A daemon in `/tmp/hgg-<pid>-<tag>` whose scope is a repository (branch `main` with one
/// commit, and `side` one commit ahead of it), the fake agent beside it, untracked.
async fn start(u: User, tag: &str) -> Daemon {
    let l = Layout::new(&format!("hgg-{}-{tag}", std::process::id()), false);
    let (root, home, scope) = (l.root.clone(), l.home.clone(), l.scope.clone());
    std::fs::write(scope.join(".fake-agent-script.json"), "{}").unwrap();
    std::fs::write(scope.join(".gitignore"), ".bin/\n.fake-agent-script.json\n").unwrap();
    std::fs::write(scope.join("README"), "base\n").unwrap();
    // With its terminal program (D.16), for a_terminal_gets_the_git_guard_like_a_connection.
    l.fake_harness_in(
        IMAGE,
        &format!(
            "[terminal]\ncommand = [\"{}\", \"--terminal\"]\n[terminal.permissions]\nask = []\nbypass = [\"--yolo\"]\n",
            scope.join(".bin/fake-acp-agent").display()
        ),
    );
    let descriptor = std::fs::read_to_string(home.join("harnesses/fake/harness.toml")).unwrap();
    // The same fake agent started from the scope it is in (`./.bin/…`, for scopes other than
    // this one), in this image and in one without git (docs/git-guard.md's defined behaviours).
    let relative = descriptor.replace(
        &scope.join(".bin/fake-acp-agent").display().to_string(),
        "./.bin/fake-acp-agent",
    );
    for (name, image) in [
        ("fakerel", IMAGE),
        ("fakenogit", "localhost/handler-test-busybox"),
    ] {
        std::fs::create_dir_all(home.join("harnesses").join(name)).unwrap();
        std::fs::write(
            home.join("harnesses").join(name).join("harness.toml"),
            relative
                .replace("name = \"fake\"", &format!("name = \"{name}\""))
                .replace(IMAGE, image),
        )
        .unwrap();
    }
    std::fs::write(
        home.join("harnesses/fakenogit/harness.toml"),
        descriptor
            .replace("name = \"fake\"", "name = \"fakenogit\"")
            .replace(IMAGE, "localhost/handler-test-busybox"),
    )
    .unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    u.give(&root);
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "user.name", "Host Person"],
        &["config", "user.email", "host@example.org"],
        &["add", "-A"],
        &["commit", "-q", "-m", "base"],
        &["branch", "side"],
        &["checkout", "-q", "side"],
        &["commit", "-q", "--allow-empty", "-m", "the host's side"],
        &["checkout", "-q", "main"],
    ] {
        u.git(&scope, args);
    }
    Daemon {
        d: l.spawn(u, &[]).await,
        scope,
    }
}

impl Daemon {
    /// Deletes `agent` (which stops its sandboxes and terminals).
    async fn delete_agent(&self, agent: &str) {
        let (s, v) = self
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/agents/{agent}"),
                None,
            )
            .await;
        assert!(s == 204 || s == 200, "{s} {v}");
    }
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }
    fn guard_log(&self, session: &str) -> String {
        std::fs::read_to_string(
            self.root
                .join("state/sessions")
                .join(session)
                .join("git-guard.log"),
        )
        .unwrap_or_default()
    }
    fn events(&self, session: &str) -> String {
        std::fs::read_to_string(
            self.root
                .join("state/sessions")
                .join(session)
                .join("events.ndjson"),
        )
        .unwrap_or_default()
    }
    async fn agent(&self) -> String {
        let (s, a) = self.agent_with(json!({"confirmRisks": true})).await;
        assert_eq!(s, 201, "{a}");
        a["id"].as_str().unwrap().to_string()
    }
    /// The account (once) and an ad-hoc agent on the scope, `extra` merged into its request.
    async fn agent_with(&self, extra: Value) -> (u16, Value) {
        let (s, v) = self
            .post(
                "/v1/accounts",
                json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
            )
            .await;
        assert!(s == 201 || s == 409, "{v}");
        let mut req = json!({"models": [{"account": "perso"}], "scope": self.scope, "network": "none", "permissions": "bypass"});
        for (k, x) in extra.as_object().unwrap() {
            req[k] = x.clone();
        }
        self.post("/v1/agents", req).await
    }
    fn git(&self, args: &[&str]) -> String {
        self.user.git(&self.scope, args)
    }
    /// Waits (60 s at most) until the host's `main` is the commit named `subject` and the
    /// daemon's log has a git-guard line for `when`.
    fn wait_for_subject(&self, subject: &str, when: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.git(&["log", "-1", "--format=%s", "main"]) != subject
            || !self.log().contains(when)
        {
            assert!(
                Instant::now() < deadline,
                "not brought back: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// What the hostile agent runs in its first turn: a hook, `core.fsmonitor` and a link under
/// `refs/` in the `.git` it sees, then commits on `main`, a new `feature` and its own `side`.
fn hostile_script(scope: &Path, canary: &Path) -> String {
    let c = canary.display();
    format!(
        "sh: cd {scope} && \
         mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch {c}\\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout && \
         git config core.fsmonitor 'touch {c}; false' && \
         ln -s /etc/passwd .git/refs/planted && \
         echo agent > work.txt && git add work.txt && git commit -q -m 'agent on main' && \
         git branch feature && git branch side && \
         git --no-optional-locks log --oneline -1 && echo done-hostile",
        scope = scope.display()
    )
}

/// The hostile agent's doing (a hook, a `refs/planted` link, an fsmonitor in the config) is not
/// in the host's git directory, and git commands there run nothing of it (`canary` not made).
fn host_git_untouched(d: &Daemon, canary: &Path) {
    let dot_git = d.scope.join(".git");
    assert!(!dot_git.join("hooks/post-checkout").exists());
    assert!(!dot_git.join("refs/planted").is_symlink());
    let config = std::fs::read_to_string(dot_git.join("config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    d.git(&["status"]);
    d.git(&["checkout", "-q", "feature"]);
    d.git(&["checkout", "-q", "main"]);
    assert!(
        !canary.exists(),
        "the host's git ran the agent's hook or fsmonitor"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_agent_leaves_the_host_repository_untouched_and_its_commits_come_back() {
    let Some(u) = user() else { return };
    let d = start(u, "hostile").await;
    let canary = d.root.join("canary");
    let base = d.git(&["rev-parse", "main"]);
    let host_side = d.git(&["rev-parse", "side"]);
    let agent = d.agent().await;
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": agent, "origin": "ui", "prompt": hostile_script(&d.scope, &canary)}),
        )
        .await;
    assert_eq!(s, 201, "{v}: {}", d.log());
    let id = v["id"].as_str().unwrap().to_string();
    // The turn ends; the bring-back creates `feature` on the host.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !d.guard_log(&id).contains("feature: created") {
        assert!(
            Instant::now() < deadline,
            "no bring-back: {}\n{}\n{}",
            d.guard_log(&id),
            d.log(),
            d.events(&id)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let log = d.guard_log(&id);
    // main: fast-forwarded to the agent's commit, the index with it (nothing shows as staged).
    let main = d.git(&["rev-parse", "main"]);
    assert_ne!(main, base, "{log}");
    assert_eq!(d.git(&["rev-parse", "main~1"]), base);
    assert_eq!(
        d.git(&["log", "-1", "--format=%s %an", "main"]),
        "agent on main Host Person"
    );
    assert_eq!(d.git(&["status", "--porcelain"]), "", "{log}");
    assert!(log.contains("main: fast-forwarded"), "{log}");
    // feature: created; side: the host's moved, so the agent's waits under the hidden ref.
    assert_eq!(d.git(&["rev-parse", "feature"]), main);
    assert_eq!(d.git(&["rev-parse", "side"]), host_side, "{log}");
    assert_eq!(
        d.git(&["rev-parse", &format!("refs/handler/sessions/{id}/side")]),
        main
    );
    assert!(
        log.contains(&format!(
            "side: waits under refs/handler/sessions/{id}/side"
        )),
        "{log}"
    );
    // The host's git directory has none of the agent's doing, and git there runs nothing.
    host_git_untouched(&d, &canary);
    // The agent's git directory did get them: they were in the sandbox's own repository.
    let own = d.root.join("state/sessions").join(&id).join("guard/git");
    assert!(own.join("hooks/post-checkout").exists());
    assert!(own.join("refs/planted").is_symlink());
    assert!(
        std::fs::read_to_string(own.join("config"))
            .unwrap()
            .contains("fsmonitor")
    );

    // Follow: a host commit between turns reaches the sandbox before its next turn.
    d.git(&[
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "the host between turns",
    ]);
    let host_main = d.git(&["rev-parse", "main"]);
    let sid = v["acpSessionId"].as_str().unwrap().to_string();
    let protocols = vec!["acp.v1".to_string(), format!("bearer.{}", d.token)];
    let url = format!("ws://127.0.0.1:{}/v1/sessions/{id}/acp", d.port);
    let mut c = test_support::acp::open(&url, &protocols, None)
        .await
        .unwrap();
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    let r = c
        .request(
            "session/load",
            json!({"sessionId": sid, "cwd": d.scope, "mcpServers": []}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let prompt = format!("sh: cd {} && git log -1 --format=%H", d.scope.display());
    let r = c
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]}),
        )
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let events = d.events(&id);
    assert!(
        events.contains(&format!("exit 0\\n{host_main}")),
        "the sandbox is not at the host's {host_main}: {events}\n{}",
        d.guard_log(&id)
    );
    assert!(
        d.guard_log(&id)
            .contains("follow: the sandbox's main moved to the host's"),
        "{}",
        d.guard_log(&id)
    );
}

/// `gitGuard = "open"` widens (D.8): refused without `confirmRisks`, saved with it and shown
/// with its warning; its sandbox then commits in the host's own `.git`, nothing to bring back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_guard_open_needs_confirmation_and_leaves_the_host_git_writable() {
    let Some(u) = user() else { return };
    let d = start(u, "open").await;
    let (s, v) = d.agent_with(json!({"gitGuard": "open"})).await;
    assert_eq!(s, 409, "{v}");
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("gitGuard: open"), "{v}");
    let (s, a) = d
        .agent_with(json!({"gitGuard": "open", "confirmRisks": true}))
        .await;
    assert_eq!(s, 201, "{a}");
    assert_eq!(a["gitGuard"], "open", "{a}");
    assert!(
        a["warnings"][0]
            .as_str()
            .unwrap_or_default()
            .contains("writable"),
        "{a}"
    );
    let prompt = format!(
        "sh: cd {} && touch .git/written-in-the-sandbox && echo o > o.txt && git add o.txt && git commit -q -m 'in the host git'",
        d.scope.display()
    );
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": a["id"], "origin": "ui", "prompt": prompt}),
        )
        .await;
    assert_eq!(s, 201, "{v}: {}", d.log());
    let id = v["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.git(&["log", "-1", "--format=%s", "main"]) != "in the host git" {
        assert!(
            Instant::now() < deadline,
            "the sandbox did not commit in the host's .git: {}\n{}",
            d.events(&id),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(d.scope.join(".git/written-in-the-sandbox").exists());
    assert!(
        !d.root
            .join("state/sessions")
            .join(&id)
            .join("guard")
            .exists()
    );
    assert!(d.log().contains("gitGuard open"), "{}", d.log());
}

/// Starts a session of `agent` with `prompt`: its id.
async fn session(d: &Daemon, agent: &Value, prompt: String) -> String {
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": agent["id"], "origin": "ui", "prompt": prompt}),
        )
        .await;
    assert_eq!(s, 201, "{v}: {}", d.log());
    v["id"].as_str().unwrap().to_string()
}

/// Waits (120 s at most) for `line` in session `id`'s git-guard log.
async fn wait_guard_line(d: &Daemon, id: &str, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let log = d.guard_log(id);
        if log.contains(line) {
            return log;
        }
        assert!(
            Instant::now() < deadline,
            "no {line:?}: {log}\n{}\n{}",
            d.events(id),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// docs/git-guard.md's defined behaviours on real Podman, one session each, in parallel: a
/// linked worktree (its branch fast-forwarded, the worktree's index with it), a shallow clone
/// (history stops where the host's does; the commit comes back), a detached HEAD (started
/// detached; only a branch comes back), an image without git (the guard holds, the line says
/// nothing can come back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worktree_a_shallow_clone_a_detached_head_and_an_image_without_git_behave_as_documented()
{
    let Some(u) = user() else { return };
    let d = start(u, "cases").await;
    let code = d.scope.parent().unwrap().to_path_buf();
    d.git(&["commit", "-q", "--allow-empty", "-m", "second"]);
    let wt = code.join("wt");
    d.git(&["worktree", "add", "-q", "-b", "wtb", wt.to_str().unwrap()]);
    let shallow = code.join("shallow");
    let detached = code.join("detached");
    let url = format!("file://{}", d.scope.display());
    let nogit = code.join("nogit");
    for (args, at) in [
        (
            vec![
                "clone",
                "-q",
                "--depth",
                "1",
                &url,
                shallow.to_str().unwrap(),
            ],
            &code,
        ),
        (vec!["clone", "-q", &url, detached.to_str().unwrap()], &code),
        (vec!["clone", "-q", &url, nogit.to_str().unwrap()], &code),
    ] {
        d.user.git(at, &args);
    }
    for r in [&shallow, &detached, &nogit] {
        d.user.git(r, &["config", "user.name", "Host Person"]);
        d.user.git(r, &["config", "user.email", "host@example.org"]);
        for f in [".bin", ".fake-agent-script.json"] {
            let _ = std::fs::remove_dir_all(r.join(f));
            let _ = std::fs::remove_file(r.join(f));
            d.user
                .cmd(
                    "cp",
                    &["-a", d.scope.join(f).to_str().unwrap(), r.to_str().unwrap()],
                    &[],
                )
                .status()
                .unwrap();
        }
    }
    for f in [".bin", ".fake-agent-script.json"] {
        d.user
            .cmd(
                "cp",
                &[
                    "-a",
                    d.scope.join(f).to_str().unwrap(),
                    wt.to_str().unwrap(),
                ],
                &[],
            )
            .status()
            .unwrap();
    }
    d.user
        .git(&detached, &["checkout", "-q", "--detach", "HEAD~1"]);
    let detached_at = d.user.git(&detached, &["rev-parse", "HEAD"]);
    let commit = |dir: &Path, file: &str| {
        format!(
            "sh: cd {} && echo x > {file} && git add {file} && git commit -q -m 'agent {file}'",
            dir.display()
        )
    };
    let agent = async |scope: &Path, account: &str| {
        let (s, a) = d
            .agent_with(
                json!({"scope": scope, "models": [{"account": account}], "confirmRisks": true}),
            )
            .await;
        assert_eq!(s, 201, "{a}");
        a
    };
    for (name, harness) in [("rel", "fakerel"), ("nogit", "fakenogit")] {
        let (s, v) = d
            .post(
                "/v1/accounts",
                json!({"name": name, "harness": harness, "token": {"value": TOKEN}}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }
    let a_wt = agent(&wt, "rel").await;
    let a_sh = agent(&shallow, "rel").await;
    let a_de = agent(&detached, "rel").await;
    let a_ng = agent(&nogit, "nogit").await;
    let s_wt = session(&d, &a_wt, commit(&wt, "w.txt")).await;
    let s_sh = session(
        &d,
        &a_sh,
        format!("{} && git rev-list --count HEAD", commit(&shallow, "s.txt")),
    )
    .await;
    let s_de = session(
        &d,
        &a_de,
        format!(
            "sh: cd {} && (git symbolic-ref -q HEAD || echo is-detached) && git rev-parse HEAD && echo y > y && git add y && git commit -q -m 'detached work' && git branch made && echo z > z && git add z && git commit -q -m 'only detached'",
            detached.display()
        ),
    )
    .await;
    let s_ng = session(&d, &a_ng, commit(&nogit, "n.txt")).await;

    // A linked worktree: its branch fast-forwarded, its index with it.
    wait_guard_line(&d, &s_wt, "wtb: fast-forwarded").await;
    assert_eq!(
        d.user.git(&wt, &["log", "-1", "--format=%s"]),
        "agent w.txt"
    );
    assert_eq!(d.user.git(&wt, &["status", "--porcelain"]), "");
    assert_eq!(d.git(&["rev-parse", "--abbrev-ref", "HEAD"]), "main");
    // A shallow clone: the sandbox's history stops where the host's does; the commit comes back.
    wait_guard_line(&d, &s_sh, "main: fast-forwarded").await;
    assert_eq!(
        d.user.git(&shallow, &["log", "-1", "--format=%s"]),
        "agent s.txt"
    );
    assert!(
        d.events(&s_sh).contains("exit 0\\n2\\n"),
        "{}",
        d.events(&s_sh)
    );
    // A detached HEAD: started detached at that commit; `made` comes back, HEAD stays.
    wait_guard_line(&d, &s_de, "made: created").await;
    let ev = d.events(&s_de);
    assert!(ev.contains(&format!("is-detached\\n{detached_at}")), "{ev}");
    assert_eq!(d.user.git(&detached, &["rev-parse", "HEAD"]), detached_at);
    assert_eq!(
        d.user.git(&detached, &["log", "-1", "--format=%s", "made"]),
        "detached work"
    );
    // An image without git: nothing commits, nothing comes back, the line says why.
    wait_guard_line(
        &d,
        &s_ng,
        "has no git, so nothing committed in the sandbox can come back",
    )
    .await;
    assert!(!nogit.join(".git/hooks/post-checkout").exists());
    assert_eq!(d.user.git(&nogit, &["log", "-1", "--format=%s"]), "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_link_in_the_host_git_directory_refuses_the_start_naming_it() {
    let Some(u) = user() else { return };
    let d = start(u, "link").await;
    let link = d.scope.join(".git/refs/heads/planted");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let agent = d.agent().await;
    let (s, v) = d
        .post("/v1/sessions", json!({"agentId": agent, "origin": "ui"}))
        .await;
    assert_eq!(s, 409, "{v}");
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!("{} -> /etc/passwd", link.display())),
        "{v}"
    );
    assert!(link.is_symlink(), "nothing is removed");
}

/// A repository of `files` files and `commits` commits in `dir` (git fast-import, then checked
/// out), owned by the caller.
fn big_repo(dir: &Path, files: usize, commits: usize) {
    use std::io::Write;
    std::fs::create_dir_all(dir).unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    git(&["init", "-q", "-b", "main"]);
    let mut s = String::new();
    for c in 0..commits {
        s.push_str(&format!(
            "commit refs/heads/main\ncommitter B <b@e> {} +0000\ndata 3\nc{:02}\n",
            1_700_000_000 + c,
            c % 100
        ));
        if c == 0 {
            for f in 0..files {
                let body = format!("file {f}\n");
                s.push_str(&format!(
                    "M 644 inline d{:03}/f{f:05}.txt\ndata {}\n{body}\n",
                    f % 100,
                    body.len()
                ));
            }
        } else {
            let f = c % files;
            let body = format!("file {f} changed in {c}\n");
            s.push_str(&format!(
                "M 644 inline d{:03}/f{f:05}.txt\ndata {}\n{body}\n",
                f % 100,
                body.len()
            ));
        }
    }
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["fast-import", "--quiet"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    git(&["reset", "-q", "--hard", "main"]);
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The start cost the guard adds, and the bring-back's time, on a repository of 10 000 files
/// and 1 000 commits: `handler-sandbox-podman launch` of `true` on the scope alone (decision
/// 0031's read-only git) against the guard's preparation plus the launch with its mounts,
/// alternated, medians; then one commit in the sandbox and its bring-back. A benchmark:
/// `cargo test -p handler-bins --test it -- --ignored daemon_git_guard::bench` (bench/git-guard.sh).
#[test]
#[ignore = "a benchmark (bench/git-guard.sh)"]
fn bench_guarded_start_and_bring_back() {
    use handler_core::daemon::launch::gitguard;
    let Some(u) = user() else { return };
    let rounds: usize = std::env::var("HANDLER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(7);
    let root = PathBuf::from(format!("/tmp/hgg-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let scope = root.join("repo");
    let t = Instant::now();
    big_repo(&scope, 10_000, 1_000);
    eprintln!("repository made in {:?}", t.elapsed());
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&root)
        .status()
        .unwrap();
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_handler-sandbox-podman"));
    let launch = |name: &str, mounts: Value, argv: Value| -> Duration {
        let spec = json!({
            "apiVersion": "handler.sandbox/v1", "name": name, "image": IMAGE,
            "argv": argv, "env": {}, "workdir": scope,
            "user": {"mode": "host-user", "home": "/home/agent"}, "mounts": mounts, "files": [],
            "writablePaths": [], "network": {"mode": "none"}, "injections": []
        });
        let file = root.join(format!("{name}.json"));
        std::fs::write(&file, spec.to_string()).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let t = Instant::now();
        let o = u
            .cmd(
                "sh",
                &[
                    "-c",
                    "exec \"$0\" launch 3<\"$1\"",
                    exe.to_str().unwrap(),
                    file.to_str().unwrap(),
                ],
                &[],
            )
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        t.elapsed()
    };
    let scope_mount = json!({"source": scope, "target": scope, "readOnly": false, "kind": "scope"});
    let (mut plain, mut guarded, mut prep) = (Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for r in 0..rounds {
        plain.push(launch(
            &format!("hgg-bench-p{r}-{}", std::process::id()),
            json!([scope_mount]),
            json!(["true"]),
        ));
        let dir = root.join(format!("guard{r}"));
        let t = Instant::now();
        let mut mounts = vec![serde_json::from_value(scope_mount.clone()).unwrap()];
        // What a start does: gather, resolve's guard plan (check, mounts), then make it.
        let facts = gitguard::gather(&root.join("seen"), &scope)
            .unwrap()
            .unwrap();
        handler_sandbox::guard::check(&facts).unwrap();
        let at = |name: &str| dir.join(name).display().to_string();
        mounts.extend(handler_sandbox::guard::mounts(
            &facts,
            &at("git"),
            &at("gitfile"),
        ));
        let g = gitguard::make_git_dir(facts, &dir).unwrap();
        let p = t.elapsed();
        u.give(&dir);
        let m = serde_json::to_value(&mounts).unwrap();
        let l = launch(
            &format!("hgg-bench-g{r}-{}", std::process::id()),
            m,
            json!(["true"]),
        );
        prep.push(p);
        guarded.push(p + l);
        last = Some((g, mounts));
    }
    let (pl, gu, pr) = (median(&mut plain), median(&mut guarded), median(&mut prep));
    eprintln!(
        "BENCH start: unguarded {pl:?}, guarded {gu:?} (of which the guard's preparation {pr:?}), ratio {:.2}x",
        gu.as_secs_f64() / pl.as_secs_f64()
    );
    // One commit in the sandbox, then its bring-back.
    let (g, mounts) = last.unwrap();
    let m = serde_json::to_value(&mounts).unwrap();
    launch(
        &format!("hgg-bench-c-{}", std::process::id()),
        m,
        json!([
            "git",
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=B",
            "-c",
            "user.email=b@e",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "bench"
        ]),
    );
    let mut cmd: Vec<String> = match &u.name {
        Some(n) => vec![
            "setpriv".into(),
            "--reuid".into(),
            n.clone(),
            "--regid".into(),
            n.clone(),
            "--init-groups".into(),
            "env".into(),
            "-i".into(),
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
            "HANDLER_PROXY_POOL=0".into(),
            format!("HOME={}", u.home()),
        ],
        None => Vec::new(),
    };
    cmd.push(exe.display().to_string());
    let launcher = handler_core::daemon::launch::launcher::ProcessLauncher {
        command: cmd,
        records: None,
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = Instant::now();
    let b = rt
        .block_on(gitguard::bring_back(&launcher, &g, "bench", IMAGE))
        .unwrap();
    eprintln!(
        "BENCH bring-back of one commit: {:?} ({:?})",
        t.elapsed(),
        b.lines
    );
    assert!(
        b.lines
            .iter()
            .any(|l| l.starts_with("main: fast-forwarded")),
        "{b:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A connection (`/v1/agents/{id}/acp`, not a session) is guarded too: the agent's commit comes
/// back at its turn's end, a host commit between turns reaches the sandbox before the next
/// prompt (follow), and a commit made in a turn that never ended comes back when the connection
/// closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_commits_come_back_at_turn_end_and_close_and_it_follows_the_host() {
    let Some(u) = user() else { return };
    let d = start(u, "conn").await;
    let agent = d.agent().await;
    let protocols = vec!["acp.v1".to_string(), format!("bearer.{}", d.token)];
    let url = format!("ws://127.0.0.1:{}/v1/agents/{agent}/acp", d.port);
    let mut c = test_support::acp::open(&url, &protocols, None)
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", d.log()));
    c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    let r = c
        .request("session/new", json!({"cwd": d.scope, "mcpServers": []}))
        .await;
    let sid = r["result"]["sessionId"].as_str().unwrap().to_string();
    let scope = d.scope.display().to_string();
    let mut prompt = async |text: String| {
        let r = c
            .request(
                "session/prompt",
                json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
            )
            .await;
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    };
    // 1. The turn's end brings the commit back, the connection still open.
    prompt(format!(
        "sh: cd {scope} && echo c > c.txt && git add c.txt && git commit -q -m 'over a connection'"
    ))
    .await;
    d.wait_for_subject("over a connection", "turn end");
    assert_eq!(d.git(&["status", "--porcelain"]), "");
    // 2. Follow: a host commit between turns is the sandbox's HEAD in the next turn.
    d.git(&[
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "the host between turns",
    ]);
    let host_main = d.git(&["rev-parse", "main"]);
    prompt(format!("sh: cd {scope} && git log -1 --format=%H")).await;
    assert!(
        c.seen
            .iter()
            .any(|m| m.to_string().contains(&format!("exit 0\\n{host_main}"))),
        "the sandbox is not at the host's {host_main}: {:?}\n{}",
        c.seen,
        d.log()
    );
    // 3. A turn that never ends: its commit comes back when the connection closes.
    let marker = d.scope.join(".bin/committed");
    c.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "session/prompt", "params": {
        "sessionId": sid, "prompt": [{"type": "text", "text": format!(
            "sh: cd {scope} && echo e > e.txt && git add e.txt && git commit -q -m 'before the close' && touch {} && sleep 120",
            marker.display())}]}}))
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "no commit: {}", d.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(c);
    d.wait_for_subject("before the close", "connection close");
    assert_eq!(d.git(&["status", "--porcelain"]), "");
}

/// Copies the fake agent (`.bin`, its script) from the daemon's scope into `dir`, as the user.
fn with_fake_agent(d: &Daemon, dir: &Path) {
    d.user
        .cmd("mkdir", &["-p", dir.to_str().unwrap()], &[])
        .status()
        .unwrap();
    for f in [".bin", ".fake-agent-script.json"] {
        let ok = d
            .user
            .cmd(
                "cp",
                &[
                    "-a",
                    d.scope.join(f).to_str().unwrap(),
                    dir.to_str().unwrap(),
                ],
                &[],
            )
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

/// Waits (60 s at most) until session `id`'s events hold `text`.
async fn wait_event(d: &Daemon, id: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !d.events(id).contains(text) {
        assert!(
            Instant::now() < deadline,
            "no {text:?}: {}\n{}",
            d.events(id),
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Security F1, both forms: a folder that was no repository when Handler first started an
/// agent on it gets a `.git` from that agent — a gitfile naming another repository of the
/// person's (its objects would be mounted, its branch moved), or a folder whose config runs a
/// clean filter (host git's `reset` would run it outside every container). The next session on
/// it is refused (409) naming the planted `.git`, and nothing the agent configured ever ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_git_directory_an_agent_plants_in_a_plain_folder_refuses_the_next_start() {
    let Some(u) = user() else { return };
    let d = start(u, "planted").await;
    let code = d.scope.parent().unwrap().to_path_buf();
    let canary = d.root.join("filter-ran");
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "rel", "harness": "fakerel", "token": {"value": TOKEN}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let gitfile = format!("gitdir: {}/.git", d.scope.display());
    let forms = [
        ("plainfile", format!("printf '{gitfile}\\n' > .git")),
        (
            "plaindir",
            format!(
                "git init -q && mkdir -p .git/info && git config filter.x.clean 'touch {c}; cat' && echo '* filter=x' > .git/info/attributes && echo a > a && git add a && git -c user.name=a -c user.email=a@b commit -q -m a",
                c = canary.display()
            ),
        ),
    ];
    for (name, plant) in forms {
        let plain = code.join(name);
        with_fake_agent(&d, &plain);
        let (s, a) = d
            .agent_with(
                json!({"scope": plain, "models": [{"account": "rel"}], "confirmRisks": true}),
            )
            .await;
        assert_eq!(s, 201, "{a}");
        let prompt = format!(
            "sh: cd {} && {plant} && echo planted-{name}",
            plain.display()
        );
        let first = session(&d, &a, prompt).await;
        wait_event(&d, &first, &format!("exit 0\\nplanted-{name}")).await;
        assert!(plain.join(".git").exists(), "{}", d.events(&first));
        let (s, v) = d
            .post(
                "/v1/sessions",
                json!({"agentId": a["id"], "origin": "ui", "prompt": "sh: true"}),
            )
            .await;
        assert_eq!(s, 409, "{name}: {v}\n{}", d.log());
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(&format!("{}/.git", plain.display())) && detail.contains("planted"),
            "{v}"
        );
        // The person's repository named by the gitfile was never touched.
        assert_eq!(d.git(&["log", "-1", "--format=%s", "main"]), "base");
    }
    assert!(!canary.exists(), "host git ran the agent's filter");
}

/// Security F4: a FIFO the agent leaves as its git directory's `packed-refs` (its branch's loose
/// ref removed, so a reader falls through to it) never wedges the session: the stop answers,
/// the bring-back says why it did nothing, and no helper container is left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_in_the_sandboxs_git_directory_never_blocks_the_session_or_leaves_a_helper() {
    let Some(u) = user() else { return };
    let d = start(u, "fifo").await;
    let agent = d.agent().await;
    let prompt = format!(
        "sh: cd {} && echo x > x && git add x && git commit -q -m x && rm -f .git/packed-refs && mkfifo .git/packed-refs && rm .git/refs/heads/main && echo fifo-made",
        d.scope.display()
    );
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": agent, "origin": "ui", "prompt": prompt}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    wait_event(&d, &id, "exit 0\\nfifo-made").await;
    let log = wait_guard_line(&d, &id, "not a regular file").await;
    assert!(log.contains("packed-refs"), "{log}");
    let stopped = tokio::time::timeout(
        Duration::from_secs(90),
        d.post(&format!("/v1/sessions/{id}/stop"), json!({})),
    )
    .await
    .expect("the stop never answered: a FIFO wedged the session");
    assert!(stopped.0 < 300, "{stopped:?}");
    // No helper container on this daemon's folders is left (other tests' may run meanwhile).
    let ours = || {
        let podman = |args: &[&str]| {
            let o = d.user.cmd("podman", args, &[]).output().unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let ids = podman(&["ps", "-aq", "--filter", "label=handler.git-bundle"]);
        ids.split_whitespace()
            .filter(|id| {
                let m = podman(&[
                    "inspect",
                    "--format",
                    "{{range .Mounts}}{{.Source}} {{end}}",
                    id,
                ]);
                m.contains(d.root.to_str().unwrap())
            })
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ours().is_empty() {
        assert!(Instant::now() < deadline, "a helper is left: {:?}", ours());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The host's branch is where it was: nothing came back from a git directory refused.
    assert_eq!(d.git(&["log", "-1", "--format=%s", "main"]), "base");
}

/// Security F7: a terminal's sandbox starts by the same guard as a connection's. Its scope is a
/// repository's root, so it gets a git directory of its own under
/// `<data>/connections/<id>/guard/git` (mounted over `.git`), never the host's `.git` writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_gets_the_git_guard_like_a_connection() {
    let Some(u) = user() else { return };
    let d = start(u, "term").await;
    let agent = d.agent().await;
    let (s, v) = d
        .post(&format!("/v1/agents/{agent}/terminal"), json!({"args": []}))
        .await;
    assert_eq!(s, 201, "{v}\n{}", d.log());
    let guards: Vec<PathBuf> = std::fs::read_dir(d.root.join("data/connections"))
        .map(|r| r.flatten().map(|e| e.path().join("guard/git")).collect())
        .unwrap_or_default();
    assert!(
        guards.iter().any(|g| g.join("HEAD").is_file()),
        "no guard made for the terminal: {guards:?}\n{}",
        d.log()
    );
    // Deleting the agent stops its terminal.
    d.delete_agent(&agent).await;
}

/// D.16, decision 0152: a filtered terminal's egress events are recorded for its agent as a
/// connection's are — followed in its launcher's file — so the agent's network page and
/// `GET /v1/agents/{id}/egress-events` show them. (The sandbox is started here without a
/// terminal attached, and a request made in it with `podman exec`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminals_egress_events_are_the_agents() {
    let Some(u) = user() else { return };
    crate::daemon_acp_sandbox::ensure_network_filter(&u);
    let d = start(u, "termnet").await;
    let (s, a) = d
        .agent_with(json!({"network": "filtered", "confirmRisks": true}))
        .await;
    assert_eq!(s, 201, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    let (s, v) = d
        .post(&format!("/v1/agents/{agent}/terminal"), json!({"args": []}))
        .await;
    assert_eq!(s, 201, "{v}\n{}", d.log());
    let sandbox = v["sandbox"].as_str().unwrap().to_string();
    let env = [("HOME", d.user.home())];
    let o = d
        .user
        .cmd("podman", &["start", &sandbox], &env)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A host no entry allows, through the sandbox's proxy: denied, and reported.
    let o = d
        .user
        .cmd(
            "podman",
            &[
                "exec",
                &sandbox,
                "wget",
                "-q",
                "-O",
                "/dev/null",
                "http://denied.example.org/",
            ],
            &env,
        )
        .output()
        .unwrap();
    assert!(!o.status.success(), "the proxy let it through");
    let t0 = Instant::now();
    loop {
        let (_, ev) = d
            .call(
                reqwest::Method::GET,
                &format!("/v1/agents/{agent}/egress-events"),
                None,
            )
            .await;
        if ev.as_array().into_iter().flatten().any(|e| {
            e.to_string().contains("denied.example.org:80") && e.to_string().contains("denied")
        }) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the terminal's event never reached the agent: {ev}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    d.delete_agent(&agent).await;
}

/// Decision 0147: a session in a machine made for its agent has the git guard as a sandbox of
/// its own has it — the scope's `.git` inside the machine is the guard's (made with the
/// machine, in its folder), never the host's — and its commits come back by bundle at the turn's
/// end; the hook, fsmonitor and link it plants never reach the host's git directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_machine_the_scopes_git_is_the_guards_and_the_work_comes_back() {
    let Some(u) = user() else { return };
    let d = start(u, "machine").await;
    let _ = d
        .user
        .cmd(
            "podman",
            &["rm", "-f", "-t", "0", "handler-m-gitbox"],
            &[("HOME", d.user.home())],
        )
        .output();
    let canary = d.root.join("canary");
    let base = d.git(&["rev-parse", "main"]);
    let (s, a) = d.agent_with(json!({"confirmRisks": true})).await;
    assert_eq!(s, 201, "{a}");
    let agent = a["id"].as_str().unwrap().to_string();
    let (s, m) = d
        .post("/v1/machines", json!({"name": "gitbox", "agents": [agent]}))
        .await;
    assert_eq!(s, 201, "{m}: {}", d.log());
    let mut req = json!({"models": [{"account": "perso"}], "scope": d.scope, "network": "none",
        "permissions": "bypass", "confirmRisks": true, "machine": "gitbox"});
    let (s, v) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/agents/{agent}"),
            Some(req.take()),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": agent, "origin": "ui", "prompt": hostile_script(&d.scope, &canary)}),
        )
        .await;
    assert_eq!(s, 201, "{v}: {}", d.log());
    let id = v["id"].as_str().unwrap().to_string();
    let guard = d.root.join("data/machines/gitbox/agents").join(&agent);
    let log = || std::fs::read_to_string(guard.join("git-guard.log")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log().contains("feature: created") {
        assert!(
            Instant::now() < deadline,
            "no bring-back: {}\n{}\n{}",
            log(),
            d.log(),
            d.events(&id)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(d.events(&id).contains("done-hostile"), "{}", d.events(&id));
    assert_eq!(d.git(&["rev-parse", "main~1"]), base);
    assert_eq!(
        d.git(&["log", "-1", "--format=%s", "main"]),
        "agent on main"
    );
    host_git_untouched(&d, &canary);
    // They are in the machine's guard, where the agent wrote them.
    assert!(guard.join("guard/git/hooks/post-checkout").exists());
    let (s, _) = d
        .call(
            reqwest::Method::DELETE,
            "/v1/machines/gitbox?force=true",
            None,
        )
        .await;
    assert_eq!(s, 204, "{}", d.log());
}
