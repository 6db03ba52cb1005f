//! How an agent is contained (D.8): the presets a project's first agent copies, an agent's
//! containment resolved from its options, and the comparison that names what a change widens
//! (the risks a save must confirm).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::control::{AgentOptions, GitGuard, NetworkMode};
use crate::harness::PermissionMode;
use crate::sandbox::{Confinement, Enforcement};

/// The presets a new project's first agent copies (D.8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// none, ask.
    LockedDown,
    /// filtered, enforce, strict, bypass: the defaults of new agents.
    #[default]
    Guarded,
    /// open, bypass.
    Open,
}

/// How an agent is contained, resolved (what risks compare).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Containment {
    /// Its network mode.
    pub network: NetworkMode,
    /// Its egress enforcement: only for a filtered network.
    pub egress: Option<Enforcement>,
    /// Its confinement.
    pub confinement: Confinement,
    /// Its harness's permission mode.
    pub permissions: PermissionMode,
    /// How its scope's git directory is guarded.
    pub git_guard: GitGuard,
}

impl Preset {
    /// Its values.
    pub fn containment(self) -> Containment {
        match self {
            Preset::LockedDown => Containment {
                network: NetworkMode::None,
                egress: None,
                confinement: Confinement::Strict,
                permissions: PermissionMode::Ask,
                git_guard: GitGuard::Fetch,
            },
            Preset::Guarded => Containment {
                network: NetworkMode::Filtered,
                egress: Some(Enforcement::Enforce),
                confinement: Confinement::Strict,
                permissions: PermissionMode::Bypass,
                git_guard: GitGuard::Fetch,
            },
            Preset::Open => Containment {
                network: NetworkMode::Open,
                egress: None,
                confinement: Confinement::Strict,
                permissions: PermissionMode::Bypass,
                git_guard: GitGuard::Fetch,
            },
        }
    }

    /// The apply-preset rule: what a project's first agent leaves out comes from the preset.
    pub fn apply(self, mut o: AgentOptions) -> AgentOptions {
        let c = self.containment();
        if o.network.is_none() {
            o.network = Some(c.network);
            if o.egress.is_none() {
                o.egress = c.egress;
            }
        }
        o.confinement.get_or_insert(c.confinement);
        o.permissions.get_or_insert(c.permissions);
        o
    }
}

/// An agent's containment: what it set, else the defaults of new agents (Guarded).
pub fn containment(o: &AgentOptions) -> Containment {
    let d = Preset::Guarded.containment();
    let network = o.network.unwrap_or(d.network);
    Containment {
        network,
        egress: (network == NetworkMode::Filtered)
            .then(|| o.egress.unwrap_or(Enforcement::Enforce)),
        confinement: o.confinement.unwrap_or(d.confinement),
        permissions: o.permissions.unwrap_or(d.permissions),
        git_guard: o.git_guard.unwrap_or_default(),
    }
}

fn network_rank(c: &Containment) -> u8 {
    match (c.network, c.egress) {
        (NetworkMode::None, _) => 0,
        (NetworkMode::Filtered, Some(Enforcement::LogOnly)) => 2,
        (NetworkMode::Filtered, _) => 1,
        (NetworkMode::Open, _) => 3,
    }
}

fn network_word(c: &Containment) -> &'static str {
    match network_rank(c) {
        0 => "no network",
        1 => "a filtered network",
        2 => "a filtered network in log only (every host let through)",
        _ => "an open network",
    }
}

fn confinement_word(c: Confinement) -> &'static str {
    match c {
        Confinement::Strict => "strict",
        Confinement::Nested => "nested (runs containers)",
        Confinement::Privileged => "privileged",
    }
}

