//! `handler account login NAME` (D.9) against a real handlerd: a file login's command (a fake
//! one: the vendors' logins cannot run here) runs on a terminal of its own with login.env
//! ({dir} a new folder), the file it leaves is kept by handlerd 0600, the folder removed; a
//! token login is not run (exit 2, saying what to run instead); a failed login exits 1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::json;
use test_support::user::free_port;

struct Daemon {
    child: Child,
    port: u16,
    token: String,
    dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
    }
}

fn env(dir: &Path, port: u16) -> Vec<(&'static str, String)> {
    let mut env = test_support::handlerd::env(dir, &dir.join("harnesses"), port);
    env.push(("HOME", dir.join("home").display().to_string()));
    env
}

async fn start(script: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("home")).unwrap();
    std::fs::create_dir_all(p.join("harnesses/filefake")).unwrap();
    let s = p.join("login.sh");
    std::fs::write(&s, script).unwrap();
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        p.join("harnesses/filefake/harness.toml"),
        test_support::descriptor::file_login(
            &format!("\"{}\"", s.display()),
            Some("Signs in in your browser"),
        ),
    )
    .unwrap();
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_handlerd"));
    cmd.env("HANDLER_SANDBOX_COMMAND", "/bin/false");
    for (k, v) in env(p, port) {
        cmd.env(k, v);
    }
    let (child, token) = test_support::handlerd::spawn(cmd, p, port).await;
    Daemon {
        child,
        port,
        token,
        dir,
    }
}

async fn post(d: &Daemon, path: &str, body: serde_json::Value) -> u16 {
    reqwest::Client::new()
        .post(format!("http://127.0.0.1:{}{path}", d.port))
        .bearer_auth(&d.token)
        .json(&body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn handler(d: &Daemon, args: &[&str]) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_handler"));
    c.args(args).stdin(Stdio::null());
    for (k, v) in env(d.dir.path(), d.port) {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn credential(d: &Daemon, name: &str) -> PathBuf {
    d.dir
        .path()
        .join("data/accounts")
        .join(name)
        .join("credential")
}

#[tokio::test]
async fn handler_account_login_keeps_the_file_the_login_leaves() {
    let rec = tempfile::NamedTempFile::new().unwrap();
    let d = start(&format!(
        "#!/bin/sh\nif [ -t 1 ]; then echo 'on a terminal'; fi\necho \"$FAKE_LOGIN_HOME\" > {}\nprintf 'API_KEY=vibe-file-cred-42\\n' > \"$FAKE_LOGIN_HOME/auth.json\"\n",
        rec.path().display()
    ))
    .await;
    assert_eq!(
        post(
            &d,
            "/v1/accounts",
            json!({"name": "work", "harness": "filefake"})
        )
        .await,
        201
    );
    let out = handler(&d, &["account", "login", "work"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("account work is logged in"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("on a terminal"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let cred = credential(&d, "work");
    assert_eq!(
        std::fs::read_to_string(&cred).unwrap(),
        "API_KEY=vibe-file-cred-42\n"
    );
    assert_eq!(
        std::fs::metadata(&cred).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let folder = std::fs::read_to_string(rec.path()).unwrap();
    assert!(!Path::new(folder.trim()).exists(), "{folder} was left");
}

#[tokio::test]
async fn a_failed_login_exits_1_and_a_token_login_is_not_run() {
    let d = start("#!/bin/sh\necho 'the browser sign-in was cancelled'\nexit 4\n").await;
    assert_eq!(
        post(
            &d,
            "/v1/accounts",
            json!({"name": "work", "harness": "filefake"})
        )
        .await,
        201
    );
    let out = handler(&d, &["account", "login", "work"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("login of work failed") && stderr.contains("auth.json"),
        "{stderr}"
    );
    assert!(!credential(&d, "work").exists());
    // A token login (Claude Code's) is not run: it says what to run instead.
    assert_eq!(
        post(
            &d,
            "/v1/accounts",
            json!({"name": "cc", "harness": "claude-code"})
        )
        .await,
        201
    );
    let out = handler(&d, &["account", "login", "cc"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("logs in with a token"), "{stderr}");
    // An unknown account.
    let out = handler(&d, &["account", "login", "ghost"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("404"));
}
