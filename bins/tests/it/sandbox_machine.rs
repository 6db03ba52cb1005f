//! Contract A's machine verbs (issue 29, decision 0142) against real rootless Podman, as the
//! unprivileged test user: a machine created from a MachineSpec on fd 3 with the launch's
//! hardening, reached by `machine exec` (stdio, exit code, a value by name never in any argv),
//! a file one exec writes seen by the next and after a stop and start, `stats` moving when a
//! process burns CPU, `{"running": false}` once stopped, and a container that is not labelled
//! as a machine never touched — each case on rootless Podman and rootless Docker, with the
//! contract-A conformance suite's environment.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::sandbox_conformance::{Env, Runtime, with_env};

const IMAGE: &str = "localhost/handler-test-busybox:latest";

/// `machine ARGS` as the test user, `doc` (if any) on fd 3 from a file only that user reads.
fn machine(e: &Env, args: &[&str], doc: Option<&Value>) -> Command {
    let mut script = String::from("exec \"$0\" machine");
    for (i, _) in args.iter().enumerate() {
        script.push_str(&format!(" \"${}\"", i + 2));
    }
    let dir = e.tempdir("machine-doc");
    let file = dir.join("doc.json");
    if let Some(d) = doc {
        std::fs::write(&file, d.to_string()).unwrap();
        e.give(&file);
        script.push_str(" 3<\"$1\"");
    }
    let mut all = vec![
        "-c",
        &script,
        e.bin.to_str().unwrap(),
        file.to_str().unwrap(),
    ];
    all.extend(args);
    e.as_user("sh", &all, &[])
}

fn out(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout {}\nstderr {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn exec(e: &Env, id: &str, x: Value) -> Output {
    out(&mut machine(e, &["exec", id], Some(&x)))
}

/// Removes the machine when the case ends, however it ends.
struct Removed<'a>(&'a Env, String);

impl Drop for Removed<'_> {
    fn drop(&mut self) {
        let _ = out(&mut machine(self.0, &["rm", &self.1], None));
    }
}

fn id(tag: &str, e: &Env) -> String {
    format!("{tag}{}{}", std::process::id(), &e.rt.cli()[..1])
}

/// The network filter image built from this checkout: its binary is a machine's exec server
/// (decision 0171), which a machine made now starts.
fn with_exec_server(e: &Env) {
    match e.rt {
        Runtime::Podman => {
            test_support::network_filter::ensure(&e.rt.built());
        }
        Runtime::Docker => {
            test_support::network_filter::ensure_docker(&e.rt.built());
        }
    }
}