/// D.8: what `new` widens compared with `old`, one sentence each.
pub fn risks(old: &Containment, new: &Containment) -> Vec<String> {
    let mut r = Vec::new();
    if network_rank(new) > network_rank(old) {
        r.push(format!(
            "network: {} instead of {}",
            network_word(new),
            network_word(old)
        ));
    }
    if new.confinement > old.confinement {
        r.push(format!(
            "confinement: {} instead of {}",
            confinement_word(new.confinement),
            confinement_word(old.confinement)
        ));
    }
    if new.permissions > old.permissions {
        r.push(format!(
            "permissions: {} instead of {}",
            new.permissions.as_str(),
            old.permissions.as_str()
        ));
    }
    if new.git_guard > old.git_guard {
        r.push(format!(
            "gitGuard: {} (the host's .git writable in the sandbox) instead of {} (a git directory of its own)",
            new.git_guard.as_str(),
            old.git_guard.as_str()
        ));
    }
    r
}

/// A save that widens an agent's containment without `confirmRisks` (D.8).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}; send confirmRisks: true to save it", .risks.join("; "))]
pub struct RisksNotConfirmed {
    /// What the change widens.
    pub risks: Vec<String>,
}

/// D.8: a change from `old` to `new` is saved when it widens nothing or is `confirmed`.
pub fn confirm(
    old: &Containment,
    new: &Containment,
    confirmed: bool,
) -> Result<(), RisksNotConfirmed> {
    let risks = risks(old, new);
    if risks.is_empty() || confirmed {
        Ok(())
    } else {
        Err(RisksNotConfirmed { risks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_without_settings_is_guarded() {
        assert_eq!(
            containment(&AgentOptions::default()),
            Preset::Guarded.containment()
        );
        let open = AgentOptions {
            network: Some(NetworkMode::Open),
            egress: Some(Enforcement::LogOnly),
            ..Default::default()
        };
        // Enforcement means nothing without a filtered network.
        assert_eq!(containment(&open).egress, None);
    }

    #[test]
    fn widening_is_named_and_narrowing_is_not() {
        let guarded = Preset::Guarded.containment();
        let locked = Preset::LockedDown.containment();
        let open = Preset::Open.containment();
        assert!(risks(&guarded, &locked).is_empty());
        assert_eq!(
            risks(&guarded, &open),
            vec!["network: an open network instead of a filtered network".to_string()]
        );
        assert_eq!(
            risks(&locked, &guarded),
            vec![
                "network: a filtered network instead of no network".to_string(),
                "permissions: bypass instead of ask".to_string()
            ]
        );
        let log_only = Containment {
            egress: Some(Enforcement::LogOnly),
            ..guarded
        };
        assert_eq!(risks(&guarded, &log_only).len(), 1);
        let nested = Containment {
            confinement: Confinement::Nested,
            ..guarded
        };
        assert_eq!(
            risks(&guarded, &nested),
            vec!["confinement: nested (runs containers) instead of strict".to_string()]
        );
        let open_git = Containment {
            git_guard: GitGuard::Open,
            ..guarded
        };
        assert_eq!(
            risks(&guarded, &open_git),
            vec!["gitGuard: open (the host's .git writable in the sandbox) instead of fetch (a git directory of its own)".to_string()]
        );
        assert!(risks(&open_git, &guarded).is_empty());
    }

    #[test]
    fn a_widening_save_needs_confirmation() {
        let (g, o) = (Preset::Guarded.containment(), Preset::Open.containment());
        assert!(confirm(&g, &o, true).is_ok());
        assert!(confirm(&o, &g, false).is_ok());
        assert_eq!(
            confirm(&g, &o, false).unwrap_err().to_string(),
            "network: an open network instead of a filtered network; send confirmRisks: true to save it"
        );
    }

    #[test]
    fn a_preset_fills_what_the_first_agent_leaves_out() {
        let o = Preset::LockedDown.apply(AgentOptions::default());
        assert_eq!(o.network, Some(NetworkMode::None));
        assert_eq!(o.egress, None);
        assert_eq!(o.permissions, Some(PermissionMode::Ask));
        let given = AgentOptions {
            network: Some(NetworkMode::Filtered),
            ..Default::default()
        };
        // A network given keeps its own egress (the default's, enforce).
        assert_eq!(Preset::Open.apply(given).egress, None);
    }
}
