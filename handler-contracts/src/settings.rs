//! The rules an agent's settings follow when it is saved (D.1, D.8, D.18), those that need no
//! file: its models (1..n, once each, each usable, E1, and made for its project's context,
//! D.19), egress and allow-list only for a filtered network, a permission mode its harnesses
//! offer, an interface's limits (unattended in bypass, 1 s to 24 h, 64 KiB schemas).

use crate::containment::containment;
use crate::context::{self, NotForContext};
use crate::control::{AgentOptions, ModelAccess, NetworkMode};
use crate::harness::PermissionMode;
use crate::validate::{AccessCatalog, ValidationError, check_model_access};

/// The largest interface schema (`fields`, `result`), serialized.
pub const INTERFACE_SCHEMA_MAX_BYTES: usize = 64 * 1024;
/// The longest run of an agent with an interface, in seconds.
pub const INTERFACE_TIMEOUT_MAX_SEC: u32 = 86_400;

/// Settings a save refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// No model.
    #[error("models: at least one model")]
    NoModel,
    /// A model listed twice.
    #[error("models[{0}]: listed twice")]
    Twice(usize),
    /// A model that is not usable (E1).
    #[error("models[{index}]: {error}")]
    Model {
        /// Its index.
        index: usize,
        /// Why.
        error: ValidationError,
    },
    /// A model not made for the project's context (D.19).
    #[error("models[{index}]: {error}")]
    Context {
        /// Its index.
        index: usize,
        /// Why.
        error: NotForContext,
    },
    /// Enforcement without a filtered network.
    #[error("egress: only for a filtered network")]
    EgressNotFiltered,
    /// An allow-list without a filtered network.
    #[error("allow: only for a filtered network")]
    AllowNotFiltered,
    /// A permission mode one of its models' harnesses does not offer.
    #[error("permissions: {harness} does not offer {mode} (models[{index}])")]
    Permissions {
        /// The harness.
        harness: String,
        /// The mode asked for.
        mode: &'static str,
        /// The model's index.
        index: usize,
    },
    /// An interface on an agent that asks permission.
    #[error(
        "permissions: an agent with an interface runs unattended: bypass (or ask, every request refused)"
    )]
    InterfaceNotBypass,
    /// An interface's timeout out of range.
    #[error("timeoutSec: 1 to 86400")]
    InterfaceTimeout,
    /// An interface's schema too large.
    #[error("{0}: larger than 64 KiB")]
    InterfaceTooLarge(&'static str),
    /// An interface's schema that is not a JSON Schema (draft 2020-12), or `fields` not an
    /// object schema.
    #[error("interface.{field}: {reason}")]
    InterfaceSchema {
        /// `fields` or `result`.
        field: &'static str,
        /// Why, from the validator.
        reason: crate::run::SchemaError,
    },
}

impl SettingsError {
    /// The API problem's title.
    pub fn title(&self) -> &'static str {
        match self {
            SettingsError::NoModel | SettingsError::Twice(_) | SettingsError::Model { .. } => {
                "model access unusable"
            }
            SettingsError::Context { .. } => "not for this project's context",
            SettingsError::EgressNotFiltered | SettingsError::AllowNotFiltered => "agent invalid",
            SettingsError::Permissions { .. } => "permissions unusable",
            SettingsError::InterfaceNotBypass
            | SettingsError::InterfaceTimeout
            | SettingsError::InterfaceTooLarge(_)
            | SettingsError::InterfaceSchema { .. } => "interface invalid",
        }
    }

    /// Whether it is a conflict with the project (409) rather than a bad request (400).
    pub fn is_conflict(&self) -> bool {
        matches!(self, SettingsError::Context { .. })
    }
}

/// The harness a model runs: the one it names, else its account's ("" when neither).
pub fn resolved_harness(catalog: &dyn AccessCatalog, m: &ModelAccess) -> String {
    if let Some(h) = &m.harness {
        return h.clone();
    }
    m.account
        .as_ref()
        .and_then(|a| catalog.account(a))
        .and_then(|r| r.ok().map(|a| a.harness.clone()))
        .unwrap_or_default()
}

/// The models (1..n, once each, usable, made for `context`), the network settings and the
/// permission mode of an agent being saved.
pub fn check_models(
    catalog: &dyn AccessCatalog,
    context: Option<&str>,
    models: &[ModelAccess],
    o: &AgentOptions,
) -> Result<(), SettingsError> {
    if models.is_empty() {
        return Err(SettingsError::NoModel);
    }
    for (i, m) in models.iter().enumerate() {
        if models[..i].contains(m) {
            return Err(SettingsError::Twice(i));
        }
        check_model_access(m, catalog).map_err(|error| SettingsError::Model { index: i, error })?;
        context::check(catalog, context, m)
            .map_err(|error| SettingsError::Context { index: i, error })?;
    }
    let c = containment(o);
    if o.egress.is_some() && c.network != NetworkMode::Filtered {
        return Err(SettingsError::EgressNotFiltered);
    }
    if !o.allow.is_empty() && c.network != NetworkMode::Filtered {
        return Err(SettingsError::AllowNotFiltered);
    }
    for (i, m) in models.iter().enumerate() {
        let h = resolved_harness(catalog, m);
        if let Some(d) = catalog.descriptor(&h)
            && !d.permissions.contains_key(&c.permissions)
        {
            return Err(SettingsError::Permissions {
                harness: h,
                mode: c.permissions.as_str(),
                index: i,
            });
        }
    }
    Ok(())
}

