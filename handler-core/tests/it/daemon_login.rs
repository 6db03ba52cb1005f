//! File logins (D.9) with a fake login command (the vendors' logins cannot run here): it runs on
//! a terminal of its own with login.env ({dir} a new private folder), its output relayed; the
//! file it leaves (login.file) goes to handlerd, kept 0600 at <data>/accounts/<name>/credential;
//! the folder is removed. A login that leaves no file keeps nothing; a token login is not run.

use crate::daemon_support;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use daemon_support::{Options, TestDaemon};
use handler_core::client::Discovery;
use handler_core::client::login::{LoginError, Relay, account_login};
use serde_json::json;

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);
impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A harness `filefake` whose file login runs `script` and keeps `auth.json`.
fn file_login_harness(d: &TestDaemon, script: &str) -> std::path::PathBuf {
    let h = d.home.path();
    let bin = h.join("fake-login.sh");
    std::fs::write(&bin, script).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(h.join("harnesses/filefake")).unwrap();
    std::fs::write(
        h.join("harnesses/filefake/harness.toml"),
        test_support::descriptor::file_login(
            &format!("\"{}\", \"--home\", \"{{dir}}\"", bin.display()),
            None,
        ),
    )
    .unwrap();
    bin
}

fn discovery(d: &TestDaemon) -> Discovery {
    // The in-process daemon has no unix socket: the port, its holder (this process) checked.
    Discovery {
        port: d.port,
        endpoint: handler_core::client::transport::Endpoint::Tcp(d.port),
        token: d.token.clone(),
    }
}

fn relay(out: &Shared, input: &'static [u8]) -> Relay {
    Relay::Pipes {
        input: Box::new(input),
        output: Box::new(out.clone()),
    }
}

#[tokio::test]
async fn a_file_login_runs_on_a_terminal_and_its_file_is_kept_0600() {
    let d = TestDaemon::start().await;
    let h = d.home.path().to_path_buf();
    file_login_harness(
        &d,
        &format!(
            "#!/bin/sh\n\
             if [ -t 0 ] && [ -t 1 ]; then echo \"login: on a terminal\"; fi\n\
             [ \"$2\" = \"$FAKE_LOGIN_HOME\" ] || {{ echo \"{{dir}} differs\"; exit 9; }}\n\
             echo \"$FAKE_LOGIN_HOME\" > {rec}\n\
             printf '{{\"refresh\":\"rt-file-credential-123\"}}' > \"$FAKE_LOGIN_HOME/auth.json\"\n\
             echo \"login: done\"\n",
            rec = h.join("login-dir.txt").display()
        ),
    );
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "work", "harness": "filefake"}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["loggedIn"], false, "{v}");
    let out = Shared::default();
    account_login(&discovery(&d), "work", relay(&out, b""))
        .await
        .expect("the login succeeds");
    let printed = String::from_utf8_lossy(&out.0.lock().unwrap()).into_owned();
    assert!(printed.contains("login: on a terminal"), "{printed}");
    assert!(printed.contains("login: done"), "{printed}");
    // Kept 0600 where handlerd keeps credentials; the login's folder is gone.
    let cred = h.join(".local/share/handler-ai/accounts/work/credential");
    assert_eq!(
        std::fs::read_to_string(&cred).unwrap(),
        "{\"refresh\":\"rt-file-credential-123\"}"
    );
    assert_eq!(
        std::fs::metadata(&cred).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let dir = std::fs::read_to_string(h.join("login-dir.txt")).unwrap();
    let dir = std::path::Path::new(dir.trim());
    assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
    assert!(
        !dir.exists(),
        "the login's folder was left: {}",
        dir.display()
    );
    let (_, v) = d.get("/v1/accounts/work").await;
    assert_eq!(v["loggedIn"], true, "{v}");
    d.stop().await;
}

