//! Machines (issue 29, the second seed's "computer"): a sandbox that outlives one connection.
//! Contract A's machine verbs take a **MachineSpec** on fd 3 — a SandboxSpec whose `argv` is the
//! machine's first process and which has no tty (decision 0142: every rule of A.1–A.9 holds as
//! written, validated by the same validator) — and `machine exec` an [`ExecSpec`]; `machine
//! stats` answers [`MachineStats`] (the seed's Stats). Which images a machine may be made of is
//! [`images`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod events;
pub mod exec_channel;
pub mod images;
pub mod parts;
pub mod profile;

/// The SandboxSpec a machine is made from (see the module's text).
pub type MachineSpec = crate::sandbox::SandboxSpec;

/// The label every machine carries: its id. Only containers with it are ever touched by a
/// machine verb.
pub const MACHINE_LABEL: &str = "handler.machine";

/// The container name of machine `id`.
pub fn container_name(id: &str) -> String {
    format!("handler-m-{id}")
}

/// Whether `id` is a machine id: a lowercase DNS label of 1–40 characters starting with a
/// letter (the container's name is `handler-m-<id>`); not `events`, the change channel's path.
pub fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    id != "events"
        && !b.is_empty()
        && b.len() <= 40
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && !id.ends_with('-')
}

/// `POST /v1/machines` (issue 29): a machine to make. `name` is required, and `image` or `agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineRequest {
    /// Its id: a lowercase DNS label of at most 40 characters.
    pub name: String,
    /// What makes it: `image` (the default) or `devcontainer` (the folder `devcontainer`
    /// names, its `.devcontainer/devcontainer.json` or `.devcontainer.json` made by the Dev
    /// Container CLI, decision 0161). Any other value is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// With `source: devcontainer`: the absolute host folder whose dev container it is (it
    /// must be allowed by the daemon's `HANDLER_DEVCONTAINER_FOLDERS`). Removing the machine
    /// never touches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<String>,
    /// The image it runs (allowed by the daemon's `HANDLER_MACHINE_IMAGES` patterns); left out
    /// with `agents`: the first agent's harness image (Handler's own, checked). Its record
    /// always names the image it was made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The agents it is made for (decision 0147): what each one's sandbox mounts, stages and
    /// allows is planned into it at creation, and only their sessions run in it (the seed's
    /// `ahpd.agents`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// A CPU limit, e.g. `2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// A memory limit, e.g. `2g`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Where commands start, its own folder kept across restarts (default `/work`; with
    /// `folder`, that folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// A host folder mounted at the same path inside (the seed's `folder`, decision 0163): a
    /// folder inside one of Handler's work folders, never one of Handler's own, as an agent's
    /// scope; its `.git` read-only (the git guard). Not with `agents` or `source: devcontainer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    /// More host folders, each at a target of its own (the seed's `mounts`, decision 0168):
    /// each source held to `folder`'s rule (inside a work folder, none of Handler's own, its
    /// `.git` read-only), each target absolute and its own. Not with `agents` or
    /// `source: devcontainer`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MachineMount>,
    /// `none` (default), `open`, or `filtered`: through the machine's own egress proxy to the
    /// hosts `allow` lists (decision 0153).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// A filtered machine's allow-list, each `HOST:PORT` (`*.example.com:443` for subdomains);
    /// only with `network: filtered`. Left out with `agents`: what every one of its agents' own
    /// sandboxes allows (its record then names the list it was made with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<crate::allow::AllowEntry>>,
    /// A profile of the daemon's (`<config>/profiles.toml`, decision 0156): what this request
    /// leaves out comes from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The parts it carries (issue 30 item 2, decision 0164): harnesses' CLIs by the
    /// harness's name, and `node`; each built (with what it requires) before the machine is
    /// made, mounted read-only at `/opt/handler/parts/<id>`, its `bin` first on the PATH. One
    /// that cannot be built is left out, named in the machine's `partsLeftOut`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<String>,
}

