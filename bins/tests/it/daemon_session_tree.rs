//! `sessionTree = "copy"` (issue 14's last item, decision 0103) against real rootless Podman:
//! handlerd as the unprivileged test user runs the scripted fake agent in
//! `localhost/handler-test-git` on a checkout of Handler's own instead of the host's tree. The
//! agent's commit reaches the host's branch and working tree by `merge --ff-only`; a file the host
//! changed meanwhile keeps the host's change and the commit waits under the hidden ref; what the
//! agent never committed is kept at `refs/handler/sessions/<id>/uncommitted` when the session
//! stops (a branch the agent names `uncommitted` comes back beside it, to `…/uncommitted_`); a git-ignored `.env` never reaches the copy; a folder without git is refused naming
//! `sessionTree` (400 at save, 409 at start). Missing podman or user FAILS, unless
//! HANDLER_SKIP_PODMAN_TESTS=1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::user::User;

use crate::temp_daemon::{HostGit, Layout, TempDaemon};

const IMAGE: &str = "localhost/handler-test-git";
const TOKEN: &str = "fk-SessionTree0Token111aaaa2222bbbb33";
/// A value only the host's ignored `.env` holds.
const SECRET_LINE: &str = "API_KEY=host-only-not-in-the-copy";

fn user() -> Option<User> {
    test_support::user::podman_user(IMAGE, "the session tree tests")
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

/// A daemon in `/tmp/hstree-<pid>-<tag>` whose scope is a repository on `main`. Under copy only
/// tracked files reach the sandbox, so the fake agent and its script are committed; `.env` (the
/// host's secret) is git-ignored and only in the host's tree. `code/plain` is a folder without
/// git.
async fn start(u: User, tag: &str) -> Daemon {
    start_in(u, tag, false).await
}

/// [`start`] on runtime `runtime` (`Some("docker")`: rootless Docker; `TempDaemon`'s option).
async fn start_on(u: User, tag: &str, runtime: Option<&str>) -> Daemon {
    start_with(u, tag, false, runtime).await
}

/// [`start`], the repository at the scope's root — or, when `above`, at its parent
/// (`home/code`, with `outside.txt` beside the scope), the scope a folder below the root.
async fn start_in(u: User, tag: &str, above: bool) -> Daemon {
    start_with(u, tag, above, None).await
}

async fn start_with(u: User, tag: &str, above: bool, runtime: Option<&str>) -> Daemon {
    let l = Layout::new(&format!("hstree-{}-{tag}", std::process::id()), false);
    let (root, home, scope) = (l.root.clone(), l.home.clone(), l.scope.clone());
    std::fs::create_dir_all(home.join("code/plain")).unwrap();
    std::fs::write(scope.join(".fake-agent-script.json"), "{}").unwrap();
    std::fs::write(scope.join(".gitignore"), ".env\n").unwrap();
    std::fs::write(scope.join(".env"), format!("{SECRET_LINE}\n")).unwrap();
    std::fs::write(scope.join("README"), "base\n").unwrap();
    l.fake_harness_in(IMAGE, "");
    // The Files pane's git reader, beside handlerd (earlier versions of a file).
    test_support::handlerd::install(&[(
        l.bin.join("handler-git-read"),
        PathBuf::from(env!("CARGO_BIN_EXE_handler-git-read")),
    )]);
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let repo = if above {
        let r = scope.parent().unwrap().to_path_buf();
        std::fs::write(r.join("outside.txt"), "outside\n").unwrap();
        r
    } else {
        scope.clone()
    };
    u.give(&root);
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "user.name", "Host Person"],
        &["config", "user.email", "host@example.org"],
        &["add", "-A"],
        &["commit", "-q", "-m", "base"],
    ] {
        u.git(&repo, args);
    }
    Daemon {
        d: l.spawn_on(u, &[], runtime).await,
        scope,
    }
}

