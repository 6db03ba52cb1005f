//! Narrow, borrowing views of raw JSON text and byte-exact splicing: read a few fields without
//! building a tree, and rewrite one value of a message while every other byte stays as it was.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// How deep the pipeline walks nested values (P6's `_meta` search). serde_json's own parser skips
/// a raw value without recursion, so the walk bounds itself.
pub(crate) const MAX_DEPTH: usize = 128;

/// A string read from JSON: borrowed when it had no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Str<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The members of a JSON object, in order, duplicates kept, values raw.
#[derive(Debug)]
pub(crate) struct Members<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(Str(k)) = map.next_key::<Str<'de>>()? {
                    let v: &'de RawValue = map.next_value()?;
                    out.push((k, v));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

impl<'a> Members<'a> {
    /// The value of the first member named `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
    /// Every value named `key` (duplicates included).
    pub(crate) fn all<'s>(&'s self, key: &'s str) -> impl Iterator<Item = &'a RawValue> + 's {
        self.0
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| *v)
    }
}

/// The elements of a JSON array, raw.
#[derive(Debug)]
pub(crate) struct Elements<'a>(pub Vec<&'a RawValue>);

impl<'de> Deserialize<'de> for Elements<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Elements<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<&'de RawValue>()? {
                    out.push(v);
                }
                Ok(Elements(out))
            }
        }
        d.deserialize_seq(V)
    }
}

/// The members of `raw` when it is an object.
pub(crate) fn members(raw: &RawValue) -> Option<Members<'_>> {
    if !raw.get().starts_with('{') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// The elements of `raw` when it is an array.
pub(crate) fn elements(raw: &RawValue) -> Option<Elements<'_>> {
    if !raw.get().starts_with('[') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// `raw` as a string, when it is one.
pub(crate) fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str::<Str<'_>>(raw.get()).ok().map(|s| s.0)
}

/// Whether `raw` is the literal `false`, `null` (absent-like) — i.e. offers nothing.
pub(crate) fn is_false_or_null(raw: &RawValue) -> bool {
    matches!(raw.get(), "false" | "null")
}

/// A JSON string literal for `s`.
pub(crate) fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

/// Where `part` (a slice of `base`) starts in `base`, as a byte range.
pub(crate) fn span(base: &[u8], part: &str) -> Range<usize> {
    let start = (part.as_ptr() as usize).wrapping_sub(base.as_ptr() as usize);
    debug_assert!(start + part.len() <= base.len());
    start..start + part.len()
}

/// Byte-range replacements over one buffer, applied at once. Ranges must not overlap.
#[derive(Debug, Default)]
pub(crate) struct Splice {
    edits: Vec<(Range<usize>, String)>,
}

impl Splice {
    pub(crate) fn new() -> Self {
        Self::default()
    }
    /// Replaces `range` with `text`.
    pub(crate) fn replace(&mut self, range: Range<usize>, text: String) {
        self.edits.push((range, text));
    }
    /// Inserts `text` at `at`.
    pub(crate) fn insert(&mut self, at: usize, text: String) {
        self.edits.push((at..at, text));
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.edits.is_empty()
    }
    /// Adds another splice's edits (over the same buffer).
    pub(crate) fn extend(&mut self, other: Splice) {
        self.edits.extend(other.edits);
    }
    /// The buffer with every edit made; overlapping edits keep the first one.
    pub(crate) fn apply(mut self, base: &[u8]) -> Vec<u8> {
        self.edits.sort_by_key(|(r, _)| (r.start, r.end));
        let extra: usize = self.edits.iter().map(|(_, t)| t.len()).sum();
        let mut out = Vec::with_capacity(base.len() + extra);
        let mut at = 0;
        for (r, t) in self.edits {
            if r.start < at || r.end > base.len() {
                continue;
            }
            out.extend_from_slice(&base[at..r.start]);
            out.extend_from_slice(t.as_bytes());
            at = r.end;
        }
        out.extend_from_slice(&base[at..]);
        out
    }
}

/// Calls `f` with the byte range (quotes included) of every string token of `json`, keys and
/// values alike. `json` must be valid JSON text.
pub(crate) fn for_each_string(json: &[u8], mut f: impl FnMut(Range<usize>)) {
    let mut i = 0;
    while let Some(q) = memchr::memchr(b'"', &json[i..]) {
        let start = i + q;
        let mut j = start + 1;
        loop {
            match memchr::memchr2(b'"', b'\\', &json[j..]) {
                Some(k) if json[j + k] == b'\\' => j += k + 2,
                Some(k) => {
                    j += k + 1;
                    break;
                }
                None => {
                    j = json.len();
                    break;
                }
            }
        }
        let end = j.min(json.len());
        f(start..end);
        i = end;
        if i >= json.len() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_keep_order_duplicates_and_raw_values() {
        let raw: &RawValue = serde_json::from_str(r#"{"b": 1.50, "a":[1, 2], "b":"x"}"#).unwrap();
        let m = members(raw).unwrap();
        let keys: Vec<_> = m.0.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        assert_eq!(m.get("b").unwrap().get(), "1.50");
        assert_eq!(m.get("a").unwrap().get(), "[1, 2]");
        assert_eq!(m.all("b").count(), 2);
    }

    #[test]
    fn escaped_keys_are_decoded() {
        let raw: &RawValue = serde_json::from_str(r#"{"\u0066s": true}"#).unwrap();
        assert_eq!(members(raw).unwrap().0[0].0, "fs");
    }

    #[test]
    fn splice_replaces_only_the_ranges() {
        let base = br#"{"id":7, "x" : [1,2]}"#;
        let mut s = Splice::new();
        s.replace(6..7, "\"a\"".into());
        s.insert(base.len() - 1, ",\"y\":0".into());
        assert_eq!(s.apply(base), br#"{"id":"a", "x" : [1,2],"y":0}"#.to_vec());
    }

    #[test]
    fn strings_are_found_with_escapes() {
        let json = br#"{"a\"b":"c\\","d":["e"]}"#;
        let mut found = Vec::new();
        for_each_string(json, |r| {
            found.push(String::from_utf8(json[r].to_vec()).unwrap());
        });
        assert_eq!(found, [r#""a\"b""#, r#""c\\""#, r#""d""#, r#""e""#]);
    }
}
