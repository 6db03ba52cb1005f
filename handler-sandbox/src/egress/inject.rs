//! Injections (A.3, E3) as rules: towards an injection's hosts the phantom becomes the value
//! in header values, `Authorization: Basic` inside its base64 and the URL — in request bodies and
//! WebSocket messages only for an injection that opts in (`body`, decision 0033) — and the value
//! in a response becomes the phantom again, also JSON-escaped or base64-encoded; towards any
//! other host a phantom is a leak, wherever it is. Phantoms are also matched percent-encoded
//! (same length as the value's, since only their letters and digits differ), so a secret in a
//! query string or a form body is found either way.

use std::collections::BTreeSet;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use handler_contracts::sandbox::Injection;

use crate::egress::phantom::{NotInjectable, check_injectable};
use crate::egress::replace::Replacer;

/// Why a set of injections is invalid (exit 65).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectionError {
    #[error("injections[{index}].name is empty")]
    /// An injection has an empty name.
    NoName {
        /// The injection's position in the list.
        index: usize,
    },
    #[error("injections[{index}] ({name}): hosts must name at least one allow-list entry")]
    /// An injection names no host.
    NoHosts {
        /// The injection's position in the list.
        index: usize,
        /// The injection's name.
        name: String,
    },
    #[error("injections[{index}] ({name}).phantom: {reason}")]
    /// An injection's phantom cannot be swapped.
    Phantom {
        /// The injection's position in the list.
        index: usize,
        /// The injection's name.
        name: String,
        /// Why the phantom cannot be swapped.
        reason: NotInjectable,
    },
    #[error("injections[{index}] ({name}).value: {reason}")]
    /// An injection's value cannot be swapped.
    Value {
        /// The injection's position in the list.
        index: usize,
        /// The injection's name.
        name: String,
        /// Why the value cannot be swapped.
        reason: NotInjectable,
    },
    #[error("injections[{index}] ({name}): the phantom must be exactly as long as the value")]
    /// An injection's phantom and value differ in length.
    Length {
        /// The injection's position in the list.
        index: usize,
        /// The injection's name.
        name: String,
    },
    #[error("injections[{index}] ({name}): the phantom must differ from the value")]
    /// An injection's phantom is its value.
    SameAsValue {
        /// The injection's position in the list.
        index: usize,
        /// The injection's name.
        name: String,
    },
    #[error("injections[{index}] ({name}): its phantom is also another injection's")]
    /// Two injections share a phantom.
    DuplicatePhantom {
        /// The injection's position in the list.
        index: usize,
        /// The injection's name.
        name: String,
    },
}

/// Validates injections (A.1): phantom printable without space and ≥ 8 characters, value
/// printable ASCII exactly as long, at least one host, phantoms distinct. Never names a value.
pub fn validate_injections(items: &[Injection]) -> Result<(), InjectionError> {
    let mut seen = BTreeSet::new();
    for (index, i) in items.iter().enumerate() {
        let name = i.name.clone();
        if i.name.trim().is_empty() {
            return Err(InjectionError::NoName { index });
        }
        if i.hosts.is_empty() {
            return Err(InjectionError::NoHosts { index, name });
        }
        check_injectable(&i.phantom).map_err(|reason| InjectionError::Phantom {
            index,
            name: name.clone(),
            reason,
        })?;
        check_injectable(&i.value).map_err(|reason| InjectionError::Value {
            index,
            name: name.clone(),
            reason,
        })?;
        if i.phantom.len() != i.value.len() {
            return Err(InjectionError::Length { index, name });
        }
        if i.phantom == i.value {
            return Err(InjectionError::SameAsValue { index, name });
        }
        if !seen.insert(i.phantom.clone()) {
            return Err(InjectionError::DuplicatePhantom { index, name });
        }
    }
    Ok(())
}

/// What one pattern does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// A phantom became its value (a request to its host).
    Inject,
    /// A phantom going to a host it is not for (the request is refused).
    Leak,
    /// A value in a response became its phantom.
    Restore,
}

/// Which injections a piece of traffic used or leaked, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hits {
    /// The injections whose value was swapped in.
    pub injected: BTreeSet<String>,
    /// The injections whose value was seen going out (towards a host not its own, or back to the sandbox).
    pub leaked: BTreeSet<String>,
}

impl Hits {
    /// Adds another's names.
    pub fn merge(&mut self, other: Hits) {
        self.injected.extend(other.injected);
        self.leaked.extend(other.leaked);
    }

    /// Whether a phantom was seen going where it must not.
    pub fn is_leak(&self) -> bool {
        !self.leaked.is_empty()
    }
}

