//! `apiVersion` markers: one zero-sized type per contract, serialized as `handler.<contract>/v<N>`.
//!
//! Reading a document whose apiVersion names another contract, or a major version this build
//! does not know, is an error naming the version found (§0: a consumer MUST reject a major
//! version it does not know).

use std::borrow::Cow;

/// Splits `handler.<contract>/v<N>` into its contract and major version.
pub fn split_api_version(s: &str) -> Option<(&str, u32)> {
    let rest = s.strip_prefix("handler.")?;
    let (contract, major) = rest.rsplit_once("/v")?;
    if contract.is_empty() || major.is_empty() || !major.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((contract, major.parse().ok()?))
}

/// The error text for an apiVersion that is not `expected`.
pub fn api_version_mismatch(found: &str, contract: &str, major: u32) -> String {
    match split_api_version(found) {
        Some((c, m)) if c == contract => format!(
            "unknown major version v{m} of handler.{contract} (this Handler reads handler.{contract}/v{major})"
        ),
        Some((c, _)) => {
            format!("this is a handler.{c} document, expected handler.{contract}/v{major}")
        }
        None => format!("{found:?} is not an apiVersion: expected handler.{contract}/v{major}"),
    }
}

macro_rules! api_version {
    ($(#[$m:meta])* $name:ident, $contract:literal, $major:literal) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name;

        impl $name {
            /// The contract name, without the `handler.` prefix.
            pub const CONTRACT: &'static str = $contract;
            /// The one major version this build reads and writes.
            pub const MAJOR: u32 = $major;
            /// The full string, e.g. `handler.sandbox/v1`.
            pub const STR: &'static str = concat!("handler.", $contract, "/v", $major);
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(Self::STR)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s: std::borrow::Cow<'de, str> = serde::Deserialize::deserialize(d)?;
                if s == Self::STR {
                    Ok($name)
                } else {
                    Err(serde::de::Error::custom($crate::api_version::api_version_mismatch(
                        &s,
                        Self::CONTRACT,
                        Self::MAJOR,
                    )))
                }
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
            fn inline_schema() -> bool {
                true
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string", "const": Self::STR })
            }
        }
    };
}

api_version!(
    /// `handler.sandbox/v1` (contract A).
    SandboxApiVersion, "sandbox", 1
);
api_version!(
    /// `handler.harness/v1` (contract B, the descriptor).
    HarnessApiVersion, "harness", 1
);
api_version!(
    /// `handler.harness-launch/v1` (contract B, render's output).
    HarnessLaunchApiVersion, "harness-launch", 1
);
api_version!(
    /// `handler.account/v1` (contract E).
    AccountApiVersion, "account", 1
);
api_version!(
    /// `handler.provider/v1` (contract E).
    ProviderApiVersion, "provider", 1
);
api_version!(
    /// `handler.addon/v1` (contract G.1).
    AddonApiVersion, "addon", 1
);
api_version!(
    /// `handler.binding/v1` (contract G.2).
    BindingApiVersion, "binding", 1
);
api_version!(
    /// `handler.miniapp/v1` (contract H).
    MiniAppApiVersion, "miniapp", 1
);
api_version!(
    /// `handler.session/v1` (contract F).
    SessionApiVersion, "session", 1
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_versions() {
        assert_eq!(
            split_api_version("handler.sandbox/v1"),
            Some(("sandbox", 1))
        );
        assert_eq!(
            split_api_version("handler.harness-launch/v12"),
            Some(("harness-launch", 12))
        );
        assert_eq!(split_api_version("handler.sandbox/v"), None);
        assert_eq!(split_api_version("sandbox/v1"), None);
    }

    #[test]
    fn unknown_major_is_named() {
        let e = serde_json::from_str::<SandboxApiVersion>("\"handler.sandbox/v2\"").unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown major version v2 of handler.sandbox"),
            "{e}"
        );
        let e = serde_json::from_str::<SandboxApiVersion>("\"handler.account/v1\"").unwrap_err();
        assert!(
            e.to_string().contains("this is a handler.account document"),
            "{e}"
        );
        assert!(serde_json::from_str::<SandboxApiVersion>("\"handler.sandbox/v1\"").is_ok());
    }
}