/// What the parent of an exec's process is in the machine: the exec server's command line, or
/// nothing (the engine's exec starts it from outside the machine's processes).
fn parent_of_an_exec(e: &Env, id: &str) -> String {
    let o = exec(
        e,
        id,
        json!({"argv": ["sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline 2>/dev/null; echo"]}),
    );
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn a_machine_is_made_reached_by_exec_kept_across_a_restart_and_removed(e: &Env) {
    with_exec_server(e);
    let id = id("t", e);
    let work = e.tempdir("machine-work");
    let w = work.display().to_string();
    let spec = json!({
        "apiVersion": "handler.sandbox/v1", "name": format!("handler-m-{id}"), "image": IMAGE,
        "argv": ["sh", "-c", "while :; do sleep 3600; done"], "env": {}, "workdir": w,
        "user": {"mode": "host-user", "home": e.home},
        "mounts": [{"source": w, "target": w, "readOnly": false, "kind": "scope"}],
        "files": [], "writablePaths": [], "network": {"mode": "none"}, "injections": [],
        "labels": {"handler.test": "machine"}
    });
    let o = out(&mut machine(e, &["create"], Some(&spec)));
    let _gone = Removed(e, id.clone());
    assert!(o.status.success(), "{}", text(&o));
    // The launch's hardening, on the machine as the engine records it.
    let o = out(&mut machine(e, &["status", &id], None));
    assert!(o.status.success(), "{}", text(&o));
    let st: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st["State"]["Running"], true, "{st}");
    assert_eq!(st["HostConfig"]["ReadonlyRootfs"], true);
    assert_eq!(st["Config"]["Labels"]["handler.machine"], id.as_str());
    // `machine ls` (decision 0155): the engine's record of every machine, this one with its
    // labels, on both engines alike.
    let o = out(&mut machine(e, &["ls"], None));
    assert!(o.status.success(), "{}", text(&o));
    let ls: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mine = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["Config"]["Labels"]["handler.machine"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} not in {ls}"));
    assert_eq!(mine["Config"]["Labels"]["handler.test"], "machine");
    assert_eq!(mine["Id"], st["Id"]);
    let caps = st["HostConfig"]["CapDrop"].to_string().to_lowercase();
    // Every capability the engine would give is dropped (podman lists them).
    for c in ["cap_setuid", "cap_net_raw", "cap_chown"] {
        assert!(
            caps.contains(c) || caps.contains("all"),
            "{c} not dropped: {caps}"
        );
    }
    assert!(
        st["HostConfig"]["SecurityOpt"]
            .to_string()
            .contains("no-new-privileges"),
        "{}",
        st["HostConfig"]["SecurityOpt"]
    );
    // An exec: stdio, the exit code, a value given by name that no argv holds.
    let o = exec(
        e,
        &id,
        json!({"argv": ["sh", "-c", "echo kept > f; echo \"v=$SECRET_X\"; exit 7"], "env": {"SECRET_X": "s3cr3t-Value-9"}}),
    );
    assert_eq!(o.status.code(), Some(7), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("v=s3cr3t-Value-9"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read_to_string(work.join("f")).unwrap(), "kept\n");
    // That exec went by the machine's exec server, with no engine call (decision 0171); the
    // server's folder is read-only in the machine: nothing in it can plant a name the host
    // would bind, nor take the lock's file.
    assert!(
        parent_of_an_exec(e, &id).contains("exec-server"),
        "{}",
        parent_of_an_exec(e, &id)
    );
    let o = exec(
        e,
        &id,
        json!({"argv": ["sh", "-c", "touch /run/handler/exec/x-0000000000000001.sock || echo refused; (: > /run/handler/exec/alive) || echo refused"]}),
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "refused\nrefused\n",
        "{}",
        text(&o)
    );
    // SIGTERM to the exec's runtime ends its process in the machine (143), as the engine's
    // exec would.
    let mut long = machine(
        e,
        &["exec", &id],
        Some(&json!({"argv": ["sh", "-c", "echo started; exec sleep 41"]})),
    );
    let mut child = long
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 8];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    let killed = Command::new("pkill")
        .args(["-TERM", "-f", &format!("machine exec {id}$")])
        .status()
        .unwrap();
    assert!(killed.success());
    let ended = child.wait_with_output().unwrap();
    assert_eq!(ended.status.code(), Some(143), "{}", text(&ended));
    let o = exec(
        e,
        &id,
        json!({"argv": ["sh", "-c", "sleep 1; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"]}),
    );
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("sleep 41"),
        "{}\nthe runtime's: {}",
        text(&o),
        text(&ended)
    );
    let mut slow = machine(
        e,
        &["exec", &id],
        Some(&json!({"argv": ["sleep", "3"], "env": {"SECRET_X": "s3cr3t-Value-9"}})),
    );
    let mut child = slow.stdin(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let leaked: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("s3cr3t-Value-9"))
        .collect();
    assert!(leaked.is_empty(), "a value in an argv: {leaked:?}");
    assert!(child.wait().unwrap().success());
    // stats move when a process burns CPU.
    let mut burn = machine(
        e,
        &["exec", &id],
        Some(&json!({"argv": ["sh", "-c", "timeout 4 sh -c 'while :; do :; done'"]})),
    );
    let mut b = burn.stdin(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = Value::Null;
    while Instant::now() < deadline {
        let o = out(&mut machine(e, &["stats", &id], None));
        assert!(o.status.success(), "{}", text(&o));
        last = serde_json::from_slice(&o.stdout).unwrap();
        if last["cpu"]["percent"].as_f64().unwrap_or(0.0) > 20.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        last["cpu"]["percent"].as_f64().unwrap_or(0.0) > 20.0,
        "{last}"
    );
    assert_eq!(last["running"], true);
    assert!(last["memory"]["used"].as_u64().unwrap() > 0, "{last}");
    // The machine's own, not its engine's: a shell loop holds far less than 512 MiB.
    assert!(
        last["memory"]["used"].as_u64().unwrap() < 512 << 20,
        "{last}"
    );
    assert!(last["pids"].as_u64().unwrap() >= 2, "{last}");
    let _ = b.wait();
    // Stopped: not running, its stats say only that; started: the file is still there.
    let o = out(&mut machine(e, &["stop", &id], None));
    assert!(o.status.success(), "{}", text(&o));
    let o = out(&mut machine(e, &["stats", &id], None));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        r#"{"running":false}"#,
        "{}",
        text(&o)
    );
    let o = exec(e, &id, json!({"argv": ["true"]}));
    assert_ne!(
        o.status.code(),
        Some(0),
        "no exec in a stopped machine: {}",
        text(&o)
    );
    let o = out(&mut machine(e, &["start", &id], None));
    assert!(o.status.success(), "{}", text(&o));
    let o = exec(e, &id, json!({"argv": ["cat", "f"]}));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "kept\n", "{}", text(&o));
    // Started again, the server is back.
    assert!(parent_of_an_exec(e, &id).contains("exec-server"));
    let o = out(&mut machine(e, &["restart", &id], None));
    assert!(o.status.success(), "{}", text(&o));
    // A bad exec names its field (65).
    let o = exec(e, &id, json!({"argv": []}));
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("argv"),
        "{}",
        text(&o)
    );
    // Removed: gone, and every verb says there is no such machine (3).
    let o = out(&mut machine(e, &["rm", &id], None));
    assert!(o.status.success(), "{}", text(&o));
    let o = out(&mut machine(e, &["status", &id], None));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
}