impl Daemon {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }
    fn session_file(&self, session: &str, name: &str) -> String {
        std::fs::read_to_string(self.root.join("state/sessions").join(session).join(name))
            .unwrap_or_default()
    }
    /// The account (once) and an ad-hoc agent on `scope`, `extra` merged into its request.
    async fn agent_on(&self, scope: &Path, extra: Value) -> (u16, Value) {
        let (s, v) = self
            .post(
                "/v1/accounts",
                json!({"name": "perso", "harness": "fake", "token": {"value": TOKEN}}),
            )
            .await;
        assert!(s == 201 || s == 409, "{v}");
        let mut req = json!({"models": [{"account": "perso"}], "scope": scope, "network": "none", "permissions": "bypass", "confirmRisks": true});
        for (k, x) in extra.as_object().unwrap() {
            req[k] = x.clone();
        }
        self.post("/v1/agents", req).await
    }
    /// A copy agent on the scope: its id.
    async fn copy_agent(&self) -> String {
        let (s, a) = self
            .agent_on(&self.scope.clone(), json!({"sessionTree": "copy"}))
            .await;
        assert_eq!(s, 201, "{a}");
        assert_eq!(a["sessionTree"], "copy", "{a}");
        a["id"].as_str().unwrap().to_string()
    }
    /// Starts a session of `agent` with `prompt`: its id and its ACP session id.
    async fn session(&self, agent: &str, prompt: String) -> (String, String) {
        let (s, v) = self
            .post(
                "/v1/sessions",
                json!({"agentId": agent, "origin": "ui", "prompt": prompt}),
            )
            .await;
        assert_eq!(s, 201, "{v}: {}", self.log());
        let id = v["id"].as_str().unwrap().to_string();
        (id, v["acpSessionId"].as_str().unwrap().to_string())
    }
    /// One more turn of session `id` (ACP `sid`) over its WebSocket: `prompt`.
    async fn turn(&self, id: &str, sid: &str, prompt: String) {
        let protocols = vec!["acp.v1".to_string(), format!("bearer.{}", self.token)];
        let url = format!("ws://127.0.0.1:{}/v1/sessions/{id}/acp", self.port);
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
                json!({"sessionId": sid, "cwd": self.scope, "mcpServers": []}),
            )
            .await;
        assert!(r["result"].is_object(), "{r}");
        let r = c
            .request(
                "session/prompt",
                json!({"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]}),
            )
            .await;
        assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    }
    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }
    /// Session `id`'s Changes as (path, change) pairs.
    async fn changes(&self, id: &str) -> Vec<(String, String)> {
        let (s, v) = self.get(&format!("/v1/sessions/{id}/changes")).await;
        assert_eq!(s, 200, "{v}");
        v["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                (f("path"), f("change"))
            })
            .collect()
    }
    /// Session `id`'s All files: their paths.
    async fn all_files(&self, id: &str) -> Vec<String> {
        let (s, v) = self.get(&format!("/v1/sessions/{id}/files")).await;
        assert_eq!(s, 200, "{v}");
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap_or_default().to_string())
            .collect()
    }
    fn git(&self, args: &[&str]) -> String {
        self.user.git(&self.scope, args)
    }
    /// Waits (120 s at most) for `line` in session `id`'s git-guard log; the log.
    async fn wait_guard_line(&self, id: &str, line: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let log = self.session_file(id, "git-guard.log");
            if log.contains(line) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "no {line:?}: {log}\n{}\n{}",
                self.session_file(id, "events.ndjson"),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// (a), (c), (e): the agent, in its copy, finds no `.env`, commits `work.txt` and leaves
/// `scratch.txt` uncommitted. After the turn the host's `main` has the commit by
/// `merge --ff-only` and the host's tree the file, not the scratch (nothing of the host's tree is
/// bound); a host commit between turns reaches the copy's tree (follow); when the session stops
/// the scratch is kept under the uncommitted ref — beside the agent's own branch named
/// `uncommitted`, which comes back to `…/uncommitted_` and is made on the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_sessions_commit_reaches_the_host_tree_and_its_uncommitted_work_is_kept() {
    let Some(u) = user() else { return };
    copy_session_case(start(u, "copy").await, "podman").await;
}

/// The same case (a) on the Docker runtime (rootless Docker as the test user): the helper
/// containers of the checkout, the bring-back and follow run on Docker too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_sessions_commit_reaches_the_host_tree_under_docker() {
    let Some(u) = user() else { return };
    copy_session_case(start_on(u, "copy-dk", Some("docker")).await, "docker").await;
}

