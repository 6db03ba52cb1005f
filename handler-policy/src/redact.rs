//! P5: secret values in agent→client traffic replaced by `[secret NAME]`, on the raw text. A
//! message without a secret is left as it is (not re-serialized); one with a secret has only
//! the strings holding it rewritten.

use memchr::memmem::Finder;

use crate::json::{self, Splice};

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
    pub fn new(pairs: &[(String, String)]) -> Self {
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

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// `frame` (valid JSON text) with every secret value replaced, and the names replaced;
    /// `None` when it holds none.
    pub fn redact(&self, frame: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
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
            let mut text = decoded.into_owned();
            for (name, value, _) in &self.items {
                if text.contains(value.as_str()) {
                    text = text.replace(value.as_str(), &format!("[secret {name}]"));
                    if !names.contains(name) {
                        names.push(name.clone());
                    }
                }
            }
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
