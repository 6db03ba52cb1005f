//! What the launcher found out about the host before planning: the user's ids, devices, cgroup
//! delegation, the paths a spec names, the images it resolves, and who the launcher is. Gathered
//! by handler-core (I/O); the plan is a pure function of the spec and these facts.

use std::collections::BTreeMap;

/// What a host path is, as seen by the launcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    Missing,
    Directory,
    File,
    Socket,
    /// Something else (fifo, device…).
    Other,
}

/// A launcher, known by its pid and start time (A: a pid alone is reused), and the boot it
/// started in (after a reboot the first pids come back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherId {
    pub pid: u32,
    /// Field 22 of /proc/<pid>/stat: clock ticks since boot.
    pub start: u64,
    /// /proc/sys/kernel/random/boot_id.
    pub boot: String,
}

/// The host facts the plan depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The host user's uid and gid (the sandbox user's, keep-id).
    pub uid: u32,
    pub gid: u32,
    /// The number of subordinate uids and gids of the user (the size of its user namespace
    /// minus one); `None` when /etc/subuid or /etc/subgid has no range for it.
    pub subuid_count: Option<u32>,
    pub subgid_count: Option<u32>,
    /// /dev/fuse and /dev/net/tun exist (nested confinement needs both).
    pub has_fuse: bool,
    pub has_tun: bool,
    /// Rootless podman can enforce memory and cpu limits here (cgroups v2 with those controllers
    /// delegated to the user).
    pub cgroup_memory: bool,
    pub cgroup_cpu: bool,
    /// What each host path the spec names is (mount sources, the display socket).
    pub paths: BTreeMap<String, PathKind>,
    /// The image's own PATH (from its config), when the spec needs it (pathAppend, imageMounts).
    pub image_path: Option<String>,
    /// The image id each imageMounts image resolves to now (A6).
    pub image_ids: BTreeMap<String, String>,
    /// This instance's private host folder (files, seeds, env file), created by the launcher.
    pub instance_dir: String,
    pub launcher: LauncherId,
}

impl HostFacts {
    /// The kind of `path`; `Missing` when it was not looked at.
    pub fn path_kind(&self, path: &str) -> PathKind {
        self.paths.get(path).copied().unwrap_or(PathKind::Missing)
    }
}
