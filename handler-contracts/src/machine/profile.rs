//! Profiles (issue 30 item 3, the second seed's "Profiles", decision 0156): named machine
//! settings in the daemon's configuration, `<config>/profiles.toml` (`[profiles.<name>]`). A
//! machine request names one with `profile`; its own fields win, then the profile's, then the
//! daemon's defaults ([`apply`]). A profile with `disposable = true` is never made ahead of
//! time: an agent's `machine = "disposable:<profile>"` makes one per session from it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{MachineRequest, valid_id};
use crate::ValidationError;
use crate::allow::AllowEntry;

/// The prefix of an agent's `machine` that names a disposable profile.
pub const DISPOSABLE_PREFIX: &str = "disposable:";

/// The document `<config>/profiles.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profiles {
    /// Each profile by its name (a machine id's form: a lowercase DNS label).
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// One profile: what a machine made from it has unless its request says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// Shown in pickers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its image (still checked against the daemon's allowed images).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Instead of `image`: the absolute host folder whose dev container its machines are
    /// (decision 0161), made by the Dev Container CLI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<String>,
    /// A CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// A memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Where commands start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// A host folder mounted at the same path (decision 0163), held to a request's rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    /// More host folders (decision 0168), held to a request's rules; a request's add to them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<super::MachineMount>,
    /// `none`, `filtered` or `open`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// A filtered machine's allow-list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<AllowEntry>>,
    /// The agents a machine from it is made for (not with `disposable`: that machine takes the
    /// session's agent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// Parts every machine from it carries (agent CLIs as read-only mounts); an id no built
    /// part has is left out with a log line, the rest of the profile standing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<String>,
    /// Made per session, never ahead of time (`disposable:<name>` as an agent's machine).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disposable: bool,
    /// With `disposable`: milliseconds its machine is kept after its session (default 300000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disposable_delay: Option<u64>,
    /// The OCI runtime its machines run under (the seed's `ociRuntime`, e.g. `runsc`: gVisor),
    /// a name or an absolute path, passed to the engine as given (decision 0162). Never in a
    /// request: the boundary a machine is given is the operator's to choose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_runtime: Option<String>,
    /// Where its machines' agents keep their state (decision 0170): `volume` (the default:
    /// Handler's own folders). The seed's `host` (this host's own configuration, sign-in
    /// included) is refused: a sandbox never holds a sign-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateMode>,
    /// Who shares that state (decision 0170): `owner` (the default: each agent its own, kept
    /// across every sandbox and machine of it) or `shared` (the agents of one harness and one
    /// login share one state in every machine made from this profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_scope: Option<StateScope>,
    /// What a session does when a key it needs cannot be read (decision 0170): `fail` (the
    /// default, and the only one: a model key is the only key, and an agent cannot work
    /// without it). `drop` is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_unreadable: Option<SecretUnreadable>,
    /// The seed's per-harness needs filled by a profile: refused (decision 0170) — an agent's
    /// own settings (its account or provider, bindings, caches, "start from my own settings")
    /// give what it needs, and keys reach a machine only as phantoms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<BTreeMap<String, serde_json::Value>>")]
    pub needs: Option<BTreeMap<String, serde_json::Value>>,
}

/// A profile's `state` (decision 0170).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateMode {
    /// Handler's own folders (the default).
    Volume,
    /// This host's own configuration, sign-in included: refused.
    Host,
}

/// A profile's `stateScope` (decision 0170).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateScope {
    /// Each agent its own state (the default).
    Owner,
    /// One state per harness and login for every agent in the profile's machines.
    Shared,
}

/// A profile's `secretUnreadable` (decision 0170).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SecretUnreadable {
    /// The session is refused, naming the key (the default).
    Fail,
    /// Run without the key: refused.
    Drop,
}

/// A profile as the API lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileInfo {
    /// Its name.
    pub name: String,
    /// Its settings.
    pub profile: Profile,
}

fn invalid(path: String, message: impl Into<String>) -> ValidationError {
    ValidationError::new(path, message)
}

/// What decision 0170 refuses of a profile: `state = "host"`, `secretUnreadable = "drop"`,
/// `needs` — the field and why.
fn refused_state_fields(p: &Profile) -> Result<(), (&'static str, &'static str)> {
    if p.state == Some(StateMode::Host) {
        return Err((
            "state",
            "\"host\" would mount your own configuration, sign-in included, into the machine, and a Handler sandbox never holds a sign-in (its keys reach it as phantoms): leave state out (volume), and turn on an agent's \"start from my own settings\" to bring your settings without the sign-in",
        ));
    }
    if p.secret_unreadable == Some(SecretUnreadable::Drop) {
        return Err((
            "secretUnreadable",
            "\"drop\" would start an agent without its model key, which it cannot work without: leave it out (fail: the session is refused naming the key)",
        ));
    }
    if p.needs.is_some() {
        return Err((
            "needs",
            "a profile fills no agent's needs in Handler: an agent's own settings (its account or provider, bindings, caches, \"start from my own settings\") give what it needs, and keys reach a machine only as phantoms: remove needs",
        ));
    }
    Ok(())
}