fn a_container_that_is_not_a_machine_is_never_touched_and_a_tty_or_secret_is_refused(e: &Env) {
    let id = id("imp", e);
    let name = format!("handler-m-{id}");
    // Someone's container with a machine's name but no machine label.
    let o = e.cli(&["run", "-d", "--name", &name, IMAGE, "sleep", "60"]);
    assert!(o.status.success(), "{}", text(&o));
    for verb in ["stop", "rm", "status", "stats"] {
        let o = out(&mut machine(e, &[verb, &id], None));
        assert_eq!(o.status.code(), Some(3), "{verb}: {}", text(&o));
    }
    let o = e.cli(&["inspect", "--format", "{{.State.Running}}", &name]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "true",
        "{}",
        text(&o)
    );
    let _ = e.cli(&["rm", "-f", &name]);
    let base = json!({
        "apiVersion": "handler.sandbox/v1", "name": "handler-m-refused", "image": IMAGE,
        "argv": ["sleep", "60"], "env": {}, "workdir": "/tmp",
        "user": {"mode": "host-user", "home": e.home},
        "mounts": [], "files": [], "writablePaths": [], "network": {"mode": "none"}, "injections": []
    });
    let mut tty = base.clone();
    tty["tty"] = json!(true);
    let o = out(&mut machine(e, &["create"], Some(&tty)));
    assert_eq!(o.status.code(), Some(65), "{}", text(&o));
    // A secret in a machine: refused (its processes read each other's phantoms, decision 0153).
    let mut f = base.clone();
    f["network"] = json!({"mode": "open"});
    f["injections"] = json!([{"name": "providers/p/apiKey", "phantom": "PHANTOM-0001",
                              "value": "SECRET-00001", "hosts": ["a.example:443"]}]);
    let o = out(&mut machine(e, &["create"], Some(&f)));
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("injections"), "{}", text(&o));
    assert!(!err.contains("SECRET-00001"), "{}", text(&o));
}

