//! Dev containers (issue 30 item 1, decision 0161): a machine made by the Dev Container CLI from
//! a folder's `devcontainer.json`. The file is a repository's, so hostile: [`check`] keeps what
//! only shapes the container (its image or build, features, users, variables, lifecycle
//! commands, which run inside) and refuses, naming the key, what would reach the host or widen
//! the container — `initializeCommand` (it runs on the host), `privileged`, `capAdd`,
//! `securityOpt`, host binds, `runArgs` beyond a few harmless flags, `${localEnv:…}`.
//! [`plan_up`] is Handler's hardening and network for the CLI's own `run`, [`override_config`]
//! the one document the CLI reads (never the repository's file, nor its folder), [`up_argv`] its words, and
//! [`post_check`] the engine's record of what was made, judged again after features added
//! their own. [`probe_env`] is what each exec is given. Pure.

use std::collections::BTreeMap;

use handler_contracts::machine::MACHINE_LABEL;
use handler_contracts::sandbox::{NetworkPolicy, SandboxSpec};
use serde_json::{Map, Value};

use crate::error::SpecError;
use crate::facts::HostFacts;
use crate::plan::{self, Engine, engine};
use crate::validate::ValidSpec;

/// The folder of a dev container's files in the repository.
pub const CONFIG_DIR: &str = ".devcontainer";
/// Its file there.
pub const CONFIG_FILE: &str = "devcontainer.json";
/// The other place the seed names: at the folder's root.
pub const ROOT_FILE: &str = ".devcontainer.json";
/// The label naming the host folder a dev container machine was made from.
pub const FOLDER_LABEL: &str = "handler.devcontainer.folder";
/// The label the CLI itself puts on a container made by hand with `devcontainer up`.
pub const LOCAL_FOLDER_LABEL: &str = "devcontainer.local_folder";
/// Where the folder is mounted inside (`/workspaces/<its name>`, the CLI's own default).
pub const WORKSPACES: &str = "/workspaces";

/// Why a dev container is not made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DevcontainerError {
    /// The file does not read as JSON with comments.
    #[error("{file}: {why}")]
    Parse {
        /// The file.
        file: String,
        /// What the parser said.
        why: String,
    },
    /// A key Handler cannot keep: its path in the file and why.
    #[error("devcontainer.json: {key}: {why}")]
    Refused {
        /// The key's path (`runArgs[2]`, `mounts[0]`, `containerEnv.X`).
        key: String,
        /// Why, and what to do.
        why: String,
    },
    /// What the engine made is wider than Handler allows (a feature's own settings).
    #[error("the dev container as made {what}: it was removed")]
    Widened {
        /// What.
        what: String,
    },
}

fn refused(key: impl Into<String>, why: impl Into<String>) -> DevcontainerError {
    DevcontainerError::Refused {
        key: key.into(),
        why: why.into(),
    }
}

/// Where the file was found: its own folder (whose other files — a Dockerfile, local features —
/// come with it) or alone at the folder's root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `.devcontainer/devcontainer.json`.
    Folder,
    /// `.devcontainer.json`.
    Root,
}

/// The file as a JSON object (comments and trailing commas allowed, as the CLI reads it).
pub fn parse(file: &str, text: &str) -> Result<Map<String, Value>, DevcontainerError> {
    let bad = |why: String| DevcontainerError::Parse {
        file: file.to_string(),
        why,
    };
    let v: Value = jsonc_parser::parse_to_serde_value(text, &jsonc_parser::ParseOptions::default())
        .map_err(|e| bad(e.to_string()))?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(bad("is not a JSON object".into())),
    }
}

/// Keys that only shape what runs inside the container: kept as written.
const KEPT: &[&str] = &[
    "$schema",
    "name",
    "image",
    "build",
    "features",
    "overrideFeatureInstallOrder",
    "containerEnv",
    "remoteEnv",
    "containerUser",
    "remoteUser",
    "updateRemoteUserUID",
    "userEnvProbe",
    "workspaceFolder",
    "runArgs",
    "mounts",
    "init",
    "privileged",
    "capAdd",
    "securityOpt",
    "overrideCommand",
    "shutdownAction",
    "onCreateCommand",
    "updateContentCommand",
    "postCreateCommand",
    "postStartCommand",
    "postAttachCommand",
    "waitFor",
    "customizations",
    "forwardPorts",
    "portsAttributes",
    "otherPortsAttributes",
    "hostRequirements",
];