/// The names of the containers engine `cli` runs for the test user.
fn containers(d: &Daemon, cli: &str) -> String {
    let home = d.user.home();
    let args = ["ps", "--format", "{{.Names}}"];
    let o = d.user.cmd(cli, &args, &[("HOME", home)]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Case (a) on daemon `d`, its sandboxes on engine `cli` (`podman`, `docker`).
async fn copy_session_case(d: Daemon, cli: &str) {
    let base = d.git(&["rev-parse", "main"]);
    let agent = d.copy_agent().await;
    let prompt = format!(
        "sh: cd {} && if test -e .env; then echo env-is-here; else echo env-absent; fi && \
         echo agent > work.txt && git add work.txt && git commit -q -m 'agent in its copy' && \
         git branch uncommitted && echo scratch > scratch.txt && echo done-copy",
        d.scope.display()
    );
    let (id, sid) = d.session(&agent, prompt).await;
    assert!(containers(&d, cli).contains(&id), "not on {cli}");
    let log = d.wait_guard_line(&id, "main: merged --ff-only").await;
    let events = d.session_file(&id, "events.ndjson");
    // The sandbox's own answer (the prompt's text holds both words).
    assert!(
        events.contains("exit 0\\nenv-absent\\ndone-copy"),
        "{events}"
    );
    // The host: main moved by the merge, its tree holds the file, nothing else changed.
    assert_eq!(
        d.git(&["log", "-1", "--format=%s %an", "main"]),
        "agent in its copy Host Person",
        "{log}"
    );
    assert_eq!(d.git(&["rev-parse", "main~1"]), base);
    assert_eq!(
        std::fs::read_to_string(d.scope.join("work.txt")).unwrap(),
        "agent\n"
    );
    assert!(
        !d.scope.join("scratch.txt").exists(),
        "the host's tree was bound"
    );
    assert_eq!(d.git(&["status", "--porcelain"]), "", "{log}");
    assert_eq!(
        std::fs::read_to_string(d.scope.join(".env")).unwrap(),
        format!("{SECRET_LINE}\n")
    );
    // The copy: in the session's folder, with no ignored file of the host's.
    let tree = d.root.join("state/sessions").join(&id).join("guard/tree");
    assert!(tree.join(".git").is_dir());
    assert!(tree.join("scratch.txt").exists());
    assert!(!tree.join(".env").exists());

    // Follow: a host commit between turns reaches the copy's tree before the next turn (the
    // agent's uncommitted scratch stays).
    std::fs::write(d.scope.join("host.txt"), "from the host\n").unwrap();
    d.git(&["add", "host.txt"]);
    d.git(&["commit", "-q", "-m", "the host between turns"]);
    let prompt = format!(
        "sh: cd {} && cat host.txt scratch.txt && git log -1 --format=%s",
        d.scope.display()
    );
    d.turn(&id, &sid, prompt).await;
    let events = d.session_file(&id, "events.ndjson");
    assert!(
        events.contains("exit 0\\nfrom the host\\nscratch\\nthe host between turns"),
        "{events}\n{}",
        d.session_file(&id, "git-guard.log")
    );
    assert!(
        d.session_file(&id, "git-guard.log")
            .contains("follow: the sandbox's main moved to the host's"),
        "{}",
        d.session_file(&id, "git-guard.log")
    );

    // Stop: the uncommitted scratch is kept at the uncommitted ref, no host branch made of it.
    let (s, v) = d.post(&format!("/v1/sessions/{id}/stop"), json!({})).await;
    assert_eq!(s, 200, "{v}");
    let log = d.wait_guard_line(&id, "uncommitted work kept as").await;
    let kept = format!("refs/handler/sessions/{id}/uncommitted");
    assert!(log.contains(&kept), "{log}");
    assert_eq!(
        d.git(&["show", &format!("{kept}:scratch.txt")]),
        "scratch",
        "{log}"
    );
    assert_eq!(
        d.git(&["rev-parse", &format!("{kept}~1")]),
        d.git(&["rev-parse", "main"])
    );
    assert_eq!(d.git(&["branch", "--list", "handler-uncommitted"]), "");
    assert!(!d.scope.join("scratch.txt").exists());
    // The agent's branch named `uncommitted`: its own hidden ref, and made on the host.
    let agents = d.git(&[
        "rev-parse",
        &format!("refs/handler/sessions/{id}/uncommitted_"),
    ]);
    assert_eq!(agents, d.git(&["rev-parse", "main~1"]), "{log}");
    assert_eq!(d.git(&["rev-parse", "uncommitted"]), agents, "{log}");
    assert_ne!(d.git(&["rev-parse", &kept]), agents);
}

/// (b): the host changed `README` (not committed) while the agent's commit writes it too: the
/// host keeps its change, `main` stays, the commit waits under the hidden ref and the log says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_change_to_a_file_the_agent_commits_keeps_the_host_change_and_the_work_waits() {
    let Some(u) = user() else { return };
    let d = start(u, "clash").await;
    let base = d.git(&["rev-parse", "main"]);
    let agent = d.copy_agent().await;
    // The host's own edit, never committed, and a file only the host's tree has: the copy
    // starts clean at `base` without them.
    std::fs::write(d.scope.join("README"), "the host's edit\n").unwrap();
    std::fs::write(d.scope.join("host-notes.txt"), "host only\n").unwrap();
    let prompt = format!(
        "sh: cd {} && cat README && echo agent > README && git commit -q -am 'agent edits README' && echo done-clash",
        d.scope.display()
    );
    let (id, _) = d.session(&agent, prompt).await;
    let hidden = format!("refs/handler/sessions/{id}/main");
    let log = d
        .wait_guard_line(&id, &format!("main: waits under {hidden}"))
        .await;
    assert!(log.contains("the host changed README"), "{log}");
    assert_eq!(d.git(&["rev-parse", "main"]), base, "{log}");
    assert_eq!(
        std::fs::read_to_string(d.scope.join("README")).unwrap(),
        "the host's edit\n"
    );
    assert_eq!(
        d.git(&["log", "-1", "--format=%s", &hidden]),
        "agent edits README"
    );
    assert_eq!(d.git(&["show", &format!("{hidden}:README")]), "agent");
    let events = d.session_file(&id, "events.ndjson");
    assert!(events.contains("exit 0\\nbase"), "{events}");

    // The Files pane (decision 0121) reads the session's checkout, not the host's tree: README
    // is the agent's, modified since the checkout's baseline, its earlier version the commit's
    // (read from the host's repository); the host's own file is nowhere, not even "deleted".
    let changes = d.changes(&id).await;
    assert_eq!(changes, [("README".to_string(), "modified".to_string())]);
    let (s, v) = d.get(&format!("/v1/sessions/{id}/file?path=README")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["content"]["text"], "agent\n", "{v}");
    assert_eq!(v["earlier"]["text"], "base\n", "{v}");
    assert_eq!(v["change"], "modified", "{v}");
    let all = d.all_files(&id).await;
    assert!(all.iter().any(|p| p == "README"), "{all:?}");
    assert!(
        !all.iter().any(|p| p == "host-notes.txt" || p == ".env"),
        "{all:?}"
    );
    let (s, v) = d
        .get(&format!("/v1/sessions/{id}/file?path=host-notes.txt"))
        .await;
    assert_eq!(s, 404, "{v}");
}

/// Decision 0121: a scope below the repository's root (`home/code/app`, the repository
/// `home/code`) gets only its part of a sparse checkout, the checkout's `.git` at the root's:
/// `outside.txt` is not in the sandbox, the agent's commit of a file in the scope reaches the
/// host's `main` and tree, and that commit keeps `outside.txt` (nothing outside is deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_a_folder_below_the_root_holds_only_that_folder_and_its_commit_comes_back() {
    let Some(u) = user() else { return };
    let d = start_in(u, "sub", true).await;
    let root = d.scope.parent().unwrap().to_path_buf();
    let base = d.user.git(&root, &["rev-parse", "main"]);
    let agent = d.copy_agent().await;
    let prompt = format!(
        "sh: cd {} && if test -e ../outside.txt; then echo outside-visible; else echo outside-absent; fi && \
         echo in-sub > sub-work.txt && git add sub-work.txt && git commit -q -m 'agent below the root' && \
         git status --porcelain | wc -l && echo done-sub",
        d.scope.display()
    );
    let (id, _) = d.session(&agent, prompt).await;
    let log = d.wait_guard_line(&id, "main: merged --ff-only").await;
    let events = d.session_file(&id, "events.ndjson");
    assert!(
        events.contains("exit 0\\noutside-absent\\n0\\ndone-sub"),
        "{events}"
    );
    let host = |args: &[&str]| d.user.git(&root, args);
    assert_eq!(
        host(&["log", "-1", "--format=%s", "main"]),
        "agent below the root",
        "{log}"
    );
    assert_eq!(host(&["rev-parse", "main~1"]), base);
    assert_eq!(host(&["show", "main:outside.txt"]), "outside");
    assert_eq!(host(&["show", "main:app/sub-work.txt"]), "in-sub");
    assert_eq!(
        std::fs::read_to_string(d.scope.join("sub-work.txt")).unwrap(),
        "in-sub\n"
    );
    assert!(root.join("outside.txt").exists());
    // The Files pane reads the scope's part of the checkout.
    let changes = d.changes(&id).await;
    assert_eq!(changes, [("sub-work.txt".to_string(), "added".to_string())]);
}

