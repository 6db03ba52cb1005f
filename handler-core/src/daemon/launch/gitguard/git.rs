//! Running the host's git safely: the safety options first, no system or global
//! configuration, nothing of handlerd's `GIT_*` environment, stdin empty, in a child with a
//! time and a memory limit, its output bounded.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use handler_sandbox::guard::{self, RepoFacts};

use super::{GitGuardError, Result, io};

/// The address space a git child may take (packs are mapped).
const GIT_MEMORY: u64 = 4 << 30;
/// How long one git child may run.
const GIT_TIME: Duration = Duration::from_secs(120);
/// The most output kept of one git child.
const GIT_OUTPUT_MAX: u64 = 16 << 20;

/// Where host git runs: a folder of Handler's, or the person's repository — named by
/// `--git-dir`/`--work-tree`, never found by discovery (security F1).
#[derive(Clone, Copy)]
pub enum At<'a> {
    /// A folder (Handler's own git directories are named in the arguments).
    Dir(&'a Path),
    /// The host repository the guard read.
    Repo(&'a RepoFacts),
}

impl<'a> From<&'a Path> for At<'a> {
    fn from(p: &'a Path) -> Self {
        Self::Dir(p)
    }
}

impl<'a> From<&'a RepoFacts> for At<'a> {
    fn from(f: &'a RepoFacts) -> Self {
        Self::Repo(f)
    }
}

/// Runs host git at `at` with the safety options first, stdin empty, with no system or global
/// configuration (nothing the person's or an agent's settings could make it run), in a child
/// limited to `GIT_MEMORY` of address space and `GIT_TIME`; its stdout.
pub fn git<'a>(at: impl Into<At<'a>>, args: &[&str], env: &[(&str, &str)]) -> Result<String> {
    git_with(at, args, env, false)
}

/// [`git`], reading the person's global configuration when `global` (only `config --get`).
pub(super) fn git_with<'a>(
    at: impl Into<At<'a>>,
    args: &[&str],
    env: &[(&str, &str)],
    global: bool,
) -> Result<String> {
    let out = git_run(at.into(), args, env, global)?;
    if out.0.success() {
        Ok(String::from_utf8_lossy(&out.1).into_owned())
    } else {
        Err(GitGuardError::Git {
            args: args.join(" "),
            status: out.0.to_string(),
            stderr: out.2,
        })
    }
}

/// [`git`]'s exit status, stdout and stderr (bounded), whatever the status.
pub(super) fn git_output<'a>(
    at: impl Into<At<'a>>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(std::process::ExitStatus, Vec<u8>, String)> {
    git_run(at.into(), args, env, false)
}

fn git_run(
    at: At<'_>,
    args: &[&str],
    env: &[(&str, &str)],
    global: bool,
) -> Result<(std::process::ExitStatus, Vec<u8>, String)> {
    let mut full: Vec<&str> = Vec::new();
    let cwd = match at {
        At::Dir(d) => d,
        At::Repo(f) => {
            full.extend(["--git-dir", &f.git_dir, "--work-tree", &f.root]);
            Path::new(&f.root)
        }
    };
    full.extend(args);
    let mut c = Command::new("git");
    c.args(guard::host_git(&full)).current_dir(cwd);
    // Nothing of handlerd's environment steers it (GIT_DIR, GIT_CONFIG_COUNT…).
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("GIT_") {
            c.env_remove(k);
        }
    }
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_ATTR_NOSYSTEM", "1");
    if !global {
        c.env("GIT_CONFIG_GLOBAL", "/dev/null");
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    limit_memory(&mut c);
    let mut child = c.spawn().map_err(|source| GitGuardError::Io {
        path: "git".into(),
        source,
    })?;
    let read = |s: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(s) = s {
                let _ = s.take(GIT_OUTPUT_MAX).read_to_end(&mut out);
            }
            out
        })
    };
    let so = read(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let se = read(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + GIT_TIME;
    let status = loop {
        match child.try_wait().map_err(io(cwd))? {
            Some(st) => break st,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(GitGuardError::Git {
                    args: args.join(" "),
                    status: "timed out".into(),
                    stderr: format!("killed after {} s", GIT_TIME.as_secs()),
                });
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let out = so.join().unwrap_or_default();
    let err = String::from_utf8_lossy(&se.join().unwrap_or_default())
        .trim()
        .chars()
        .take(2000)
        .collect();
    Ok((status, out, err))
}

#[allow(unsafe_code)]
fn limit_memory(c: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing is allocated between fork and exec.
    unsafe {
        c.pre_exec(|| {
            nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_AS,
                GIT_MEMORY,
                GIT_MEMORY,
            )
            .map_err(std::io::Error::from)
        });
    }
}
