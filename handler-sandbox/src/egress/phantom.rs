//! Phantoms (E3): a stand-in of a secret with the same length and form — a digit for a digit, a
//! letter for a letter of the same case, every other character and a known vendor prefix (such
//! as `sk-ant-oat01-`, from [`KNOWN_PREFIXES`]) kept when at least 24 characters follow it —
//! random at each launch. The randomness comes in as an argument, so the generator is pure and
//! testable.

/// A source of uniform random numbers (the runtime passes an OS-seeded one).
pub trait RandomSource {
    /// A uniformly random u32.
    fn next_u32(&mut self) -> u32;

    /// A uniformly random number below `n` (n > 0), without modulo bias.
    fn below(&mut self, n: u32) -> u32 {
        let zone = u32::MAX - (u32::MAX % n);
        loop {
            let x = self.next_u32();
            if x < zone {
                return x % n;
            }
        }
    }
}

/// Why a value cannot be injected: the sandbox then gets the value itself (E3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotInjectable {
    #[error("a value under 8 characters cannot be injected")]
    /// The value is shorter than 8 characters.
    TooShort,
    #[error("a value with a character other than printable ASCII without space cannot be injected")]
    /// The value holds a character other than printable ASCII without space.
    NotPrintable,
    #[error("a value without a letter or a digit to vary cannot be injected")]
    /// The value has no letter or digit a phantom could vary.
    NothingToVary,
}

/// The minimum length of an injectable value.
pub const MIN_LEN: usize = 8;
/// How many characters must follow a vendor prefix for it to be kept.
pub const PREFIX_KEEP_MIN_FOLLOWING: usize = 24;

/// Whether `value` can be injected: at least 8 characters, all printable ASCII without space.
pub fn check_injectable(value: &str) -> Result<(), NotInjectable> {
    if !value.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(NotInjectable::NotPrintable);
    }
    if value.len() < MIN_LEN {
        return Err(NotInjectable::TooShort);
    }
    if !value.bytes().any(|b| b.is_ascii_alphanumeric()) {
        return Err(NotInjectable::NothingToVary);
    }
    Ok(())
}

/// Shorthand for [`check_injectable`].
pub fn injectable(value: &str) -> bool {
    check_injectable(value).is_ok()
}

/// Vendors' key prefixes a phantom keeps (E3), so that SDKs checking a key's shape accept it.
/// Longer ones first where one begins another.
pub const KNOWN_PREFIXES: &[&str] = &[
    // Anthropic
    "sk-ant-admin01-",
    "sk-ant-oat01-",
    "sk-ant-ort01-",
    "sk-ant-api03-",
    "sk-ant-",
    // OpenAI
    "sk-proj-",
    "sk-svcacct-",
    "sk-admin-",
    "sk-None-",
    // OpenRouter
    "sk-or-v1-",
    // Generic `sk-` (OpenAI's older keys, DeepSeek, Moonshot, …)
    "sk-",
    // GitHub
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    // GitLab
    "glpat-",
    // Slack
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxe-",
    "xapp-",
    // Google (API keys)
    "AIza",
    // Hugging Face, Groq, Replicate, Perplexity, xAI, NVIDIA, Cerebras, Fireworks
    "hf_",
    "gsk_",
    "r8_",
    "pplx-",
    "xai-",
    "nvapi-",
    "csk-",
    "fw_",
    // npm, PyPI
    "npm_",
    "pypi-",
];

/// The length of the vendor prefix kept in a phantom: the longest of [`KNOWN_PREFIXES`] that
/// `value` starts with and after which at least 24 characters follow; 0 when there is none (a
/// value's own leading letters are never taken for a prefix).
pub fn vendor_prefix_len(value: &str) -> usize {
    prefix_len_with(value, None)
}

/// [`vendor_prefix_len`], `extra` (a harness's declared `login.tokenPrefix`, B.1) counting as a
/// known prefix too.
pub fn prefix_len_with(value: &str, extra: Option<&str>) -> usize {
    KNOWN_PREFIXES
        .iter()
        .copied()
        .chain(extra.filter(|p| !p.is_empty()))
        .filter(|p| value.starts_with(*p) && value.len() - p.len() >= PREFIX_KEEP_MIN_FOLLOWING)
        .map(str::len)
        .max()
        .unwrap_or(0)
}

/// A phantom for `value`: same length and form, different from it, random from `rng`.
pub fn make_phantom(value: &str, rng: &mut dyn RandomSource) -> Result<String, NotInjectable> {
    make_phantom_keeping(value, None, rng)
}

