//! P5: secret values replaced by `[secret NAME]`. [`redact`] does it to any text (a log line, a
//! message); [`Secrets`] does it to agent→client JSON-RPC frames on the raw text: a message
//! without a secret is left as it is (not re-serialized), one with a secret has only the strings
//! holding it rewritten.

use memchr::memmem::Finder;

use crate::json::{self, Splice};

/// `text` with every value of `secrets` (name, value) replaced by `[secret NAME]`: the one
/// redaction of Handler (P5), used on agent→client messages and on every line logged from a
/// sandbox.
///
/// At each position the longest value that starts there wins, so a secret that contains another
/// (`ghp_abc123XYZ` and `ghp_abc123`) is replaced whole and never leaves a tail behind; text
/// written by one replacement is never searched again. Empty values are ignored (they would
/// match everywhere). Text holding no value comes back unchanged.
///
/// ```
/// let secrets = [
///     ("SHORT".to_string(), "abc123".to_string()),
///     ("LONG".to_string(), "abc123XYZ".to_string()),
/// ];
/// assert_eq!(
///     handler_policy::redact("key=abc123XYZ, other=abc123", &secrets),
///     "key=[secret LONG], other=[secret SHORT]"
/// );
/// ```
pub fn redact(text: &str, secrets: &[(String, String)]) -> String {
    let mut by_length: Vec<(&str, &str)> = secrets
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    by_length.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    replace_longest_first(text, &by_length, &mut Vec::new())
}

/// `text` with each of `secrets` (name, value; non-empty, longest value first) replaced in one
/// left-to-right pass, the longest value starting at a position winning; the names replaced are
/// added to `names` in the order first met.
fn replace_longest_first(text: &str, secrets: &[(&str, &str)], names: &mut Vec<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    loop {
        // The earliest occurrence of any value; at equal positions the first in `secrets`,
        // which is the longest (`min_by_key` keeps the first of equal keys).
        let next = secrets
            .iter()
            .filter_map(|(n, v)| {
                memchr::memmem::find(rest.as_bytes(), v.as_bytes()).map(|i| (i, n, v))
            })
            .min_by_key(|(i, _, _)| *i);
        let Some((at, name, value)) = next else {
            if out.is_empty() {
                // Nothing replaced: the usual case for a log line.
                return text.to_string();
            }
            out.push_str(rest);
            return out;
        };
        // A value is valid UTF-8 found in valid UTF-8: `at` and `at + len` are char boundaries.
        out.push_str(&rest[..at]);
        out.push_str("[secret ");
        out.push_str(name);
        out.push(']');
        if !names.iter().any(|n| n == name) {
            names.push((*name).to_string());
        }
        rest = &rest[at + value.len()..];
    }
}

/// The agent's secrets, ready to search for.
#[derive(Debug, Default)]
pub(crate) struct Secrets {
    /// (name, value, finder of the value as it appears in JSON text), longest value first.
    items: Vec<(String, String, Vec<Finder<'static>>)>,
    /// A value holds a non-ASCII character, which an encoder may write as `\uXXXX`.
    non_ascii: bool,
}

static ESCAPE_U: std::sync::LazyLock<Finder<'static>> =
    std::sync::LazyLock::new(|| Finder::new(b"\\u00").into_owned());
static ESCAPE_SLASH: std::sync::LazyLock<Finder<'static>> =
    std::sync::LazyLock::new(|| Finder::new(b"\\/").into_owned());

/// Whether `frame` uses an escape that can spell a printable ASCII character differently
/// (`\u0041` for `A`, `\/` for `/`), which a byte search for an ASCII pattern would miss: such a
/// message is decoded string by string. Encoders escape only control characters, `"`, `\` and
/// (some) non-ASCII, so real traffic almost never takes the slow path.
pub(crate) fn has_hiding_escape(frame: &[u8]) -> bool {
    if memchr::memchr(b'\\', frame).is_none() {
        return false;
    }
    if ESCAPE_SLASH.find(frame).is_some() {
        return true;
    }
    ESCAPE_U.find_iter(frame).any(|i| {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            frame.get(i + 4).copied().and_then(hex),
            frame.get(i + 5).copied().and_then(hex),
        ) {
            (Some(h), Some(l)) => (0x20..0x80).contains(&(h * 16 + l)),
            _ => false,
        }
    })
}

