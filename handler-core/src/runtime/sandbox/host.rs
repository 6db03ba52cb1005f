//! Looking at the host for the launcher: the user's ids and subordinate ranges, devices, cgroup
//! delegation, what each path of a spec is, the images a spec resolves, the launcher's own
//! identity (pid, start time, boot), and the per-user folder holding instance folders.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use handler_contracts::SandboxSpec;
use handler_contracts::sandbox::MountKind;
use handler_sandbox::egress::topology::Topology;
use handler_sandbox::facts::{
    ContainersConf, GitEntryKind, GitPath, GitRepo, HostFacts, LauncherId, PathKind,
};
use handler_sandbox::git::{ConfigPathKey, commondir_target, config_paths, gitfile_target};
use handler_sandbox::host::{fib_trie_local_addresses, stat_start_time, subid_count};

use super::podman;

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
pub(crate) fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The start time of process `pid` (clock ticks since boot), None when there is no such process.
pub(crate) fn process_start(pid: u32) -> Option<u64> {
    stat_start_time(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This process as a launcher.
pub fn launcher_self() -> LauncherId {
    let pid = std::process::id();
    LauncherId {
        pid,
        start: process_start(pid).unwrap_or(0),
        boot: boot_id(),
    }
}

/// The user's name (for /etc/subuid), or its uid as text.
pub(crate) fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

/// The size of the user's subordinate range in `file` (/etc/subuid or /etc/subgid).
pub(crate) fn subids(file: &str, uid: u32) -> Option<u32> {
    subid_count(&fs::read_to_string(file).ok()?, &user_name(uid), uid)
}

/// What `path` is (symlinks followed).
pub(crate) fn path_kind(path: &str) -> PathKind {
    match fs::metadata(path) {
        Err(_) => PathKind::Missing,
        Ok(m) if m.is_dir() => PathKind::Directory,
        Ok(m) if m.is_file() => PathKind::File,
        Ok(m) if m.file_type().is_socket() => PathKind::Socket,
        Ok(_) => PathKind::Other,
    }
}

/// Whether rootless podman can set this cgroup controller for `uid`: cgroups v2 with the
/// controller delegated to the user's systemd service.
pub(crate) fn cgroup_delegated(uid: u32, controller: &str) -> bool {
    if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        return false;
    }
    let f =
        format!("/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service/cgroup.controllers");
    fs::read_to_string(f).is_ok_and(|s| s.split_whitespace().any(|c| c == controller))
}

/// Why the host could not be looked at (the launch then fails: 66).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The folder of this user's instance folders cannot be made or used.
    #[error("cannot create {}: {source}", path.display())]
    CreateBase {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// That folder cannot be looked at or given its mode.
    #[error("{}: {source}", path.display())]
    Base {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// That folder is not a folder of this user's.
    #[error("{} is not a folder of this user's", path.display())]
    NotOurs {
        /// The folder.
        path: PathBuf,
    },
    /// An image mount's image cannot be resolved to an id.
    #[error("image mount {image:?}: {source}")]
    ImageMount {
        /// The image reference.
        image: String,
        /// podman's words.
        source: podman::PodmanError,
    },
    /// The image's PATH cannot be read.
    #[error("image {image:?}: {source}")]
    Image {
        /// The image reference.
        image: String,
        /// podman's words.
        source: podman::PodmanError,
    },
}

/// The folder holding this user's instance folders: `$XDG_RUNTIME_DIR/handler-sandbox`, else
/// `/tmp/handler-sandbox-<uid>`; created 0700, and refused when another user owns it.
pub fn runtime_base(uid: u32) -> Result<PathBuf, HostError> {
    let base = match std::env::var("XDG_RUNTIME_DIR") {
        Ok(d) if !d.is_empty() && Path::new(&d).is_dir() => {
            PathBuf::from(d).join("handler-sandbox")
        }
        _ => PathBuf::from(format!("/tmp/handler-sandbox-{uid}")),
    };
    match fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(HostError::CreateBase { path: base, source }),
    }
    let m = match fs::symlink_metadata(&base) {
        Ok(m) => m,
        Err(source) => return Err(HostError::Base { path: base, source }),
    };
    if !m.is_dir() || m.uid() != uid {
        return Err(HostError::NotOurs { path: base });
    }
    if m.permissions().mode() & 0o077 != 0
        && let Err(source) = fs::set_permissions(&base, fs::Permissions::from_mode(0o700))
    {
        return Err(HostError::Base { path: base, source });
    }
    Ok(base)
}

/// The image's PATH from its config.
pub(crate) fn image_path(image: &str) -> Result<Option<String>, podman::PodmanError> {
    let env = podman::json(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config.Env}}",
        image,
    ])?;
    Ok(env.as_array().and_then(|a| {
        a.iter()
            .filter_map(|v| v.as_str())
            .find_map(|s| s.strip_prefix("PATH=").map(str::to_string))
    }))
}