/// [`make_phantom`], also keeping `prefix` (a harness's declared token prefix) when `value`
/// starts with it.
pub fn make_phantom_keeping(
    value: &str,
    prefix: Option<&str>,
    rng: &mut dyn RandomSource,
) -> Result<String, NotInjectable> {
    check_injectable(value)?;
    let keep = prefix_len_with(value, prefix);
    let varying = value
        .bytes()
        .skip(keep)
        .filter(u8::is_ascii_alphanumeric)
        .count();
    if varying == 0 {
        return Err(NotInjectable::NothingToVary);
    }
    loop {
        let phantom: String = value
            .bytes()
            .enumerate()
            .map(|(i, b)| {
                if i < keep {
                    return b as char;
                }
                match b {
                    b'0'..=b'9' => (b'0' + rng.below(10) as u8) as char,
                    b'a'..=b'z' => (b'a' + rng.below(26) as u8) as char,
                    b'A'..=b'Z' => (b'A' + rng.below(26) as u8) as char,
                    other => other as char,
                }
            })
            .collect();
        if phantom != value {
            return Ok(phantom);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A deterministic generator for tests (xorshift).
    struct Xorshift(u64);
    impl RandomSource for Xorshift {
        fn next_u32(&mut self) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 32) as u32
        }
    }

    fn same_form(a: &str, b: &str) -> bool {
        a.len() == b.len()
            && a.bytes().zip(b.bytes()).all(|(x, y)| match x {
                b'0'..=b'9' => y.is_ascii_digit(),
                b'a'..=b'z' => y.is_ascii_lowercase(),
                b'A'..=b'Z' => y.is_ascii_uppercase(),
                _ => x == y,
            })
    }

    #[test]
    fn keeps_a_vendor_prefix_with_24_characters_after_it() {
        let v = "sk-ant-oat01-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abc";
        assert_eq!(vendor_prefix_len(v), "sk-ant-oat01-".len());
        let p = make_phantom(v, &mut Xorshift(7)).unwrap();
        assert!(p.starts_with("sk-ant-oat01-"), "{p}");
        assert!(same_form(v, &p));
        assert_ne!(p, v);
        assert_eq!(vendor_prefix_len("ghp_abcdefghijklmnopqrstuvwxyz0123"), 4);
        assert_eq!(
            vendor_prefix_len("github_pat_11ABCDEFG0123456789_abcdefghijklmnop"),
            11
        );
        assert_eq!(
            vendor_prefix_len("sk-or-v1-0123456789abcdef0123456789abcdef"),
            9
        );
    }

    #[test]
    fn a_prefix_with_less_than_24_after_it_is_not_kept() {
        // 23 characters after "sk-": no prefix kept.
        let v = "sk-abcdefghijklmnopqrstuvw";
        assert_eq!(vendor_prefix_len(v), 0);
        // "sk-ant-" has 24 after it but "sk-ant-oat01-" has fewer: the longer is not kept.
        let v = "sk-ant-oat01-abcdefghijk";
        assert_eq!(v.len() - "sk-ant-".len(), 17);
        assert_eq!(vendor_prefix_len(v), 0);
        let v = "sk-ant-oat01-abcdefghijklmnopqrstuvwx";
        assert_eq!(vendor_prefix_len(v), "sk-ant-oat01-".len());
        // A random-looking first segment is not a tag.
        assert_eq!(vendor_prefix_len("Ab3f91cd-0123456789abcdef0123456789"), 0);
    }

    #[test]
    fn only_known_vendor_prefixes_are_kept() {
        // A value's own leading letters are random, not a vendor's: they vary in the phantom.
        for v in [
            "deadbeef-0123456789abcdef0123456789",
            "abc_0123456789abcdefABCDEF0123456789",
            "key-live-0123456789abcdefABCDEF0123456789",
        ] {
            assert_eq!(vendor_prefix_len(v), 0, "{v}");
        }
        assert_eq!(
            vendor_prefix_len("AIzaSyA0123456789abcdefghijklmnopqrstu"),
            4
        );
        assert_eq!(
            vendor_prefix_len("sk-proj-0123456789abcdefABCDEF0123456789"),
            8
        );
        assert_eq!(
            vendor_prefix_len("xoxb-0123456789-abcdefABCDEF0123456789"),
            5
        );
        assert_eq!(vendor_prefix_len("hf_0123456789abcdefABCDEF0123456789"), 3);
        // A harness's declared token prefix is kept too.
        let v = "fk-Acp0Token1111aaaa2222bbbb3333cccc";
        assert_eq!(vendor_prefix_len(v), 0);
        assert_eq!(prefix_len_with(v, Some("fk-")), 3);
        let p = make_phantom_keeping(v, Some("fk-"), &mut Xorshift(3)).unwrap();
        assert!(p.starts_with("fk-") && same_form(v, &p) && p != v, "{p}");
    }

    #[test]
    fn refuses_values_that_cannot_be_injected() {
        assert_eq!(check_injectable("abc1234"), Err(NotInjectable::TooShort));
        assert_eq!(
            check_injectable("abc 12345"),
            Err(NotInjectable::NotPrintable)
        );
        assert_eq!(
            check_injectable("abcé12345"),
            Err(NotInjectable::NotPrintable)
        );
        assert_eq!(
            check_injectable("abc\t12345"),
            Err(NotInjectable::NotPrintable)
        );
        assert_eq!(
            check_injectable("!!!!-----"),
            Err(NotInjectable::NothingToVary)
        );
        assert!(injectable("abcd1234"));
        assert!(make_phantom("short", &mut Xorshift(1)).is_err());
    }

    #[test]
    fn each_launch_gets_another_phantom() {
        let v = "sk-proj-0123456789abcdefABCDEF0123456789";
        let a = make_phantom(v, &mut Xorshift(1)).unwrap();
        let b = make_phantom(v, &mut Xorshift(2)).unwrap();
        assert_ne!(a, b);
    }

    proptest! {
        #[test]
        fn a_phantom_has_the_values_form(value in "[!-~]{8,80}", seed in 1u64..) {
            match make_phantom(&value, &mut Xorshift(seed)) {
                Ok(p) => {
                    prop_assert!(same_form(&value, &p), "{} / {}", value, p);
                    prop_assert_ne!(&p, &value);
                    let k = vendor_prefix_len(&value);
                    prop_assert_eq!(&p[..k], &value[..k]);
                    prop_assert!(k == 0 || value.len() - k >= PREFIX_KEEP_MIN_FOLLOWING);
                }
                Err(e) => prop_assert_eq!(e, NotInjectable::NothingToVary),
            }
        }
    }
}