/// (d): `sessionTree` takes `shared` or `copy` (400 naming it otherwise); `copy` on a folder
/// without git is refused at save (400), and at start (409) when the repository went away after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_without_a_repository_is_refused_naming_session_tree() {
    let Some(u) = user() else { return };
    let d = start(u, "refused").await;
    let (s, v) = d
        .agent_on(&d.scope.clone(), json!({"sessionTree": "mirror"}))
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("sessionTree"),
        "{v}"
    );
    let plain = d.scope.parent().unwrap().join("plain");
    let (s, v) = d.agent_on(&plain, json!({"sessionTree": "copy"})).await;
    assert_eq!(s, 400, "{v}");
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("sessionTree") && detail.contains("not"),
        "{v}"
    );
    let (s, v) = d
        .agent_on(&plain, json!({"sessionTree": "copy", "gitGuard": "open"}))
        .await;
    assert_eq!(s, 400, "{v}");
    // Saved on the repository, started once it is none: 409, nothing started.
    let agent = d.copy_agent().await;
    let away = d.scope.join(".git-away");
    std::fs::rename(d.scope.join(".git"), &away).unwrap();
    let (s, v) = d
        .post(
            "/v1/sessions",
            json!({"agentId": agent, "origin": "ui", "prompt": "sh: true"}),
        )
        .await;
    std::fs::rename(&away, d.scope.join(".git")).unwrap();
    assert_eq!(s, 409, "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("sessionTree"),
        "{v}"
    );
}

