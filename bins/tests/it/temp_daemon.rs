//! The start the daemon tests share: handlerd in `/tmp/<name>` as the test user, its binaries
//! installed beside it, the scripted fake agent in its scope (`home/code/app`, a folder root),
//! the `fake` harness described for it; stopped and its folder removed when dropped.

use std::path::{Path, PathBuf};
use std::process::Child;

use serde_json::Value;
use test_support::user::{User, free_port};

/// The busybox image the fake agent runs in.
pub(crate) const IMAGE: &str = "localhost/handler-test-busybox";

/// Where a daemon will live, before it starts: made, binaries and the fake agent installed.
pub(crate) struct Layout {
    /// `/tmp/<name>`.
    pub(crate) root: PathBuf,
    /// The user's home of this daemon (`root/home`): its harnesses and folders.
    pub(crate) home: PathBuf,
    /// The scope, `home/code/app` (the fake agent at `.bin/fake-acp-agent`).
    pub(crate) scope: PathBuf,
    /// The installed binaries (`root/bin`).
    pub(crate) bin: PathBuf,
}

impl Layout {
    /// `/tmp/<name>` made afresh with handlerd, handler-sandbox-podman (and `handler` when
    /// `cli`) in `bin/`, the fake agent in the scope and `home/code` as the folder root.
    pub(crate) fn new(name: &str, cli: bool) -> Self {
        let root = PathBuf::from(format!("/tmp/{name}"));
        let _ = std::fs::remove_dir_all(&root);
        let home = root.join("home");
        let scope = home.join("code/app");
        let bin = root.join("bin");
        for d in [&scope, &home.join("harnesses/fake"), &root.join("config")] {
            std::fs::create_dir_all(d).unwrap();
        }
        let mut files = vec![
            (
                bin.join("handlerd"),
                PathBuf::from(env!("CARGO_BIN_EXE_handlerd")),
            ),
            (
                bin.join("handler-sandbox-podman"),
                PathBuf::from(env!("CARGO_BIN_EXE_handler-sandbox-podman")),
            ),
            (
                scope.join(".bin/fake-acp-agent"),
                test_support::static_build::fakes().agent.clone(),
            ),
        ];
        if cli {
            files.push((
                bin.join("handler"),
                PathBuf::from(env!("CARGO_BIN_EXE_handler")),
            ));
        }
        test_support::handlerd::install(&files);
        std::fs::write(
            root.join("config/folders.toml"),
            format!("roots = [\"{}\"]\n", home.join("code").display()),
        )
        .unwrap();
        Layout {
            root,
            home,
            scope,
            bin,
        }
    }

    /// The `fake` harness: the fake agent in [`IMAGE`] (login host `api.fake.test:443`), with
    /// `extra` TOML appended.
    pub(crate) fn fake_harness(&self, extra: &str) {
        self.fake_harness_in(IMAGE, extra);
    }

    /// The `fake` harness in `image`, with `extra` TOML appended.
    pub(crate) fn fake_harness_in(&self, image: &str, extra: &str) {
        self.fake_harness_at(image, "api.fake.test:443", extra);
    }

    /// The `fake` harness in `image` whose login token goes to `login_host` (its injection's
    /// host), with `extra` TOML appended.
    pub(crate) fn fake_harness_at(&self, image: &str, login_host: &str, extra: &str) {
        let descriptor = test_support::descriptor::sandbox_fake(
            "Fake ACP agent",
            image,
            &format!("\"{}\"", self.scope.join(".bin/fake-acp-agent").display()),
            login_host,
        );
        std::fs::write(
            self.home.join("harnesses/fake/harness.toml"),
            format!("{descriptor}{extra}"),
        )
        .unwrap();
    }

