//! Addons and bindings as they are on disk (G.1, G.2): the addons loaded from two folders
//! (the platform's built-in ones, then the user's, a user addon replacing a built-in one of
//! its name), the bindings, which of them an agent may use, and what they add to an agent's
//! allow-list.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path as FsPath, PathBuf};

use handler_contracts::addon::{AddonManifest, Binding};
use handler_contracts::allow::AllowEntry;
use handler_contracts::parse::from_toml;
use handler_contracts::validate::{validate_addon, validate_binding};

use crate::daemon::config::DaemonConfig;
use crate::daemon::store::agents::{AgentStore, StoredAgent};
use crate::daemon::store::catalog::valid_name;
use crate::daemon::store::skills;

/// An addon as loaded from its folder.
#[derive(Debug, Clone)]
pub struct LoadedAddon {
    /// Its name (its folder's).
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// Whether it is one of the platform's.
    pub builtin: bool,
    /// Whether it is the user's and replaces a built-in one of its name.
    pub overrides_builtin: bool,
    /// The manifest, or why the addon's files are invalid.
    pub manifest: Result<AddonManifest, String>,
    /// Its skills' folder names (`skills/<skill>/`).
    pub skills: Vec<String>,
}

/// Why a binding cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    /// No binding of that name.
    #[error("no binding {0:?}")]
    Unknown(String),
    /// Its file is invalid.
    #[error("binding {name:?} is invalid: {why}")]
    Invalid {
        /// The binding.
        name: String,
        /// What is wrong in its file.
        why: String,
    },
    /// It names an addon that is not there.
    #[error("binding {name:?}: unknown addon {addon:?}")]
    UnknownAddon {
        /// The binding.
        name: String,
        /// The addon it names.
        addon: String,
    },
    /// Its addon's files are invalid.
    #[error("binding {name:?}: addon {addon:?} is invalid: {why}")]
    InvalidAddon {
        /// The binding.
        name: String,
        /// Its addon.
        addon: String,
        /// What is wrong with the addon.
        why: String,
    },
}

/// Why an agent's selection of bindings breaks G3.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    /// A binding of the selection cannot be used.
    #[error("bindings[{index}]: {source}")]
    Unusable {
        /// Its place in the selection.
        index: usize,
        /// Why.
        source: BindingError,
    },
    /// Two bindings of one addon.
    #[error("bindings[{index}]: {name:?} and {other:?} both use addon {addon}")]
    SameAddon {
        /// The place of the second.
        index: usize,
        /// The second binding.
        name: String,
        /// The first.
        other: String,
        /// Their addon.
        addon: String,
    },
    /// Two addons declaring one command.
    #[error("bindings[{index}]: addons {other} and {addon} both declare the command {command:?}")]
    SameCommand {
        /// The place of the second binding.
        index: usize,
        /// The first addon.
        other: String,
        /// The second addon.
        addon: String,
        /// The command.
        command: String,
    },
}

/// A binding as loaded from its file.
#[derive(Debug, Clone)]
pub struct LoadedBinding {
    /// Its name (its file's stem).
    pub name: String,
    /// What the file says, when it could be read.
    pub binding: Option<Binding>,
    /// Why it cannot be selected (G2), or why the file could not be read.
    pub error: Option<String>,
}

/// Addons and bindings as they are on disk now.
#[derive(Debug, Clone, Default)]
pub struct AddonSet {
    /// The addons, by name.
    pub addons: BTreeMap<String, LoadedAddon>,
    /// The bindings, by name.
    pub bindings: BTreeMap<String, LoadedBinding>,
}

pub(crate) fn read_addon(dir: &FsPath, name: &str, builtin: bool) -> LoadedAddon {
    let skills = skills::addon_skill_names(dir);
    let manifest = (|| {
        let text = std::fs::read_to_string(dir.join("addon.toml"))
            .map_err(|e| format!("addons/{name}/addon.toml: {e}"))?;
        let a: AddonManifest =
            from_toml(&format!("addons/{name}/addon.toml"), &text).map_err(|e| e.to_string())?;
        validate_addon(&a, Some(name)).map_err(|e| format!("addons/{name}/addon.toml: {e}"))?;
        let has_recipe = dir.join("Containerfile").is_file();
        if a.image.is_some() && !has_recipe {
            return Err(format!(
                "addons/{name}: image is set but it has no Containerfile"
            ));
        }
        if a.image.is_none() && has_recipe {
            return Err(format!("addons/{name}: a Containerfile but no image"));
        }
        for s in &skills {
            skills::check_skill_dir(&dir.join("skills").join(s), s)
                .map_err(|e| format!("addons/{name}: {e}"))?;
        }
        Ok(a)
    })();
    LoadedAddon {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        builtin,
        overrides_builtin: false,
        manifest,
        skills,
    }
}

fn addon_dirs(root: &FsPath) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut v: Vec<(String, PathBuf)> = rd
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
        .filter(|(n, _)| valid_name(n))
        .collect();
    v.sort();
    v
}

/// A binding's document.
pub fn binding_path(config: &DaemonConfig, name: &str) -> PathBuf {
    config.bindings_dir.join(format!("{name}.toml"))
}

/// The store path of a binding's secret (E3, D.15).
pub fn secret_path(binding: &str, slot: &str) -> String {
    format!("bindings/{binding}/{slot}")
}

