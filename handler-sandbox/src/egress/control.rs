//! A machine's proxy's control socket, pure (decision 0166): what one exec says to the running
//! proxy (its own injections, held while its connection stays open), what the proxy answers,
//! and how the injections of the execs that hold some make one set.

use handler_contracts::sandbox::Injection;
use serde::{Deserialize, Serialize};

use crate::egress::inject::{InjectionError, InjectionSet};

/// The longest request line the proxy reads on its control socket.
pub const MAX_REQUEST: u64 = 1 << 20;

/// What an exec sends, one JSON line: its injections (values included: the socket is reached
/// only from the host, decision 0166).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ControlRequest {
    /// The exec's injections, held until it closes the connection.
    pub injections: Vec<Injection>,
}

impl std::fmt::Debug for ControlRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlRequest")
            .field("injections", &self.injections)
            .finish()
    }
}

/// What the proxy answers, one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlAnswer {
    /// Whether the injections are held.
    pub ok: bool,
    /// Why not (never a value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The set of the proxy's own injections (`base`, from its configuration) and each live exec's
/// (`held`): one injection said twice (the same in every field) counts once; a phantom said
/// again with another value or other hosts is refused, as in one exec's.
pub fn combine<'a>(
    base: &'a [Injection],
    held: impl IntoIterator<Item = &'a [Injection]>,
) -> Result<InjectionSet, InjectionError> {
    let mut all: Vec<Injection> = Vec::new();
    for i in base.iter().chain(held.into_iter().flatten()) {
        if !all.contains(i) {
            all.push(i.clone());
        }
    }
    InjectionSet::new(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inj(name: &str, phantom: &str, value: &str, host: &str) -> Injection {
        serde_json::from_value(serde_json::json!({
            "name": name, "phantom": phantom, "value": value, "hosts": [host]
        }))
        .unwrap()
    }

    #[test]
    fn the_live_execs_injections_make_one_set_each_said_once() {
        let a = [inj(
            "k",
            "phantom-aaaaaaaa",
            "secret-111111111",
            "api.x.com:443",
        )];
        let b = [inj(
            "k",
            "phantom-bbbbbbbb",
            "secret-111111111",
            "api.x.com:443",
        )];
        let s = combine(&[], [&a[..], &a[..], &b[..]]).unwrap();
        // Both phantoms swapped towards the host, once each.
        let (out, hits) = s
            .request_rules("api.x.com", 443)
            .bytes(b"phantom-aaaaaaaa phantom-bbbbbbbb");
        assert_eq!(out, b"secret-111111111 secret-111111111");
        assert!(hits.injected.contains("k"));
        assert!(!s.injects_into("other.com", 443));
        // None held: nothing is decrypted.
        assert!(combine(&[], std::iter::empty()).unwrap().is_empty());
        // One phantom for two values: refused, whoever said it.
        let c = [inj(
            "k2",
            "phantom-aaaaaaaa",
            "secret-222222222",
            "api.x.com:443",
        )];
        assert!(matches!(
            combine(&[], [&a[..], &c[..]]),
            Err(InjectionError::DuplicatePhantom { .. })
        ));
    }

    #[test]
    fn a_request_shows_no_value_and_refuses_unknown_fields() {
        let r = ControlRequest {
            injections: vec![inj(
                "k",
                "phantom-aaaaaaaa",
                "secret-111111111",
                "a.com:443",
            )],
        };
        assert!(!format!("{r:?}").contains("secret-1"));
        let back: ControlRequest =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(serde_json::from_str::<ControlRequest>(r#"{"injections":[],"x":1}"#).is_err());
    }
}
