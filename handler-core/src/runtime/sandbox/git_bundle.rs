//! `git-bundle` (issue 14): the git guard's bring-back. A short helper container of the
//! sandbox's image on the session's git directory and the host's objects (both read-only, no
//! network; `handler_sandbox::guard::helper_run_args`) writes a bundle of every branch on its
//! stdout, which is this verb's stdout: the host's git never opens the session's git directory.
//! Exit 0 with the bundle, [`NOTHING_NEW`] when every branch is known already, [`NO_GIT`] when the
//! image has no git, 1 otherwise (the reason on stderr).

use std::process::{Output, Stdio};

use handler_sandbox::plan::{DockerFacts, Engine};
use handler_sandbox::verbs::{Bundle, Copy, CopyAction, Follow};

use super::{docker, engine, log, podman};

/// Exit code: no branch holds a commit the host does not have (git refuses an empty bundle).
pub const NOTHING_NEW: i32 = 3;
/// Exit code: the image has no `git` to write the bundle with.
pub const NO_GIT: i32 = 4;

/// The engine's facts for a helper container (Docker: rootless or opted in).
fn docker_facts() -> Result<Option<DockerFacts>, podman::PodmanError> {
    match engine::current() {
        engine::Kind::Podman => Ok(None),
        engine::Kind::Docker => Ok(Some(DockerFacts {
            rootless: docker::daemon_rootless()?,
            allow_rootful: docker::rootful_allowed(),
            oci_runtime: None,
            filter_image_id: None,
            image_mounts: false,
        })),
    }
}

/// How long one helper container may run: a bundle, a reset or a merge of a large repository
/// takes seconds; one blocked on a FIFO the agent planted would run for ever (security F4).
const HELPER_TIME: std::time::Duration = std::time::Duration::from_secs(300);

/// A fresh helper container name of this runtime process.
fn helper_name() -> String {
    format!(
        "handler-git-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Runs the engine with `args` (a helper named `name`), its stdout to `stdout`: past
/// [`HELPER_TIME`] the container is removed by name and the run fails. Its stderr, bounded.
fn run_helper(args: &[String], name: &str, stdout: Stdio) -> Result<Output, String> {
    use std::io::Read;
    let mut child = podman::command(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", podman::program()))?;
    let mut err = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.take(1 << 20).read_to_end(&mut b);
        }
        b
    });
    let mut out = child.stdout.take();
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut b);
        }
        b
    });
    let deadline = std::time::Instant::now() + HELPER_TIME;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if std::time::Instant::now() >= deadline => {
                let rm: &[&str] = match engine::current() {
                    engine::Kind::Podman => &["rm", "-f", "--time", "0", name],
                    engine::Kind::Docker => &["rm", "-f", name],
                };
                let _ = podman::output(rm);
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the helper container {name} did not finish within {} s: removed",
                    HELPER_TIME.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    };
    Ok(Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: reader.join().unwrap_or_default(),
    })
}

fn ids() -> (u32, u32) {
    (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    )
}

/// Runs the helper container; its exit code as described above.
pub fn run(req: &Bundle) -> i32 {
    let facts = match docker_facts() {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string()),
    };
    let eng = facts.as_ref().map_or(Engine::Podman, Engine::Docker);
    let (name, me) = (helper_name(), super::host::launcher_self());
    let args = match handler_sandbox::guard::helper_run_args(
        eng,
        ids(),
        (&name, &me),
        &req.image,
        &req.git_dir,
        &req.objects,
        &req.known,
    ) {
        Ok(a) => a,
        Err(e) => return fail(&e.to_string()),
    };
    let out = match run_helper(&args, &name, Stdio::inherit()) {
        Ok(o) => o,
        Err(e) => return fail(&e),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => 0,
        _ if stderr.contains("Refusing to create empty bundle") => NOTHING_NEW,
        Some(126 | 127) => {
            log(&format!(
                "git-bundle: the image {} has no git: {}",
                req.image,
                stderr.trim()
            ));
            NO_GIT
        }
        _ => fail(stderr.trim()),
    }
}