/// The id an image reference resolves to now.
pub(crate) fn image_id(image: &str) -> Result<String, podman::PodmanError> {
    Ok(
        podman::run(&["image", "inspect", "--format", "{{.Id}}", image])?
            .trim()
            // Docker's ids read `sha256:<hex>`, podman's `<hex>`: one form in labels and names.
            .trim_start_matches("sha256:")
            .to_string(),
    )
}

/// The network filter image's id when its binary runs a machine's execs (its label, decision
/// 0171); `None` when it is missing or older.
pub(crate) fn exec_server_image() -> Option<String> {
    use handler_sandbox::egress::topology::PROXY_IMAGE;
    use handler_sandbox::machine::exec_server::EXEC_SERVER_LABEL;
    let format = format!("{{{{.Id}}}}|{{{{index .Config.Labels \"{EXEC_SERVER_LABEL}\"}}}}");
    let out = podman::run(&["image", "inspect", "--format", &format, PROXY_IMAGE]).ok()?;
    let (id, label) = out.trim().split_once('|')?;
    (label == "1").then(|| id.trim_start_matches("sha256:").to_string())
}

/// `p` resolved: canonical when it exists, else the canonical nearest existing folder above it
/// with the rest appended (where it would be created); and whether it exists.
fn resolve(p: &Path) -> (String, bool) {
    if let Ok(c) = fs::canonicalize(p) {
        return (c.display().to_string(), true);
    }
    for a in p.ancestors().skip(1) {
        if let Ok(c) = fs::canonicalize(a) {
            let rest = p.strip_prefix(a).unwrap_or(p);
            return (c.join(rest).display().to_string(), false);
        }
    }
    (p.display().to_string(), false)
}

/// A small regular file's text (at most `limit` bytes read; never blocks on a fifo), `None` when
/// it is missing, not a regular file or unreadable.
fn read_small(p: &Path, limit: u64) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    if !fs::metadata(p).ok()?.is_file() {
        return None;
    }
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(p)
        .ok()?;
    let mut buf = Vec::new();
    f.take(limit).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// `~/x` against `home`, a relative path against `base`.
fn expand(v: &str, base: &Path, home: Option<&Path>) -> PathBuf {
    match (v.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => h.join(rest),
        _ => base.join(v),
    }
}

/// Collects a repository's git paths: the folder or file itself, and for a folder each entry
/// in it (a hook may be a link elsewhere).
struct GitWalk<'a> {
    paths: Vec<GitPath>,
    home: Option<&'a Path>,
    top: PathBuf,
    seen: std::collections::BTreeSet<String>,
}