/// Keys refused whatever their value, and why (decision 0161).
const REFUSED: &[(&str, &str)] = &[
    (
        "initializeCommand",
        "it runs on the host, outside any container, and Handler never runs a repository's command there; run it yourself before making the machine",
    ),
    (
        "workspaceMount",
        "Handler mounts the folder itself (its .git read-only, the git guard); remove it and set workspaceFolder for the path inside",
    ),
    (
        "appPort",
        "it publishes the container's ports on the host's interfaces; use forwardPorts",
    ),
    (
        "dockerComposeFile",
        "a compose file can give its services the host's network, devices and folders, which Handler cannot check; use image or build",
    ),
    ("service", "only with dockerComposeFile, which is refused"),
    (
        "runServices",
        "only with dockerComposeFile, which is refused",
    ),
];

/// `runArgs` flags kept (each with a value): they neither reach the host nor widen the
/// container. Everything else is refused, naming it.
const KEPT_RUN_FLAGS: &[&str] = &[
    "-e",
    "--env",
    "-l",
    "--label",
    "-h",
    "--hostname",
    "--add-host",
    "--shm-size",
    "--tmpfs",
];

/// The file checked (see the module's text): the object the override is made from, with
/// `build.context` made absolute in `folder`. `Err` names the first key refused.
pub fn check(
    config: &Map<String, Value>,
    layout: Layout,
    folder: &str,
) -> Result<Map<String, Value>, DevcontainerError> {
    let mut out = Map::new();
    let config = &with_folder(config, folder);
    for (key, value) in config {
        if let Some((_, why)) = REFUSED.iter().find(|(k, _)| k == key) {
            return Err(refused(key.as_str(), *why));
        }
        if !KEPT.contains(&key.as_str()) {
            return Err(refused(
                key.as_str(),
                "Handler does not know what this key does, so it cannot tell whether it widens the container; remove it",
            ));
        }
        no_local_env(key, value)?;
        let kept = match key.as_str() {
            "privileged" if value.as_bool() == Some(true) => {
                return Err(refused(
                    key.as_str(),
                    "a privileged container holds every capability and the host's devices (A3); remove it",
                ));
            }
            "capAdd" | "securityOpt" if !empty(value) => {
                return Err(refused(
                    key.as_str(),
                    "Handler's machines run with no capability and no-new-privileges (A3); remove it",
                ));
            }
            "privileged" | "capAdd" | "securityOpt" => continue,
            "runArgs" => {
                check_run_args(value)?;
                value.clone()
            }
            "mounts" => {
                check_mounts(value)?;
                value.clone()
            }
            "build" => check_build(value, layout, folder)?,
            "features" => {
                check_features(value, layout)?;
                value.clone()
            }
            _ => value.clone(),
        };
        out.insert(key.clone(), kept);
    }
    if !out.contains_key("image") && !out.contains_key("build") {
        return Err(refused(
            "image",
            "a dev container names an image or a build (dockerComposeFile is refused)",
        ));
    }
    Ok(out)
}