#[tokio::test]
async fn a_login_that_leaves_no_file_keeps_nothing() {
    let d = TestDaemon::start().await;
    let h = d.home.path().to_path_buf();
    file_login_harness(
        &d,
        &format!(
            "#!/bin/sh\necho \"$FAKE_LOGIN_HOME\" > {}\necho 'sign-in cancelled'\nexit 3\n",
            h.join("login-dir.txt").display()
        ),
    );
    let (s, _) = d
        .post(
            "/v1/accounts",
            json!({"name": "work", "harness": "filefake"}),
        )
        .await;
    assert_eq!(s, 201);
    let out = Shared::default();
    let e = account_login(&discovery(&d), "work", relay(&out, b""))
        .await
        .expect_err("no file, no login");
    assert!(
        matches!(&e, LoginError::Failed { file, .. } if file == "auth.json"),
        "{e}"
    );
    assert!(e.to_string().contains("exit status: 3"), "{e}");
    assert!(String::from_utf8_lossy(&out.0.lock().unwrap()).contains("sign-in cancelled"));
    assert!(
        !h.join(".local/share/handler-ai/accounts/work/credential")
            .exists()
    );
    let dir = std::fs::read_to_string(h.join("login-dir.txt")).unwrap();
    assert!(!std::path::Path::new(dir.trim()).exists());
    // A token login is not run: it says what to run instead.
    d.fake_account("tok", "fk-Login0Token1111aaaa2222bbbb3333cccc")
        .await;
    let e = account_login(&discovery(&d), "tok", relay(&out, b""))
        .await
        .expect_err("a token login");
    assert!(matches!(e, LoginError::TokenLogin(..)), "{e}");
    // An unknown account: handlerd's 404 said.
    let e = account_login(&discovery(&d), "ghost", relay(&out, b""))
        .await
        .expect_err("unknown");
    assert!(e.to_string().contains("404"), "{e}");
    d.stop().await;
}

#[tokio::test]
async fn what_is_typed_reaches_the_login() {
    let d = TestDaemon::start().await;
    file_login_harness(
        &d,
        "#!/bin/sh\nprintf 'Paste the code: '\nread code\nprintf '%s' \"$code\" > \"$FAKE_LOGIN_HOME/auth.json\"\n",
    );
    let (s, _) = d
        .post(
            "/v1/accounts",
            json!({"name": "work", "harness": "filefake"}),
        )
        .await;
    assert_eq!(s, 201);
    let out = Shared::default();
    account_login(&discovery(&d), "work", relay(&out, b"CODE-4242\n"))
        .await
        .expect("the login reads the code");
    let cred = d
        .home
        .path()
        .join(".local/share/handler-ai/accounts/work/credential");
    assert_eq!(std::fs::read_to_string(cred).unwrap(), "CODE-4242");
    assert!(String::from_utf8_lossy(&out.0.lock().unwrap()).contains("Paste the code: "));
    d.stop().await;
}

/// The web UI's Log in (D.9): handlerd opens a terminal window running
/// `handler account login NAME --keep-open` for a file login; a token login is 409, an unknown
/// account 404, a terminal that cannot start 503 saying what to set.
#[tokio::test]
async fn log_in_opens_a_terminal_window_running_the_accounts_login() {
    let tools = tempfile::tempdir().unwrap();
    let rec = tools.path().join("argv.txt");
    let term = tools.path().join("fake-term");
    std::fs::write(
        &term,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > {}.part && mv {}.part {}\n",
            rec.display(),
            rec.display(),
            rec.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&term, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = TestDaemon::start_with(Options {
        terminal: Some(term.display().to_string()),
        handler_cli: Some("/opt/handler/bin/handler".into()),
        ..Options::default()
    })
    .await;
    file_login_harness(&d, "#!/bin/sh\nexit 0\n");
    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "work", "harness": "filefake"}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = d.post("/v1/accounts/work/login/window", json!(null)).await;
    assert_eq!(s, 202, "{v}");
    assert_eq!(v["terminal"], term.display().to_string(), "{v}");
    let want = "-e\n/opt/handler/bin/handler\naccount\nlogin\n--keep-open\n--\nwork\n";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_to_string(&rec).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the terminal never ran"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read_to_string(&rec).unwrap(), want);

    let (s, v) = d
        .post(
            "/v1/accounts",
            json!({"name": "tok", "harness": "fake", "token": {"value": "fk-Login0Window111aaaa2222bbbb3333cc"}}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = d.post("/v1/accounts/tok/login/window", json!(null)).await;
    assert_eq!(s, 409, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("paste it"), "{v}");
    let (s, _) = d
        .post("/v1/accounts/nobody/login/window", json!(null))
        .await;
    assert_eq!(s, 404);
    d.stop().await;

    let d = TestDaemon::start_with(Options {
        terminal: Some(tools.path().join("no-such-term").display().to_string()),
        ..Options::default()
    })
    .await;
    file_login_harness(&d, "#!/bin/sh\nexit 0\n");
    let (s, _) = d
        .post(
            "/v1/accounts",
            json!({"name": "work", "harness": "filefake"}),
        )
        .await;
    assert_eq!(s, 201);
    let (s, v) = d.post("/v1/accounts/work/login/window", json!(null)).await;
    assert_eq!(s, 503, "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("HANDLER_TERMINAL"),
        "{v}"
    );
    d.stop().await;
}