/// D.18: an interface's agent runs unattended (bypass), 1 s to 24 h, with schemas of at most
/// 64 KiB that are JSON Schemas (draft 2020-12; `fields` an object schema).
pub fn check_interface(o: &AgentOptions) -> Result<(), SettingsError> {
    let Some(iface) = &o.interface else {
        return Ok(());
    };
    // Ask is ask-and-deny (the built-in skill-review's, D.18): the daemon refuses every request.
    if !matches!(
        containment(o).permissions,
        PermissionMode::Bypass | PermissionMode::Ask
    ) {
        return Err(SettingsError::InterfaceNotBypass);
    }
    if iface.timeout_sec == 0 || iface.timeout_sec > INTERFACE_TIMEOUT_MAX_SEC {
        return Err(SettingsError::InterfaceTimeout);
    }
    for (field, s) in [
        ("fields", iface.fields.as_ref()),
        ("result", Some(&iface.result)),
    ] {
        if let Some(s) = s
            && serde_json::to_vec(s).map(|v| v.len()).unwrap_or(0) > INTERFACE_SCHEMA_MAX_BYTES
        {
            return Err(SettingsError::InterfaceTooLarge(field));
        }
        if let Some(s) = s {
            crate::run::check_schema(s, field == "fields")
                .map_err(|reason| SettingsError::InterfaceSchema { field, reason })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::AgentInterface;
    use crate::sandbox::Enforcement;
    use crate::validate::UnusableDocument;
    use crate::{Account, HarnessDescriptor, Provider};

    struct Empty;
    impl AccessCatalog for Empty {
        fn descriptor(&self, _: &str) -> Option<&HarnessDescriptor> {
            None
        }
        fn account(&self, _: &str) -> Option<Result<&Account, &UnusableDocument>> {
            None
        }
        fn provider(&self, _: &str) -> Option<Result<&Provider, &UnusableDocument>> {
            None
        }
    }

    #[test]
    fn models_are_one_or_more_and_each_usable() {
        let o = AgentOptions::default();
        assert_eq!(
            check_models(&Empty, None, &[], &o),
            Err(SettingsError::NoModel)
        );
        let m = ModelAccess {
            account: Some("gone".into()),
            ..Default::default()
        };
        let e = check_models(&Empty, None, std::slice::from_ref(&m), &o).unwrap_err();
        assert!(matches!(e, SettingsError::Model { index: 0, .. }), "{e}");
        assert_eq!(e.title(), "model access unusable");
        let twice = check_models(&Empty, None, &[m.clone(), m], &o).unwrap_err();
        // The first is checked before the second is found twice.
        assert!(matches!(twice, SettingsError::Model { index: 0, .. }));
    }

    #[test]
    fn an_interface_runs_unattended_within_its_limits() {
        let iface: AgentInterface =
            serde_json::from_value(serde_json::json!({"result": {"type": "object"}})).unwrap();
        let mut o = AgentOptions {
            interface: Some(iface.clone()),
            ..Default::default()
        };
        assert_eq!(check_interface(&o), Ok(()));
        o.permissions = Some(PermissionMode::Ask);
        assert_eq!(check_interface(&o), Ok(()), "ask-and-deny");
        o.permissions = Some(PermissionMode::AcceptEdits);
        assert_eq!(check_interface(&o), Err(SettingsError::InterfaceNotBypass));
        assert!(
            SettingsError::InterfaceNotBypass
                .to_string()
                .starts_with("permissions: ")
        );
        o.permissions = None;
        o.interface = Some(AgentInterface {
            timeout_sec: 0,
            ..iface.clone()
        });
        assert_eq!(check_interface(&o), Err(SettingsError::InterfaceTimeout));
        o.interface = Some(AgentInterface {
            result: serde_json::json!({"description": "x".repeat(INTERFACE_SCHEMA_MAX_BYTES)}),
            ..iface.clone()
        });
        assert_eq!(
            check_interface(&o).unwrap_err().to_string(),
            "result: larger than 64 KiB"
        );
        o.interface = Some(AgentInterface {
            fields: Some(serde_json::json!({"type": "array"})),
            result: serde_json::json!({"type": "object"}),
            ..iface
        });
        let e = check_interface(&o).unwrap_err();
        assert_eq!(e.title(), "interface invalid");
        assert!(e.to_string().starts_with("interface.fields: "), "{e}");
    }

    #[test]
    fn network_settings_need_a_filtered_network() {
        let m = ModelAccess::default();
        let o = AgentOptions {
            network: Some(NetworkMode::Open),
            egress: Some(Enforcement::LogOnly),
            ..Default::default()
        };
        // With no usable model the models fail first; the network rule is checked after them.
        assert!(matches!(
            check_models(&Empty, None, &[m], &o),
            Err(SettingsError::Model { .. })
        ));
        assert_eq!(SettingsError::EgressNotFiltered.title(), "agent invalid");
    }
}