/// The validated injections of one sandbox.
#[derive(Debug, Clone, Default)]
pub struct InjectionSet {
    items: Vec<Injection>,
}

/// The substitutions for one direction of traffic with one host.
#[derive(Debug, Clone)]
pub struct Rules {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    meta: Vec<(usize, Effect)>,
    names: Vec<String>,
}

/// `s` percent-encoded (RFC 3986 unreserved characters kept), with upper-case hex digits, and
/// with lower-case ones (RFC 3986 §2.1 makes them equivalent; some encoders write them).
fn pct_encodings(s: &str) -> [String; 2] {
    let mut upper = String::with_capacity(s.len() * 3);
    let mut lower = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            upper.push(b as char);
            lower.push(b as char);
        } else {
            upper.push_str(&format!("%{b:02X}"));
            lower.push_str(&format!("%{b:02x}"));
        }
    }
    [upper, lower]
}

/// `s` inside a JSON string (printable ASCII: only `"` and `\` must be escaped), and with `/`
/// escaped too, as some encoders write it.
fn json_escapes(s: &str) -> [String; 2] {
    let plain: String = s
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c => vec![c],
        })
        .collect();
    let slash = plain.replace('/', "\\/");
    [plain, slash]
}

/// The characters of `s`'s base64 (standard and URL-safe alphabets) that only `s`'s bytes
/// determine, for each of the three offsets `s` can start at inside a longer encoded string.
/// The same offsets of another string of the same length give pieces of the same lengths.
fn base64_pieces(s: &str) -> Vec<String> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let n = s.len();
    let mut out = Vec::new();
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for k in 0..3usize {
            let mut bytes = vec![0u8; k];
            bytes.extend_from_slice(s.as_bytes());
            let enc = engine.encode(&bytes);
            // Character i holds bits 6i..6i+6; the string's bits are 8k..8(k+n).
            let first = (8 * k).div_ceil(6);
            let last = (8 * (k + n) - 6) / 6;
            out.push(enc[first..=last].to_string());
        }
    }
    out
}

/// A replacement of `len` characters for an encoded value whose phantom, encoded the same way,
/// has another length (a phantom not made by `make_phantom`): the value is masked.
fn masked(len: usize) -> String {
    "*".repeat(len)
}

impl InjectionSet {
    /// A set of valid injections.
    pub fn new(items: Vec<Injection>) -> Result<Self, InjectionError> {
        validate_injections(&items)?;
        Ok(InjectionSet { items })
    }

    /// Whether there is none (then nothing is decrypted and nothing scanned).
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether an injection is given to `host:port`: then its tunnels are decrypted.
    pub fn injects_into(&self, host: &str, port: u16) -> bool {
        self.items
            .iter()
            .any(|i| i.hosts.iter().any(|e| e.allows(host, port)))
    }

    fn applies(i: &Injection, host: &str, port: u16) -> bool {
        i.hosts.iter().any(|e| e.allows(host, port))
    }

    fn rules(
        &self,
        encoded: bool,
        f: impl Fn(usize, &Injection) -> Option<(String, String, Effect)>,
    ) -> Rules {
        let mut pairs = Vec::new();
        let mut meta = Vec::new();
        let mut add = |from: String, to: String, idx: usize, effect: Effect| {
            if !from.is_empty()
                && !pairs
                    .iter()
                    .any(|(f, _): &(Vec<u8>, Vec<u8>)| *f == from.as_bytes())
            {
                pairs.push((from.into_bytes(), to.into_bytes()));
                meta.push((idx, effect));
            }
        };
        for (idx, i) in self.items.iter().enumerate() {
            let Some((from, to, effect)) = f(idx, i) else {
                continue;
            };
            let (pf, pt) = (pct_encodings(&from), pct_encodings(&to));
            if encoded {
                for (ef, et) in json_escapes(&from).into_iter().zip(json_escapes(&to)) {
                    let et = if et.len() == ef.len() {
                        et
                    } else {
                        masked(ef.len())
                    };
                    add(ef, et, idx, effect);
                }
                for (bf, bt) in base64_pieces(&from).into_iter().zip(base64_pieces(&to)) {
                    add(bf, bt, idx, effect);
                }
            }
            add(from, to, idx, effect);
            for (f, t) in pf.into_iter().zip(pt) {
                add(f, t, idx, effect);
            }
        }
        Rules {
            pairs,
            meta,
            names: self.items.iter().map(|i| i.name.clone()).collect(),
        }
    }

