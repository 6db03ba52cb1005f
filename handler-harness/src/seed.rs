//! State seeded from the person's own settings (issue 30 item 4, decision 0154): the pure half.
//! What a seed's file becomes ([`filter`]: keep or drop for JSON and TOML, merged into a file
//! slot's own), and what to copy given the host's files as they are now and the record of the
//! last copy ([`plan`]): a seed is copied once; a later change is offered ([`Step::Changed`]),
//! never forced. No I/O: the caller reads the host and writes the slot.

use std::collections::BTreeMap;

use handler_contracts::harness::{SlotKind, StateSeed};
use serde::{Deserialize, Serialize};

/// Why a seed's file cannot be seeded as its harness says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeedError {
    /// Its content is not the JSON or TOML its name says.
    #[error("{source_path}: not valid {format}: {reason}")]
    Parse {
        /// The seed's source.
        source_path: String,
        /// `JSON` or `TOML`.
        format: &'static str,
        /// The parser's words.
        reason: String,
    },
    /// Keep or drop on a file that is not a JSON or TOML object at its top.
    #[error("{source_path}: keep and drop need an object at the top")]
    NotObject {
        /// The seed's source.
        source_path: String,
    },
}

/// What the host says of a seed's source now: its size and modification time (seconds and
/// nanoseconds), or that it is not there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stamp {
    /// Bytes (a folder: the sum of its files' sizes).
    pub size: u64,
    /// Modification time, nanoseconds since the epoch (a folder: its newest file's).
    pub mtime_ns: i128,
}

/// The record of the last copy, kept by the daemon beside the slots (never in them: an agent
/// can write its slot): per seed's source, what it was when it was copied, and when.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Source (`~/…`) → its copy.
    pub seeds: BTreeMap<String, Copied>,
}

/// One seed as it was last copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Copied {
    /// The source's stamp then (None: it was absent, nothing copied).
    pub stamp: Option<Stamp>,
    /// When (RFC 3339, the caller's clock).
    pub at: String,
}

/// What to do with one seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Never copied: copy it now.
    Copy,
    /// Copied, and the host's is as it was: nothing.
    Unchanged,
    /// Copied, and the host's changed since: offered (copied only when the person asks).
    Changed,
    /// Not on this host: skipped (copied once it appears, when the person asks or on first
    /// sight).
    Absent,
}

/// What each seed of a slot needs now, in the seeds' order: never copied → [`Step::Copy`]
/// (or [`Step::Absent`]); copied → [`Step::Unchanged`] or [`Step::Changed`]. `now` maps each
/// source to its stamp (None: absent); a source `now` lacks counts as absent.
pub fn plan(
    seeds: &[StateSeed],
    now: &BTreeMap<String, Option<Stamp>>,
    record: &Record,
) -> Vec<(String, Step)> {
    seeds
        .iter()
        .map(|s| {
            let stamp = now.get(&s.source).copied().flatten();
            let step = match (record.seeds.get(&s.source), stamp) {
                (None | Some(Copied { stamp: None, .. }), None) => Step::Absent,
                (None, Some(_)) => Step::Copy,
                (Some(c), Some(n)) if c.stamp == Some(n) => Step::Unchanged,
                (Some(_), _) => Step::Changed,
            };
            (s.source.clone(), step)
        })
        .collect()
}

/// Which format a seed's source is, by its name.
fn format_of(source: &str) -> Option<&'static str> {
    if source.ends_with(".json") {
        Some("JSON")
    } else if source.ends_with(".toml") {
        Some("TOML")
    } else {
        None
    }
}

