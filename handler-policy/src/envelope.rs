//! The JSON-RPC 2.0 envelope, read and nothing more: id as raw JSON, method, and params, result
//! or error as raw text borrowed from the frame; plus the id keys used to route responses.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::json::Str;

/// One frame's envelope. Every value borrows from the frame.
#[derive(Debug, Default)]
pub(crate) struct Envelope<'a> {
    pub id: Option<&'a RawValue>,
    pub method: Option<&'a RawValue>,
    pub params: Option<&'a RawValue>,
    pub result: Option<&'a RawValue>,
    pub error: Option<&'a RawValue>,
    /// A member of the envelope was given twice (a message read differently by different
    /// parsers: refused).
    pub duplicate: bool,
}

impl<'de> Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Envelope<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON-RPC message object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut env = Envelope::default();
                while let Some(Str(k)) = map.next_key::<Str<'de>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    let slot = match k.as_ref() {
                        "id" => &mut env.id,
                        "method" => &mut env.method,
                        "params" => &mut env.params,
                        "result" => &mut env.result,
                        "error" => &mut env.error,
                        _ => continue,
                    };
                    if slot.is_some() {
                        env.duplicate = true;
                    }
                    *slot = Some(v);
                }
                Ok(env)
            }
        }
        d.deserialize_map(V)
    }
}

/// What a frame is.
#[derive(Debug)]
pub(crate) enum Kind<'a> {
    Request {
        id: &'a RawValue,
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    Notification {
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    Response {
        id: &'a RawValue,
        result: Option<&'a RawValue>,
        error: Option<&'a RawValue>,
    },
}

/// Why a frame is not a message the pipeline can route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// Not JSON (or not UTF-8): JSON-RPC's parse error.
    NotJson(String),
    /// A JSON array: a batch, which ACP does not use.
    Batch,
    /// JSON, not an object.
    NotObject,
    /// An object that is neither a request, a notification nor a response. The id, when the
    /// object had a usable one, for the error.
    Invalid {
        reason: &'static str,
        id: Option<String>,
    },
}

/// Reads a frame's envelope.
pub(crate) fn parse(frame: &[u8]) -> Result<(Envelope<'_>, Kind<'_>), Malformed> {
    let first = frame.iter().copied().find(|b| !b.is_ascii_whitespace());
    let env: Envelope<'_> = match serde_json::from_slice(frame) {
        Ok(env) => env,
        Err(e) => {
            return Err(match (first, e.classify()) {
                (Some(b'['), serde_json::error::Category::Data) => Malformed::Batch,
                (_, serde_json::error::Category::Data) => Malformed::NotObject,
                _ => Malformed::NotJson(e.to_string()),
            });
        }
    };
    let usable_id = env
        .id
        .filter(|id| id_key(id).is_some())
        .map(|id| id.get().to_owned());
    let invalid = |reason| Malformed::Invalid {
        reason,
        id: usable_id.clone(),
    };
    if env.duplicate {
        return Err(invalid("a member of the envelope is given twice"));
    }
    if let Some(m) = env.method {
        let Some(method) = crate::json::string(m) else {
            return Err(invalid("method is not a string"));
        };
        if env.result.is_some() || env.error.is_some() {
            return Err(invalid("a request cannot carry result or error"));
        }
        let params = env.params;
        let kind = match env.id {
            None => Kind::Notification { method, params },
            Some(id) if id_key(id).is_some() => Kind::Request { id, method, params },
            Some(_) => return Err(invalid("id must be a string or a number")),
        };
        return Ok((env, kind));
    }
    match (env.id, env.result, env.error) {
        (Some(id), result, error) if result.is_some() != error.is_some() => {
            if id_key(id).is_none() {
                return Err(invalid("a response's id must be a string or a number"));
            }
            let kind = Kind::Response { id, result, error };
            Ok((env, kind))
        }
        (_, Some(_), Some(_)) => Err(invalid("a response has both result and error")),
        _ => Err(invalid("neither a request, a notification nor a response")),
    }
}

/// The routing key of an id: strings by their decoded value, numbers by their text. `None` for
/// what is not an id (null, bool, object, array).
pub(crate) fn id_key(raw: &RawValue) -> Option<IdKey> {
    let text = raw.get();
    match text.as_bytes().first()? {
        b'"' => crate::json::string(raw).map(|s| IdKey::Str(s.into_owned())),
        b'-' | b'0'..=b'9' => Some(IdKey::Num(text.to_owned())),
        _ => None,
    }
}

/// Whether a numeric or string id's text is the form every JSON implementation writes back
/// unchanged (an integer without sign tricks, fraction or exponent; any string). Other ids are
/// always rewritten towards the agent.
pub(crate) fn id_is_plain(raw: &RawValue) -> bool {
    let t = raw.get().as_bytes();
    match t.first() {
        Some(b'"') => true,
        Some(_) => {
            let digits = t.strip_prefix(b"-").unwrap_or(t);
            !digits.is_empty()
                && digits.len() <= 15
                && digits.iter().all(u8::is_ascii_digit)
                && (digits == b"0" || digits[0] != b'0')
                && t != b"-0"
        }
        None => false,
    }
}

/// An id as a routing key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum IdKey {
    Num(String),
    Str(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let (_, k) =
            parse(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#).unwrap();
        assert!(matches!(k, Kind::Request { ref method, .. } if method == "initialize"));
        let (_, k) = parse(br#"{"jsonrpc":"2.0","method":"session/cancel"}"#).unwrap();
        assert!(matches!(k, Kind::Notification { .. }));
        let (_, k) = parse(br#"{"jsonrpc":"2.0","id":"a","result":null}"#).unwrap();
        assert!(matches!(
            k,
            Kind::Response {
                result: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn malformed() {
        assert!(matches!(parse(b"nope"), Err(Malformed::NotJson(_))));
        assert!(matches!(parse(b"[1]"), Err(Malformed::Batch)));
        assert!(matches!(parse(b"12"), Err(Malformed::NotObject)));
        assert!(matches!(
            parse(b"{\"id\":1}"),
            Err(Malformed::Invalid { .. })
        ));
        assert!(matches!(
            parse(br#"{"id":1,"method":"a","method":"b"}"#),
            Err(Malformed::Invalid { reason, id: Some(_) }) if reason.contains("twice")
        ));
        assert!(matches!(
            parse(br#"{"id":null,"method":"a"}"#),
            Err(Malformed::Invalid { id: None, .. })
        ));
        assert!(matches!(
            parse(b"{\"a\":\"\xff\"}"),
            Err(Malformed::NotJson(_))
        ));
    }

    #[test]
    fn plain_ids() {
        let raw = |s: &str| -> Box<RawValue> { RawValue::from_string(s.to_string()).unwrap() };
        for p in ["0", "7", "-3", "\"x\"", "123456789012345"] {
            assert!(id_is_plain(&raw(p)), "{p}");
        }
        for p in ["1.0", "1e3", "-0", "1234567890123456789"] {
            assert!(!id_is_plain(&raw(p)), "{p}");
        }
    }
}
