//! The warm proxy pool's runtime side (issue 34 item 1, decision 0175): `proxy-pool fill` starts
//! members (`handler_sandbox::egress::pool::plan_member`) until the pool holds
//! `HANDLER_PROXY_POOL` of them, a filtered launch claims one by renaming its folder into the
//! instance folder (only one launcher can), and `proxy-pool drain` removes them all. The pool is
//! the user's own (a folder of their runtime folder, 0700, never mounted into a sandbox), one
//! per engine.

use std::fs;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use handler_sandbox::egress::pool::{
    CLAIM_SOCKET, CLAIM_SUBDIR, CLAIMED_SUBDIR, DEFAULT_IDLE_SECS, POOL_CONTAINER_PREFIX,
    POOL_LABEL, is_member_id, plan_member, pool_folder_name,
};
use handler_sandbox::egress::topology::{CA_SUBDIR, SETTINGS_SUBDIR, SOCKET_SUBDIR};
use handler_sandbox::plan::DockerFacts;

use crate::runtime::sandbox::engine;
use crate::runtime::sandbox::podman::{self, PodmanError};

/// How many members the pool keeps (default 1; 0: no pool, every launch starts its proxy).
pub const SIZE_VAR: &str = "HANDLER_PROXY_POOL";
/// How long a member waits unclaimed, in seconds (default 600).
pub const IDLE_VAR: &str = "HANDLER_PROXY_POOL_IDLE";
/// The most members a pool keeps, whatever the variable says.
pub const MAX_SIZE: usize = 4;
/// How long a launch's refill waits before it starts anything (the launch's own start first).
pub const REFILL_AFTER_MS: u64 = 1000;

/// Why the pool could not be filled or drained.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The runtime folder could not be made or used.
    #[error(transparent)]
    Base(#[from] crate::runtime::sandbox::host::HostError),
    /// A folder or the lock of the pool.
    #[error("proxy pool {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The engine refused (the network filter image missing, for one).
    #[error(transparent)]
    Podman(#[from] PodmanError),
    /// A member started but never waited on its claim socket.
    #[error("proxy pool: {0} did not start waiting within 20 s")]
    NotWaiting(String),
}

/// The pool's size from [`SIZE_VAR`].
pub fn size() -> usize {
    std::env::var(SIZE_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(1)
        .min(MAX_SIZE)
}

fn idle_secs() -> u64 {
    std::env::var(IDLE_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|s| *s > 0)
        .unwrap_or(DEFAULT_IDLE_SECS)
}

/// This engine's pool folder (made 0700 when missing).
fn pool_dir() -> Result<PathBuf, PoolError> {
    let base = crate::runtime::sandbox::host::runtime_base(nix::unistd::getuid().as_raw())?;
    let dir = base.join(pool_folder_name(engine::current().name()));
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(PoolError::Io { path: dir, source }),
    }
    Ok(dir)
}

/// The member ids in `pool` (anything else there is left alone), in name order.
fn members(pool: &Path) -> Vec<String> {
    let mut ids: Vec<String> = fs::read_dir(pool)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_member_id(n))
        .collect();
    ids.sort();
    ids
}

/// A member a launcher holds: the connection it gives the configuration on and reads back from,
/// and its container's name (removed with the instance).
#[derive(Debug)]
pub struct Claimed {
    /// The claim connection.
    pub stream: UnixStream,
    /// The member's container.
    pub container: String,
}

/// Claims a waiting member for instance folder `inst`: its folder moves into the instance
/// folder (its settings, CA and socket folders where the instance's go), and the launcher
/// connects to it. None when the pool is off or holds no member that still waits.
pub fn claim(inst: &Path) -> Option<Claimed> {
    if size() == 0 {
        return None;
    }
    let pool = pool_dir().ok()?;
    for id in members(&pool) {
        let held = inst.join(CLAIMED_SUBDIR);
        // Atomic: of two launchers, one gets it, the other moves on.
        if fs::rename(pool.join(&id), &held).is_err() {
            continue;
        }
        let moved = [SETTINGS_SUBDIR, CA_SUBDIR, SOCKET_SUBDIR]
            .iter()
            .all(|sub| fs::rename(held.join(sub), inst.join(sub)).is_ok());
        let conn = moved
            .then(|| UnixStream::connect(held.join(CLAIM_SUBDIR).join(CLAIM_SOCKET)).ok())
            .flatten();
        match conn {
            Some(stream) => {
                return Some(Claimed {
                    stream,
                    container: format!("{POOL_CONTAINER_PREFIX}{id}"),
                });
            }
            None => {
                // It had ended (its idle time passed): what it left goes, the next is tried.
                for sub in [SETTINGS_SUBDIR, CA_SUBDIR, SOCKET_SUBDIR] {
                    let _ = fs::remove_dir_all(inst.join(sub));
                }
                let _ = fs::remove_dir_all(&held);
            }
        }
    }
    None
}