    /// handlerd started as `u` on a free port with `extra` settings (its log at `info`, its
    /// sandboxes by the installed handler-sandbox-podman), once it answers.
    pub(crate) async fn spawn(self, u: User, extra: &[(&'static str, String)]) -> TempDaemon {
        self.spawn_on(u, extra, None).await
    }

    /// [`Layout::spawn`] on runtime `runtime` (`Some("docker")`: handler-sandbox-docker installed
    /// beside handlerd, which picks it by `HANDLER_RUNTIME`, as `daemon_acp_sandbox` does);
    /// `None`: `HANDLER_SANDBOX_COMMAND` names handler-sandbox-podman.
    pub(crate) async fn spawn_on(
        self,
        u: User,
        extra: &[(&'static str, String)],
        runtime: Option<&str>,
    ) -> TempDaemon {
        use std::os::unix::fs::PermissionsExt;
        let port = free_port();
        let mut env = test_support::handlerd::env(&self.root, &self.home.join("harnesses"), port);
        env.push(match runtime {
            Some(r) => {
                assert_eq!(r, "docker", "the runtimes: podman (None) and docker");
                test_support::handlerd::install(&[(
                    self.bin.join(format!("handler-sandbox-{r}")),
                    PathBuf::from(env!("CARGO_BIN_EXE_handler-sandbox-docker")),
                )]);
                ("HANDLER_RUNTIME", r.to_string())
            }
            None => (
                "HANDLER_SANDBOX_COMMAND",
                self.bin
                    .join("handler-sandbox-podman")
                    .display()
                    .to_string(),
            ),
        });
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o755)).unwrap();
        u.give(&self.root);
        env.extend([("HOME", u.home()), ("HANDLER_LOG", "info".to_string())]);
        env.extend(extra.iter().cloned());
        let (child, token) = test_support::handlerd::spawn_as(
            &u,
            &self.bin.join("handlerd"),
            &env,
            &self.root,
            port,
        )
        .await;
        TempDaemon {
            child,
            port,
            token,
            scope: self.scope.display().to_string(),
            root: self.root,
            env,
            http: reqwest::Client::new(),
            user: u,
        }
    }
}

/// A running handlerd of a [`Layout`].
pub(crate) struct TempDaemon {
    /// The handlerd process.
    pub(crate) child: Child,
    /// Its port on 127.0.0.1.
    pub(crate) port: u16,
    /// Its API token.
    pub(crate) token: String,
    /// `/tmp/<name>`.
    pub(crate) root: PathBuf,
    /// The scope, as text.
    pub(crate) scope: String,
    /// The environment it was started with.
    pub(crate) env: Vec<(&'static str, String)>,
    /// A client for its API.
    pub(crate) http: reqwest::Client,
    /// The user it runs as.
    pub(crate) user: User,
}

impl Drop for TempDaemon {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl TempDaemon {
    /// `method path` with `body` as JSON: the status and the JSON answer (null when none).
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = self
            .http
            .request(method, format!("http://127.0.0.1:{}{path}", self.port))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// `handler ARGS` as the daemon's user, with its settings: (exit code, stdout, stderr).
    pub(crate) fn handler(&self, args: &[&str]) -> (i32, String, String) {
        let o = self
            .user
            .cmd(
                self.root.join("bin/handler").to_str().unwrap(),
                args,
                &self.env,
            )
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    /// The engine's CLI `cli` (`podman`, `docker`) as the daemon's user, its HOME and `env`:
    /// whether it succeeded, and what it printed (stdout, then stderr).
    pub(crate) fn engine_cli(
        &self,
        cli: &str,
        args: &[&str],
        env: &[(&str, String)],
    ) -> (bool, String) {
        let mut all = vec![("HOME", self.user.home())];
        all.extend(env.iter().cloned());
        let o = self.user.cmd(cli, args, &all).output().unwrap();
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }

    /// handlerd's log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("handlerd.log")).unwrap_or_default()
    }

    /// The scope as a path.
    pub(crate) fn scope_dir(&self) -> &Path {
        Path::new(&self.scope)
    }

    /// handlerd stopped (SIGTERM, as its service manager would) and started again on its port.
    pub(crate) async fn restart(&mut self) {
        test_support::handlerd::stop(&mut self.child);
        self.start_from(&self.root.join("bin/handlerd")).await;
    }

    /// handlerd SIGKILLed (nothing of its shutdown runs) and started again from `bin`.
    pub(crate) async fn kill_and_start(&mut self, bin: &Path) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        self.start_from(bin).await;
    }

    /// handlerd (the executable `bin`) started on this daemon's port, folders and settings.
    pub(crate) async fn start_from(&mut self, bin: &Path) {
        let (child, token) =
            test_support::handlerd::spawn_as(&self.user, bin, &self.env, &self.root, self.port)
                .await;
        self.child = child;
        self.token = token;
    }
}

/// The host's git run as the test user.
pub(crate) trait HostGit {
    /// `git -C dir args` as this user: its stdout, trimmed (panics on failure).
    fn git(&self, dir: &Path, args: &[&str]) -> String;
}

impl HostGit for User {
    fn git(&self, dir: &Path, args: &[&str]) -> String {
        let mut a = vec!["-C", dir.to_str().unwrap()];
        a.extend(args);
        let o = self.cmd("git", &a, &[]).output().unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }
}

/// A plain HTTP server on the host's every address (a sandbox or a machine's proxy reaches the
/// host as host.containers.internal): answers 200 "ok" to every request; (its port, how many
/// requests reached it).
pub(crate) async fn http_ok_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let (port, hits, _) = http_ok_server_seen().await;
    (port, hits)
}

/// Each request's head as [`http_ok_server`]'s received it.
pub(crate) type Heads = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// [`http_ok_server`], keeping each request's head.
pub(crate) async fn http_ok_server_seen()
-> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>, Heads) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let l = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let heads = Heads::default();
    let (seen, kept) = (hits.clone(), heads.clone());
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let (seen, kept) = (seen.clone(), kept.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                kept.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).into_owned());
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = c
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (port, hits, heads)
}