/// A host folder mounted into a machine (decision 0168).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MachineMount {
    /// The host folder (resolved when the machine is made; the record keeps it resolved).
    pub source: String,
    /// Where it is inside: absolute, no `..`, none of Handler's own places.
    pub target: String,
    /// Read-only inside.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

impl MachineMount {
    /// Reads `SRC:TARGET[:ro]` (a container engine's `-v`): the target defaults to the source.
    pub fn parse(s: &str) -> Option<MachineMount> {
        let mut parts: Vec<&str> = s.split(':').collect();
        let read_only = match parts.last() {
            Some(&"ro") if parts.len() > 1 => {
                parts.pop();
                true
            }
            Some(&"rw") if parts.len() > 1 => {
                parts.pop();
                false
            }
            _ => false,
        };
        let (source, target) = match parts.as_slice() {
            [s] => (*s, *s),
            [s, t] => (*s, *t),
            _ => return None,
        };
        (!source.is_empty() && !target.is_empty()).then(|| MachineMount {
            source: source.to_string(),
            target: target.to_string(),
            read_only,
        })
    }

    /// Why `target` cannot be a mount's target inside a machine: not absolute, a `..` or `.`
    /// component, the root, or one of Handler's own places (its parts, its run folder, the
    /// network filter's).
    pub fn target_refusal(target: &str) -> Option<&'static str> {
        if !target.starts_with('/') {
            return Some("is not an absolute path");
        }
        if target
            .split('/')
            .any(|c| c == ".." || c == "." || c.contains('\0'))
        {
            return Some("has a . or .. component");
        }
        let t = target.trim_end_matches('/');
        if t.is_empty() {
            return Some("is the machine's root");
        }
        let under = |root: &str| t == root || t.starts_with(&format!("{root}/"));
        if under("/opt/handler")
            || under("/run/handler")
            || under("/proc")
            || under("/sys")
            || under("/dev")
        {
            return Some("is one of Handler's or the system's own places");
        }
        if parts::PART_ROOT.starts_with(&format!("{t}/"))
            || "/run/handler".starts_with(&format!("{t}/"))
        {
            return Some("would hide one of Handler's own places");
        }
        None
    }
}

/// What a machine is now: the runtime's state of its container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MachineState {
    /// Its container runs.
    Running,
    /// Its container exists and does not run.
    Stopped,
    /// The runtime has no container for it (removed outside Handler): shown, never recreated.
    Missing,
}

/// A machine as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineInfo {
    /// Its id.
    pub id: String,
    /// What it was made from.
    pub request: MachineRequest,
    /// Now.
    pub state: MachineState,
    /// The runtime's container id.
    pub container_id: String,
    /// RFC 3339.
    pub created_at: String,
    /// Made for one session and removed after its delay once no session runs in it (issue 29
    /// item 6, decision 0148); left out: a machine the person keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disposable: Option<Disposable>,
    /// A dev container's user, folder and variables' names (decision 0161); left out: a
    /// machine made from an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<DevcontainerInfo>,
    /// The parts it was made with (decision 0164), requirements first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<parts::MountedPart>,
    /// The parts asked for and left out, each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts_left_out: Vec<parts::PartLeftOut>,
}

/// What a dev container's `machine up` found (decision 0161): every exec in it runs as
/// `remoteUser` in `remoteWorkspaceFolder` with `env` (the file's `remoteEnv` over what its
/// user's login shell held when it was made, less what the container itself holds).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevcontainerUp {
    /// The container `devcontainer up` answered with: the only handle.
    pub container_id: String,
    /// The user each exec runs as.
    pub remote_user: String,
    /// Where each exec starts: the folder as mounted inside.
    pub remote_workspace_folder: String,
    /// The variables each exec is given, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl std::fmt::Debug for DevcontainerUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevcontainerUp")
            .field("container_id", &self.container_id)
            .field("remote_user", &self.remote_user)
            .field("remote_workspace_folder", &self.remote_workspace_folder)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// A dev container as the API shows it: its folder, user and where it starts, and the names