/// Starts `proxy-pool fill` in the background (its own process group, no stdio), to replace the
/// member a launch took (or to make the first one) after [`REFILL_AFTER_MS`].
pub fn spawn_refill() {
    if size() == 0 {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "proxy-pool",
        "fill",
        &format!("--after-ms={REFILL_AFTER_MS}"),
    ]);
    podman::spawn_detached(cmd);
}

/// Whether member container `name` runs.
fn running(name: &str) -> bool {
    podman::run(&[
        "container",
        "inspect",
        "--format",
        "{{.State.Running}}",
        name,
    ])
    .is_ok_and(|s| s.trim() == "true")
}

/// Holds the pool's lock (one fill or drain at a time).
fn lock(pool: &Path) -> Result<nix::fcntl::Flock<fs::File>, PoolError> {
    let path = pool.join(".lock");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|source| PoolError::Io {
            path: path.clone(),
            source,
        })?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| {
        PoolError::Io {
            path,
            source: e.into(),
        }
    })
}

/// Starts members until the pool holds [`size`] that wait; members that no longer run are
/// removed first. The number started.
pub fn fill(after: Duration) -> Result<usize, PoolError> {
    std::thread::sleep(after);
    let want = size();
    if want == 0 {
        return Ok(0);
    }
    let pool = pool_dir()?;
    let _lock = lock(&pool)?;
    let mut live = 0;
    for id in members(&pool) {
        let dir = pool.join(&id);
        if dir.join(CLAIM_SUBDIR).join(CLAIM_SOCKET).exists()
            && running(&format!("{POOL_CONTAINER_PREFIX}{id}"))
        {
            live += 1;
        } else {
            let _ = remove(&[&format!("{POOL_CONTAINER_PREFIX}{id}")]);
            let _ = fs::remove_dir_all(&dir);
        }
    }
    let mut started = 0;
    while live + started < want {
        start_member(&pool)?;
        started += 1;
    }
    Ok(started)
}

/// Removes containers `names` at once (none left running).
fn remove(names: &[&str]) -> Result<String, PodmanError> {
    let mut a = engine::current().rm_args(0);
    a.extend(names.iter().map(|n| (*n).to_string()));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    podman::run(&a)
}

/// Starts one member and waits until it waits on its claim socket.
fn start_member(pool: &Path) -> Result<(), PoolError> {
    let id = format!("{:016x}", rand::random::<u64>());
    let kind = engine::current();
    let docker = DockerFacts::default();
    let plan = plan_member(
        kind.plan_engine(&docker),
        kind.name(),
        &pool.to_string_lossy(),
        &id,
        idle_secs(),
    );
    for (d, mode) in &plan.dirs {
        fs::DirBuilder::new()
            .mode(*mode)
            .create(d)
            .and_then(|()| fs::set_permissions(d, fs::Permissions::from_mode(*mode)))
            .map_err(|source| PoolError::Io {
                path: PathBuf::from(d),
                source,
            })?;
    }
    let args: Vec<&str> = plan.args.iter().map(String::as_str).collect();
    let dir = pool.join(&id);
    if let Err(e) = podman::run(&args) {
        let _ = fs::remove_dir_all(&dir);
        return Err(e.into());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !Path::new(&plan.claim_socket).exists() {
        if Instant::now() >= deadline {
            let _ = remove(&[&plan.container]);
            let _ = fs::remove_dir_all(&dir);
            return Err(PoolError::NotWaiting(plan.container));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Removes every member of this engine's pool (and its folder); the number removed.
pub fn drain() -> Result<usize, PoolError> {
    let pool = pool_dir()?;
    let _lock = lock(&pool)?;
    let filter = format!("label={POOL_LABEL}");
    let ids = podman::run(&["ps", "-a", "-q", "--filter", &filter])?;
    let ids: Vec<&str> = ids.split_whitespace().collect();
    if !ids.is_empty() {
        remove(&ids)?;
    }
    for id in members(&pool) {
        let _ = fs::remove_dir_all(pool.join(id));
    }
    Ok(ids.len())
}

/// `proxy-pool fill`: prints `{"started": N}`; 0, or 1 with the error on stderr.
pub fn fill_verb(after_ms: u64) -> i32 {
    match fill(Duration::from_millis(after_ms)) {
        Ok(n) => {
            println!("{}", serde_json::json!({ "started": n }));
            0
        }
        Err(e) => {
            crate::runtime::sandbox::log(&format!("proxy-pool fill: {e}"));
            1
        }
    }
}

/// `proxy-pool drain`: prints `{"removed": N}`; 0, or 1 with the error on stderr.
pub fn drain_verb() -> i32 {
    match drain() {
        Ok(n) => {
            println!("{}", serde_json::json!({ "removed": n }));
            0
        }
        Err(e) => {
            crate::runtime::sandbox::log(&format!("proxy-pool drain: {e}"));
            1
        }
    }
}