impl Profiles {
    /// Each profile's own consistency: its name a machine id's form, a network the machines
    /// have, an allow-list only when filtered, a disposable profile naming no agents and a
    /// delay of at least a second, the delay only with `disposable`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        for (name, p) in &self.profiles {
            let at = |f: &str| format!("profiles.{name}.{f}");
            if !valid_id(name) {
                return Err(invalid(
                    format!("profiles.{name}"),
                    "a profile's name is a lowercase DNS label of at most 40 characters",
                ));
            }
            if let Some(n) = &p.network
                && !["none", "filtered", "open"].contains(&n.as_str())
            {
                return Err(invalid(
                    at("network"),
                    format!("{n:?} is not none, filtered or open"),
                ));
            }
            if let Some(d) = &p.devcontainer {
                if p.image.is_some() {
                    return Err(invalid(
                        at("devcontainer"),
                        "a profile names an image or a dev container's folder, not both",
                    ));
                }
                if !d.starts_with('/') {
                    return Err(invalid(
                        at("devcontainer"),
                        format!("{d:?} is not an absolute path"),
                    ));
                }
            }
            if p.allow.is_some() && p.network.as_deref() != Some("filtered") {
                return Err(invalid(
                    at("allow"),
                    "only a filtered profile has an allow-list",
                ));
            }
            refused_state_fields(p).map_err(|(f, m)| invalid(at(f), m))?;
            if p.disposable && !p.agents.is_empty() {
                return Err(invalid(
                    at("agents"),
                    "a disposable profile's machine takes its session's agent: name none",
                ));
            }
            if let Some(r) = &p.oci_runtime {
                if !crate::sandbox::is_oci_runtime(r) {
                    return Err(invalid(
                        at("ociRuntime"),
                        format!("{r:?} is not an OCI runtime's name or absolute path"),
                    ));
                }
                if p.devcontainer.is_some() {
                    return Err(invalid(
                        at("ociRuntime"),
                        "a dev container is made by the Dev Container CLI, which takes no OCI runtime: remove one of them",
                    ));
                }
            }
            match (p.disposable, p.disposable_delay) {
                (false, Some(_)) => {
                    return Err(invalid(
                        at("disposableDelay"),
                        "only with disposable = true",
                    ));
                }
                (true, Some(ms)) if ms < 1000 => {
                    return Err(invalid(at("disposableDelay"), "at least 1000 ms"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The names, for a message listing them.
    pub fn names(&self) -> String {
        if self.profiles.is_empty() {
            "none".into()
        } else {
            self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
        }
    }
}

/// `req` with what it leaves out taken from `p` (the request's own fields win; a list the
/// request gives replaces the profile's, but for `parts`: the profile's and the request's).
/// The daemon's defaults apply after.
pub fn apply(req: &MachineRequest, p: &Profile) -> MachineRequest {
    let or = |mine: &Option<String>, theirs: &Option<String>| mine.clone().or(theirs.clone());
    let network = or(&req.network, &p.network);
    // A request that names its own network does not inherit another network's list.
    let allow = match (&req.allow, &req.network) {
        (Some(a), _) => Some(a.clone()),
        (None, Some(_)) if req.network != p.network => None,
        (None, _) => p.allow.clone(),
    };
    // A request that names its image or its source takes neither of the profile's.
    let own_source = req.image.is_some() || req.source.is_some();
    let (source, devcontainer) = match (&p.devcontainer, own_source) {
        (Some(d), false) => (Some("devcontainer".to_string()), Some(d.clone())),
        _ => (req.source.clone(), req.devcontainer.clone()),
    };
    MachineRequest {
        name: req.name.clone(),
        source,
        devcontainer,
        image: if own_source || p.devcontainer.is_none() {
            or(&req.image, &p.image)
        } else {
            None
        },
        agents: if req.agents.is_empty() {
            p.agents.clone()
        } else {
            req.agents.clone()
        },
        cpus: or(&req.cpus, &p.cpus),
        memory: or(&req.memory, &p.memory),
        workdir: or(&req.workdir, &p.workdir),
        folder: or(&req.folder, &p.folder),
        // The profile's mounts, then the request's (one said twice counts once).
        mounts: {
            let mut m = p.mounts.clone();
            for x in &req.mounts {
                if !m.contains(x) {
                    m.push(x.clone());
                }
            }
            m
        },
        network,
        allow,
        profile: req.profile.clone(),
        parts: {
            // The profile's parts and the request's own: a machine carries both.
            let mut parts = p.parts.clone();
            for id in &req.parts {
                if !parts.contains(id) {
                    parts.push(id.clone());
                }
            }
            parts
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Profiles {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_request_wins_then_the_profile() {
        let p = doc(
            "[profiles.small]\nimage = \"img\"\ncpus = \"1\"\nmemory = \"256m\"\nnetwork = \"filtered\"\nallow = [\"a.example:443\"]\nagents = [\"a_1\"]\nfolder = \"/srv/p\"\nparts = [\"node\", \"codex\"]\n[[profiles.small.mounts]]\nsource = \"/srv/data\"\ntarget = \"/data\"\nreadOnly = true\n",
        );
        let small = &p.profiles["small"];
        let bare = MachineRequest {
            name: "box".into(),
            source: None,
            devcontainer: None,
            folder: None,
            mounts: vec![
                super::super::MachineMount::parse("/srv/data:/data:ro").unwrap(),
                super::super::MachineMount::parse("/srv/more").unwrap(),
            ],
            image: None,
            agents: vec![],
            cpus: None,
            memory: None,
            workdir: None,
            network: None,
            allow: None,
            profile: Some("small".into()),
            parts: vec!["gemini".into(), "codex".into()],
        };
        let got = apply(&bare, small);
        assert_eq!(got.image.as_deref(), Some("img"));
        assert_eq!(got.cpus.as_deref(), Some("1"));
        assert_eq!(got.memory.as_deref(), Some("256m"));
        assert_eq!(got.network.as_deref(), Some("filtered"));
        assert_eq!(got.allow.as_ref().map(Vec::len), Some(1));
        assert_eq!(got.agents, ["a_1"]);
        assert_eq!(got.folder.as_deref(), Some("/srv/p"));
        assert_eq!(
            got.parts,
            ["node", "codex", "gemini"],
            "the profile's parts and the request's, each once"
        );
        // Mounts add up: the profile's, then the request's, one said twice counted once.
        let targets: Vec<&str> = got.mounts.iter().map(|m| m.target.as_str()).collect();
        assert_eq!(targets, ["/data", "/srv/more"]);
        let mine = MachineRequest {
            memory: Some("2g".into()),
            network: Some("none".into()),
            agents: vec!["a_2".into()],
            ..bare.clone()
        };
        let got = apply(&mine, small);
        assert_eq!(got.memory.as_deref(), Some("2g"));
        assert_eq!(got.network.as_deref(), Some("none"));
        assert_eq!(got.allow, None, "another network's list is not inherited");
        assert_eq!(got.agents, ["a_2"]);
        assert_eq!(got.cpus.as_deref(), Some("1"));
    }

    #[test]
    fn a_profile_is_refused_naming_its_field() {
        for (text, path) in [
            ("[profiles.Big]\n", "profiles.Big"),
            ("[profiles.p]\nnetwork = \"bridge\"\n", "profiles.p.network"),
            (
                "[profiles.p]\nallow = [\"a.example:443\"]\n",
                "profiles.p.allow",
            ),
            (
                "[profiles.p]\ndisposable = true\nagents = [\"a_1\"]\n",
                "profiles.p.agents",
            ),
            (
                "[profiles.p]\ndisposableDelay = 5000\n",
                "profiles.p.disposableDelay",
            ),
            ("[profiles.p]\nstate = \"host\"\n", "profiles.p.state"),
            (
                "[profiles.p]\nsecretUnreadable = \"drop\"\n",
                "profiles.p.secretUnreadable",
            ),
            (
                "[profiles.p]\n[profiles.p.needs]\nclaudeConfigDirectory = \"/srv/claude\"\n",
                "profiles.p.needs",
            ),
            (
                "[profiles.p]\ndisposable = true\ndisposableDelay = 10\n",
                "profiles.p.disposableDelay",
            ),
        ] {
            let e = doc(text).validate().unwrap_err();
            assert_eq!(e.path, path, "{text}");
        }
        for bad in [
            "[profiles.p]\nociRuntime = \"--privileged\"\n",
            "[profiles.p]\nociRuntime = \"run sc\"\n",
            "[profiles.p]\nociRuntime = \"/usr/../bin/runsc\"\n",
            "[profiles.p]\nociRuntime = \"runsc\"\ndevcontainer = \"/srv/app\"\n",
        ] {
            assert_eq!(
                doc(bad).validate().unwrap_err().path,
                "profiles.p.ociRuntime",
                "{bad}"
            );
        }
        doc("[profiles.p]\nociRuntime = \"runsc\"\n")
            .validate()
            .unwrap();
        doc("[profiles.p]\nociRuntime = \"/usr/bin/runsc\"\n")
            .validate()
            .unwrap();
        assert!(toml::from_str::<Profiles>("[profiles.p]\nnope = 1\n").is_err());
        doc("[profiles.scratch]\ndisposable = true\ndisposableDelay = 3000\n")
            .validate()
            .unwrap();
        let team = doc(
            "[profiles.team]\nstate = \"volume\"\nstateScope = \"shared\"\nsecretUnreadable = \"fail\"\n",
        );
        team.validate().unwrap();
        assert_eq!(team.profiles["team"].state_scope, Some(StateScope::Shared));
        assert!(toml::from_str::<Profiles>("[profiles.p]\nstateScope = \"team\"\n").is_err());
    }
}
