//! What the launcher found out about the host before planning: the user's ids, devices, cgroup
//! delegation, the paths a spec names, the images it resolves, and who the launcher is. Gathered
//! by handler-core (I/O); the plan is a pure function of the spec and these facts.

use std::collections::BTreeMap;

/// What a host path is, as seen by the launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathKind {
    /// Nothing is there (or it was not looked at).
    Missing,
    /// A folder.
    Directory,
    /// A regular file.
    File,
    /// A unix socket.
    Socket,
    /// Something else (fifo, device…).
    Other,
}

/// A launcher, known by its pid and start time (A: a pid alone is reused), and the boot it
/// started in (after a reboot the first pids come back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherId {
    /// The launcher's process id.
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: clock ticks since boot.
    pub start: u64,
    /// /proc/sys/kernel/random/boot_id.
    pub boot: String,
}

/// The host facts the plan depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct HostFacts {
    /// The host user's uid and gid (the sandbox user's, keep-id).
    pub uid: u32,
    /// The host user's gid.
    pub gid: u32,
    /// The number of subordinate uids and gids of the user (the size of its user namespace
    /// minus one); `None` when /etc/subuid or /etc/subgid has no range for it.
    pub subuid_count: Option<u32>,
    /// The number of subordinate gids of the user; `None` when /etc/subgid has no range for it.
    pub subgid_count: Option<u32>,
    /// /dev/fuse and /dev/net/tun exist (nested confinement needs both).
    pub has_fuse: bool,
    /// /dev/net/tun exists.
    pub has_tun: bool,
    /// Rootless podman can enforce memory and cpu limits here (cgroups v2 with those controllers
    /// delegated to the user).
    pub cgroup_memory: bool,
    /// Rootless podman can enforce cpu limits here.
    pub cgroup_cpu: bool,
    /// What each host path the spec names is (mount sources, the display socket).
    pub paths: BTreeMap<String, PathKind>,
    /// The image's own PATH (from its config), when the spec needs it (pathAppend, imageMounts).
    pub image_path: Option<String>,
    /// The image id each imageMounts image resolves to now (A6).
    pub image_ids: BTreeMap<String, String>,
    /// This instance's private host folder (files, seeds, env file), created by the launcher.
    pub instance_dir: String,
    /// The launcher, as recorded in the labels of what it creates (for sweep).
    pub launcher: LauncherId,
    /// The git repository each writable scope mount is or is inside (item 5 of issue 11): what
    /// the host's git would read there, so the plan keeps it read-only in the sandbox.
    pub git: Vec<GitRepo>,
    /// Each writable mount's source, symbolic links resolved (where the git paths are compared).
    pub canonical_sources: BTreeMap<String, String>,
    /// The launcher's hard RLIMIT_NPROC (the sandbox's process limit cannot exceed it rootless);
    /// `None` when unlimited.
    pub nproc_hard: Option<u64>,
    /// Rootless podman can enforce `--pids-limit` here (cgroups v2, pids controller delegated).
    pub cgroup_pids: bool,
    /// The `[containers]` table podman will apply from the user's and the system's
    /// containers.conf files, as it merges them.
    pub containers_conf: ContainersConf,
    /// The network filter image's id when its binary has a machine's exec server (its label,
    /// decision 0171): a machine made now starts it. `None` for a launch, or an older image.
    pub exec_server: Option<String>,
    /// The host's own addresses, for the egress proxy's DNS-rebinding guard (gathered when the
    /// spec needs a proxy; empty otherwise).
    pub host_addresses: Vec<std::net::IpAddr>,
}

/// What podman's containers.conf files set in `[containers]`, merged in podman's order
/// (`CONTAINERS_CONF` alone when set; else /usr/share, /etc, /etc's containers.conf.d, the
/// user's, the user's containers.conf.d): each key with the file that set it last and its value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainersConf {
    /// Each `[containers]` key set: the file that set it last, and its value.
    pub settings: BTreeMap<String, (String, serde_json::Value)>,
    /// A file podman would read that could not be read or parsed (podman would fail too).
    pub unreadable: Option<String>,
}

/// What a repository's `.git` entry is (not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitEntryKind {
    /// A git directory.
    Dir,
    /// A gitfile (`gitdir: <path>`: a worktree, a submodule).
    File,
    /// A symbolic link (git follows it).
    Symlink,
}

/// A path the host's git takes from a repository: the git directory, its common directory,
/// hooks, config files and what they include.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitPath {
    /// What named it, for messages (`gitdir of /p/.git`, `core.hooksPath in /p/.git/config`).
    pub what: String,
    /// Canonical when it exists; otherwise the canonical nearest existing folder with the rest
    /// appended (where it would be created).
    pub path: String,
    /// Whether the path exists now.
    pub exists: bool,
}

/// The repository a scope is or is inside: its `.git` entry (the nearest one from the scope
/// up, as git finds it) and every path the host's git takes from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRepo {
    /// `<folder>/.git` as found, not resolved.
    pub entry: String,
    /// What that `.git` entry is.
    pub kind: GitEntryKind,
    /// Every path the host's git takes from the repository.
    pub paths: Vec<GitPath>,
}

impl HostFacts {
    /// The kind of `path`; `Missing` when it was not looked at.
    pub fn path_kind(&self, path: &str) -> PathKind {
        self.paths.get(path).copied().unwrap_or(PathKind::Missing)
    }
}