/// The benchmark of issue 29 (`bench/machine-exec.sh`): `machine exec` of `true` in a running
/// machine ÷ the engine's own `exec` of it, alternated, medians (both through the same
/// `setpriv` to the test user). Prints one `BENCH` line.
fn bench_exec_against_the_engines_exec(e: &Env) {
    let rounds: usize = std::env::var("HANDLER_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(15);
    let id = id("b", e);
    let spec = json!({
        "apiVersion": "handler.sandbox/v1", "name": format!("handler-m-{id}"), "image": IMAGE,
        "argv": ["sh", "-c", "while :; do sleep 3600; done"], "env": {}, "workdir": "/",
        "user": {"mode": "host-user", "home": e.home}, "mounts": [], "files": [],
        "writablePaths": [], "network": {"mode": "none"}, "injections": [],
        "labels": {"handler.test": "machine-bench"}
    });
    let o = out(&mut machine(e, &["create"], Some(&spec)));
    let _gone = Removed(e, id.clone());
    assert!(o.status.success(), "{}", text(&o));
    let name = format!("handler-m-{id}");
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let o = exec(e, &id, json!({"argv": ["true"]}));
        ours.push(t.elapsed());
        assert!(o.status.success(), "{}", text(&o));
        let t = Instant::now();
        let o = e.cli(&["exec", &name, "true"]);
        bare.push(t.elapsed());
        assert!(o.status.success(), "{}", text(&o));
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (o, b) = (median(&mut ours), median(&mut bare));
    println!(
        "BENCH machine-exec {} rounds={rounds} machine_exec_ms={} engine_exec_ms={} ratio={:.2}",
        e.rt.cli(),
        o.as_millis(),
        b.as_millis(),
        o.as_secs_f64() / b.as_secs_f64()
    );
}

/// Decision 0161: `machine up` makes a dev container with the real Dev Container CLI from a
/// staged, checked copy of the folder's file (a local image and a local feature), with
/// Handler's hardening; it answers the user, the folder inside and the variables each exec gets,
/// and exec with them runs as that user in the folder with the container's, the feature's and
/// the file's variables. A staged copy that asks for `privileged` is refused (64) and nothing is
/// made.
fn a_dev_container_is_made_by_the_cli_and_reached_as_its_user(e: &Env) {
    let id = id("dc", e);
    let repo = e.tempdir("dc-repo");
    let stage = e.tempdir("dc-stage");
    let write = |p: std::path::PathBuf, text: &str| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        for a in p
            .ancestors()
            .take_while(|a| a.starts_with(&stage) || a.starts_with(&repo))
        {
            e.give(a);
        }
    };
    write(repo.join("README"), "mine\n");
    let file = json!({"image": IMAGE, "features": {"./feat": {}},
        "containerEnv": {"CE": "cont"}, "remoteEnv": {"RE": "remote"}});
    write(
        stage.join(".devcontainer/devcontainer.json"),
        &file.to_string(),
    );
    write(
        stage.join(".devcontainer/feat/devcontainer-feature.json"),
        r#"{"id": "feat", "version": "1.0.0", "name": "feat", "containerEnv": {"FEAT": "on"}}"#,
    );
    write(
        stage.join(".devcontainer/feat/install.sh"),
        "#!/bin/sh\necho feature-installed > /feat-ok\n",
    );
    let folder = repo.display().to_string();
    let target = format!(
        "/workspaces/{}",
        repo.file_name().unwrap().to_str().unwrap()
    );
    let doc = |config: &std::path::Path| {
        json!({"spec": {
            "apiVersion": "handler.sandbox/v1", "name": format!("handler-m-{id}"), "image": "devcontainer",
            "argv": ["sh"], "env": {}, "workdir": target,
            "user": {"mode": "host-user", "home": e.home},
            "mounts": [{"source": folder, "target": target, "readOnly": false, "kind": "state"}],
            "files": [], "writablePaths": [], "network": {"mode": "none"}, "injections": [],
            "labels": {}
        }, "folder": folder, "configDir": config.display().to_string()})
    };
    let _gone = Removed(e, id.clone());
    let o = out(&mut machine(e, &["up"], Some(&doc(&stage))));
    assert!(o.status.success(), "{}", text(&o));
    let up: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(up["remoteWorkspaceFolder"], target.as_str(), "{up}");
    assert_eq!(up["env"]["RE"], "remote", "{up}");
    let o = exec(
        e,
        &id,
        json!({"argv": ["sh", "-c", "pwd; echo $CE $FEAT $RE; cat /feat-ok; echo in > made-inside"],
            "user": up["remoteUser"], "cwd": up["remoteWorkspaceFolder"], "env": up["env"]}),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{target}\ncont on remote\nfeature-installed\n"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("made-inside")).unwrap(),
        "in\n"
    );
    let o = out(&mut machine(e, &["stats", &id], None));
    assert!(o.status.success(), "{}", text(&o));
    // Refused before the CLI runs: nothing is made.
    let bad = e.tempdir("dc-bad");
    std::fs::create_dir_all(bad.join(".devcontainer")).unwrap();
    std::fs::write(
        bad.join(".devcontainer/devcontainer.json"),
        json!({"image": IMAGE, "privileged": true}).to_string(),
    )
    .unwrap();
    e.give(&bad.join(".devcontainer"));
    e.give(&bad.join(".devcontainer/devcontainer.json"));
    let mut d = doc(&bad);
    d["spec"]["name"] = json!(format!("handler-m-{id}x"));
    let o = out(&mut machine(e, &["up"], Some(&d)));
    assert_eq!(o.status.code(), Some(64), "{}", text(&o));
    assert!(text(&o).contains("privileged"), "{}", text(&o));
    assert!(
        e.cli(&["inspect", &format!("handler-m-{id}x")])
            .status
            .code()
            != Some(0)
    );
}