impl GitWalk<'_> {
    fn add(&mut self, what: String, p: &Path) -> Option<PathBuf> {
        let (path, exists) = resolve(p);
        self.paths.push(GitPath {
            what,
            path: path.clone(),
            exists,
        });
        exists.then(|| PathBuf::from(path))
    }

    /// A hooks folder and every entry of it.
    fn hooks(&mut self, what: String, p: &Path) {
        let Some(dir) = self.add(what.clone(), p) else {
            return;
        };
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.flatten().take(1000) {
                self.add(
                    format!("{what} ({})", e.file_name().to_string_lossy()),
                    &e.path(),
                );
            }
        }
    }

    /// A config file, the hooks folder and the includes it names, those included in turn.
    fn config(&mut self, what: String, p: &Path, depth: u32) {
        let Some(file) = self.add(what, p) else {
            return;
        };
        if depth > 10 || !self.seen.insert(file.display().to_string()) {
            return;
        }
        let Some(text) = read_small(&file, 1024 * 1024) else {
            return;
        };
        let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
        for (key, v) in config_paths(&text) {
            match key {
                ConfigPathKey::HooksPath => {
                    let hp = expand(&v, &self.top, self.home);
                    self.hooks(format!("core.hooksPath in {}", file.display()), &hp);
                }
                ConfigPathKey::Include => {
                    let inc = expand(&v, &dir, self.home);
                    self.config(format!("an include in {}", file.display()), &inc, depth + 1);
                }
            }
        }
    }
}

/// The repository `scope` (canonical) is or is inside, as the host's git finds it (the nearest
/// `.git` from the scope up), with every path git takes from it: its git directory (a gitfile's
/// target, a link's), the common directory its `commondir` names, the hooks, the config files
/// (the repository's, the worktree's, the user's and the system's) and what they include or
/// name as `core.hooksPath`. `None` outside any repository.
pub(crate) fn git_repo(scope: &Path, home: Option<&Path>) -> Option<GitRepo> {
    let (top, entry, meta) = scope.ancestors().find_map(|d| {
        let e = d.join(".git");
        fs::symlink_metadata(&e)
            .ok()
            .map(|m| (d.to_path_buf(), e, m))
    })?;
    Some(git_repo_at(top, entry, &meta, home))
}

/// The most folders [`nested_git_repos`] looks into in one scope.
pub(crate) const NESTED_GIT_WALK_LIMIT: usize = 100_000;