fn fail(msg: &str) -> i32 {
    log(&format!("git-bundle: {msg}"));
    1
}

/// `git-follow` (issue 14, item 3): `update-ref` then `read-tree` in two helper containers on
/// the session's git directory. Exit 0, [`NO_GIT`], or 1 (the reason on stderr).
pub fn follow(req: &Follow) -> i32 {
    let facts = match docker_facts() {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string()),
    };
    let eng = facts.as_ref().map_or(Engine::Podman, Engine::Docker);
    let argvs = match handler_sandbox::guard::follow_argvs(&req.branch, &req.from, &req.to) {
        Ok(a) => a,
        Err(e) => return fail(&e.to_string()),
    };
    let me = super::host::launcher_self();
    for argv in argvs {
        let name = helper_name();
        let h = handler_sandbox::guard::Helper {
            image: &req.image,
            session_git: &req.git_dir,
            host_objects: &req.objects,
            git_dir_writable: true,
            name: &name,
            launcher: &me,
        };
        let args = match handler_sandbox::guard::helper_args(eng, ids(), &h, argv) {
            Ok(a) => a,
            Err(e) => return fail(&e.to_string()),
        };
        match run_helper(&args, &name, Stdio::piped()) {
            Ok(o) if o.status.success() => {}
            Ok(o) if matches!(o.status.code(), Some(126 | 127)) => return NO_GIT,
            Ok(o) => return fail(String::from_utf8_lossy(&o.stderr).trim()),
            Err(e) => return fail(&e),
        }
    }
    0
}

/// `git-copy` (decision 0103): one helper container on the checkout, mounted writable at the
/// guard's git path (its alternates name the host's objects, read-only there). Exit 0,
/// [`NO_GIT`], or 1 (the reason on stderr).
pub fn copy(req: &Copy) -> i32 {
    use handler_sandbox::{copytree, guard};
    let facts = match docker_facts() {
        Ok(f) => f,
        Err(e) => return fail(&e.to_string()),
    };
    let eng = facts.as_ref().map_or(Engine::Podman, Engine::Docker);
    let argv = match &req.action() {
        CopyAction::Reset(commit) => match guard::check_oid(commit) {
            Ok(c) => {
                let mut a = vec!["git".to_string()];
                a.extend(copytree::checkout_argvs(guard::SANDBOX_GIT_DIR, c).remove(0));
                a
            }
            Err(e) => return fail(&e.to_string()),
        },
        CopyAction::Follow(to) => match guard::check_oid(to) {
            Ok(c) => {
                let mut a = vec!["git".to_string()];
                a.extend(guard::host_git(&[
                    "-C",
                    guard::SANDBOX_GIT_DIR,
                    "merge",
                    "--quiet",
                    "--ff-only",
                    "--no-edit",
                    c,
                ]));
                a
            }
            Err(e) => return fail(&e.to_string()),
        },
        CopyAction::Uncommitted => vec![
            "sh".into(),
            "-c".into(),
            copytree::uncommitted_script(guard::SANDBOX_GIT_DIR),
        ],
    };
    let (name, me) = (helper_name(), super::host::launcher_self());
    let h = guard::Helper {
        image: &req.image,
        session_git: &req.tree,
        host_objects: &req.objects,
        git_dir_writable: true,
        name: &name,
        launcher: &me,
    };
    let args = match guard::helper_args(eng, ids(), &h, argv) {
        Ok(a) => a,
        Err(e) => return fail(&e.to_string()),
    };
    match run_helper(&args, &name, Stdio::piped()) {
        Ok(o) if o.status.success() => 0,
        Ok(o) if matches!(o.status.code(), Some(126 | 127)) => NO_GIT,
        Ok(o) => fail(&format!(
            "git-copy: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => fail(&e),
    }
}