    /// For a request's URL and headers to `host:port`: its injections' phantoms become their
    /// values; every other phantom is a leak.
    pub fn request_rules(&self, host: &str, port: u16) -> Rules {
        self.rules(false, |_, i| {
            if Self::applies(i, host, port) {
                Some((i.phantom.clone(), i.value.clone(), Effect::Inject))
            } else {
                Some((i.phantom.clone(), i.phantom.clone(), Effect::Leak))
            }
        })
    }

    /// For a request's body (and a WebSocket's messages from the client) to `host:port`: the
    /// phantoms of its injections that opt in (`body`) become their values, those of its other
    /// injections pass as they are (decision 0033: a prompt holding a phantom reaches the model
    /// as the phantom), every other phantom is a leak. Over plain http:// (`tls` false) no
    /// phantom becomes its value (decision 0036).
    pub fn request_body_rules(&self, host: &str, port: u16, tls: bool) -> Rules {
        self.rules(false, |_, i| {
            match (Self::applies(i, host, port), i.body && tls) {
                (true, true) => Some((i.phantom.clone(), i.value.clone(), Effect::Inject)),
                (true, false) => None,
                (false, _) => Some((i.phantom.clone(), i.phantom.clone(), Effect::Leak)),
            }
        })
    }

    /// For a response from `host:port`: its injections' values become their phantoms, as they
    /// are, percent-encoded, JSON-escaped or base64-encoded.
    pub fn response_rules(&self, host: &str, port: u16) -> Rules {
        self.rules(true, |_, i| {
            Self::applies(i, host, port)
                .then(|| (i.value.clone(), i.phantom.clone(), Effect::Restore))
        })
    }
}

impl Rules {
    /// Whether these rules change or detect nothing.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// A streaming replacer for a body.
    pub fn replacer(&self) -> Replacer {
        Replacer::new(self.pairs.clone()).expect("phantoms and values have equal lengths")
    }

    /// What a replacer's hit counts mean.
    pub fn hits_of(&self, counts: &[usize]) -> Hits {
        let mut h = Hits::default();
        for (k, n) in counts.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            let (idx, effect) = self.meta[k];
            let name = self.names[idx].clone();
            match effect {
                Effect::Inject => {
                    h.injected.insert(name);
                }
                Effect::Leak => {
                    h.leaked.insert(name);
                }
                Effect::Restore => {}
            }
        }
        h
    }

    /// Rewrites a whole buffer (a URL, a header value, a buffered body).
    pub fn bytes(&self, input: &[u8]) -> (Vec<u8>, Hits) {
        if self.is_empty() {
            return (input.to_vec(), Hits::default());
        }
        let mut r = self.replacer();
        let mut out = Vec::with_capacity(input.len());
        r.push(input, &mut out);
        r.finish(&mut out);
        let hits = self.hits_of(r.hits());
        (out, hits)
    }

    /// Rewrites a header value; `Authorization: Basic` credentials inside their base64 too.
    pub fn header_value(&self, name: &str, value: &[u8]) -> (Vec<u8>, Hits) {
        let (mut out, mut hits) = self.bytes(value);
        if name.eq_ignore_ascii_case("authorization")
            || name.eq_ignore_ascii_case("proxy-authorization")
        {
            if let Some((scheme, cred)) = split_scheme(&out) {
                if scheme.eq_ignore_ascii_case(b"basic") {
                    if let Ok(decoded) = B64.decode(cred.trim_ascii()) {
                        let (replaced, h) = self.bytes(&decoded);
                        if replaced != decoded || h.is_leak() {
                            let prefix_len = out.len() - cred.len();
                            let mut new = out[..prefix_len].to_vec();
                            new.extend_from_slice(B64.encode(&replaced).as_bytes());
                            out = new;
                        }
                        hits.merge(h);
                    }
                }
            }
        }
        (out, hits)
    }
}

