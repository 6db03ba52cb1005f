//! How the CLI reaches handlerd (decision 0132, issue 27 F6): over handlerd's unix socket by
//! default (the port dead, it still works); a listener of another user on the port it is told
//! to use (`HANDLER_TRANSPORT=tcp`) gets a connection and not one byte; a peer of another user
//! on the socket is closed by handlerd before it reads anything, and the CLI refuses a socket
//! held by another user. The two-user tests need root and the `handler-test` user
//! (.ci/setup-podman.sh); without root they are skipped.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use test_support::user::{USER, User, as_user, free_port, id_of, is_root};

struct Daemon {
    child: Child,
    port: u16,
    root: PathBuf,
    token: String,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
        if self._dir.is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

fn env(root: &Path, port: u16) -> Vec<(&'static str, String)> {
    let mut env = test_support::handlerd::env(root, &root.join("harnesses"), port);
    env.push(("HOME", root.join("home").display().to_string()));
    env.push(("HANDLER_SANDBOX_COMMAND", "/bin/false".into()));
    env
}

/// handlerd as this process's user, in a temporary folder.
async fn start() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    for d in ["home", "harnesses"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_handlerd"));
    cmd.env_remove("XDG_RUNTIME_DIR");
    for (k, v) in env(&root, port) {
        cmd.env(k, v);
    }
    let (child, token) = test_support::handlerd::spawn(cmd, &root, port).await;
    Daemon {
        child,
        port,
        root,
        token,
        _dir: Some(dir),
    }
}

/// The test user, when the tests run as root (else None: the two-user tests skip).
fn other_user() -> Option<User> {
    if !is_root() {
        eprintln!("skipped: two users need root (and {USER}, .ci/setup-podman.sh)");
        return None;
    }
    let uid = id_of("-u", USER)
        .unwrap_or_else(|| panic!("no user {USER}: run .ci/setup-podman.sh as root first"));
    Some(User {
        name: Some(USER.into()),
        uid,
        gid: id_of("-g", USER).unwrap_or(uid),
    })
}

/// `handler ARGS` as this process's user with `env` (and `extra` over it).
fn handler(env: &[(&str, String)], extra: &[(&str, String)], args: &[&str]) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_handler"));
    c.args(args)
        .stdin(Stdio::null())
        .env_remove("XDG_RUNTIME_DIR");
    for (k, v) in env.iter().chain(extra) {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[tokio::test]
async fn the_cli_reaches_handlerd_over_its_socket_with_the_port_dead() {
    let d = start().await;
    let e = env(&d.root, d.port);
    let sock = d.root.join("run/handlerd.sock");
    let meta = std::fs::symlink_metadata(&sock).expect("handlerd made its socket");
    assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
    use std::os::unix::fs::PermissionsExt;
    let dir_mode = std::fs::metadata(d.root.join("run"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);

    let dead = free_port().to_string();
    let (code, out) = handler(&e, &[("HANDLER_PORT", dead.clone())], &["agent", "list"]);
    assert_eq!(code, 0, "over the socket, the port dead: {out}");
    // The port is still there for whoever asks for it (its holder is this user).
    let (code, out) = handler(
        &e,
        &[("HANDLER_TRANSPORT", "tcp".into())],
        &["agent", "list"],
    );
    assert_eq!(code, 0, "over the port: {out}");
    // Told to use the dead port, it does not fall back: it says it cannot reach it.
    let (code, out) = handler(
        &e,
        &[("HANDLER_TRANSPORT", "tcp".into()), ("HANDLER_PORT", dead)],
        &["agent", "list"],
    );
    assert_eq!(code, 3, "{out}");
    // No socket: unreachable (3), naming it.
    let (code, out) = handler(
        &e,
        &[(
            "HANDLER_SOCKET",
            d.root.join("none.sock").display().to_string(),
        )],
        &["agent", "list"],
    );
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("none.sock"), "{out}");
    assert!(!out.contains(&d.token), "{out}");
}

/// A listener of the test user on a free port: it accepts one connection and prints how many
/// bytes it received before the other end closed (or 5 s passed).
const LISTENER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(4)
print("ready", flush=True)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(5)
got = b""
try:
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += b
except socket.timeout:
    pass
print(len(got), flush=True)
"#;

#[tokio::test]
async fn a_listener_of_another_user_on_the_port_gets_nothing() {
    if other_user().is_none() {
        return;
    }
    let port = free_port();
    let mut l = as_user("/usr/bin/python3", &["-c", LISTENER, &port.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = l.stdout.take().unwrap();
    let mut ready = [0u8; 6];
    out.read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");

    let dir = tempfile::tempdir().unwrap();
    let token = "f6-the-real-token-0123456789abcdef0123456789abcdef";
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    std::fs::write(dir.path().join("config/token"), format!("{token}\n")).unwrap();
    let e = env(dir.path(), port);
    let (code, said) = handler(
        &e,
        &[("HANDLER_TRANSPORT", "tcp".into())],
        &["agent", "list"],
    );

    let mut got = String::new();
    out.read_to_string(&mut got).unwrap();
    let _ = l.wait();
    assert_ne!(code, 0, "{said}");
    assert!(
        said.contains("refused to talk to 127.0.0.1:") && said.contains("nothing was sent"),
        "{said}"
    );
    assert!(!said.contains(token), "{said}");
    assert_eq!(got.trim(), "0", "the other user's listener received bytes");
}

/// handlerd as the test user, in `/tmp/<name>` given to it.
async fn start_as(u: &User, name: &str) -> Daemon {
    use std::os::unix::fs::PermissionsExt;
    let root = PathBuf::from(format!("/tmp/{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for d in ["home", "harnesses", "bin"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    test_support::handlerd::install(&[(
        root.join("bin/handlerd"),
        PathBuf::from(env!("CARGO_BIN_EXE_handlerd")),
    )]);
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    u.give(&root);
    let port = free_port();
    let e = env(&root, port);
    let (child, token) =
        test_support::handlerd::spawn_as(u, &root.join("bin/handlerd"), &e, &root, port).await;
    Daemon {
        child,
        port,
        root,
        token,
        _dir: None,
    }
}

#[tokio::test]
async fn a_peer_of_another_user_on_the_socket_is_closed_and_refused() {
    let Some(u) = other_user() else { return };
    let d = start_as(&u, "hwsock").await;
    let sock = d.root.join("run/handlerd.sock");
    // Root reaches the test user's socket (no folder stops it): handlerd closes the
    // connection, token or not, before it answers anything.
    let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = format!(
        "GET /v1/harnesses HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {}\r\n\r\n",
        d.port, d.token
    );
    let _ = s.write_all(req.as_bytes());
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        got.is_empty(),
        "another user's peer was answered: {}",
        String::from_utf8_lossy(&got)
    );
    let log = std::fs::read_to_string(d.root.join("handlerd.log")).unwrap();
    assert!(log.contains("its peer is another user"), "{log}");
    // The CLI (root) refuses the socket the test user holds: it sends it nothing.
    let (code, said) = handler(&env(&d.root, d.port), &[], &["agent", "list"]);
    assert_ne!(code, 0, "{said}");
    assert!(
        said.contains("refused to talk to") && said.contains(&format!("uid {}", u.uid)),
        "{said}"
    );
}