/// (never the values) of the variables its execs get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevcontainerInfo {
    /// The host folder it was made from.
    pub folder: String,
    /// The user each exec runs as.
    pub remote_user: String,
    /// Where each exec starts.
    pub remote_workspace_folder: String,
    /// The names of the variables each exec is given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Made by hand with `devcontainer up` and adopted by a request for its folder: it has the
    /// hardening its maker gave it, not Handler's (decision 0161).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
}

/// `machine up`'s input on fd 3 (decision 0161): the MachineSpec whose hardening, network and
/// labels the dev container gets, the folder it is made from, and the folder where Handler
/// staged the checked copy of its `.devcontainer` (the CLI reads that copy, never the
/// repository's own file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DevcontainerSpec {
    /// The machine's hardening, network, resources and labels.
    pub spec: MachineSpec,
    /// The absolute host folder (the workspace the CLI mounts).
    pub folder: String,
    /// The staged folder holding `.devcontainer/devcontainer.json` (checked) and its files.
    pub config_dir: String,
}

/// A disposable machine's session and delay (decision 0148).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disposable {
    /// The session it was made for: the only one that runs in it.
    pub session: String,
    /// Milliseconds after the last session in it has ended before it is removed.
    pub delay_ms: u64,
}

/// An agent's `machine` value that gives each of its sessions a disposable machine of its own
/// (decision 0148).
pub const DISPOSABLE: &str = "disposable";

/// The default `disposableDelayMs`: five minutes, as the second seed's `disposableDelay`.
pub const DISPOSABLE_DELAY_MS: u64 = 300_000;

/// The id of session `session`'s disposable machine: `d-` and the session id's hex
/// (`s_0123…` → `d-0123…`), a valid machine id, and one a person's machine is refused.
#[must_use]
pub fn disposable_id(session: &str) -> String {
    format!(
        "d-{}",
        session
            .strip_prefix("s_")
            .unwrap_or(session)
            .replace('_', "-")
    )
}

/// Whether `id` has the form of a disposable machine's id (`d-` and 16 hex digits).
#[must_use]
pub fn is_disposable_id(id: &str) -> bool {
    id.strip_prefix("d-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// A process to run in a running machine (`machine exec`, on fd 3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecSpec {
    /// The program and its arguments (not empty).
    pub argv: Vec<String>,
    /// Where it starts (absolute; the machine's workdir when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Its variables: given to the engine by name, the values only in the engine's own
    /// environment (never in argv, A2's rule for secrets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The user inside the machine (a name or `uid[:gid]`); the machine's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A terminal (the caller's) instead of pipes.
    #[serde(default)]
    pub tty: bool,
    /// Start the machine first when it is stopped (a session's exec: its start costs no
    /// engine call before the exec); without it, an exec in a stopped machine is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub start_stopped: bool,
    /// Secrets this exec's phantoms stand for (decision 0166): given to the machine's running
    /// proxy for as long as the exec runs, towards their hosts only. Only on fd 3; only in a
    /// filtered machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injections: Vec<crate::sandbox::Injection>,
}

/// An [`ExecSpec`] that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The field named is wrong.
    #[error("{field}: {why}")]
    Field {
        /// The field.
        field: String,
        /// What is wrong.
        why: String,
    },
}

fn field(field: impl Into<String>, why: impl Into<String>) -> ExecError {
    ExecError::Field {
        field: field.into(),
        why: why.into(),
    }
}

impl ExecSpec {
    /// The rules of an exec (A2 for names, absolute paths): the first field that breaks one.
    pub fn check(&self) -> Result<(), ExecError> {
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(field("argv", "names no program"));
        }
        if let Some(i) = self.argv.iter().position(|a| a.contains('\0')) {
            return Err(field(format!("argv[{i}]"), "holds a NUL"));
        }
        if let Some(c) = &self.cwd
            && (!c.starts_with('/') || c.contains('\0'))
        {
            return Err(field("cwd", "is not an absolute path"));
        }
        let name_ok = |n: &str| {
            let mut cs = n.chars();
            cs.next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if let Some(n) = self.env.keys().find(|n| !name_ok(n)) {
            return Err(field(format!("env.{n}"), "is not a variable name"));
        }
        if let Some(i) = self.injections.iter().position(|i| i.hosts.is_empty()) {
            return Err(field(format!("injections[{i}].hosts"), "names no host"));
        }
        if let Some(u) = &self.user {
            let ok = !u.is_empty()
                && u.len() <= 64
                && u.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-:".contains(c))
                && !u.starts_with('-');
            if !ok {
                return Err(field("user", "is not a user name or uid[:gid]"));
            }
        }
        Ok(())
    }
}