/// The repositories inside `scope` (canonical), below it: every folder holding a `.git`
/// (folder, file or link), found without following links and without looking into a `.git`
/// folder, at most [`NESTED_GIT_WALK_LIMIT`] folders looked into (decision 0031).
pub(crate) fn nested_git_repos(scope: &Path, home: Option<&Path>) -> Vec<GitRepo> {
    let mut out = Vec::new();
    let mut stack = vec![scope.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        seen += 1;
        if seen > NESTED_GIT_WALK_LIMIT {
            break;
        }
        let Ok(rd) = fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else {
                continue;
            };
            if e.file_name() == ".git" {
                if d != scope
                    && let Ok(meta) = fs::symlink_metadata(e.path())
                {
                    out.push(git_repo_at(d.clone(), e.path(), &meta, home));
                }
            } else if ft.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

fn git_repo_at(top: PathBuf, entry: PathBuf, meta: &fs::Metadata, home: Option<&Path>) -> GitRepo {
    let kind = if meta.file_type().is_symlink() {
        GitEntryKind::Symlink
    } else if meta.is_dir() {
        GitEntryKind::Dir
    } else {
        GitEntryKind::File
    };
    let shown = entry.display().to_string();
    let mut w = GitWalk {
        paths: Vec::new(),
        home,
        top: top.clone(),
        seen: Default::default(),
    };
    let gitdir = match kind {
        GitEntryKind::Dir | GitEntryKind::Symlink => Some(entry.clone()),
        GitEntryKind::File => {
            read_small(&entry, 64 * 1024).and_then(|t| gitfile_target(&t).map(|g| top.join(g)))
        }
    };
    if let Some(g) = gitdir
        && let Some(g) = w.add(format!("the git directory of {shown}"), &g)
    {
        let common = read_small(&g.join("commondir"), 64 * 1024)
            .and_then(|t| commondir_target(&t).map(|c| g.join(c)));
        let common = match common {
            Some(c) => w.add(format!("the commondir of {}", g.display()), &c),
            None => Some(g.clone()),
        };
        if let Some(c) = &common {
            w.hooks(format!("the hooks of {}", c.display()), &c.join("hooks"));
            w.config(
                format!("the config of {}", c.display()),
                &c.join("config"),
                0,
            );
        }
        w.config(
            format!("the worktree config of {}", g.display()),
            &g.join("config.worktree"),
            0,
        );
        if common.as_ref() != Some(&g) {
            w.config(
                format!("the config of {}", g.display()),
                &g.join("config"),
                0,
            );
        }
    }
    // The user's and the system's configs (a relative core.hooksPath there is the working tree's).
    if let Some(h) = home {
        w.config("~/.gitconfig".into(), &h.join(".gitconfig"), 0);
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| h.join(".config"));
        w.config("the user's git config".into(), &xdg.join("git/config"), 0);
    }
    w.config("/etc/gitconfig".into(), Path::new("/etc/gitconfig"), 0);
    GitRepo {
        entry: shown,
        kind,
        paths: w.paths,
    }
}

/// The containers.conf files podman 4 reads for a rootless user, in its order: `CONTAINERS_CONF`
/// alone when set; else /usr/share/containers/containers.conf, /etc/containers/containers.conf,
/// /etc/containers/containers.conf.d/*.conf, the user's `$XDG_CONFIG_HOME/containers/
/// containers.conf` (default `~/.config`) and its containers.conf.d/*.conf (each folder sorted);
/// `CONTAINERS_CONF_OVERRIDE` (newer podman) last.
pub(crate) fn containers_conf_files() -> Vec<PathBuf> {
    let env = |v: &str| {
        std::env::var_os(v)
            .filter(|x| !x.is_empty())
            .map(PathBuf::from)
    };
    let mut files = Vec::new();
    if let Some(f) = env("CONTAINERS_CONF") {
        files.push(f);
    } else {
        let dropins = |dir: PathBuf, files: &mut Vec<PathBuf>| {
            let mut found: Vec<PathBuf> = fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                .collect();
            found.sort();
            files.extend(found);
        };
        files.push("/usr/share/containers/containers.conf".into());
        files.push("/etc/containers/containers.conf".into());
        dropins("/etc/containers/containers.conf.d".into(), &mut files);
        let user = env("XDG_CONFIG_HOME").or_else(|| env("HOME").map(|h| h.join(".config")));
        if let Some(u) = user {
            files.push(u.join("containers/containers.conf"));
            dropins(u.join("containers/containers.conf.d"), &mut files);
        }
    }
    if let Some(f) = env("CONTAINERS_CONF_OVERRIDE") {
        files.push(f);
    }
    files
}

/// The `[containers]` settings of `files` merged as podman merges them (a later file's key
/// wins); missing files are skipped, an unreadable or unparsable one is reported.
pub(crate) fn containers_conf(files: &[PathBuf]) -> ContainersConf {
    let mut conf = ContainersConf::default();
    for f in files {
        let text = match fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                conf.unreadable = Some(format!("{}: {e}", f.display()));
                return conf;
            }
        };
        let doc: toml::Table = match toml::from_str(&text) {
            Ok(d) => d,
            Err(e) => {
                conf.unreadable = Some(format!("{}: {}", f.display(), e.message()));
                return conf;
            }
        };
        if let Some(toml::Value::Table(c)) = doc.get("containers") {
            for (k, v) in c {
                let v = serde_json::to_value(v).unwrap_or(serde_json::Value::Null);
                conf.settings
                    .insert(k.clone(), (f.display().to_string(), v));
            }
        }
    }
    conf
}

/// This host's own addresses (for the egress proxy's DNS-rebinding guard), read from /proc.
pub(crate) fn host_addresses() -> Vec<std::net::IpAddr> {
    fs::read_to_string("/proc/net/fib_trie")
        .map(|t| fib_trie_local_addresses(&t))
        .unwrap_or_default()
}

/// The repositories the writable scope mounts are or hold (what the host's git reads there),
/// and each writable mount's source with its links resolved.
fn writable_sources(spec: &SandboxSpec) -> (Vec<GitRepo>, BTreeMap<String, String>) {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut git = Vec::new();
    let mut canonical_sources = BTreeMap::new();
    for m in spec.mounts.iter().filter(|m| !m.read_only) {
        let Ok(c) = fs::canonicalize(&m.source) else {
            continue;
        };
        if m.kind == MountKind::Scope {
            let repos = git_repo(&c, home.as_deref())
                .into_iter()
                .chain(nested_git_repos(&c, home.as_deref()));
            for r in repos {
                if !git.contains(&r) {
                    git.push(r);
                }
            }
        }
        canonical_sources.insert(m.source.clone(), c.display().to_string());
    }
    (git, canonical_sources)
}