/// The file with `${localWorkspaceFolder}` and `${localWorkspaceFolderBasename}` written out:
/// the CLI is given the staged folder as its workspace, so it would fill in that one.
fn with_folder(config: &Map<String, Value>, folder: &str) -> Map<String, Value> {
    fn fill(v: &Value, folder: &str, base: &str) -> Value {
        match v {
            Value::String(s) => Value::String(
                s.replace("${localWorkspaceFolderBasename}", base)
                    .replace("${localWorkspaceFolder}", folder),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|x| fill(x, folder, base)).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| (k.clone(), fill(x, folder, base)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let folder = folder.trim_end_matches('/');
    let base = folder.rsplit('/').next().unwrap_or_default();
    config
        .iter()
        .map(|(k, v)| (k.clone(), fill(v, folder, base)))
        .collect()
}

fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// `${localEnv:…}` reads the host's environment (the daemon's) into the container: refused
/// wherever it is written.
fn no_local_env(at: &str, v: &Value) -> Result<(), DevcontainerError> {
    match v {
        Value::String(s) if s.contains("${localEnv") => Err(refused(
            at,
            "${localEnv:…} copies the host's environment into the container; write the value, or give a secret through Handler",
        )),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| no_local_env(&format!("{at}[{i}]"), x)),
        Value::Object(m) => m.iter().try_for_each(|(k, x)| {
            if k.contains("${localEnv") {
                return Err(refused(
                    format!("{at}.{k}"),
                    "${localEnv:…} copies the host's environment into the container",
                ));
            }
            no_local_env(&format!("{at}.{k}"), x)
        }),
        _ => Ok(()),
    }
}

fn check_run_args(v: &Value) -> Result<(), DevcontainerError> {
    let Value::Array(args) = v else {
        return Err(refused("runArgs", "is not a list of words"));
    };
    let mut i = 0;
    while i < args.len() {
        let at = format!("runArgs[{i}]");
        let Some(word) = args[i].as_str() else {
            return Err(refused(at, "is not a word"));
        };
        let (flag, inline) = match word.split_once('=') {
            Some((f, _)) if f.starts_with('-') => (f, true),
            _ => (word, false),
        };
        if !KEPT_RUN_FLAGS.contains(&flag) {
            return Err(refused(
                at,
                format!(
                    "{word:?}: Handler decides the container's user, network, capabilities, devices and mounts; runArgs may only hold {}",
                    KEPT_RUN_FLAGS.join(", ")
                ),
            ));
        }
        let value = if inline {
            word.split_once('=').map_or("", |(_, v)| v)
        } else {
            i += 1;
            args.get(i)
                .and_then(Value::as_str)
                .ok_or_else(|| refused(&at, format!("{word:?} has no value after it")))?
        };
        // Handler's labels (and the CLI's) say what a container is to Handler: never the file's.
        if ["-l", "--label"].contains(&flag) {
            let key = value.split('=').next().unwrap_or_default();
            if key.starts_with("handler.") || key.starts_with("devcontainer.") {
                return Err(refused(
                    at,
                    format!("the label {key:?} is Handler's or the Dev Container CLI's own"),
                ));
            }
        }
        i += 1;
    }
    Ok(())
}

/// A mount's options, from the string form (`type=volume,source=x,target=/y`) or the object.
fn mount_options(v: &Value) -> Option<BTreeMap<String, String>> {
    match v {
        Value::String(s) => Some(
            s.split(',')
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
                    None => (kv.trim().to_string(), String::new()),
                })
                .collect(),
        ),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Some((k.clone(), s.clone())),
                Value::Bool(b) => Some((k.clone(), b.to_string())),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn check_mounts(v: &Value) -> Result<(), DevcontainerError> {
    let Value::Array(ms) = v else {
        return Err(refused("mounts", "is not a list"));
    };
    for (i, m) in ms.iter().enumerate() {
        let at = format!("mounts[{i}]");
        let opts = mount_options(m).ok_or_else(|| refused(&at, "is not a mount"))?;
        if let Some(k) = opts.keys().find(|k| {
            ![
                "type",
                "source",
                "src",
                "target",
                "dst",
                "destination",
                "readonly",
                "ro",
                "consistency",
            ]
            .contains(&k.as_str())
        }) {
            return Err(refused(
                at,
                format!(
                    "option {k:?}: only type, source, target and readonly are kept (a volume's options can bind a host path)"
                ),
            ));
        }
        let kind = opts.get("type").map_or("volume", String::as_str);
        let source = opts
            .get("source")
            .or_else(|| opts.get("src"))
            .map(String::as_str);
        match kind {
            "volume" if source.is_some_and(|s| s.starts_with("handler")) => {
                return Err(refused(
                    at,
                    format!(
                        "the volume {:?} is Handler's own; name another",
                        source.unwrap_or_default()
                    ),
                ));
            }
            "volume" | "tmpfs" => {}
            _ => {
                return Err(refused(
                    at,
                    format!(
                        "a {kind} mount reaches the host's files: only volume and tmpfs mounts are kept (the folder itself is mounted by Handler)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `rel` joined to `base` lexically, or `None` when it climbs above `base`'s `floor`.
fn join_within(base: &str, rel: &str, floor: &str) -> Option<String> {
    let mut parts: Vec<&str> = if rel.starts_with('/') {
        Vec::new()
    } else {
        base.split('/').filter(|p| !p.is_empty()).collect()
    };
    for p in rel.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    let joined = format!("/{}", parts.join("/"));
    let floor = floor.trim_end_matches('/');
    (joined == floor || joined.starts_with(&format!("{floor}/"))).then_some(joined)
}

fn check_build(v: &Value, layout: Layout, folder: &str) -> Result<Value, DevcontainerError> {
    let Value::Object(b) = v else {
        return Err(refused("build", "is not an object"));
    };
    let config_dir = match layout {
        Layout::Folder => format!("{}/{CONFIG_DIR}", folder.trim_end_matches('/')),
        Layout::Root => folder.trim_end_matches('/').to_string(),
    };
    let mut out = Map::new();
    for (k, x) in b {
        let at = format!("build.{k}");
        match k.as_str() {
            "dockerfile" => {
                let rel = x.as_str().ok_or_else(|| refused(&at, "is not a path"))?;
                if layout == Layout::Root {
                    return Err(refused(
                        at,
                        "a Dockerfile is read from the .devcontainer folder: move the file to .devcontainer/devcontainer.json and the Dockerfile beside it",
                    ));
                }
                let staged = format!("/{CONFIG_DIR}");
                if rel.starts_with('/') || join_within(&staged, rel, &staged).is_none() {
                    return Err(refused(
                        at,
                        format!("{rel:?} is not inside .devcontainer, the folder Handler copies"),
                    ));
                }
                out.insert(k.clone(), x.clone());
            }
            "context" => {
                let rel = x.as_str().ok_or_else(|| refused(&at, "is not a path"))?;
                let abs = join_within(&config_dir, rel, folder).ok_or_else(|| {
                    refused(&at, format!("{rel:?} is not inside the folder {folder}"))
                })?;
                out.insert(k.clone(), Value::String(abs));
            }
            "args" | "target" | "cacheFrom" => {
                out.insert(k.clone(), x.clone());
            }
            "options" => {
                return Err(refused(
                    at,
                    "build options reach the engine's build as they are (a host folder, the host's network): remove them",
                ));
            }
            _ => return Err(refused(at, "Handler does not know this build key")),
        }
    }
    if !out.contains_key("dockerfile") {
        return Err(refused("build.dockerfile", "a build names its Dockerfile"));
    }
    if !out.contains_key("context") {
        // The CLI's default context is the file's folder, made absolute here too.
        out.insert("context".into(), Value::String(config_dir));
    }
    Ok(Value::Object(out))
}

fn check_features(v: &Value, layout: Layout) -> Result<(), DevcontainerError> {
    let Value::Object(fs) = v else {
        return Err(refused("features", "is not an object"));
    };
    for id in fs.keys() {
        let local = id.starts_with("./") || id.starts_with("../") || id.starts_with('/');
        if !local {
            continue;
        }
        let at = format!("features.{id}");
        if layout == Layout::Root {
            return Err(refused(
                at,
                "a local feature lives in the .devcontainer folder: move the file to .devcontainer/devcontainer.json",
            ));
        }
        let staged = format!("/{CONFIG_DIR}");
        if id.starts_with('/') || join_within(&staged, id, &staged).is_none() {
            return Err(refused(
                at,
                "a local feature is a folder inside .devcontainer",
            ));
        }
    }
    Ok(())
}

/// Where the folder is mounted inside: `/workspaces/<its last name>`.
pub fn workspace_target(folder: &str) -> String {
    let name = folder
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("workspace");
    format!("{WORKSPACES}/{name}")
}

/// What `machine up` does around the CLI (decision 0161): Handler's options for the CLI's `run`,
/// and for a filtered dev container the forwarder's entrypoint, the machine's kept proxy and the
/// volumes Docker fills first.
#[derive(Debug, Clone, PartialEq)]
pub struct UpPlan {
    /// Appended to the file's `runArgs`.
    pub run_args: Vec<String>,
    /// Filtered: the shell line of the feature Handler adds (`./handler-egress`): the forwarder
    /// started before anything else in the container runs, the container ended (66) when the
    /// proxy never answers (A1).
    pub egress_entrypoint: Option<String>,
    /// Filtered: the machine's own proxy, started before the CLI (decision 0153).
    pub proxy: Option<crate::plan::ProxyPlan>,
    /// Docker: the volumes to fill from images first (the network filter's).
    pub image_volumes: Vec<crate::plan::ImageVolume>,
    /// Made for agents (decision 0169): their homes and staged files, created under the
    /// machine's folder before the CLI runs.
    pub stage: Vec<crate::plan::Stage>,
}

/// The name of the feature Handler adds to a filtered dev container.
pub const EGRESS_FEATURE: &str = "handler-egress";

/// Handler's options for the CLI's `run`: its name, `--init`, the host user (keep-id on
/// Podman), the process limit, no capability and no-new-privileges, the network (`none`;
/// `open`; `filtered`: no route but the forwarder's to the machine's own proxy, whose variables
/// it gets), the resources the engine can enforce here (A1), and the folder's git directory
/// read-only over itself (the git guard, as for every sandbox). `spec.mounts[0]` is the folder's
/// own mount.
pub fn plan_up(
    engine: Engine<'_>,
    spec: &ValidSpec<'_>,
    facts: &HostFacts,
) -> Result<UpPlan, SpecError> {
    let s = spec.spec();
    let pids = facts
        .nproc_hard
        .map_or(plan::PIDS_LIMIT, |h| h.min(plan::PIDS_LIMIT));
    let mut a: Vec<String> = vec!["--name".into(), s.name.clone(), "--init".into()];
    // The labels [`labels`] leaves out (a comma in their value).
    for (k, v) in s.labels.iter().filter(|(_, v)| v.contains(',')) {
        a.extend(["--label".into(), format!("{k}={v}")]);
    }
    a.extend(engine::user_args(engine, facts)?);
    a.extend(["--ulimit".into(), format!("nproc={pids}:{pids}")]);
    a.extend(engine::proxy_variables_off(engine).map(String::from));
    if facts.cgroup_pids {
        a.extend(["--pids-limit".into(), pids.to_string()]);
    }
    if s.oci_runtime.is_some() {
        return Err(SpecError::unenforceable(
            "ociRuntime",
            "a dev container is made by the Dev Container CLI, which takes no OCI runtime",
        ));
    }
    a.extend(engine::oci_runtime_args(engine, s));
    a.extend(
        ["--cap-drop", "all", "--security-opt", "no-new-privileges"]
            .iter()
            .map(ToString::to_string),
    );
    let mut up = UpPlan {
        run_args: Vec::new(),
        egress_entrypoint: None,
        proxy: None,
        image_volumes: Vec::new(),
        stage: Vec::new(),
    };
    match &s.network {
        NetworkPolicy::None => a.extend(["--network".into(), "none".into()]),
        NetworkPolicy::Open => a.extend(engine::open_network_args(engine)),
        NetworkPolicy::Filtered { .. } => {
            // The machine's plan gives the sandbox's side of its proxy and the kept proxy.
            let lp = super::plan_create(engine, spec, facts)?;
            a.extend(lp.network.podman_args.iter().cloned());
            for (k, v) in &lp.network.env {
                a.extend(["--env".into(), format!("{k}={v}")]);
            }
            let words: Vec<String> = lp
                .network
                .argv_prefix
                .iter()
                .chain(std::iter::once(&"true".to_string()))
                .map(|w| quote(w))
                .collect();
            up.egress_entrypoint = Some(format!("{} || exit 66", words.join(" ")));
            up.proxy = lp.proxy;
            up.image_volumes = lp.image_volumes;
        }
    }
    a.extend(plan::resource_args(s, facts)?);
    // Made for agents (decision 0169): their scopes, state, homes and files as their sandboxes
    // have them.
    if !super::session::agents_of(s).is_empty() {
        let m = plan::agent_mounts(engine, s, facts)?;
        a.extend(m.args);
        up.stage = m.stage;
    }
    // The git guard over every writable mount, the folder's and the agents' (the engine lays
    // the deeper mount over the other whatever their order).
    for m in (!s.git_writable)
        .then(|| plan::git_read_only(s, facts))
        .transpose()?
        .unwrap_or_default()
    {
        a.extend(["--mount".into(), m]);
    }
    // Its parts (decision 0164): image mounts as every launch has them, read-only.
    for m in plan::image_mounts(engine, s, facts)? {
        a.extend(["--mount".into(), m.mount]);
        up.image_volumes.extend(m.volume);
    }
    up.run_args = a;
    Ok(up)
}

/// `w` as one shell word.
fn quote(w: &str) -> String {
    if !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:=,".contains(&b))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

impl UpPlan {
    /// The mounts Handler itself gives (each `--mount` of its run arguments): `(source,
    /// destination)` — what [`post_check`] accepts beside the folder's.
    pub fn own_mounts(&self) -> Vec<(String, String)> {
        self.run_args
            .windows(2)
            .filter(|w| w[0] == "--mount")
            .filter_map(|w| {
                let o = mount_options(&Value::String(w[1].clone()))?;
                let source = o.get("source").or_else(|| o.get("src"))?.clone();
                let dest = o
                    .get("destination")
                    .or_else(|| o.get("target"))
                    .or_else(|| o.get("dst"))?
                    .clone();
                Some((source, dest))
            })
            .collect()
    }
}

/// The feature Handler adds to a filtered dev container (`.devcontainer/handler-egress`): its
/// `devcontainer-feature.json` (the entrypoint) and its `install.sh` (nothing to install).
pub fn egress_feature(entrypoint: &str) -> (String, String) {
    let json = serde_json::json!({
        "id": EGRESS_FEATURE,
        "version": "1.0.0",
        "name": "Handler's egress forwarder",
        "description": "Starts the forwarder to the machine's own egress proxy before anything else runs (decision 0161).",
        "entrypoint": entrypoint,
    });
    (
        serde_json::to_string_pretty(&json).expect("a JSON object serializes"),
        "#!/bin/sh\nexit 0\n".to_string(),
    )
}

/// The one document the CLI reads (`--config`, in the staged folder): the checked file, the folder mounted
/// by Handler at [`workspace_target`] (`workspaceFolder` there unless the file names one),
/// `runArgs` with Handler's after the file's, and Handler's egress feature when `up` has one.
pub fn override_config(
    checked: &Map<String, Value>,
    folder: &str,
    up: &UpPlan,
) -> Map<String, Value> {
    let handler_args = &up.run_args;
    let mut out = checked.clone();
    if up.egress_entrypoint.is_some() {
        let mut features = out
            .get("features")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        features.insert(format!("./{EGRESS_FEATURE}"), Value::Object(Map::new()));
        out.insert("features".into(), Value::Object(features));
    }
    let target = workspace_target(folder);
    out.insert(
        "workspaceMount".into(),
        Value::String(format!("type=bind,source={folder},target={target}")),
    );
    out.entry("workspaceFolder")
        .or_insert_with(|| Value::String(target));
    let mut args: Vec<Value> = checked
        .get("runArgs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    args.extend(handler_args.iter().cloned().map(Value::String));
    out.insert("runArgs".into(), Value::Array(args));
    out
}

/// The labels a dev container machine is found by (each an `--id-label`): the spec's, its
/// machine id and its folder — but those whose value holds a comma (its agents, its parts),
/// which [`plan_up`] gives as run arguments: the CLI finds its container with `ps --filter
/// label=K=V`, and Podman splits a filter at each comma.
pub fn labels(spec: &SandboxSpec, id: &str, folder: &str) -> BTreeMap<String, String> {
    let mut l: BTreeMap<String, String> = spec
        .labels
        .iter()
        .filter(|(_, v)| !v.contains(','))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    l.insert(MACHINE_LABEL.into(), id.into());
    l.insert(FOLDER_LABEL.into(), folder.into());
    l
}

/// The CLI's words (after its program): `up` with the staged folder `stage` as its workspace
/// and its copy `<stage>/.devcontainer/devcontainer.json` as its file, on the engine
/// `docker_path`, labelled. The CLI resolves a local feature only inside its *workspace's*
/// `.devcontainer` and reads a Dockerfile beside its file, so it is given the staged folder: the
/// repository is never read by it (with `--override-config` it read the repository's features).
/// The real folder reaches the container only as the file's `workspaceMount`, which Handler
/// writes ([`override_config`]); its git root is never mounted in its place.
pub fn up_argv(stage: &str, docker_path: &str, labels: &BTreeMap<String, String>) -> Vec<String> {
    let config = format!("{}/{CONFIG_DIR}/{CONFIG_FILE}", stage.trim_end_matches('/'));
    let mut a: Vec<String> = [
        "up",
        "--workspace-folder",
        stage,
        "--config",
        &config,
        "--docker-path",
        docker_path,
        "--mount-workspace-git-root",
        "false",
        "--skip-post-attach",
        "--log-format",
        "json",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    for (k, v) in labels {
        a.extend(["--id-label".into(), format!("{k}={v}")]);
    }
    a
}

/// The engine the CLI is given (`--docker-path`, a script in the machine's staged folder): the
/// engine itself, except that its `events` replay from `since` (unix seconds). The CLI starts
/// its watcher for the container's start without waiting for it to listen, so on a busy host
/// the start came first and `up` waited for ever; replayed, it is seen. Only the CLI's own
/// labels match, so an older start of another container is never taken for this one's.
pub fn engine_script(program: &str, since: u64) -> String {
    let q = format!("'{}'", program.replace('\'', "'\\''"));
    format!(
        "#!/bin/sh\n# Handler's engine for the Dev Container CLI (decision 0161).\nif [ \"$1\" = events ]; then exec {q} \"$@\" --since {since}; fi\nexec {q} \"$@\"\n"
    )
}

/// What `devcontainer up` printed last on stdout: the container, its user and folder inside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Up {
    /// The container id.
    pub container_id: String,
    /// `remoteUser`.
    pub remote_user: String,
    /// `remoteWorkspaceFolder`.
    pub remote_workspace_folder: String,
}

/// Reads `up`'s answer (its last JSON line): `Err` carries the CLI's own message.
pub fn parse_up(stdout: &str) -> Result<Up, String> {
    let v: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l.trim()).ok())
        .ok_or_else(|| "the Dev Container CLI answered nothing".to_string())?;
    if v["outcome"] != "success" {
        let msg = [&v["message"], &v["description"]]
            .iter()
            .filter_map(|x| x.as_str())
            .collect::<Vec<_>>()
            .join(": ");
        return Err(if msg.is_empty() { v.to_string() } else { msg });
    }
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    let up = Up {
        container_id: s("containerId"),
        remote_user: s("remoteUser"),
        remote_workspace_folder: s("remoteWorkspaceFolder"),
    };
    if up.container_id.is_empty() {
        return Err("the Dev Container CLI named no container".into());
    }
    Ok(up)
}

/// The engine's record of what was made, judged again (a feature brings its own `privileged`,
/// `capAdd`, `securityOpt` and mounts): not privileged, no capability added, no security option
/// but no-new-privileges and labels, no host namespace or device, every bind inside `folder`, no
/// volume of Handler's, the network planned (`none` stays none; an open one is never the host's).
pub fn post_check(
    inspect: &Value,
    folder: &str,
    network: &NetworkPolicy,
    own: &[(String, String)],
) -> Result<(), DevcontainerError> {
    let widened = |what: String| DevcontainerError::Widened { what };
    let h = &inspect["HostConfig"];
    if h["Privileged"].as_bool() == Some(true) {
        return Err(widened("is privileged".into()));
    }
    if let Some(c) = h["CapAdd"].as_array().filter(|c| !c.is_empty()) {
        return Err(widened(format!("adds capabilities {c:?}")));
    }
    for o in h["SecurityOpt"].as_array().into_iter().flatten() {
        let o = o.as_str().unwrap_or_default();
        // Podman's rootless containers carry label=disable themselves (no SELinux here).
        if !(o.starts_with("no-new-privileges") || o == "label=disable") {
            return Err(widened(format!("has the security option {o:?}")));
        }
    }
    for k in ["PidMode", "IpcMode", "UTSMode", "UsernsMode"] {
        if h[k].as_str() == Some("host") {
            return Err(widened(format!("shares the host's {k}")));
        }
    }
    if let Some(d) = h["Devices"].as_array().filter(|d| !d.is_empty()) {
        return Err(widened(format!("has the host's devices {d:?}")));
    }
    let net = h["NetworkMode"].as_str().unwrap_or_default();
    let net_ok = match network {
        NetworkPolicy::None => net == "none",
        _ => net != "host" && !net.starts_with("container:"),
    };
    if !net_ok {
        return Err(widened(format!("has the network {net:?}")));
    }
    let folder = folder.trim_end_matches('/');
    for m in inspect["Mounts"].as_array().into_iter().flatten() {
        let kind = m["Type"].as_str().unwrap_or_default();
        let source = m["Source"].as_str().unwrap_or_default();
        let name = m["Name"].as_str().unwrap_or_default();
        let dest = m["Destination"].as_str().unwrap_or_default();
        // At a destination of Handler's own (Podman shows an image mount twice there: as the
        // image and as a bind of its storage): the engine allows one mount per destination.
        let handlers = own.iter().any(|(_, d)| d == dest);
        let ok = handlers
            || match kind {
                "bind" => source == folder || source.starts_with(&format!("{folder}/")),
                "volume" => !name.starts_with("handler"),
                "tmpfs" => true,
                _ => false,
            };
        if !ok {
            return Err(widened(format!(
                "mounts {kind} {} at {}",
                if name.is_empty() { source } else { name },
                m["Destination"].as_str().unwrap_or_default()
            )));
        }
    }
    Ok(())
}

/// The file in a machine's staged folder naming the container it adopted (its full id): what
/// lets the machine verbs touch a container that carries none of Handler's labels.
pub const ADOPTED_FILE: &str = "adopted";

/// The user and the folder inside of a container someone made by hand with `devcontainer up`
/// (decision 0161): the last `remoteUser` of its `devcontainer.metadata` label, else its
/// container's user, else `root`; where `folder` is mounted, else `/workspaces/<its name>`.
pub fn adopted_user_and_folder(inspect: &Value, folder: &str) -> (String, String) {
    let meta: Vec<Value> = inspect["Config"]["Labels"]["devcontainer.metadata"]
        .as_str()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    let user = meta
        .iter()
        .rev()
        .find_map(|e| e["remoteUser"].as_str())
        .or_else(|| inspect["Config"]["User"].as_str().filter(|u| !u.is_empty()))
        .unwrap_or("root")
        .to_string();
    let folder = folder.trim_end_matches('/');
    let inside = inspect["Mounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["Source"].as_str() == Some(folder))
        .and_then(|m| m["Destination"].as_str())
        .map_or_else(|| workspace_target(folder), String::from);
    (user, inside)
}

/// `env` (what [`probe_env`] found) with the parts' `bin` folders (decision 0164) before the
/// PATH every exec is given: the login shell's when it differs from the container's, else the
/// container's own, else the runtime's default. No parts: `env` as it is.
pub fn parts_path(
    mut env: BTreeMap<String, String>,
    container_env: &[String],
    prepend: &[String],
) -> BTreeMap<String, String> {
    if prepend.is_empty() {
        return env;
    }
    let base = env
        .get("PATH")
        .cloned()
        .or_else(|| {
            container_env
                .iter()
                .find_map(|e| e.strip_prefix("PATH=").map(String::from))
        })
        .unwrap_or_else(|| plan::DEFAULT_PATH.to_string());
    env.insert("PATH".into(), format!("{}:{base}", prepend.join(":")));
    env
}

/// The container's own variables (`NAME=value`) in the engine's record `inspect`.
pub fn container_env(inspect: &Value) -> Vec<String> {
    inspect["Config"]["Env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str().map(String::from))
        .collect()
}

/// [`probe_env`] of the login shell's `environ` and the container whose engine record is
/// `inspect` (its variables and its `devcontainer.metadata` label).
pub fn inspect_env(environ: &[u8], inspect: &Value) -> BTreeMap<String, String> {
    let metadata = inspect["Config"]["Labels"]["devcontainer.metadata"]
        .as_str()
        .unwrap_or("[]");
    probe_env(environ, &container_env(inspect), metadata)
}

/// The variables every exec in the dev container is given (decision 0161): what its user's
/// login shell held when it was made (`environ`, NUL-separated), less what the container holds
/// itself (`container_env`, `NAME=value`) and a shell's own (`PWD`, `SHLVL`, …), with the
/// `remoteEnv` of each entry of its `devcontainer.metadata` label over it (`${containerEnv:X}`
/// filled from the container's; a null value removes the name).
pub fn probe_env(
    environ: &[u8],
    container_env: &[String],
    metadata: &str,
) -> BTreeMap<String, String> {
    const SHELL_OWN: &[&str] = &["PWD", "OLDPWD", "SHLVL", "_", "HOSTNAME", "TERM", "HOME"];
    let container: BTreeMap<&str, &str> = container_env
        .iter()
        .filter_map(|e| e.split_once('='))
        .collect();
    // Only names an exec can be given (anything else would refuse every exec).
    let name_ok = |n: &str| {
        let mut cs = n.chars();
        cs.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let mut env: BTreeMap<String, String> = environ
        .split(|b| *b == 0)
        .filter_map(|e| std::str::from_utf8(e).ok())
        .filter_map(|e| e.split_once('='))
        .filter(|(k, v)| name_ok(k) && !SHELL_OWN.contains(k) && container.get(k) != Some(v))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let entries: Vec<Value> = serde_json::from_str(metadata).unwrap_or_default();
    for e in &entries {
        for (k, v) in e["remoteEnv"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| name_ok(k))
        {
            match v.as_str() {
                Some(v) => {
                    let mut value = String::new();
                    let mut rest = v;
                    while let Some(start) = rest.find("${containerEnv:") {
                        let Some(len) = rest[start..].find('}') else {
                            break;
                        };
                        let name = &rest[start + 15..start + len];
                        value.push_str(&rest[..start]);
                        value.push_str(
                            env.get(name)
                                .map(String::as_str)
                                .or_else(|| container.get(name).copied())
                                .unwrap_or_default(),
                        );
                        rest = &rest[start + len + 1..];
                    }
                    value.push_str(rest);
                    env.insert(k.clone(), value);
                }
                None => {
                    env.remove(k);
                }
            }
        }
    }
    env
}

#[cfg(test)]
mod tests;