/// `machine stats` (the seed's Stats): sizes in bytes; `cpu.percent` is of one core, so it can
/// exceed 100. A stopped machine is `{ "running": false }`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStats {
    /// Whether it runs.
    pub running: bool,
    /// Its CPU use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    /// Its memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    /// Its processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Bytes received and sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetStats>,
    /// Bytes read and written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<BlockStats>,
}

/// CPU: percent of one core; its core limit when it has one.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct CpuStats {
    /// Percent of one core.
    pub percent: f64,
    /// Its CPU limit, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<f64>,
}

/// Memory: used and limit in bytes, and their ratio in percent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct MemoryStats {
    /// Bytes in use.
    pub used: u64,
    /// Its limit in bytes.
    pub limit: u64,
    /// `used / limit`, in percent.
    pub percent: f64,
}

/// Network bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NetStats {
    /// Received.
    pub rx: u64,
    /// Sent.
    pub tx: u64,
}

/// Block device bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct BlockStats {
    /// Read.
    pub read: u64,
    /// Written.
    pub write: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_reads_like_an_engines_and_its_target_is_its_own() {
        let m = |s: &str| MachineMount::parse(s);
        assert_eq!(
            m("/h/a:/w/a:ro"),
            Some(MachineMount {
                source: "/h/a".into(),
                target: "/w/a".into(),
                read_only: true
            })
        );
        assert_eq!(m("/h/a").unwrap().target, "/h/a");
        assert!(!m("/h/a:/w:rw").unwrap().read_only);
        assert_eq!(m("/a:/b:/c"), None);
        assert_eq!(m(":/b"), None);
        let refused = MachineMount::target_refusal;
        assert_eq!(refused("/srv/data"), None);
        assert_eq!(refused("rel"), Some("is not an absolute path"));
        assert_eq!(refused("/srv/../etc"), Some("has a . or .. component"));
        assert_eq!(refused("/"), Some("is the machine's root"));
        for own in ["/opt/handler/parts/x", "/run/handler", "/proc/self", "/dev"] {
            assert!(refused(own).is_some(), "{own}");
        }
        for hides in ["/opt", "/run", "/opt/handler/"] {
            assert!(refused(hides).is_some(), "{hides}");
        }
    }

    #[test]
    fn an_exec_names_the_field_it_breaks() {
        let ok = ExecSpec {
            argv: vec!["sh".into()],
            ..ExecSpec::default()
        };
        assert_eq!(ok.check(), Ok(()));
        let bad = |f: &dyn Fn(&mut ExecSpec), want: &str| {
            let mut e = ok.clone();
            f(&mut e);
            match e.check() {
                Err(ExecError::Field { field, .. }) => assert_eq!(field, want),
                other => panic!("{want}: {other:?}"),
            }
        };
        bad(&|e| e.argv.clear(), "argv");
        bad(&|e| e.cwd = Some("rel".into()), "cwd");
        bad(
            &|e| {
                e.env.insert("1X".into(), "v".into());
            },
            "env.1X",
        );
        bad(&|e| e.user = Some("-u".into()), "user");
        assert!(
            valid_id("box-2")
                && !valid_id("Box")
                && !valid_id("-x")
                && !valid_id("x-")
                && !valid_id("events")
        );
        assert_eq!(container_name("box"), "handler-m-box");
    }

    #[test]
    fn a_stopped_machines_stats_are_only_that() {
        assert_eq!(
            serde_json::to_string(&MachineStats::default()).unwrap(),
            r#"{"running":false}"#
        );
    }
}
