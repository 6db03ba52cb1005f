//! Pairing (docs/remote.md § Pairing): a one-time code handlerd shows (typed, or read from its QR
//! code) from which both sides derive the pairing's id at the gateway, the claim the gateway
//! checks, and the key that authenticates the two public keys to each other. The gateway sees
//! the id, the claim's hash and then the claim — never the code nor the MAC key — so it can
//! neither pose as the daemon to the device nor as the device to the daemon.

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::b64;

/// The code's alphabet: RFC 4648 base32 (no 0 or 1 to read as O or I).
pub const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
/// The code's length (100 bits), shown in groups of four.
pub const CODE_LEN: usize = 20;
/// How long a code can be claimed.
pub const TTL_SECS: u64 = 600;

/// The code of 20 random bytes (the caller's randomness), grouped `ABCD-EFGH-…`.
pub fn code(random: [u8; CODE_LEN]) -> String {
    let chars: Vec<char> = random
        .iter()
        .map(|b| ALPHABET[usize::from(b & 31)] as char)
        .collect();
    chars
        .chunks(4)
        .map(|c| c.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join("-")
}

/// A typed code as the derivations take it: upper case, dashes and spaces gone; None when it
/// is not 20 characters of the alphabet.
pub fn normalize(typed: &str) -> Option<String> {
    let s: String = typed
        .chars()
        .filter(|c| !matches!(c, '-' | ' '))
        .map(|c| c.to_ascii_uppercase())
        .collect();
    (s.len() == CODE_LEN && s.bytes().all(|b| ALPHABET.contains(&b))).then_some(s)
}

/// What a code gives both sides.
#[derive(Clone)]
pub struct CodeKeys {
    /// The pairing's id at the gateway (32 hex).
    pub pairing_id: String,
    /// What the device shows the gateway to claim the pairing (base64url of 32 bytes).
    pub claim: String,
    mac: [u8; 32],
}

impl std::fmt::Debug for CodeKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeKeys")
            .field("pairing_id", &self.pairing_id)
            .finish_non_exhaustive()
    }
}

/// HKDF-SHA256 (salt `handler.remote.pair.v1`, the normalized code) expanded with `info`.
fn derive<const N: usize>(code: &str, info: &[u8]) -> [u8; N] {
    let hk = Hkdf::<Sha256>::new(Some(b"handler.remote.pair.v1"), code.as_bytes());
    let mut out = [0u8; N];
    hk.expand(info, &mut out)
        .expect("short HKDF-SHA256 outputs are valid");
    out
}

/// The derivations of a normalized code: `id` (16 bytes, hex), `claim` (32), `mac` (32).
pub fn code_keys(normalized: &str) -> CodeKeys {
    let id: [u8; 16] = derive(normalized, b"id");
    let claim: [u8; 32] = derive(normalized, b"claim");
    CodeKeys {
        pairing_id: id.iter().map(|b| format!("{b:02x}")).collect(),
        claim: b64(&claim),
        mac: derive(normalized, b"mac"),
    }
}

/// The SHA-256 of a claim, hex: what the daemon gives the gateway to check it.
pub fn claim_hash(claim: &str) -> String {
    Sha256::digest(claim.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn hmac(key: &[u8; 32], parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
        m.update(b"\0");
    }
    m
}

impl CodeKeys {
    /// The daemon's tag on its id and public key, which the device checks before it trusts them.
    pub fn daemon_tag(&self, daemon_id: &str, daemon_pk: &[u8; 32]) -> String {
        b64(
            &hmac(&self.mac, &[b"daemon", daemon_id.as_bytes(), daemon_pk])
                .finalize()
                .into_bytes(),
        )
    }

    /// Whether a tag is the daemon's (in constant time).
    pub fn daemon_tag_holds(&self, daemon_id: &str, daemon_pk: &[u8; 32], tag: &str) -> bool {
        super::unb64(tag).is_some_and(|t| {
            hmac(&self.mac, &[b"daemon", daemon_id.as_bytes(), daemon_pk])
                .verify_slice(&t)
                .is_ok()
        })
    }

    /// The device's proof on its public key and the daemon's, which the daemon checks.
    pub fn device_proof(&self, device_pk: &[u8; 32], daemon_pk: &[u8; 32]) -> String {
        b64(&hmac(&self.mac, &[b"device", device_pk, daemon_pk])
            .finalize()
            .into_bytes())
    }

    /// Whether a proof is the device's (in constant time).
    pub fn device_proof_holds(&self, device_pk: &[u8; 32], daemon_pk: &[u8; 32], p: &str) -> bool {
        super::unb64(p).is_some_and(|t| {
            hmac(&self.mac, &[b"device", device_pk, daemon_pk])
                .verify_slice(&t)
                .is_ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_twenty_letters_in_groups_and_normalizes_as_typed() {
        let c = code([
            0, 1, 2, 31, 32, 33, 200, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
        ]);
        assert_eq!(c, "ABC7-ABIH-IJKL-MNOP-QRST");
        assert_eq!(
            normalize("abc7 abih-ijkl-mnop-qrst").unwrap(),
            "ABC7ABIHIJKLMNOPQRST"
        );
        assert_eq!(normalize("ABC7-ABIH-IJKL-MNOP-QRS"), None);
        assert_eq!(normalize("ABC0-ABIH-IJKL-MNOP-QRST"), None);
    }

    #[test]
    fn the_tag_and_the_proof_hold_only_for_the_code_and_keys_they_were_made_with() {
        let k = code_keys("ABC7ABIHIJKLMNOPQRST");
        let other = code_keys("ABC7ABIHIJKLMNOPQRSA");
        assert_ne!(k.pairing_id, other.pairing_id);
        assert_eq!(k.pairing_id.len(), 32);
        let (dpk, vpk) = ([1u8; 32], [2u8; 32]);
        let tag = k.daemon_tag("d_1", &dpk);
        assert!(k.daemon_tag_holds("d_1", &dpk, &tag));
        assert!(!other.daemon_tag_holds("d_1", &dpk, &tag));
        assert!(!k.daemon_tag_holds("d_2", &dpk, &tag));
        assert!(!k.daemon_tag_holds("d_1", &vpk, &tag));
        let proof = k.device_proof(&vpk, &dpk);
        assert!(k.device_proof_holds(&vpk, &dpk, &proof));
        assert!(!k.device_proof_holds(&[3; 32], &dpk, &proof));
        assert!(!other.device_proof_holds(&vpk, &dpk, &proof));
        assert!(!k.device_proof_holds(&vpk, &dpk, "not base64!"));
        // What the gateway holds says nothing of the MAC key: the claim is its own derivation.
        assert_ne!(claim_hash(&k.claim), k.claim);
        insta::assert_snapshot!(format!("{} {} {} {}", k.pairing_id, k.claim, tag, proof));
    }
}
