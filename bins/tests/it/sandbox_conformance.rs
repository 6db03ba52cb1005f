//! Contract A conformance of handler-sandbox-podman (rootless Podman) and handler-sandbox-docker
//! (rootless Docker), every case run against both (issue 19: `podman::` and `docker::`), run as an
//! unprivileged user (`runuser`-style via setpriv when the tests run as root; user from
//! HANDLER_TEST_USER, default handler-test; image localhost/handler-test-busybox:latest made by
//! .ci/setup-podman.sh). Missing podman or user FAILS, unless HANDLER_SKIP_PODMAN_TESTS=1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::user::id_of;

const IMAGE: &str = "localhost/handler-test-busybox:latest";

/// The runtime executable a case runs against (issue 19: one suite, two runtimes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Runtime {
    Podman,
    Docker,
}

impl Runtime {
    /// The engine's CLI.
    pub(crate) fn cli(self) -> &'static str {
        match self {
            Runtime::Podman => "podman",
            Runtime::Docker => "docker",
        }
    }

    /// The built runtime executable.
    pub(crate) fn built(self) -> PathBuf {
        PathBuf::from(match self {
            Runtime::Podman => env!("CARGO_BIN_EXE_handler-sandbox-podman"),
            Runtime::Docker => env!("CARGO_BIN_EXE_handler-sandbox-docker"),
        })
    }

    /// What makes the test user's engine ready.
    fn setup_script(self) -> &'static str {
        match self {
            Runtime::Podman => ".ci/setup-podman.sh",
            Runtime::Docker => ".ci/setup-docker.sh",
        }
    }

    /// The variable that lets a machine without this engine skip its cases.
    fn skip_var(self) -> &'static str {
        match self {
            Runtime::Podman => "HANDLER_SKIP_PODMAN_TESTS",
            Runtime::Docker => "HANDLER_SKIP_DOCKER_TESTS",
        }
    }

    /// PID 1 of a sandbox (`--init`).
    fn init_path(self) -> &'static str {
        match self {
            Runtime::Podman => "/run/podman-init",
            Runtime::Docker => "/sbin/docker-init",
        }
    }
}

pub(crate) struct Env {
    pub(crate) rt: Runtime,
    pub(crate) bin: PathBuf,
    /// Some(name) when the tests run as root and must switch to that user.
    user: Option<String>,
    uid: u32,
    gid: u32,
    pub(crate) home: String,
}

