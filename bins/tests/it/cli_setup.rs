//! `handler daemon …` and `handler setup` against a real handlerd: `daemon start` starts it in
//! the background (its log in the state folder, without colours), `status` says where it runs
//! and which runtime it uses, `logs` prints its log, `ui --print` the URL with the token in its
//! fragment only, `stop` stops it, `install --no-start` writes the user unit. `setup` starts
//! handlerd, shows the host check (which runtime runs and why) and, when something required is
//! missing, stops there (exit 1) naming the fix; on a ready host it builds nothing that is there
//! (a sandbox executable that answers the check and says every image exists).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use test_support::user::free_port;

/// A folder whose handlerd (started by `handler daemon start`) is stopped at the end.
struct Home {
    dir: tempfile::TempDir,
    port: u16,
}

impl Drop for Home {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(self.dir.path().join("state/handlerd.pid"));
        if let Ok(pid) = pid {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
}

fn home(sandbox: &str) -> Home {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::create_dir_all(dir.path().join("harnesses")).unwrap();
    let script = dir.path().join("sandbox.sh");
    std::fs::write(&script, sandbox).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    Home {
        dir,
        port: free_port(),
    }
}

struct Run {
    code: i32,
    out: String,
    err: String,
}

impl Home {
    fn run(&self, args: &[&str]) -> Run {
        let p = self.dir.path();
        let mut c = assert_cmd::Command::new(env!("CARGO_BIN_EXE_handler"));
        c.args(args).write_stdin("");
        for (k, v) in test_support::handlerd::env(p, &p.join("harnesses"), self.port) {
            c.env(k, v);
        }
        c.env("HOME", p.join("home"))
            .env("XDG_CONFIG_HOME", p.join("home/.config"))
            .env("HANDLER_SANDBOX_COMMAND", p.join("sandbox.sh"))
            .env("HANDLER_CHECK", p.join("check.json"))
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("NO_COLOR");
        let o = c.output().unwrap();
        Run {
            code: o.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&o.stdout).into_owned(),
            err: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
    fn ok(&self, args: &[&str]) -> Run {
        let r = self.run(args);
        assert_eq!(r.code, 0, "handler {args:?}: {}{}", r.out, r.err);
        r
    }
    fn check(&self, ok: bool) {
        let check = serde_json::json!({"runtime": "fake 1.0", "ok": ok, "items": [
            {"name": "podman", "ok": true, "required": true, "detail": "podman 5.4"},
            {"name": "subuid", "ok": ok, "required": true, "detail": if ok { "ok" } else { "no subuid range: sudo usermod --add-subuids 100000-165535 $USER" }},
        ]});
        std::fs::write(self.dir.path().join("check.json"), check.to_string()).unwrap();
    }
}

/// A sandbox executable that answers `check` with $HANDLER_CHECK and says every image exists.
const READY: &str = "#!/bin/sh\ncase \"$1\" in\ncheck) cat \"$HANDLER_CHECK\" ;;\nimage) echo '[{\"Id\":\"sha256:0\",\"Labels\":{}}]' ;;\n*) exit 2 ;;\nesac\n";

fn log_of(p: &Path) -> String {
    std::fs::read_to_string(p.join("state/handlerd.log")).unwrap_or_default()
}

#[test]
fn daemon_start_status_logs_ui_stop_and_install() {
    let h = home(READY);
    h.check(true);
    assert_eq!(h.run(&["daemon", "status"]).code, 3);
    let r = h.ok(&["daemon", "start"]);
    assert!(
        r.err
            .contains(&format!("handlerd started on 127.0.0.1:{}", h.port)),
        "{}",
        r.err
    );
    // A second start finds it running.
    assert!(
        h.ok(&["daemon", "start"])
            .err
            .contains("handlerd is running")
    );
    let r = h.ok(&["daemon", "status"]);
    assert!(
        r.out
            .contains(&format!("handlerd is running on 127.0.0.1:{}", h.port)),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("runtime: fake 1.0 (can run sandboxes)"),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("(chosen by HANDLER_SANDBOX_COMMAND)"),
        "{}",
        r.out
    );
    let log = log_of(h.dir.path());
    assert!(log.contains("request"), "{log}");
    assert!(!log.contains('\u{1b}'), "colours in a log file: {log}");
    assert!(h.ok(&["daemon", "logs", "-n", "3"]).out.lines().count() <= 3);
    let url = h.ok(&["ui", "--print"]).out;
    let token = std::fs::read_to_string(h.dir.path().join("config/token")).unwrap();
    assert_eq!(
        url,
        format!("http://127.0.0.1:{}/#token={}\n", h.port, token.trim())
    );
    assert_eq!(h.ok(&["daemon", "stop"]).out, "handlerd stopped\n");
    assert_eq!(h.run(&["daemon", "status"]).code, 3);
    assert!(!h.dir.path().join("state/handlerd.pid").exists());
    h.ok(&["daemon", "install", "--no-start"]);
    let unit = std::fs::read_to_string(
        h.dir
            .path()
            .join("home/.config/systemd/user/handlerd.service"),
    )
    .unwrap();
    assert!(
        unit.contains("ExecStart=") && unit.contains("/handlerd\n"),
        "{unit}"
    );
    assert!(
        unit.contains(&format!("Environment=\"HANDLER_PORT={}\"", h.port)),
        "{unit}"
    );
    assert!(unit.contains("WantedBy=default.target"), "{unit}");
}

#[test]
fn setup_stops_at_what_the_host_lacks_and_builds_nothing_that_is_there() {
    let h = home(READY);
    h.check(false);
    let r = h.run(&["setup", "--yes"]);
    assert_eq!(r.code, 1, "{}{}", r.out, r.err);
    assert!(r.err.contains("handlerd started"), "{}", r.err);
    assert!(r.out.contains("runtime: fake 1.0"), "{}", r.out);
    assert!(
        r.out
            .contains("✗ subuid: no subuid range: sudo usermod --add-subuids"),
        "{}",
        r.out
    );
    assert!(r.out.contains("✓ selected: "), "{}", r.out);
    assert!(
        r.err
            .contains("fix what is marked ✗ above, then run `handler setup` again"),
        "{}",
        r.err
    );
    h.check(true);
    let r = h.ok(&[
        "setup",
        "--yes",
        "--provider-template",
        "llamacpp",
        "--provider-name",
        "local",
    ]);
    assert!(
        r.out
            .contains("✓ network-filter: built\n✓ toolbox: built\nnothing to build"),
        "{}",
        r.out
    );
    assert!(
        r.out.contains("✓ provider local: added from llamacpp"),
        "{}",
        r.out
    );
    assert!(r.out.contains("next: "), "{}", r.out);
    // Idempotent: the provider is there, nothing is built.
    let r = h.ok(&[
        "setup",
        "--yes",
        "--provider-template",
        "llamacpp",
        "--provider-name",
        "local",
    ]);
    assert!(
        r.out.contains("nothing to build") && r.out.contains("✓ provider local: there"),
        "{}",
        r.out
    );
    assert_eq!(h.ok(&["--json", "build", "list"]).out.trim(), "[]");
    h.ok(&["daemon", "stop"]);
}