impl Secrets {
    pub(crate) fn new(pairs: &[(String, String)]) -> Self {
        let mut items: Vec<_> = pairs
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(n, v)| {
                let quoted = json::quote(v);
                let escaped = &quoted[1..quoted.len() - 1];
                let mut finders = vec![Finder::new(v.as_bytes()).into_owned()];
                if escaped != v {
                    finders.push(Finder::new(escaped.as_bytes()).into_owned());
                }
                (n.clone(), v.clone(), finders)
            })
            .collect();
        items.sort_by_key(|i| std::cmp::Reverse(i.1.len()));
        let non_ascii = items.iter().any(|i| !i.1.is_ascii());
        Secrets { items, non_ascii }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// `frame` (valid JSON text) with every secret value replaced, and the names replaced;
    /// `None` when it holds none.
    pub(crate) fn redact(&self, frame: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
        if self.items.is_empty() {
            return None;
        }
        let plain_hit = self
            .items
            .iter()
            .any(|(_, _, fs)| fs.iter().any(|f| f.find(frame).is_some()));
        let escaped_non_ascii = self.non_ascii && memchr::memmem::find(frame, b"\\u").is_some();
        if !plain_hit && !escaped_non_ascii && !has_hiding_escape(frame) {
            return None;
        }
        let mut splice = Splice::new();
        let mut names: Vec<String> = Vec::new();
        json::for_each_string(frame, |range| {
            let token = &frame[range.clone()];
            let decoded: std::borrow::Cow<'_, str> = if memchr::memchr(b'\\', token).is_some() {
                match serde_json::from_slice::<String>(token) {
                    Ok(s) => s.into(),
                    Err(_) => return,
                }
            } else {
                match std::str::from_utf8(&token[1..token.len().saturating_sub(1)]) {
                    Ok(s) => s.into(),
                    Err(_) => return,
                }
            };
            if !self
                .items
                .iter()
                .any(|(_, v, _)| decoded.contains(v.as_str()))
            {
                return;
            }
            let pairs: Vec<(&str, &str)> = self
                .items
                .iter()
                .map(|(n, v, _)| (n.as_str(), v.as_str()))
                .collect();
            let text = replace_longest_first(&decoded, &pairs, &mut names);
            splice.replace(range, json::quote(&text));
        });
        if splice.is_empty() {
            return None;
        }
        Some((splice.apply(frame), names))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn redact_replaces_every_occurrence_and_keeps_the_rest() {
        let s = pairs(&[("TOKEN", "ghp_abc123")]);
        assert_eq!(
            redact("a ghp_abc123 b ghp_abc123", &s),
            "a [secret TOKEN] b [secret TOKEN]"
        );
        assert_eq!(redact("nothing here", &s), "nothing here");
        assert_eq!(redact("", &s), "");
        assert_eq!(redact("é ghp_abc123 ü", &s), "é [secret TOKEN] ü");
    }

    #[test]
    fn redact_takes_the_longest_value_first_whatever_the_order_given() {
        for s in [
            pairs(&[("SHORT", "abc123"), ("LONG", "abc123XYZ")]),
            pairs(&[("LONG", "abc123XYZ"), ("SHORT", "abc123")]),
        ] {
            assert_eq!(
                redact("abc123XYZ abc123", &s),
                "[secret LONG] [secret SHORT]"
            );
        }
    }