mod podman {
    #[test]
    fn a_dev_container_is_made_by_the_cli_and_reached_as_its_user() {
        super::with_env(
            super::Runtime::Podman,
            super::a_dev_container_is_made_by_the_cli_and_reached_as_its_user,
        );
    }
    #[test]
    #[ignore = "a benchmark: bench/machine-exec.sh"]
    fn bench_exec_against_the_engines_exec() {
        super::with_env(
            super::Runtime::Podman,
            super::bench_exec_against_the_engines_exec,
        );
    }
    #[test]
    fn a_machine_is_made_reached_by_exec_kept_across_a_restart_and_removed() {
        super::with_env(
            super::Runtime::Podman,
            super::a_machine_is_made_reached_by_exec_kept_across_a_restart_and_removed,
        );
    }
    #[test]
    fn a_container_that_is_not_a_machine_is_never_touched_and_a_tty_or_secret_is_refused() {
        super::with_env(
            super::Runtime::Podman,
            super::a_container_that_is_not_a_machine_is_never_touched_and_a_tty_or_secret_is_refused,
        );
    }
}

mod docker {
    #[test]
    fn a_dev_container_is_made_by_the_cli_and_reached_as_its_user() {
        super::with_env(
            super::Runtime::Docker,
            super::a_dev_container_is_made_by_the_cli_and_reached_as_its_user,
        );
    }
    #[test]
    #[ignore = "a benchmark: bench/machine-exec.sh"]
    fn bench_exec_against_the_engines_exec() {
        super::with_env(
            super::Runtime::Docker,
            super::bench_exec_against_the_engines_exec,
        );
    }
    #[test]
    fn a_machine_is_made_reached_by_exec_kept_across_a_restart_and_removed() {
        super::with_env(
            super::Runtime::Docker,
            super::a_machine_is_made_reached_by_exec_kept_across_a_restart_and_removed,
        );
    }
    #[test]
    fn a_container_that_is_not_a_machine_is_never_touched_and_a_tty_or_secret_is_refused() {
        super::with_env(
            super::Runtime::Docker,
            super::a_container_that_is_not_a_machine_is_never_touched_and_a_tty_or_secret_is_refused,
        );
    }
}