/// A seed's file as it goes into its slot: `bytes` (the host's) with only `keep`'s top-level
/// keys, then without each of `drop`'s dotted paths; for a file slot with `keep`, merged over
/// `current` (the slot's own file: its other keys stay). No filter: `bytes` unchanged.
pub fn filter(
    seed: &StateSeed,
    kind: SlotKind,
    bytes: &[u8],
    current: Option<&[u8]>,
) -> Result<Vec<u8>, SeedError> {
    if seed.keep.is_empty() && seed.drop.is_empty() {
        return Ok(bytes.to_vec());
    }
    let format = format_of(&seed.source).unwrap_or("JSON");
    let parse = |b: &[u8]| -> Result<serde_json::Value, SeedError> {
        let perr = |reason: String| SeedError::Parse {
            source_path: seed.source.clone(),
            format,
            reason,
        };
        let text = std::str::from_utf8(b).map_err(|e| perr(e.to_string()))?;
        if format == "TOML" {
            let t: toml::Table = toml::from_str(text).map_err(|e| perr(e.message().into()))?;
            serde_json::to_value(t).map_err(|e| perr(e.to_string()))
        } else {
            serde_json::from_str(text).map_err(|e| perr(e.to_string()))
        }
    };
    let not_object = || SeedError::NotObject {
        source_path: seed.source.clone(),
    };
    let mut v = parse(bytes)?;
    let obj = v.as_object_mut().ok_or_else(not_object)?;
    if !seed.keep.is_empty() {
        obj.retain(|k, _| seed.keep.iter().any(|keep| keep == k));
    }
    for path in &seed.drop {
        remove_path(obj, path);
    }
    if kind == SlotKind::File
        && let Some(cur) = current
        && let Ok(serde_json::Value::Object(mut base)) = parse(cur)
    {
        // The slot's own keys (onboarding flags, what the agent wrote) stay; the seed's win.
        for (k, val) in std::mem::take(obj) {
            base.insert(k, val);
        }
        *obj = base;
    }
    Ok(if format == "TOML" {
        toml::to_string(&v).map_or_else(|_| Vec::new(), String::into_bytes)
    } else {
        let mut out = serde_json::to_vec_pretty(&v).unwrap_or_default();
        out.push(b'\n');
        out
    })
}

/// Removes dotted path `path` (`a.b.c`; a `*` step is every key there) from `obj`; a path that
/// is not there changes nothing.
fn remove_path(obj: &mut serde_json::Map<String, serde_json::Value>, path: &str) {
    match path.split_once('.') {
        None if path == "*" => obj.clear(),
        None => {
            obj.remove(path);
        }
        Some(("*", rest)) => {
            for v in obj.values_mut() {
                if let serde_json::Value::Object(inner) = v {
                    remove_path(inner, rest);
                }
            }
        }
        Some((head, rest)) => {
            if let Some(serde_json::Value::Object(inner)) = obj.get_mut(head) {
                remove_path(inner, rest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(source: &str, keep: &[&str], drop: &[&str]) -> StateSeed {
        StateSeed {
            source: source.into(),
            target: None,
            keep: keep.iter().map(|s| (*s).to_string()).collect(),
            drop: drop.iter().map(|s| (*s).to_string()).collect(),
        }
    }

    #[test]
    fn a_seed_is_copied_once_then_a_change_is_offered() {
        let seeds = [seed("~/a.json", &[], &[]), seed("~/b", &[], &[])];
        let st = |size| Some(Stamp { size, mtime_ns: 7 });
        let now = BTreeMap::from([("~/a.json".to_string(), st(3)), ("~/b".to_string(), None)]);
        let mut record = Record::default();
        assert_eq!(
            plan(&seeds, &now, &record),
            [
                ("~/a.json".into(), Step::Copy),
                ("~/b".into(), Step::Absent)
            ]
        );
        record.seeds.insert(
            "~/a.json".into(),
            Copied {
                stamp: st(3),
                at: "t".into(),
            },
        );
        record.seeds.insert(
            "~/b".into(),
            Copied {
                stamp: None,
                at: "t".into(),
            },
        );
        assert_eq!(plan(&seeds, &now, &record)[0].1, Step::Unchanged);
        let later = BTreeMap::from([("~/a.json".to_string(), st(4)), ("~/b".to_string(), st(1))]);
        assert_eq!(
            plan(&seeds, &later, &record),
            [
                ("~/a.json".into(), Step::Changed),
                ("~/b".into(), Step::Changed)
            ]
        );
        let gone = BTreeMap::new();
        assert_eq!(plan(&seeds, &gone, &record)[0].1, Step::Changed);
    }

    #[test]
    fn a_broken_file_is_an_error_naming_it() {
        let e = filter(
            &seed("~/.claude/settings.json", &[], &["x"]),
            SlotKind::Dir,
            b"{nope",
            None,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("~/.claude/settings.json: not valid JSON"),
            "{e}"
        );
        let e = filter(&seed("~/x.json", &["a"], &[]), SlotKind::Dir, b"[1]", None).unwrap_err();
        assert_eq!(
            e,
            SeedError::NotObject {
                source_path: "~/x.json".into()
            }
        );
    }
}