fn split_scheme(v: &[u8]) -> Option<(&[u8], &[u8])> {
    let sp = v.iter().position(|b| *b == b' ')?;
    Some((&v[..sp], &v[sp + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use handler_contracts::allow::AllowEntry;
    use proptest::prelude::*;

    const PH: &str = "sk-test-AbCdEfGh0123456789xyzwABCDEFGH";
    const VA: &str = "sk-test-QwErTyUi9876543210abcdZYXWVUTS";

    fn inj(name: &str, phantom: &str, value: &str, hosts: &[&str]) -> Injection {
        Injection {
            name: name.into(),
            phantom: phantom.into(),
            value: value.into(),
            hosts: hosts
                .iter()
                .map(|h| AllowEntry::parse(h).unwrap())
                .collect(),
            body: false,
        }
    }

    fn set() -> InjectionSet {
        InjectionSet::new(vec![
            inj("providers/x/apiKey", PH, VA, &["api.x.com:443"]),
            inj(
                "bindings/b/tok",
                "ph+ph/ph=12",
                "va+va/va=98",
                &["*.b.io:443"],
            ),
        ])
        .unwrap()
    }

    #[test]
    fn validates_injections_without_naming_the_value() {
        let bad = [
            (inj("", PH, VA, &["a.com:443"]), "name is empty"),
            (inj("n", PH, VA, &[]), "at least one"),
            (
                inj("n", "short", "shor1", &["a.com:443"]),
                "phantom: a value under 8",
            ),
            (inj("n", PH, &VA[1..], &["a.com:443"]), "as long as"),
            (inj("n", PH, PH, &["a.com:443"]), "differ"),
            (
                inj(
                    "n",
                    PH,
                    "sk-test-QwErTyUi98765 3210abcdZYXWVUTS",
                    &["a.com:443"],
                ),
                "value: a value with a character",
            ),
        ];
        for (i, want) in bad {
            let e = validate_injections(&[i]).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains("QwErTy"), "an error never holds the value: {e}");
        }
        let dup = [
            inj("a", PH, VA, &["a.com:443"]),
            inj("b", PH, VA, &["b.com:443"]),
        ];
        assert!(matches!(
            validate_injections(&dup),
            Err(InjectionError::DuplicatePhantom { .. })
        ));
    }

    #[test]
    fn injects_towards_its_hosts_only() {
        let s = set();
        assert!(s.injects_into("api.x.com", 443));
        assert!(s.injects_into("z.b.io", 443));
        assert!(!s.injects_into("api.x.com", 80));
        assert!(!s.injects_into("other.com", 443));
        let r = s.request_rules("api.x.com", 443);
        let (out, hits) = r.header_value("x-api-key", PH.as_bytes());
        assert_eq!(out, VA.as_bytes());
        assert_eq!(
            hits.injected,
            BTreeSet::from(["providers/x/apiKey".to_string()])
        );
        assert!(!hits.is_leak());
        let (out, _) = r.bytes(format!("/v1/x?key={PH}&a=1").as_bytes());
        assert_eq!(out, format!("/v1/x?key={VA}&a=1").as_bytes());
    }

    #[test]
    fn a_phantom_towards_another_host_is_a_leak() {
        let s = set();
        let r = s.request_rules("other.com", 443);
        let (out, hits) = r.bytes(format!("{{\"k\":\"{PH}\"}}").as_bytes());
        assert!(
            String::from_utf8(out).unwrap().contains(PH),
            "a leak is not given the value"
        );
        assert_eq!(
            hits.leaked,
            BTreeSet::from(["providers/x/apiKey".to_string()])
        );
        // Another injection's phantom to an injection host is a leak too.
        let r = s.request_rules("api.x.com", 443);
        let (_, hits) = r.bytes(b"ph+ph/ph=12");
        assert_eq!(hits.leaked, BTreeSet::from(["bindings/b/tok".to_string()]));
    }

    #[test]
    fn basic_credentials_are_rewritten_inside_their_base64() {
        let s = set();
        let r = s.request_rules("api.x.com", 443);
        let header = format!("Basic {}", B64.encode(format!("user:{PH}")));
        let (out, hits) = r.header_value("Authorization", header.as_bytes());
        assert_eq!(out.len(), header.len());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!("Basic {}", B64.encode(format!("user:{VA}")))
        );
        assert!(hits.injected.contains("providers/x/apiKey"));
        let r = s.request_rules("evil.com", 443);
        let (_, hits) = r.header_value("authorization", header.as_bytes());
        assert!(hits.is_leak());
    }

    #[test]
    fn percent_encoded_phantoms_are_found() {
        let s = set();
        let r = s.request_rules("a.b.io", 443);
        let (out, hits) = r.bytes(b"tok=ph%2Bph%2Fph%3D12");
        assert_eq!(out, b"tok=va%2Bva%2Fva%3D98");
        assert!(hits.injected.contains("bindings/b/tok"));
        // Lower-case escapes are the same characters (RFC 3986 §2.1): swapped towards its
        // host, a leak towards another.
        let (out, _) = r.bytes(b"tok=ph%2bph%2fph%3d12");
        assert_eq!(out, b"tok=va%2bva%2fva%3d98");
        let (_, hits) = s
            .request_rules("evil.com", 443)
            .bytes(b"tok=ph%2bph%2fph%3d12");
        assert!(
            hits.is_leak(),
            "a lower-case escaped phantom to another host"
        );
    }

    #[test]
    fn responses_give_back_the_phantom() {
        let s = set();
        let r = s.response_rules("api.x.com", 443);
        let (out, _) = r.bytes(format!("you sent {VA}").as_bytes());
        assert_eq!(out, format!("you sent {PH}").as_bytes());
        assert!(s.response_rules("other.com", 443).is_empty());
    }

    #[test]
    fn a_phantom_in_a_body_stays_a_phantom_unless_its_injection_opts_in() {
        let mut form = inj(
            "bindings/f/key",
            "fk-1234abcdWXYZ",
            "fk-9876zyxwABCD",
            &["form.io:443"],
        );
        form.body = true;
        let s = InjectionSet::new(vec![
            inj("providers/x/apiKey", PH, VA, &["api.x.com:443"]),
            form,
        ])
        .unwrap();
        // A prompt holding the model key's phantom reaches the model as the phantom.
        let r = s.request_body_rules("api.x.com", 443, true);
        let prompt = format!(r#"{{"messages":[{{"content":"reverse {PH}"}}]}}"#);
        let (out, hits) = r.bytes(prompt.as_bytes());
        assert_eq!(out, prompt.as_bytes());
        assert!(hits.injected.is_empty() && !hits.is_leak());
        // Headers and the URL still get the value.
        let (out, _) = s
            .request_rules("api.x.com", 443)
            .header_value("x-api-key", PH.as_bytes());
        assert_eq!(out, VA.as_bytes());
        // Another injection's phantom in the body is still a leak.
        let (_, hits) = r.bytes(b"k=fk-1234abcdWXYZ");
        assert_eq!(hits.leaked, BTreeSet::from(["bindings/f/key".to_string()]));
        // The injection that opts in is swapped in a body (form-encoded too).
        let (out, hits) = s
            .request_body_rules("form.io", 443, false)
            .bytes(b"key=fk-1234abcdWXYZ&x=1");
        assert_eq!(
            out, b"key=fk-1234abcdWXYZ&x=1",
            "never the value over plain http"
        );
        assert!(hits.injected.is_empty() && !hits.is_leak());
        let r = s.request_body_rules("form.io", 443, true);
        let (out, hits) = r.bytes(b"key=fk-1234abcdWXYZ&x=1");
        assert_eq!(out, b"key=fk-9876zyxwABCD&x=1");
        assert!(hits.injected.contains("bindings/f/key"));
        let (_, hits) = r.bytes(PH.as_bytes());
        assert!(
            hits.is_leak(),
            "the model key's phantom to the form host is a leak"
        );
    }

    #[test]
    fn a_value_comes_back_as_the_phantom_json_escaped_or_base64_encoded() {
        let ph = r#"ab"cd\ef/gh12345678"#;
        let va = r#"zy"xw\vu/ts98765432"#;
        let s = InjectionSet::new(vec![
            inj("n", ph, va, &["api.x.com:443"]),
            inj("m", PH, VA, &["api.x.com:443"]),
        ])
        .unwrap();
        let r = s.response_rules("api.x.com", 443);
        let json = serde_json::to_string(&serde_json::json!({ "echo": va })).unwrap();
        let (out, _) = r.bytes(json.as_bytes());
        let back: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back["echo"], ph);
        let (out, _) = r.bytes(br#"zy\"xw\\vu\/ts98765432"#);
        assert_eq!(out, br#"ab\"cd\\ef\/gh12345678"#);
        for pre in ["", "a", "ab", "abc"] {
            for engine in [&B64, &base64::engine::general_purpose::URL_SAFE] {
                let enc = engine.encode(format!("{pre}{VA}{pre}"));
                let (out, _) = r.bytes(enc.as_bytes());
                let decoded = String::from_utf8_lossy(&engine.decode(&out).unwrap()).to_string();
                assert!(
                    !decoded.contains(&VA[2..VA.len() - 2]),
                    "{pre:?}: {decoded}"
                );
                assert!(decoded.contains(&PH[2..PH.len() - 2]), "{pre:?}: {decoded}");
            }
        }
    }

    proptest! {
        #[test]
        fn no_value_reaches_the_process_over_any_split(pre in "[ -~]{0,40}", cut in 0usize..100) {
            let s = set();
            let r = s.response_rules("api.x.com", 443);
            let body = format!("{pre}{VA}{pre}");
            let cut = cut.min(body.len());
            let mut rep = r.replacer();
            let mut out = Vec::new();
            rep.push(&body.as_bytes()[..cut], &mut out);
            rep.push(&body.as_bytes()[cut..], &mut out);
            rep.finish(&mut out);
            prop_assert!(!String::from_utf8(out).unwrap().contains(VA));
        }
    }
}
