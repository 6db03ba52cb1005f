//! `handler account login NAME` (D.9) against a real handlerd: a file login's command (a fake
//! one: the vendors' logins cannot run here) runs on a terminal of its own with login.env
//! ({dir} a new folder), the file it leaves is kept by handlerd 0600, the folder removed; a
//! token login is not run (exit 2, saying what to run instead); a failed login exits 1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

struct Daemon {
    child: Child,
    port: u16,
    token: String,
    dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const DESCRIPTOR: &str = r#"apiVersion = "handler.harness/v1"
name = "filefake"
product = "Fake file login"
image = "localhost/handler-test-busybox"
acpCommand = ["/bin/true"]
home = "/home/agent"

[stateSlots.auth]
target = "~/.filefake/auth.json"
kind = "file"
required = true
credential = true

[login]
unattended = "allowed"
terms = "https://example.com/terms"
subscription = "Fake"
file = "auth.json"
command = ["@SCRIPT@"]
hosts = ["auth.fake.test:443"]
help = "Signs in in your browser"

[login.env]
FAKE_LOGIN_HOME = "{dir}"

[permissions.bypass]
sessionMode = "bypass"
"#;

fn env(dir: &Path, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("HOME", dir.join("home").display().to_string()),
        (
            "HANDLER_CONFIG_DIR",
            dir.join("config").display().to_string(),
        ),
        ("HANDLER_DATA_DIR", dir.join("data").display().to_string()),
        ("HANDLER_STATE_DIR", dir.join("state").display().to_string()),
        (
            "HANDLER_HARNESSES_DIR",
            dir.join("harnesses").display().to_string(),
        ),
        ("HANDLER_PORT", port.to_string()),
    ]
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
        DESCRIPTOR.replace("@SCRIPT@", &s.display().to_string()),
    )
    .unwrap();
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_handlerd"));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env("HANDLER_SANDBOX_COMMAND", "/bin/false");
    for (k, v) in env(p, port) {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let token_path = p.join("config/token");
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = loop {
        if let Ok(t) = std::fs::read_to_string(&token_path)
            && http
                .get(format!("http://127.0.0.1:{port}/v1/harnesses"))
                .bearer_auth(t.trim())
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        {
            break t.trim().to_string();
        }
        assert!(Instant::now() < deadline, "handlerd did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
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