impl AddonSet {
    /// Reads every addon and binding now.
    pub fn read(config: &DaemonConfig) -> AddonSet {
        let mut addons = BTreeMap::new();
        for (name, dir) in addon_dirs(&config.builtin_addons_dir) {
            addons.insert(name.clone(), read_addon(&dir, &name, true));
        }
        for (name, dir) in addon_dirs(&config.addons_dir) {
            let overrides = addons.contains_key(&name);
            let mut a = read_addon(&dir, &name, false);
            a.overrides_builtin = overrides;
            addons.insert(name, a);
        }
        let mut bindings = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir(&config.bindings_dir) {
            for e in rd.flatten() {
                let p = e.path();
                let (Some(stem), Some(ext)) = (
                    p.file_stem().and_then(|s| s.to_str()),
                    p.extension().and_then(|s| s.to_str()),
                ) else {
                    continue;
                };
                if ext != "toml" || !valid_name(stem) {
                    continue;
                }
                let name = stem.to_string();
                let what = format!("bindings/{name}.toml");
                let loaded = match std::fs::read_to_string(&p)
                    .map_err(|e| format!("{what}: {e}"))
                    .and_then(|t| from_toml::<Binding>(&what, &t).map_err(|e| e.to_string()))
                {
                    Err(error) => LoadedBinding {
                        name: name.clone(),
                        binding: None,
                        error: Some(error),
                    },
                    Ok(b) => {
                        let addon = addons
                            .get(&b.addon)
                            .map(|a: &LoadedAddon| a.manifest.as_ref().map_err(String::as_str));
                        let error = validate_binding(&b, addon)
                            .err()
                            .map(|e| format!("{what}: {e}"));
                        LoadedBinding {
                            name: name.clone(),
                            binding: Some(b),
                            error,
                        }
                    }
                };
                bindings.insert(name, loaded);
            }
        }
        AddonSet { addons, bindings }
    }

    /// A valid binding and its valid addon.
    pub fn usable(
        &self,
        name: &str,
    ) -> Result<(&Binding, &LoadedAddon, &AddonManifest), BindingError> {
        let b = self
            .bindings
            .get(name)
            .ok_or_else(|| BindingError::Unknown(name.into()))?;
        let invalid = |why: &str| BindingError::Invalid {
            name: name.into(),
            why: why.into(),
        };
        if let Some(e) = &b.error {
            return Err(invalid(e));
        }
        let binding = b.binding.as_ref().ok_or_else(|| invalid("unreadable"))?;
        let a = self
            .addons
            .get(&binding.addon)
            .ok_or_else(|| BindingError::UnknownAddon {
                name: name.into(),
                addon: binding.addon.clone(),
            })?;
        let m = a
            .manifest
            .as_ref()
            .map_err(|e| BindingError::InvalidAddon {
                name: name.into(),
                addon: a.name.clone(),
                why: e.clone(),
            })?;
        Ok((binding, a, m))
    }

    /// G3: a selection of bindings an agent may be saved with.
    pub fn check_selection(&self, selected: &[String]) -> Result<(), SelectionError> {
        let mut by_addon: BTreeMap<&str, &str> = BTreeMap::new();
        let mut commands: BTreeMap<&str, &str> = BTreeMap::new();
        for (i, name) in selected.iter().enumerate() {
            let (_, a, m) = self
                .usable(name)
                .map_err(|source| SelectionError::Unusable { index: i, source })?;
            if let Some(other) = by_addon.insert(&a.name, name) {
                return Err(SelectionError::SameAddon {
                    index: i,
                    name: name.clone(),
                    other: other.to_string(),
                    addon: a.name.clone(),
                });
            }
            for c in &m.commands {
                if let Some(other) = commands.insert(c, &a.name) {
                    return Err(SelectionError::SameCommand {
                        index: i,
                        other: other.to_string(),
                        addon: a.name.clone(),
                        command: c.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The agents that picked a binding: `agents/<project>/<name>`, `ad-hoc/<agent id>`.
    pub fn used_by(agents: &AgentStore, binding: &str) -> Vec<String> {
        let projects = agents.projects();
        let mut v: Vec<String> = agents
            .agents()
            .iter()
            .filter(|a| a.options.bindings.iter().any(|b| b == binding))
            .map(|a| match &a.project_id {
                Some(pid) => format!(
                    "agents/{}/{}",
                    projects
                        .iter()
                        .find(|p| &p.id == pid)
                        .map(|p| p.name.clone())
                        .unwrap_or_else(|| pid.clone()),
                    a.name.clone().unwrap_or_default()
                ),
                None => format!("ad-hoc/{}", a.id),
            })
            .collect();
        v.sort();
        v
    }
}

/// The egress its bindings' addons give an agent (G4), read without resolving any secret; a
/// binding that is not usable gives none.
pub fn egress_of(config: &DaemonConfig, agent: &StoredAgent) -> Vec<AllowEntry> {
    if agent.options.bindings.is_empty() {
        return Vec::new();
    }
    let set = AddonSet::read(config);
    agent
        .options
        .bindings
        .iter()
        .filter_map(|name| set.usable(name).ok())
        .flat_map(|(_, _, m)| m.egress.iter().cloned())
        .collect()
}

/// The required hosts an agent's bindings add (E4), for its view: `addon <addon>: <binding>`.
pub fn required_hosts(config: &DaemonConfig, bindings: &[String]) -> Vec<(AllowEntry, String)> {
    if bindings.is_empty() {
        return Vec::new();
    }
    let set = AddonSet::read(config);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for name in bindings {
        if let Ok((_, a, m)) = set.usable(name) {
            for e in &m.egress {
                if seen.insert((e.clone(), name.clone())) {
                    out.push((e.clone(), format!("addon {}: {name}", a.name)));
                }
            }
        }
    }
    out
}