    #[test]
    fn redact_handles_overlapping_values() {
        // One secret is the other's tail: the longest starting at a position wins, and no piece
        // of either is left in clear.
        let s = pairs(&[("A", "xyz-secret"), ("B", "secret-42")]);
        assert_eq!(redact("xyz-secret-42", &s), "[secret A]-42");
        assert_eq!(redact("the secret-42", &s), "the [secret B]");
        // A replacement's own text is not searched again.
        let s = pairs(&[("K", "secret K"), ("S", "secret")]);
        assert_eq!(redact("secret K secret", &s), "[secret K] [secret S]");
    }

    proptest::proptest! {
        /// Whatever the text and however the secrets overlap, no secret's value is left in
        /// what `redact` gives (names and the `[secret …]` text share no letter with the
        /// values here, so a replacement cannot spell one), and text without a secret comes
        /// back unchanged.
        #[test]
        fn redact_leaves_no_secret(
            text in "[xyz ]{0,60}",
            values in proptest::collection::vec("[xyz]{2,6}", 0..4),
        ) {
            let secrets: Vec<(String, String)> = values
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("S{i}"), v.clone()))
                .collect();
            let out = redact(&text, &secrets);
            for (_, v) in &secrets {
                proptest::prop_assert!(!out.contains(v.as_str()), "{out:?} holds {v:?}");
            }
            if secrets.iter().all(|(_, v)| !text.contains(v.as_str())) {
                proptest::prop_assert_eq!(out, text);
            }
        }
    }

    #[test]
    fn redact_ignores_empty_values() {
        let s = pairs(&[("EMPTY", ""), ("T", "tok")]);
        assert_eq!(redact("a tok b", &s), "a [secret T] b");
        assert_eq!(redact("abc", &pairs(&[("EMPTY", "")])), "abc");
        assert_eq!(redact("abc", &[]), "abc");
    }

    fn secrets() -> Secrets {
        Secrets::new(&[
            ("GITHUB_TOKEN".into(), "ghp_abc123".into()),
            ("LONG".into(), "ghp_abc123XYZ".into()),
            ("QUOTE".into(), "a\"b".into()),
        ])
    }

    #[test]
    fn untouched_without_secret() {
        assert!(
            secrets()
                .redact(br#"{"a":"hello \u00e9 \u001b[0m"}"#)
                .is_none()
        );
        assert!(!has_hiding_escape(br#"{"a":"\u00e9\u001b\n"}"#));
        assert!(has_hiding_escape(br#"{"a":"\u0041"}"#));
        assert!(has_hiding_escape(br#"{"a":"a\/b"}"#));
        assert!(secrets().redact(br#"{"a":"hello"}"#).is_none());
    }

    #[test]
    fn replaced_in_place_others_kept() {
        let (out, names) = secrets()
            .redact(br#"{"x" : 1.50,"t":"tok=ghp_abc123."}"#)
            .unwrap();
        assert_eq!(
            out,
            br#"{"x" : 1.50,"t":"tok=[secret GITHUB_TOKEN]."}"#.to_vec()
        );
        assert_eq!(names, ["GITHUB_TOKEN"]);
    }

    #[test]
    fn non_ascii_secret_written_with_escapes() {
        let s = Secrets::new(&[("P".into(), "pässwörd".into())]);
        let (out, _) = s.redact(br#"{"t":"p\u00e4ssw\u00f6rd!"}"#).unwrap();
        assert_eq!(out, br#"{"t":"[secret P]!"}"#.to_vec());
    }

    #[test]
    fn longest_first_and_escaped_forms() {
        let (out, _) = secrets().redact(br#"{"t":"ghp_abc123XYZ"}"#).unwrap();
        assert_eq!(out, br#"{"t":"[secret LONG]"}"#.to_vec());
        let (out, _) = secrets().redact(br#"{"t":"\u0067hp_abc123"}"#).unwrap();
        assert_eq!(out, br#"{"t":"[secret GITHUB_TOKEN]"}"#.to_vec());
        let (out, _) = secrets().redact(br#"{"t":"x a\"b"}"#).unwrap();
        assert_eq!(out, br#"{"t":"x [secret QUOTE]"}"#.to_vec());
    }
}