/// Waits (120 s at most) for `line` in the daemon's log; the log.
async fn wait_daemon_line(d: &TempDaemon, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let log = d.log();
        if log.contains(line) {
            return log;
        }
        assert!(Instant::now() < deadline, "no {line:?}: {log}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Decision 0122: a plain connection (`/v1/agents/{id}/acp`) of a copy agent, over a real
/// WebSocket, gets its own checkout (no `.env`); its commit reaches the host's `main` and tree
/// at the turn's end, and when it closes its uncommitted scratch is kept at
/// `refs/handler/sessions/<connection id>/uncommitted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_connection_gets_its_checkout_its_commit_comes_back_and_its_uncommitted_is_kept() {
    let Some(u) = user() else { return };
    let d = start(u, "conn").await;
    let base = d.git(&["rev-parse", "main"]);
    let agent = d.copy_agent().await;
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
    let text = format!(
        "sh: cd {} && if test -e .env; then echo env-is-here; else echo env-absent; fi && \
         echo conn > conn.txt && git add conn.txt && git commit -q -m 'agent over a copy connection' && \
         echo scratch > scratch.txt && echo done-conn",
        d.scope.display()
    );
    let r = c
        .request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": text}]}),
        )
        .await;
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    assert!(
        c.seen
            .iter()
            .any(|m| m.to_string().contains("exit 0\\nenv-absent\\ndone-conn")),
        "{:?}",
        c.seen
    );
    let log = wait_daemon_line(&d, "main: merged --ff-only").await;
    assert_eq!(
        d.git(&["log", "-1", "--format=%s", "main"]),
        "agent over a copy connection",
        "{log}"
    );
    assert_eq!(d.git(&["rev-parse", "main~1"]), base);
    assert_eq!(
        std::fs::read_to_string(d.scope.join("conn.txt")).unwrap(),
        "conn\n"
    );
    assert!(
        !d.scope.join("scratch.txt").exists(),
        "the host's tree was bound"
    );
    drop(c);
    let log = wait_daemon_line(&d, "uncommitted work kept as refs/handler/sessions/c").await;
    let kept = log
        .split_whitespace()
        .find(|w| w.starts_with("refs/handler/sessions/c") && w.ends_with("/uncommitted"))
        .unwrap_or_else(|| panic!("{log}"))
        .to_string();
    assert_eq!(
        d.git(&["show", &format!("{kept}:scratch.txt")]),
        "scratch",
        "{log}"
    );
    assert_eq!(d.git(&["status", "--porcelain"]), "", "{log}");
}
