//! Rules both the services and the launch apply, pure (no I/O): an agent's containment and
//! the risks of widening it (D.8), the host a container reaches for a host URL and the hosts a
//! model requires (E4), the contexts a model may run in (D.19). On their way to the pure crates
//! (issue 12, item 4).

use handler_contracts::allow::{AllowEntry, entry_for_url};
use handler_contracts::control::{AgentOptions, ModelAccess, NetworkMode, Preset, RequiredHost};
use handler_contracts::harness::PermissionMode;
use handler_contracts::sandbox::{Confinement, Enforcement};
use handler_contracts::validate::{AccessCatalog, check_model_access};

use crate::daemon::store::catalog::Snapshot;

/// How an agent is contained, resolved (what risks compare).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Containment {
    /// The network mode.
    pub network: NetworkMode,
    /// The filter's enforcement (filtered only).
    pub egress: Option<Enforcement>,
    /// The confinement.
    pub confinement: Confinement,
    /// The harness's permission mode.
    pub permissions: PermissionMode,
}

/// A preset's values.
pub fn preset_containment(preset: Preset) -> Containment {
    {
        match preset {
            Preset::LockedDown => Containment {
                network: NetworkMode::None,
                egress: None,
                confinement: Confinement::Strict,
                permissions: PermissionMode::Ask,
            },
            Preset::Guarded => Containment {
                network: NetworkMode::Filtered,
                egress: Some(Enforcement::Enforce),
                confinement: Confinement::Strict,
                permissions: PermissionMode::Bypass,
            },
            Preset::Open => Containment {
                network: NetworkMode::Open,
                egress: None,
                confinement: Confinement::Strict,
                permissions: PermissionMode::Bypass,
            },
        }
    }
}

/// An agent's containment: what it set, else the defaults of new agents (Guarded).
pub fn containment(o: &AgentOptions) -> Containment {
    let d = preset_containment(Preset::Guarded);
    let network = o.network.unwrap_or(d.network);
    Containment {
        network,
        egress: (network == NetworkMode::Filtered)
            .then(|| o.egress.unwrap_or(Enforcement::Enforce)),
        confinement: o.confinement.unwrap_or(d.confinement),
        permissions: o.permissions.unwrap_or(d.permissions),
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

/// D.8: what `new` widens compared with `old`.
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
        let w = |c: Confinement| match c {
            Confinement::Strict => "strict",
            Confinement::Nested => "nested (runs containers)",
            Confinement::Privileged => "privileged",
        };
        r.push(format!(
            "confinement: {} instead of {}",
            w(new.confinement),
            w(old.confinement)
        ));
    }
    if new.permissions > old.permissions {
        r.push(format!(
            "permissions: {} instead of {}",
            new.permissions.as_str(),
            old.permissions.as_str()
        ));
    }
    r
}

/// The host a container reaches for a host URL (E4: the machine's loopback is the container
/// host's name in a container).
pub fn container_host(host: &str) -> String {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    if h == "localhost" || h == "::1" || h.starts_with("127.") {
        "host.containers.internal".to_string()
    } else {
        host.to_string()
    }
}

/// E4: the hosts a model's account or provider requires, each with what requires it.
pub fn required_hosts(snap: &Snapshot, m: &ModelAccess) -> Vec<RequiredHost> {
    let mut out = Vec::new();
    if let Some(a) = &m.account
        && let Some(Ok(acc)) = snap.account(a)
        && let Some(login) = snap.descriptor(&acc.harness).and_then(|d| d.login.as_ref())
    {
        for h in &login.hosts {
            out.push(RequiredHost {
                host: h.clone(),
                by: format!("account {a}"),
            });
        }
    }
    if let Some(p) = &m.provider
        && let Ok(r) = check_model_access(m, snap)
        && let (Some(proto), Some(Ok(prov))) = (r.protocol, snap.provider(p))
        && let Some(url) = prov.endpoints.get(&proto)
        && let Some((host, port)) = entry_for_url(url)
        && let Ok(e) = AllowEntry::parse(&format!("{}:{port}", container_host(&host)))
    {
        out.push(RequiredHost {
            host: e,
            by: format!("provider {p}"),
        });
    }
    out
}

/// The contexts an account or a provider may be used in.
pub fn contexts_of(snap: &Snapshot, m: &ModelAccess) -> Option<Vec<String>> {
    if let Some(a) = &m.account {
        snap.accounts.get(a)?.as_ref().ok()?.contexts.clone()
    } else if let Some(p) = &m.provider {
        snap.providers.get(p)?.as_ref().ok()?.contexts.clone()
    } else {
        None
    }
}

/// D.19: `None` when the model may run in a project of `context`, else why not.
pub fn check(snap: &Snapshot, context: Option<&str>, m: &ModelAccess) -> Option<String> {
    let ctx = context?;
    let list = contexts_of(snap, m).unwrap_or_default();
    if list.iter().any(|c| c == "any" || c == ctx) {
        return None;
    }
    let what = m
        .account
        .as_ref()
        .map(|a| format!("account {a:?}"))
        .or_else(|| m.provider.as_ref().map(|p| format!("provider {p:?}")))
        .unwrap_or_default();
    Some(format!(
        "{what} is not made for this project's context {ctx:?} (its contexts: {})",
        if list.is_empty() {
            "none".into()
        } else {
            list.join(", ")
        }
    ))
}