/// The host facts a spec's plan needs, gathered once. Errors: an image that cannot be resolved (setup failed).
pub fn gather(
    spec: &SandboxSpec,
    instance_dir: String,
    launcher: LauncherId,
) -> Result<HostFacts, HostError> {
    gather_for(spec, instance_dir, launcher, true)
}

/// [`gather`] for a dev container: its image is the CLI's to build, so its PATH is not read
/// from one (its execs' PATH is the one its login shell's probe found, decision 0161).
pub fn gather_devcontainer(
    spec: &SandboxSpec,
    instance_dir: String,
    launcher: LauncherId,
) -> Result<HostFacts, HostError> {
    // Its folder (`mounts[0]`, at /workspaces/<name>) is a repository the container can write,
    // as a scope is: the repositories it is or holds are found as a scope's, so the git guard
    // keeps their `.git` read-only there (decision 0169; its kind stays the folder's own).
    let mut scanned = spec.clone();
    if let Some(m) = scanned.mounts.first_mut() {
        m.kind = MountKind::Scope;
    }
    gather_for(&scanned, instance_dir, launcher, false)
}

fn gather_for(
    spec: &SandboxSpec,
    instance_dir: String,
    launcher: LauncherId,
    read_image_path: bool,
) -> Result<HostFacts, HostError> {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let mut paths = BTreeMap::new();
    for m in &spec.mounts {
        paths.insert(m.source.clone(), path_kind(&m.source));
    }
    if let Some(d) = &spec.display {
        paths.insert(d.socket.clone(), path_kind(&d.socket));
    }
    let mut image_ids = BTreeMap::new();
    for im in &spec.image_mounts {
        let id = image_id(&im.image).map_err(|source| HostError::ImageMount {
            image: im.image.clone(),
            source,
        })?;
        image_ids.insert(im.image.clone(), id);
    }
    let image_path = if !read_image_path
        || spec.path_append.is_empty()
            && spec.path_prepend.is_empty()
            && spec.image_mounts.is_empty()
    {
        None
    } else {
        image_path(&spec.image).map_err(|source| HostError::Image {
            image: spec.image.clone(),
            source,
        })?
    };
    let nested = spec.confinement == handler_contracts::sandbox::Confinement::Nested;
    let (git, canonical_sources) = writable_sources(spec);
    Ok(HostFacts {
        uid,
        gid,
        subuid_count: if nested {
            subids("/etc/subuid", uid)
        } else {
            None
        },
        subgid_count: if nested {
            subids("/etc/subgid", uid)
        } else {
            None
        },
        has_fuse: Path::new("/dev/fuse").exists(),
        has_tun: Path::new("/dev/net/tun").exists(),
        cgroup_memory: spec.resources.as_ref().is_some_and(|r| r.memory.is_some())
            && cgroup_delegated(uid, "memory"),
        cgroup_cpu: spec.resources.as_ref().is_some_and(|r| r.cpus.is_some())
            && cgroup_delegated(uid, "cpu"),
        paths,
        image_path,
        image_ids,
        launcher,
        git,
        canonical_sources,
        nproc_hard: nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NPROC)
            .ok()
            .map(|(_, hard)| hard)
            .filter(|h| *h != nix::sys::resource::RLIM_INFINITY),
        cgroup_pids: cgroup_delegated(uid, "pids"),
        containers_conf: containers_conf(&containers_conf_files()),
        // Only a spec with a proxy needs them (its rebinding guard).
        host_addresses: if Topology::of(spec, &instance_dir).is_some() {
            host_addresses()
        } else {
            Vec::new()
        },
        // A machine's create asks for it (decision 0171); a launch never has one.
        exec_server: None,
        instance_dir,
    })
}