/// Removes `/tmp/handler-sandbox-test-bin-<pid>` folders whose process no longer runs.
fn remove_stale_copies() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("handler-sandbox-test-bin-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn setup(rt: Runtime) -> Result<Env, String> {
    let euid = id_of("-u", "").or_else(|| {
        let o = Command::new("id").arg("-u").output().ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    });
    let root = euid == Some(0);
    let built = rt.built();
    let (bin, user) = if root {
        let user = std::env::var("HANDLER_TEST_USER").unwrap_or_else(|_| "handler-test".into());
        if id_of("-u", &user).is_none() {
            return Err(format!(
                "no user {user:?}: run .ci/setup-podman.sh as root first"
            ));
        }
        // The build folder may not be reachable by the user: a world-readable copy (222 MB in
        // a debug build). Copies left by earlier runs, whose process is gone, are removed first.
        remove_stale_copies();
        let dir = PathBuf::from(format!(
            "/tmp/handler-sandbox-test-bin-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        let bin = dir.join(built.file_name().unwrap());
        std::fs::copy(&built, &bin).map_err(|e| format!("copy {}: {e}", built.display()))?;
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        (bin, Some(user))
    } else {
        (built, None)
    };
    let who = user
        .clone()
        .unwrap_or_else(|| std::env::var("USER").unwrap_or_default());
    let (uid, gid) = match &user {
        Some(u) => (id_of("-u", u).unwrap(), id_of("-g", u).unwrap()),
        None => (euid.unwrap_or(0), {
            let o = Command::new("id")
                .arg("-g")
                .output()
                .map_err(|e| e.to_string())?;
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse()
                .unwrap_or(0)
        }),
    };
    let home = match &user {
        Some(u) => format!("/home/{u}"),
        None => std::env::var("HOME").unwrap_or_default(),
    };
    let env = Env {
        rt,
        bin,
        user,
        uid,
        gid,
        home,
    };
    let out = env.cli(&["image", "inspect", "--format", "{{.Id}}", IMAGE]);
    if !out.status.success() {
        return Err(format!(
            "{} cannot find {IMAGE} as {who} ({}): run {} as root first",
            rt.cli(),
            String::from_utf8_lossy(&out.stderr).trim(),
            rt.setup_script()
        ));
    }
    Ok(env)
}

fn env(rt: Runtime) -> Option<&'static Env> {
    static PODMAN: OnceLock<Result<Env, String>> = OnceLock::new();
    static DOCKER: OnceLock<Result<Env, String>> = OnceLock::new();
    let cell = match rt {
        Runtime::Podman => &PODMAN,
        Runtime::Docker => &DOCKER,
    };
    match cell.get_or_init(|| setup(rt)) {
        Ok(e) => Some(e),
        Err(e) if std::env::var(rt.skip_var()).as_deref() == Ok("1") => {
            eprintln!("{} tests skipped ({}=1): {e}", rt.cli(), rt.skip_var());
            None
        }
        Err(e) => panic!(
            "the sandbox tests need rootless {}: {e} (or set {}=1)",
            rt.cli(),
            rt.skip_var()
        ),
    }
}

thread_local! {
    /// The runtime of the case running on this thread.
    static CURRENT: std::cell::Cell<Option<Runtime>> = const { std::cell::Cell::new(None) };
}

/// Runs conformance case `case` against runtime `rt` (skipped, saying so, when the machine
/// has no such engine and its skip variable is set).
pub(crate) fn with_env(rt: Runtime, case: fn(&Env)) {
    CURRENT.with(|c| c.set(Some(rt)));
    if let Some(e) = env(rt) {
        case(e);
    }
}

impl Env {
    /// A command run as the test user, with a clean environment plus `extra`.
    pub(crate) fn as_user(&self, program: &str, args: &[&str], extra: &[(&str, &str)]) -> Command {
        match &self.user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid", u, "--regid", u, "--init-groups", "env", "-i"]);
                c.arg(format!("HOME={}", self.home))
                    .arg(format!("USER={u}"))
                    .arg(format!("LOGNAME={u}"));
                c.arg("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
                // No warm proxy pool but in its own test (decision 0175).
                c.arg("HANDLER_PROXY_POOL=0");
                for (k, v) in extra {
                    c.arg(format!("{k}={v}"));
                }
                c.arg(program).args(args);
                c
            }
            None => {
                let mut c = Command::new(program);
                c.args(args);
                for (k, v) in extra {
                    c.env(k, v);
                }
                c
            }
        }
    }

    /// The sandbox's uid and gid as seen inside: the host user's (podman's keep-id), or
    /// container root of the rootless daemon, which is the host user outside (Docker).
    fn inner_ids(&self) -> (u32, u32) {
        match self.rt {
            Runtime::Podman => (self.uid, self.gid),
            Runtime::Docker => (0, 0),
        }
    }

    /// The engine's CLI (podman or docker) as the test user.
    pub(crate) fn cli(&self, args: &[&str]) -> Output {
        self.as_user(self.rt.cli(), args, &[])
            .stdin(Stdio::null())
            .output()
            .expect("the engine's CLI runs")
    }

    pub(crate) fn bin(&self, args: &[&str]) -> Command {
        self.as_user(self.bin.to_str().unwrap(), args, &[])
    }

    /// `launch` with the spec on fd 3.
    fn launch(&self, spec: &Value, extra: &[(&str, &str)]) -> Command {
        let dir = self.tempdir("spec");
        let file = dir.join("spec.json");
        std::fs::write(&file, serde_json::to_vec(spec).unwrap()).unwrap();
        self.give(&file);
        self.as_user(
            "sh",
            &[
                "-c",
                "exec \"$0\" launch 3<\"$1\"",
                self.bin.to_str().unwrap(),
                file.to_str().unwrap(),
            ],
            extra,
        )
    }

    /// Gives a path to the test user.
    pub(crate) fn give(&self, p: &Path) {
        if self.user.is_some() {
            std::os::unix::fs::chown(p, Some(self.uid), Some(self.gid)).unwrap();
        }
    }

    /// A fresh folder owned by the test user (0755).
    pub(crate) fn tempdir(&self, tag: &str) -> PathBuf {
        static N: AtomicU32 = AtomicU32::new(0);
        // One folder per test process, `/tmp/hst-<pid>`: the next run removes what a run left.
        static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
        let dir = DIR.get_or_init(|| test_support::user::process_dir("hst-"));
        let p = dir.join(format!("{}-{tag}", N.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        self.give(&p);
        p
    }

    fn containers(&self, name: &str) -> Vec<String> {
        let o = self.cli(&[
            "ps",
            "-a",
            "--filter",
            &format!("label=handler.sandbox={name}"),
            "--format",
            "{{.Names}}",
        ]);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .filter(|l| !l.is_empty())
            .collect()
    }

    fn wait_running(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = self.cli(&[
                "ps",
                "--filter",
                &format!("label=handler.sandbox={name}"),
                "--filter",
                "status=running",
                "-q",
            ]);
            if !String::from_utf8_lossy(&o.stdout).trim().is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "sandbox {name} never ran");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn instance_dir(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/tmp/handler-sandbox-{}/{name}", self.uid))
    }
}

fn name(tag: &str) -> String {
    // The runtime in the name: both runtimes' cases run at once, in one instance folder.
    let rt = CURRENT.with(std::cell::Cell::get).map_or("x", Runtime::cli);
    format!("hst-{}-{rt}-{tag}", std::process::id())
}

fn spec(name: &str, scope: &Path, argv: &[&str]) -> Value {
    json!({
        "apiVersion": "handler.sandbox/v1",
        "name": name,
        "image": IMAGE,
        "argv": argv,
        "env": {},
        "workdir": scope,
        "user": {"mode": "host-user", "home": "/home/agent"},
        "mounts": [{"source": scope, "target": scope, "readOnly": false, "kind": "scope"}],
        "files": [],
        "writablePaths": [],
        "network": {"mode": "none"}
    })
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `KEY=VALUE` lines of a script's output.
fn kv(out: &str) -> std::collections::BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn invalid_spec_is_65_naming_the_field(e: &Env) {
    let n = name("invalid");
    let scope = e.tempdir("scope");
    let mut s = spec(&n, &scope, &["true"]);
    s["mounts"][0]["source"] = json!("relative/path");
    let o = run(&mut e.launch(&s, &[]));
    assert_eq!(o.status.code(), Some(65), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("mounts[0].source"),
        "{}",
        text(&o.stderr)
    );
    assert!(o.stdout.is_empty());
    let mut s = spec(&n, &scope, &["true"]);
    s["user"]["home"] = json!(42);
    let o = run(&mut e.launch(&s, &[]));
    assert_eq!(o.status.code(), Some(65));
    assert!(text(&o.stderr).contains("user.home"), "{}", text(&o.stderr));
    assert!(e.containers(&n).is_empty());
}

fn unenforceable_spec_is_64_before_anything_starts(e: &Env) {
    let n = name("unenforceable");
    let scope = e.tempdir("scope");
    let mut cases = vec![
        json!({"display": {"mode": "wayland", "socket": format!("{}/no-such-socket", scope.display())}}),
        json!({"display": {"mode": "wayland", "socket": format!("{}/plain-file", scope.display())}}),
    ];
    // Resource limits rootless podman would silently ignore (cgroups v1/hybrid, or no delegation).
    let uid = e.uid;
    let delegated = std::fs::read_to_string(format!(
        "/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service/cgroup.controllers"
    ))
    .is_ok_and(|c| c.contains("memory"));
    if !delegated {
        cases.push(json!({"resources": {"memory": "256m"}}));
    }
    std::fs::write(scope.join("plain-file"), "x").unwrap();
    for patch in cases {
        let mut s = spec(&n, &scope, &["sh", "-c", "echo started"]);
        for (k, v) in patch.as_object().unwrap() {
            s[k] = v.clone();
        }
        let o = run(&mut e.launch(&s, &[]));
        assert_eq!(o.status.code(), Some(64), "{patch}: {}", text(&o.stderr));
        assert!(
            o.stdout.is_empty(),
            "the process started: {}",
            text(&o.stdout)
        );
        assert!(e.containers(&n).is_empty());
        assert!(!e.instance_dir(&n).exists());
    }
    let o = run(&mut e.bin(&["set-allow", &n, "example.com"]));
    assert_eq!(
        o.status.code(),
        Some(65),
        "a bare host is invalid: {}",
        text(&o.stderr)
    );
}

fn strict_sandbox_sees_only_its_mounts_as_the_host_user(e: &Env) {
    let n = name("strict");
    let root = e.tempdir("strict");
    let scope = root.join("scope");
    let ro = root.join("ro");
    let hidden = root.join("hidden");
    for d in [&scope, &ro, &hidden] {
        std::fs::create_dir(d).unwrap();
        e.give(d);
    }
    std::fs::write(ro.join("data"), "original").unwrap();
    std::fs::write(hidden.join("secret"), "s").unwrap();
    let script = format!(
        r"echo uid=$(id -u); echo gid=$(id -g); echo home=$HOME; echo pwd=$(pwd)
touch $HOME/w 2>/dev/null && echo home_writable=yes
echo hi > {scope}/written && echo scope_writable=yes
echo x > {ro}/data 2>/dev/null || echo ro_refused=yes
test -e {hidden} || echo hidden_invisible=yes
test -e {root}/scope && echo parent_shows_scope=yes
ls {root} | tr '\n' ' ' | sed 's/^/listing=/'; echo
touch /etc/x 2>/dev/null || echo rootfs_readonly=yes
grep CapEff /proc/self/status | tr -d '\t' | sed 's/CapEff:/capeff=/'
grep NoNewPrivs /proc/self/status | tr -d '\t' | sed 's/NoNewPrivs:/nnp=/'
echo pid1=$(tr '\0' '\n' </proc/1/cmdline | head -n 1)
tr '\0' '\n' </proc/1/environ | grep '^SECRET_TOKEN=' | sed 's/^/environ_/'
echo file=$(cat /etc/handler/info.txt); touch /etc/handler/info.txt 2>/dev/null || echo file_ro=yes
echo seed=$(cat $HOME/.config/tool/seed.txt); echo more >> $HOME/.config/tool/seed.txt && echo seed_writable=yes
touch /var/cache/agent/x && echo writable_path=yes
",
        scope = scope.display(),
        ro = ro.display(),
        hidden = hidden.display(),
        root = root.display()
    );
    let mut s = spec(&n, &scope, &["sh", "-c", &script]);
    s["env"] = json!({"SECRET_TOKEN": "tok-123456", "XDG_CONFIG_HOME": "/home/agent/.config"});
    s["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"source": ro, "target": ro, "readOnly": true, "kind": "knowledge"}));
    s["files"] = json!([
        {"target": "/etc/handler/info.txt", "content": "given"},
        {"target": "/home/agent/.config/tool/seed.txt", "content": "seeded", "seed": true}
    ]);
    s["writablePaths"] = json!(["/var/cache/agent"]);
    let o = run(&mut e.launch(&s, &[]));
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    let v = kv(&out);
    let get = |k: &str| {
        v.get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {k} in:\n{out}"))
    };
    // Podman: keep-id, the host user's ids inside. Rootless Docker: container uid 0, which is
    // the host user outside (decision 0080): the file written below is the host user's.
    assert_eq!(get("uid"), e.inner_ids().0.to_string(), "not the host user");
    assert_eq!(get("gid"), e.inner_ids().1.to_string());
    assert_eq!(get("home"), "/home/agent");
    assert_eq!(
        get("pwd"),
        scope.to_str().unwrap(),
        "scope at the same path"
    );
    for k in [
        "home_writable",
        "scope_writable",
        "ro_refused",
        "hidden_invisible",
        "rootfs_readonly",
        "file_ro",
        "seed_writable",
        "writable_path",
    ] {
        assert_eq!(get(k), "yes", "{k}:\n{out}");
    }
    let mut listing: Vec<&str> = get("listing").split_whitespace().collect();
    listing.sort();
    assert_eq!(
        listing,
        ["ro", "scope"],
        "only the mounts of {}",
        root.display()
    );
    assert_eq!(get("capeff"), "0000000000000000");
    assert_eq!(get("nnp"), "1");
    assert_eq!(get("pid1"), e.rt.init_path(), "an init is PID 1");
    assert_eq!(
        get("environ_SECRET_TOKEN"),
        "tok-123456",
        "/proc/1/environ holds the environment"
    );
    assert_eq!(get("file"), "given");
    assert_eq!(get("seed"), "seeded");
    assert_eq!(
        std::fs::read_to_string(scope.join("written")).unwrap(),
        "hi\n"
    );
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(scope.join("written")).unwrap()),
        e.uid
    );
    assert_eq!(
        std::fs::read_to_string(ro.join("data")).unwrap(),
        "original"
    );
    assert!(e.containers(&n).is_empty(), "--rm");
    assert!(!e.instance_dir(&n).exists(), "instance folder removed");
}

fn host_server() -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            match l.accept() {
                Ok((mut s, _)) => {
                    let _ = s.write_all(b"pong-from-host\n");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (port, h)
}

fn network_none_has_only_loopback_and_open_reaches_the_host(e: &Env) {
    let (port, _server) = host_server();
    let scope = e.tempdir("net");
    let probe = format!(
        "echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '); \
         echo reply=$(nc -w 3 10.0.2.2 {port} </dev/null 2>/dev/null); \
         echo byname=$(nc -w 3 host.containers.internal {port} </dev/null 2>/dev/null)"
    );
    let n = name("none");
    let o = run(&mut e.launch(&spec(&n, &scope, &["sh", "-c", &probe]), &[]));
    let v = kv(&text(&o.stdout));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(v["ifaces"].trim(), "lo", "none: only loopback");
    assert_eq!(v["reply"], "", "none: no egress");
    let n = name("open");
    let mut s = spec(&n, &scope, &["sh", "-c", &probe]);
    s["network"] = json!({"mode": "open"});
    let o = run(&mut e.launch(&s, &[]));
    let v = kv(&text(&o.stdout));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(
        v["reply"], "pong-from-host",
        "open reaches a loopback server on the host: {v:?}"
    );
    assert_eq!(v["byname"], "pong-from-host", "as host.containers.internal");
}

fn stdio_round_trips_a_1mib_ndjson_line_and_the_exit_code(e: &Env) {
    let n = name("stdio");
    let scope = e.tempdir("stdio");
    let mut child = e
        .launch(&spec(&n, &scope, &["sh", "-c", "cat; exit 3"]), &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let payload = "x".repeat(1024 * 1024 - 64);
    let line = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"big\",\"params\":\"{payload}\"}}\n");
    assert!(line.len() >= 1024 * 1024 - 20);
    let mut stdin = child.stdin.take().unwrap();
    let l2 = line.clone();
    let w = std::thread::spawn(move || {
        stdin.write_all(l2.as_bytes()).unwrap();
    });
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    w.join().unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(3), "the process's exit code");
    assert_eq!(out.len(), line.len());
    assert!(out == line.as_bytes(), "the line came back changed");
}

fn spawn_sleeper(e: &Env, n: &str, scope: &Path) -> Sleeper {
    Sleeper(
        e.launch(&spec(n, scope, &["sleep", "300"]), &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// A launcher running `sleep 300`; a case that panics before it ends it still does: dropped
/// while running, it gets SIGTERM (its own cleanup, as A says) and is waited for.
struct Sleeper(Child);

impl std::ops::Deref for Sleeper {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Sleeper {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status();
            let _ = self.0.wait();
        }
    }
}

fn kill(pid: u32, sig: &str) {
    assert!(
        Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

fn sigterm_removes_everything_the_launcher_created(e: &Env) {
    let n = name("sigterm");
    let scope = e.tempdir("sigterm");
    let mut child = spawn_sleeper(e, &n, &scope);
    e.wait_running(&n);
    assert!(e.instance_dir(&n).exists());
    kill(child.id(), "TERM");
    let st = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(st.code(), Some(143), "{err}");
    assert!(e.containers(&n).is_empty(), "a container left behind");
    let f = format!("label=handler.sandbox={n}");
    for kind in ["network", "volume"] {
        let o = e.cli(&[kind, "ls", "-q", "--filter", &f]);
        assert!(text(&o.stdout).trim().is_empty(), "a {kind} left behind");
    }
    assert!(
        !e.instance_dir(&n).exists(),
        "the instance folder left behind"
    );
}

/// The pid of launcher `pid`'s watchdog (`handler-sandbox-podman watchdog --pid PID …`).
fn watchdog_of(pid: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let is_it = args.iter().any(|a| *a == b"watchdog")
                && args
                    .windows(2)
                    .any(|w| w[0] == b"--pid" && w[1] == pid.to_string().as_bytes());
            if is_it {
                return e.file_name().to_str()?.parse().ok();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn sweep_removes_a_dead_launchers_leftovers_and_spares_a_live_one(e: &Env) {
    let (dead, live) = (name("sweep-dead"), name("sweep-live"));
    let scope = e.tempdir("sweep");
    let mut a = spawn_sleeper(e, &dead, &scope);
    let mut b = spawn_sleeper(e, &live, &scope);
    e.wait_running(&dead);
    e.wait_running(&live);
    // A launcher dead with its watchdog (which otherwise cleans up at once, decision 0038):
    // its folder stays; its podman dies with it (and its sandbox with podman), so the container
    // a dead launcher leaves (e.g. one killed with its whole tree) is made here, with its labels.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", a.id())).unwrap();
    let start = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    let watchdog = watchdog_of(a.id()).expect("the launcher's watchdog");
    kill(watchdog, "KILL");
    kill(a.id(), "KILL");
    a.wait().unwrap();
    let wait = if e.rt == Runtime::Docker { 2 } else { 10 };
    let deadline = Instant::now() + Duration::from_secs(wait);
    while !e.containers(&dead).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    // Docker: the daemon keeps a container whose client died, so the dead launcher's own
    // container is still there, with its labels: that is the leftover.
    let kept = e.rt == Runtime::Docker && e.containers(&dead).len() == 1;
    let left = if kept {
        e.cli(&["inspect", "--format", "{{.Name}}", &dead])
    } else {
        e.cli(&[
            "run",
            "-d",
            "--name",
            &dead,
            "--label",
            &format!("handler.sandbox={dead}"),
            "--label",
            &format!("handler.launcher.pid={}", a.id()),
            "--label",
            &format!("handler.launcher.start={start}"),
            "--label",
            &format!("handler.launcher.boot={}", boot.trim()),
            IMAGE,
            "sleep",
            "300",
        ])
    };
    assert!(left.status.success(), "{}", text(&left.stderr));
    assert_eq!(
        e.containers(&dead).len(),
        1,
        "the dead launcher's container"
    );
    assert!(e.instance_dir(&dead).exists());
    let o = run(&mut e.bin(&["sweep"]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).expect("sweep prints JSON");
    assert!(
        report["containers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == dead.as_str()),
        "{report}"
    );
    assert!(
        e.containers(&dead).is_empty(),
        "sweep removed the dead launcher's container"
    );
    assert!(!e.instance_dir(&dead).exists());
    assert_eq!(
        e.containers(&live).len(),
        1,
        "a live launcher's sandbox survives sweep"
    );
    assert!(e.instance_dir(&live).exists());
    kill(b.id(), "TERM");
    assert_eq!(b.wait().unwrap().code(), Some(143));
    assert!(e.containers(&live).is_empty());
}

fn tty_launch_waits_for_attach_and_exits_with_its_code(e: &Env) {
    let n = name("tty");
    let scope = e.tempdir("tty");
    let mut s = spec(
        &n,
        &scope,
        &[
            "sh",
            "-c",
            // The pause: podman 4.3's `start --attach` can miss what a process writes in its
            // first instant when the machine is loaded (seen once in CI with every container
            // test of the crate in one binary); the test is about the tty and the exit code.
            "sleep 1; test -t 0 && test -t 1 && echo on-a-tty; exit 7",
        ],
    );
    s["tty"] = json!(true);
    let mut launch = e
        .launch(&s, &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(launch.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "launch ended before handler-ready"
        );
        if line.trim() == "handler-ready" {
            break;
        }
    }
    // attach on a terminal of its own: `script` gives it a pty.
    let attach = format!("{} attach {n}", e.bin.display());
    let o = run(&mut e.as_user("script", &["-qefc", &attach, "/dev/null"], &[]));
    assert_eq!(
        o.status.code(),
        Some(7),
        "attach exits with the process's code: {}",
        text(&o.stdout)
    );
    assert!(text(&o.stdout).contains("on-a-tty"), "{}", text(&o.stdout));
    let st = launch.wait().unwrap();
    assert_eq!(st.code(), Some(7));
    let mut out = Vec::new();
    launch.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(
        out.is_empty(),
        "launch's stdout is not the process's in tty mode"
    );
    assert!(e.containers(&n).is_empty(), "launch cleans up after attach");
    // Nobody attaches: 66 and nothing left.
    let n2 = name("tty-late");
    let mut s2 = spec(&n2, &scope, &["true"]);
    s2["tty"] = json!(true);
    let o = run(&mut e.launch(&s2, &[("HANDLER_SANDBOX_ATTACH_TIMEOUT", "1")]));
    assert_eq!(o.status.code(), Some(66), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("handler-ready"));
    assert!(e.containers(&n2).is_empty());
}

fn display_gives_only_its_wayland_socket(e: &Env) {
    let scope = e.tempdir("display");
    let run_dir = e.tempdir("xdg");
    let socket = run_dir.join("wayland-1");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    e.give(&socket);
    let _x11 = std::os::unix::net::UnixListener::bind(run_dir.join("X0")).unwrap();
    std::fs::write(run_dir.join("other-file"), "private").unwrap();
    let probe = format!(
        "echo wd=$WAYLAND_DISPLAY; echo xdg=$XDG_RUNTIME_DIR; echo display=${{DISPLAY-unset}}; \
         test -S \"$XDG_RUNTIME_DIR/$WAYLAND_DISPLAY\" && echo socket=yes; echo ls=$(ls -A $XDG_RUNTIME_DIR 2>/dev/null); \
         test -e {rd} || echo host_dir_invisible=yes",
        rd = run_dir.display()
    );
    // The caller's own display variables (its XDG_RUNTIME_DIR is podman's too: one that podman
    // already uses for this user, so its state stays where it is).
    let xdg = format!("/tmp/podman-run-{}", e.uid);
    let mut caller_env = vec![("DISPLAY", ":0"), ("WAYLAND_DISPLAY", "wayland-9")];
    if Path::new(&xdg).is_dir() {
        caller_env.push(("XDG_RUNTIME_DIR", xdg.as_str()));
    }
    let n = name("display");
    let mut s = spec(&n, &scope, &["sh", "-c", &probe]);
    s["display"] = json!({"mode": "wayland", "socket": socket});
    let o = run(&mut e.launch(&s, &caller_env));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v = kv(&text(&o.stdout));
    assert_eq!(v["wd"], "wayland-0");
    assert_eq!(v["xdg"], format!("/run/user/{}", e.uid));
    assert_eq!(v["display"], "unset");
    assert_eq!(v["socket"], "yes");
    assert_eq!(
        v["ls"], "wayland-0",
        "only that socket in the runtime folder"
    );
    assert_eq!(v["host_dir_invisible"], "yes");
    // Without a display: none of the variables, even when the caller has them.
    let n = name("nodisplay");
    let o = run(&mut e.launch(&spec(&n, &scope, &["sh", "-c", "env"]), &caller_env));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    for var in ["DISPLAY=", "WAYLAND_DISPLAY=", "XDG_RUNTIME_DIR="] {
        assert!(
            !out.lines().any(|l| l.starts_with(var)),
            "{var} leaked:\n{out}"
        );
    }
}

fn image_verbs_on_a_from_scratch_image(e: &Env) {
    let ctx = e.tempdir("imgctx");
    let stage_label = format!("hst-stage-{}", std::process::id());
    std::fs::write(ctx.join("hello.txt"), "hello from scratch\n").unwrap();
    std::fs::create_dir(ctx.join("dir")).unwrap();
    std::fs::write(ctx.join("dir/inner"), "x").unwrap();
    std::fs::write(
        ctx.join("Containerfile"),
        format!(
            "FROM scratch AS stage1\nLABEL handler.test.stage={stage_label}\nCOPY hello.txt /hello.txt\n\
             FROM scratch\nARG GREETING\nLABEL greeting=$GREETING\nCOPY --from=stage1 /hello.txt /hello.txt\nCOPY dir /dir\n"
        ),
    )
    .unwrap();
    for p in ["hello.txt", "dir", "dir/inner", "Containerfile"] {
        e.give(&ctx.join(p));
    }
    let tag1 = format!("localhost/hst-img-{}:1", std::process::id());
    let tag2 = format!("localhost/hst-img-{}:2", std::process::id());
    let o = run(&mut e.bin(&[
        "image",
        "build",
        "--tag",
        &tag1,
        "--build-arg",
        "GREETING=hi-there",
        "--no-intermediate",
        ctx.to_str().unwrap(),
    ]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let id = text(&o.stdout).trim().to_string();
    assert_eq!(id.len(), 64, "stdout is the image id: {id:?}");
    assert!(!text(&o.stderr).is_empty(), "build progress goes to stderr");
    let o = e.cli(&[
        "images",
        "-a",
        "-q",
        "--filter",
        &format!("label=handler.test.stage={stage_label}"),
    ]);
    assert!(
        text(&o.stdout).trim().is_empty(),
        "--no-intermediate kept an intermediate image: {}",
        text(&o.stdout)
    );

    let o = run(&mut e.bin(&["image", "read", &tag1, "/hello.txt"]));
    assert_eq!(
        (o.status.code(), text(&o.stdout).as_str()),
        (Some(0), "hello from scratch\n")
    );
    let o = run(&mut e.bin(&["image", "read", &tag1, "/dir"]));
    assert_eq!(o.status.code(), Some(1), "read refuses a folder");
    assert!(text(&o.stderr).contains("folder"), "{}", text(&o.stderr));
    let o = run(&mut e.bin(&["image", "read", &tag1, "/nope"]));
    assert_eq!(o.status.code(), Some(1));

    let o = run(&mut e.bin(&["image", "inspect", &tag1]));
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["labels"]["greeting"], "hi-there",
        "the build argument reached the build"
    );
    assert_eq!(v["id"], id.as_str());

    assert_eq!(
        run(&mut e.bin(&["image", "tag", &tag1, &tag2]))
            .status
            .code(),
        Some(0)
    );
    let o = run(&mut e.bin(&[
        "image",
        "list",
        &format!("localhost/hst-img-{}", std::process::id()),
    ]));
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| i["names"].as_array().cloned().unwrap_or_default())
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&tag1) && names.contains(&tag2), "{names:?}");

    // An image mounted by a running sandbox cannot be removed.
    let n = name("imgmount");
    let scope = e.tempdir("imgmount");
    let mut s = spec(
        &n,
        &scope,
        &["sh", "-c", "cat /opt/img/hello.txt; sleep 300"],
    );
    s["imageMounts"] = json!([{"image": tag1, "target": "/opt/img"}]);
    let mut child = e
        .launch(&s, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "hello from scratch\n", "the image mount is visible");
    let o = e.cli(&[
        "ps",
        "--filter",
        &format!("label=handler.image-mount.{id}"),
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(
        text(&o.stdout).trim(),
        n,
        "labelled with handler.image-mount.<id>"
    );
    let o = run(&mut e.bin(&["image", "remove", &tag2]));
    assert_eq!(
        o.status.code(),
        Some(1),
        "remove refuses an image a container mounts"
    );
    assert!(text(&o.stderr).contains(&n), "{}", text(&o.stderr));
    kill(child.id(), "TERM");
    child.wait().unwrap();
    assert_eq!(
        run(&mut e.bin(&["image", "remove", &tag2])).status.code(),
        Some(0)
    );
    assert_eq!(
        run(&mut e.bin(&["image", "remove", &tag1])).status.code(),
        Some(0)
    );
    assert_eq!(
        run(&mut e.bin(&["image", "inspect", &tag1])).status.code(),
        Some(1)
    );
}

fn cache_size_and_clear_count_inner_ids_and_refuse_a_mounted_folder(e: &Env) {
    let root = e.tempdir("cache");
    let cache = root.join("cargo");
    std::fs::create_dir(&cache).unwrap();
    e.give(&cache);
    let c = cache.to_str().unwrap();
    // Files owned by an inner id (a subordinate id on the host), unreadable to the host user.
    let script = format!(
        "mkdir -p {c}/inner && head -c 200000 /dev/zero > {c}/inner/blob && chown -R 100:100 {c}/inner && chmod 700 {c}/inner"
    );
    let o = match e.rt {
        Runtime::Podman => e.cli(&["unshare", "sh", "-c", &script]),
        // Docker: a container of the rootless daemon writes them (its uid 100 is subordinate).
        Runtime::Docker => e.cli(&[
            "run",
            "--rm",
            "--mount",
            &format!("type=bind,source={c},destination={c}"),
            IMAGE,
            "sh",
            "-c",
            &script,
        ]),
    };
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&mut e.as_user("ls", &[&format!("{c}/inner")], &[]));
    assert!(
        !o.status.success(),
        "the host user cannot read the inner id's folder"
    );
    let o = run(&mut e.bin(&["cache", "size", c]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["bytes"].as_u64().unwrap() >= 200000, "{v}");

    // Refused while a sandbox mounts the folder (or one inside it).
    let n = name("cachemount");
    let scope = e.tempdir("cachescope");
    let mut s = spec(&n, &scope, &["sleep", "300"]);
    s["mounts"].as_array_mut().unwrap().push(json!({"source": cache, "target": "/home/agent/.cargo", "readOnly": false, "kind": "cache"}));
    let mut child = e
        .launch(&s, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    e.wait_running(&n);
    let o = run(&mut e.bin(&["cache", "clear", c]));
    assert_eq!(o.status.code(), Some(1), "clear refused while mounted");
    assert!(text(&o.stderr).contains(&n), "{}", text(&o.stderr));
    let o = run(&mut e.bin(&["cache", "clear", root.to_str().unwrap()]));
    assert_eq!(
        o.status.code(),
        Some(1),
        "clear refused while a folder inside it is mounted"
    );
    kill(child.id(), "TERM");
    child.wait().unwrap();

    let o = run(&mut e.bin(&["cache", "clear", c]));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0, "emptied");
    assert!(cache.is_dir(), "the folder itself stays");
    let o = run(&mut e.bin(&["cache", "size", c]));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["bytes"].as_u64().unwrap() < 200000);
}

fn check_reports_a_usable_host(e: &Env) {
    let o = run(&mut e.bin(&["check"]));
    let v: Value = serde_json::from_slice(&o.stdout).expect("a RuntimeCheck on stdout");
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    assert_eq!(v["ok"], true);
    let runtime = v["runtime"].as_str().unwrap();
    assert!(
        runtime.starts_with(&format!("{} ", e.rt.cli())),
        "{runtime}"
    );
    let items = v["items"].as_array().unwrap();
    let names: &[&str] = match e.rt {
        Runtime::Podman => &[
            "podman",
            "rootless",
            "subuid",
            "subgid",
            "runtime",
            "keep-id",
            "/dev/net/tun",
            "/dev/fuse",
            "init",
        ],
        // Docker (decision 0080): the daemon rootless, this user not root; image mounts by the
        // volume fallback and gVisor are reported, not required.
        Runtime::Docker => {
            assert!(runtime.ends_with("(rootless)"), "{runtime}");
            for optional in ["image-mounts", "gvisor"] {
                assert!(
                    items
                        .iter()
                        .any(|i| i["name"] == optional && i["required"] == false)
                );
            }
            // Below API 1.48 (Docker 28) there is no `--mount type=image`: the volume fallback
            // is what check names (decision 0082), and what the image-mount case above used.
            let api = text(
                &e.cli(&["version", "--format", "{{.Server.APIVersion}}"])
                    .stdout,
            );
            let minor: u32 = api.trim().trim_start_matches("1.").parse().unwrap_or(0);
            let detail = items.iter().find(|i| i["name"] == "image-mounts").unwrap()["detail"]
                .as_str()
                .unwrap()
                .to_string();
            if api.trim().starts_with("1.") && minor < 48 {
                assert!(detail.contains("volumes filled from the image"), "{detail}");
            } else {
                eprintln!("docker API {}: image mounts: {detail}", api.trim());
            }
            &["docker", "rootless-daemon", "user"]
        }
    };
    for name in names.iter().copied() {
        let it = items
            .iter()
            .find(|i| i["name"] == name)
            .unwrap_or_else(|| panic!("no item {name}"));
        assert_eq!(it["ok"], true, "{it}");
    }
}

/// `git` on the host as the test user in `dir`, its failure ignored (what a person runs in a
/// repository the sandbox may have broken).
fn host_git_try(e: &Env, dir: &Path, args: &[&str]) {
    let mut all = vec!["-C", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let _ = e.as_user("git", &all, &[]).stdin(Stdio::null()).output();
}

/// `git` on the host as the test user in `dir`, asserted to succeed; its stdout.
fn host_git(e: &Env, dir: &Path, args: &[&str]) -> String {
    let mut all = vec![
        "-C",
        dir.to_str().unwrap(),
        "-c",
        "user.name=Test",
        "-c",
        "user.email=test@example.invalid",
        "-c",
        "init.defaultBranch=main",
    ];
    all.extend_from_slice(args);
    let o = e
        .as_user("git", &all, &[])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// Every file under `dir` with its content (links as `-> target`), for before/after comparisons.
fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let key = p.strip_prefix(dir).unwrap().display().to_string();
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(key, format!("-> {}", t.display()).into_bytes());
            } else if m.is_dir() {
                out.insert(key, b"<dir>".to_vec());
                stack.push(p);
            } else {
                out.insert(key, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The paths that differ between two [`tree`]s, none expected.
fn assert_same_tree(
    before: &std::collections::BTreeMap<String, Vec<u8>>,
    after: &std::collections::BTreeMap<String, Vec<u8>>,
) {
    let changed: Vec<&String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(changed.is_empty(), "the host's .git changed: {changed:?}");
}

/// What an agent tries in its scope to get the host's git to run something: a hook, a
/// `core.fsmonitor` and a hooks path in the config, a ref, and replacing or moving `.git`
/// itself. `CANARY` is the file a successful attack creates on the host.
fn git_attack(canary: &Path) -> String {
    format!(
        r#"hook='#!/bin/sh
touch {canary}'
printf '%s\n' "$hook" > .git/hooks/post-checkout 2>/dev/null && chmod +x .git/hooks/post-checkout && echo hook=written
printf '[core]\n\tfsmonitor = "touch {canary}; false"\n\thooksPath = evil-hooks\n' >> .git/config 2>/dev/null && echo config=written
mkdir -p evil-hooks && printf '%s\n' "$hook" > evil-hooks/post-checkout && chmod +x evil-hooks/post-checkout
echo 0000000000000000000000000000000000000000 > .git/refs/heads/evil 2>/dev/null && echo ref=written
ln -s /tmp .git/refs/heads/link 2>/dev/null && echo reflink=written
mv .git .git-moved 2>/dev/null && echo moved=yes && mv .git-moved .git
rmdir .git/refs/tags 2>/dev/null && echo removed=yes
echo done > work.txt && echo scope_writable=yes
"#,
        canary = canary.display()
    )
}

/// Issue 11, item 5: a sandbox whose scope is a git repository cannot change anything of its
/// `.git` (hooks, config, refs), so the person's next `git checkout` on the host runs nothing
/// the agent planted; the working tree stays writable.
fn the_scopes_git_directory_is_read_only_in_the_sandbox(e: &Env) {
    let n = name("git");
    let root = e.tempdir("git");
    let scope = root.join("repo");
    std::fs::create_dir(&scope).unwrap();
    e.give(&scope);
    let canary = root.join("canary");
    host_git(e, &scope, &["init", "-q"]);
    std::fs::write(scope.join("a.txt"), "a\n").unwrap();
    e.give(&scope.join("a.txt"));
    host_git(e, &scope, &["add", "a.txt"]);
    host_git(e, &scope, &["commit", "-q", "-m", "one"]);
    host_git(e, &scope, &["branch", "other"]);
    let before = tree(&scope.join(".git"));

    let s = spec(&n, &scope, &["sh", "-c", &git_attack(&canary)]);
    let o = run(&mut e.launch(&s, &[]));
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    let after = tree(&scope.join(".git"));
    // The person's next checkouts and status run nothing.
    if scope.join(".git").exists() {
        host_git(e, &scope, &["checkout", "-q", "other"]);
        host_git(e, &scope, &["checkout", "-q", "main"]);
        host_git(e, &scope, &["status", "--short"]);
    }
    assert!(
        !canary.exists(),
        "the host's git ran what the sandbox planted:\n{out}"
    );
    assert_eq!(
        kv(&out).get("scope_writable").map(String::as_str),
        Some("yes"),
        "{out}"
    );
    for k in ["hook", "config", "ref", "reflink", "moved", "removed"] {
        assert!(!kv(&out).contains_key(k), "{k}: {out}");
    }
    assert_same_tree(&before, &after);
    assert!(e.containers(&n).is_empty());
}

/// Issue 11, item 5, a worktree: its `.git` file is read-only (else the sandbox points it at a
/// git directory of its own making, with hooks), and a scope holding the main repository keeps
/// its common directory (where the worktrees' hooks and config live) read-only too.
fn a_worktrees_git_file_and_common_dir_are_read_only_in_the_sandbox(e: &Env) {
    let root = e.tempdir("gitwt");
    let main = root.join("main");
    std::fs::create_dir(&main).unwrap();
    e.give(&main);
    let canary = root.join("canary");
    host_git(e, &main, &["init", "-q"]);
    std::fs::write(main.join("a.txt"), "a\n").unwrap();
    e.give(&main.join("a.txt"));
    host_git(e, &main, &["add", "a.txt"]);
    host_git(e, &main, &["commit", "-q", "-m", "one"]);
    let wt = root.join("wt");
    host_git(
        e,
        &main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feature",
            wt.to_str().unwrap(),
        ],
    );
    // The scope is the worktree; the sandbox redirects its .git file to a git directory it makes.
    let n = name("gitwt");
    let fake = wt.join("evil-gitdir");
    let attack = format!(
        r#"mkdir -p {fake}/hooks {fake}/objects {fake}/refs/heads; echo 'ref: refs/heads/feature' > {fake}/HEAD
printf '#!/bin/sh\ntouch {canary}\n' > {fake}/hooks/post-checkout; chmod +x {fake}/hooks/post-checkout
printf '[core]\n\tfsmonitor = "touch {canary}; false"\n' > {fake}/config
echo 'gitdir: {fake}' > .git 2>/dev/null && echo gitfile=written
echo done > work.txt && echo scope_writable=yes
"#,
        fake = fake.display(),
        canary = canary.display()
    );
    let gitfile = std::fs::read(wt.join(".git")).unwrap();
    let o = run(&mut e.launch(&spec(&n, &wt, &["sh", "-c", &attack]), &[]));
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    host_git_try(e, &wt, &["status", "--short"]);
    host_git_try(e, &wt, &["checkout", "-q", "-b", "next"]);
    assert!(
        !canary.exists(),
        "the host's git ran a hook of the sandbox's git directory:\n{out}"
    );
    host_git(e, &wt, &["checkout", "-q", "feature"]);
    assert_eq!(
        kv(&out).get("scope_writable").map(String::as_str),
        Some("yes"),
        "{out}"
    );
    assert!(!kv(&out).contains_key("gitfile"), "{out}");
    assert_eq!(std::fs::read(wt.join(".git")).unwrap(), gitfile);

    // A scope holding the main repository and its worktree: both git directories read-only.
    let n = name("gitwt2");
    let before = tree(&main.join(".git"));
    let attack = format!(
        r"cd {main} && {a}
cd {wt} && echo 'gitdir: {fake}' > .git 2>/dev/null && echo gitfile=written
echo x > {main}/.git/worktrees/wt/HEAD 2>/dev/null && echo wthead=written
true
",
        main = main.display(),
        wt = wt.display(),
        fake = fake.display(),
        a = git_attack(&canary)
    );
    let o = run(&mut e.launch(&spec(&n, &root, &["sh", "-c", &attack]), &[]));
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    for k in [
        "hook", "config", "ref", "moved", "removed", "gitfile", "wthead",
    ] {
        assert!(!kv(&out).contains_key(k), "{k}: {out}");
    }
    assert_same_tree(&before, &tree(&main.join(".git")));
    assert_eq!(std::fs::read(wt.join(".git")).unwrap(), gitfile);
    host_git(e, &main, &["checkout", "-q", "-b", "again"]);
    host_git(e, &wt, &["checkout", "-q", "next"]);
    assert!(
        !canary.exists(),
        "the host's git ran what the sandbox planted"
    );
}

/// Issue 11, item 5: a `.git` that is a symbolic link in the scope (planted in an earlier
/// session, say) is refused (64) before anything starts: the sandbox could point it anywhere.
fn a_git_link_in_the_scope_is_refused(e: &Env) {
    let n = name("gitlink");
    let root = e.tempdir("gitlink");
    let real = root.join("real");
    std::fs::create_dir(&real).unwrap();
    e.give(&real);
    host_git(e, &real, &["init", "-q"]);
    let scope = root.join("scope");
    std::fs::create_dir(&scope).unwrap();
    e.give(&scope);
    std::os::unix::fs::symlink(real.join(".git"), scope.join(".git")).unwrap();
    let o = run(&mut e.launch(&spec(&n, &scope, &["sh", "-c", "echo started"]), &[]));
    assert_eq!(o.status.code(), Some(64), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
    assert!(
        text(&o.stderr).contains("symbolic link"),
        "{}",
        text(&o.stderr)
    );
}

/// A2 whatever containers.conf says: a `[containers] volumes` in the file podman reads (here
/// through CONTAINERS_CONF, and as a drop-in of the user's containers.conf.d) refuses the
/// launch (64) naming the file and the setting, before anything starts; the test user's own
/// containers.conf (`runtime = "runc"`) keeps working (every other test).
fn a_containers_conf_that_adds_a_volume_is_refused(e: &Env) {
    let n = name("conf");
    let root = e.tempdir("conf");
    let scope = root.join("scope");
    std::fs::create_dir(&scope).unwrap();
    e.give(&scope);
    let user_conf =
        std::fs::read_to_string(format!("{}/.config/containers/containers.conf", e.home))
            .unwrap_or_default();
    let conf = root.join("containers.conf");
    std::fs::write(
        &conf,
        format!("[containers]\nvolumes = [\"/etc/hostname:/leaked:ro\"]\n{user_conf}"),
    )
    .unwrap();
    e.give(&conf);
    let s = spec(&n, &scope, &["sh", "-c", "echo started; cat /leaked"]);
    let o = run(&mut e.launch(&s, &[("CONTAINERS_CONF", conf.to_str().unwrap())]));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(64), "{}{err}", text(&o.stdout));
    assert!(
        o.stdout.is_empty(),
        "the process started: {}",
        text(&o.stdout)
    );
    assert!(
        err.contains(conf.to_str().unwrap()) && err.contains("volumes"),
        "{err}"
    );

    // The same as a drop-in beside the user's own containers.conf (and storage.conf).
    let xdg = root.join("xdg");
    let dropins = xdg.join("containers/containers.conf.d");
    std::fs::create_dir_all(&dropins).unwrap();
    for f in ["containers.conf", "storage.conf"] {
        let _ = std::fs::copy(
            format!("{}/.config/containers/{f}", e.home),
            xdg.join("containers").join(f),
        );
    }
    std::fs::write(
        dropins.join("50-leak.conf"),
        "[containers]\nvolumes = [\"/etc/hostname:/leaked:ro\"]\n",
    )
    .unwrap();
    for p in [
        &xdg,
        &xdg.join("containers"),
        &dropins,
        &dropins.join("50-leak.conf"),
    ] {
        e.give(p);
    }
    let xdg_s = xdg.to_str().unwrap();
    let o = run(&mut e.launch(&s, &[("XDG_CONFIG_HOME", xdg_s)]));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(64), "{}{err}", text(&o.stdout));
    assert!(
        err.contains("50-leak.conf") && err.contains("volumes"),
        "{err}"
    );
    // Without the drop-in the same folder works (runc from the copied containers.conf).
    std::fs::remove_file(dropins.join("50-leak.conf")).unwrap();
    let o = run(&mut e.launch(
        &spec(&n, &scope, &["sh", "-c", "echo started"]),
        &[("XDG_CONFIG_HOME", xdg_s)],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "started\n");
}

/// The sandbox has a process limit: a fork loop stops there (here the launcher's own hard
/// RLIMIT_NPROC, 400, lowers the default 4096), the sandbox's other processes go on.
fn a_fork_loop_stops_at_the_process_limit(e: &Env) {
    // RLIMIT_NPROC counts every process of the user (both runtimes' sandboxes run as it): the
    // Podman and the Docker case at once would share the 400, so they take turns.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = name("pids");
    let scope = e.tempdir("pids");
    // The loop's shell dies when a fork fails; its count survives in the scope.
    let script =
        "(i=0; while [ $i -lt 1000 ]; do sleep 20 & i=$((i+1)); echo $i > count; done) 2>/dev/null
kill -9 -1; wait
# The killed sleeps are the init's children: until it reaps them they still count against the
# user's limit. Wait (without forking: a glob) until this sandbox has only a few processes left.
t=0; while set -- /proc/[0-9]*; [ $# -gt 6 ] && [ $t -lt 500000 ]; do t=$((t+1)); done
read n < count; echo started=$n
grep 'Max processes' /proc/self/limits | tr -s ' ' | sed 's/^/limit=/'; echo alive=yes";
    let spec_v = spec(&n, &scope, &["sh", "-c", script]);
    let file = e.tempdir("pids-spec").join("spec.json");
    std::fs::write(&file, serde_json::to_vec(&spec_v).unwrap()).unwrap();
    e.give(&file);
    let o = run(&mut e.as_user(
        "sh",
        &[
            "-c",
            "exec prlimit --nproc=400:400 \"$0\" launch 3<\"$1\"",
            e.bin.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
        &[],
    ));
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{}", text(&o.stderr));
    let v = kv(&out);
    let started: u32 = v
        .get("started")
        .unwrap_or_else(|| panic!("{out}"))
        .parse()
        .unwrap();
    assert!(
        started < 400,
        "{started} processes started: no limit\n{out}"
    );
    assert!(
        v.get("limit").is_some_and(|l| l.contains("400 400")),
        "{out}"
    );
    assert_eq!(v.get("alive").map(String::as_str), Some("yes"), "{out}");
    // Launched with the test user's own limit, the sandbox's is the default.
    let o = run(&mut e.launch(
        &spec(
            &n,
            &scope,
            &[
                "sh",
                "-c",
                "grep 'Max processes' /proc/self/limits | tr -s ' '",
            ],
        ),
        &[],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("Max processes 4096 4096"),
        "{}",
        text(&o.stdout)
    );
}

/// Every process's argv (`/proc/*/cmdline`), each as one space-joined line.
fn all_argvs() -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline"))
            && !c.is_empty()
        {
            out.push(String::from_utf8_lossy(&c).replace('\0', " "));
        }
    }
    out
}

/// Values by name (issue 19, item 3): during a whole launch — the launcher's own calls to the
/// engine, the engine's CLI running the sandbox, its daemon's helpers — no process on the
/// machine has the env value in its argv (`ps` sees argv), while the engine's CLI names the
/// variable and the process inside reads the value.
fn no_secret_in_any_process_argv_during_a_launch(e: &Env) {
    let n = name("argv");
    let scope = e.tempdir("argv");
    let secret = format!("hst-argv-secret-{}-{}", std::process::id(), e.rt.cli());
    let mut s = spec(
        &n,
        &scope,
        &["sh", "-c", "echo got=$HST_SECRET_VALUE; sleep 300"],
    );
    s["env"] = json!({"HST_SECRET_VALUE": secret});
    let mut child = e
        .launch(&s, &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut first = String::new();
        let _ = BufReader::new(out).read_line(&mut first);
        let _ = tx.send(first);
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut named = false;
    let first = loop {
        for argv in all_argvs() {
            assert!(
                !argv.contains(&secret),
                "a secret in a process's argv: {argv}"
            );
            named |= argv.starts_with(e.rt.cli()) && argv.contains(" HST_SECRET_VALUE ");
        }
        if let Ok(l) = rx.try_recv() {
            break l;
        }
        assert!(Instant::now() < deadline, "the sandbox never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    // A little longer: the running sandbox's processes, the engine's helpers.
    for _ in 0..20 {
        for argv in all_argvs() {
            assert!(
                !argv.contains(&secret),
                "a secret in a process's argv: {argv}"
            );
            named |= argv.starts_with(e.rt.cli()) && argv.contains(" HST_SECRET_VALUE ");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(
        first.trim(),
        format!("got={secret}"),
        "the process reads the value"
    );
    assert!(named, "the engine's CLI is given the variable by name");
    kill(child.id(), "TERM");
    child.wait().unwrap();
    assert!(e.containers(&n).is_empty());
}

/// The image of [`nested_confinement_runs_podman_inside`] (.ci/setup-podman.sh).
const NESTED_IMAGE: &str = "localhost/handler-test-nested:latest";

/// A.5 nested, run for real (issue 33 item 6; the seed says it was verified by hand): in a
/// `nested` sandbox whose image has podman (busybox with this host's podman, runc, conmon and
/// newuidmap/newgidmap with file capabilities, as the default toolbox has them), `podman load`
/// and `podman run` work as the sandbox's user: the inner container runs as its own root, on the
/// subordinate ids the runtime gives the sandbox, and nothing of it outlives the launch. The
/// inner image comes as an archive in the scope (the sandbox has no network). Docker refuses
/// nested before anything starts (64, naming the setting); a host without /dev/fuse or
/// /dev/net/tun makes Podman refuse it the same way, and the case then says why it stops there.
fn nested_confinement_runs_podman_inside(e: &Env) {
    let n = name("nested");
    let scope = e.tempdir("scope");
    let script = "podman load -q -i img.tar && podman run --rm localhost/handler-test-busybox:latest sh -c 'echo inner-uid=$(id -u)' && podman ps -aq | wc -l | sed 's/^ */left=/'";
    let mut s = spec(&n, &scope, &["sh", "-c", script]);
    s["confinement"] = json!("nested");
    s["image"] = json!(NESTED_IMAGE);
    if e.rt == Runtime::Docker {
        let o = run(&mut e.launch(&s, &[]));
        assert_eq!(o.status.code(), Some(64), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains("nested"), "{}", text(&o.stderr));
        assert!(o.stdout.is_empty() && e.containers(&n).is_empty());
        return;
    }
    let o = e.cli(&["save", "-o", scope.join("img.tar").to_str().unwrap(), IMAGE]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&mut e.launch(&s, &[]));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    if o.status.code() == Some(64) && err.contains("nested needs") {
        eprintln!("nested confinement is not offered on this host, so not run: {err}");
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.lines().any(|l| l == "inner-uid=0"), "{out}{err}");
    assert!(out.lines().any(|l| l == "left=0"), "{out}{err}");
    assert!(
        e.containers(&n).is_empty(),
        "the sandbox outlived its launch"
    );
}

/// The contract-A cases, each run against both runtime executables (issue 19). A case that does
/// not apply to one runtime is an ignored test there, with its reason (`cargo test` prints it),
/// never a silent pass.
macro_rules! conformance {
    ($( $case:ident $(, docker_skip = $why:literal)? ; )*) => {
        mod podman {
            $( #[test] fn $case() { super::with_env(super::Runtime::Podman, super::$case) } )*
        }
        mod docker {
            $(
                #[test]
                $(#[ignore = $why])?
                fn $case() { super::with_env(super::Runtime::Docker, super::$case) }
            )*
        }
        /// Every case, with the reason Docker skips it (if it does).
        const CASES: &[(&str, Option<&str>)] = &[$( (stringify!($case), conformance!(@why $($why)?)) ),*];
    };
    (@why) => { None };
    (@why $why:literal) => { Some($why) };
}

conformance! {
    invalid_spec_is_65_naming_the_field;
    unenforceable_spec_is_64_before_anything_starts;
    strict_sandbox_sees_only_its_mounts_as_the_host_user;
    network_none_has_only_loopback_and_open_reaches_the_host;
    stdio_round_trips_a_1mib_ndjson_line_and_the_exit_code;
    sigterm_removes_everything_the_launcher_created;
    sweep_removes_a_dead_launchers_leftovers_and_spares_a_live_one;
    tty_launch_waits_for_attach_and_exits_with_its_code;
    display_gives_only_its_wayland_socket;
    image_verbs_on_a_from_scratch_image;
    cache_size_and_clear_count_inner_ids_and_refuse_a_mounted_folder;
    check_reports_a_usable_host;
    the_scopes_git_directory_is_read_only_in_the_sandbox;
    a_worktrees_git_file_and_common_dir_are_read_only_in_the_sandbox;
    a_git_link_in_the_scope_is_refused;
    a_containers_conf_that_adds_a_volume_is_refused, docker_skip = "podman's containers.conf; Docker reads none (its daemon.json is the daemon owner's)";
    a_fork_loop_stops_at_the_process_limit;
    no_secret_in_any_process_argv_during_a_launch;
    nested_confinement_runs_podman_inside;
}

/// The count of cases per runtime, and Docker's skipped ones with their reasons.
#[test]
fn cases_per_runtime() {
    let skipped: Vec<&(&str, Option<&str>)> = CASES.iter().filter(|(_, w)| w.is_some()).collect();
    eprintln!(
        "contract-A conformance: podman {} cases, docker {} cases ({} skipped)",
        CASES.len(),
        CASES.len() - skipped.len(),
        skipped.len()
    );
    for (case, why) in &skipped {
        eprintln!("  docker skips {case}: {}", why.unwrap_or_default());
    }
    assert!(CASES.len() > 10 && skipped.len() < CASES.len() / 2);
}

/// Docker only (its image mounts are volumes, decision 0081): `sweep` removes an image volume
/// whose image is gone and keeps one whose image exists. Podman mounts images directly: no
/// such volumes.
#[test]
fn docker_sweep_removes_image_volumes_of_removed_images() {
    with_env(Runtime::Docker, |e| {
        let base_id = text(
            &e.cli(&["image", "inspect", "--format", "{{.Id}}", IMAGE])
                .stdout,
        )
        .trim()
        .trim_start_matches("sha256:")
        .to_string();
        assert!(!base_id.is_empty(), "the test image exists");
        let gone_id = "0".repeat(64);
        let (stale, kept) = (name("imgvol-stale"), name("imgvol-kept"));
        for (vol, id) in [(&stale, gone_id.as_str()), (&kept, base_id.as_str())] {
            let o = e.cli(&[
                "volume",
                "create",
                "--label",
                "handler.image-volume=1",
                "--label",
                &format!("handler.image-mount.{id}={IMAGE}"),
                vol,
            ]);
            assert!(o.status.success(), "{}", text(&o.stderr));
        }
        let o = run(&mut e.bin(&["sweep"]));
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let report: Value = serde_json::from_slice(&o.stdout).expect("sweep prints JSON");
        let removed = report["volumes"].as_array().unwrap();
        // Another test's sweep (a daemon sweeps at its start) may have taken the stale volume
        // first: then this report does not name it, but it is gone all the same (below).
        let by_this_one = removed.iter().any(|v| v == stale.as_str());
        assert!(
            by_this_one || !e.cli(&["volume", "inspect", &stale]).status.success(),
            "{report}"
        );
        assert!(!removed.iter().any(|v| v == kept.as_str()), "{report}");
        let exists = |v: &str| e.cli(&["volume", "inspect", v]).status.success();
        assert!(!exists(&stale), "the stale image volume is gone");
        assert!(exists(&kept), "a volume of an existing image is kept");
        let _ = e.cli(&["volume", "rm", &kept]);
    });
}
