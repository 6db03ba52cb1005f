//! The envelope (docs/remote.md § Envelopes): what the gateway routes between handlerd and one
//! device and can neither read, forge nor replay. X25519 between the daemon's key and the
//! device's, HKDF-SHA256 to one AES-256-GCM key per direction, the routing header (version,
//! sender, recipient, counter, time) authenticated as associated data. Opening refuses an
//! altered, reflected, misrouted, replayed or over-10-minute-old envelope, each with its reason.

use aes_gcm::aead::{Aead, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use hkdf::Hkdf;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use x25519_dalek::{PublicKey, StaticSecret};

use super::{b64, unb64};

/// The envelope format's version.
pub const VERSION: u8 = 1;
/// An envelope older than this is refused as expired (D.7: 10 minutes).
pub const MAX_AGE_MS: u64 = 10 * 60 * 1000;
/// An envelope dated further ahead than this is refused (the clocks disagree too much).
pub const MAX_AHEAD_MS: u64 = 60 * 1000;
/// The largest plaintext an envelope carries.
pub const MAX_PLAINTEXT: usize = 512 * 1024;

/// One sealed message. Every field but `ct` is the routing header the gateway reads; all of
/// them are authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The format's version ([`VERSION`]).
    pub v: u8,
    /// The sender's opaque id (`d_…` a daemon, `v_…` a device).
    pub from: String,
    /// The recipient's opaque id.
    pub to: String,
    /// The sender's counter towards this recipient: strictly increasing.
    pub n: u64,
    /// When it was sealed, milliseconds since the Unix epoch.
    pub t: u64,
    /// AES-GCM's 12-byte nonce, base64url.
    pub nonce: String,
    /// The ciphertext and its 16-byte tag, base64url.
    pub ct: String,
}

/// Why an envelope was not opened. Logged without its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not an envelope of this version (a field missing, not base64url, a wrong size).
    #[error("malformed")]
    Malformed,
    /// Not for this link: another recipient or an unknown sender.
    #[error("misrouted")]
    Misrouted,
    /// Its header or ciphertext changed on the way (it does not authenticate).
    #[error("altered")]
    Altered,
    /// One this side sealed itself, sent back to it.
    #[error("reflected")]
    Reflected,
    /// Sealed more than 10 minutes ago.
    #[error("expired")]
    Expired,
    /// Dated more than a minute ahead of this side's clock.
    #[error("dated in the future")]
    Ahead,
    /// Its counter is not above the last one accepted from that sender.
    #[error("replayed")]
    Replayed,
}

impl Refusal {
    /// The reason's one word, for logs and tests.
    pub fn word(self) -> &'static str {
        match self {
            Refusal::Malformed => "malformed",
            Refusal::Misrouted => "misrouted",
            Refusal::Altered => "altered",
            Refusal::Reflected => "reflected",
            Refusal::Expired => "expired",
            Refusal::Ahead => "ahead",
            Refusal::Replayed => "replayed",
        }
    }
}

/// A key pair cannot make a link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The peer's public key gives no shared secret (a low-order point).
    #[error("the peer's public key is not usable (low order)")]
    LowOrder,
}

/// An X25519 key pair.
#[derive(Clone)]
pub struct KeyPair {
    secret: StaticSecret,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &b64(&self.public()))
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    /// The key pair of 32 random bytes (the caller's randomness).
    pub fn from_secret(bytes: [u8; 32]) -> Self {
        KeyPair {
            secret: StaticSecret::from(bytes),
        }
    }

    /// Its public key.
    pub fn public(&self) -> [u8; 32] {
        PublicKey::from(&self.secret).to_bytes()
    }

    /// Its secret, to keep in the secret store.
    pub fn secret_bytes(&self) -> [u8; 32] {
        self.secret.to_bytes()
    }
}

/// Which end of a pair this side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// handlerd.
    Daemon,
    /// A paired device.
    Device,
}

/// One side of a daemon–device pair: its id, the peer's, and the two directions' keys.
#[derive(Clone)]
pub struct Link {
    /// This side's id.
    pub me: String,
    /// The peer's id.
    pub peer: String,
    send: [u8; 32],
    recv: [u8; 32],
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("me", &self.me)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

/// The associated data: the header, each field ended by a NUL.
pub fn aad(from: &str, to: &str, n: u64, t: u64) -> Vec<u8> {
    format!("handler.remote.v{VERSION}\0{from}\0{to}\0{n}\0{t}\0").into_bytes()
}

impl Link {
    /// The link of `own` (this side, `role`, id `me`) with the peer `peer` whose public key is
    /// `peer_public`: X25519, then HKDF-SHA256 (salt `handler.remote.v1`, info `keys` ‖ the
    /// daemon's public key ‖ the device's) to 64 bytes, daemon→device first.
    pub fn new(
        role: Role,
        me: &str,
        peer: &str,
        own: &KeyPair,
        peer_public: &[u8; 32],
    ) -> Result<Link, KeyError> {
        let shared = own.secret.diffie_hellman(&PublicKey::from(*peer_public));
        if !shared.was_contributory() {
            return Err(KeyError::LowOrder);
        }
        let own_public = own.public();
        let (daemon_pk, device_pk) = match role {
            Role::Daemon => (own_public, *peer_public),
            Role::Device => (*peer_public, own_public),
        };
        let mut info = b"keys".to_vec();
        info.extend_from_slice(&daemon_pk);
        info.extend_from_slice(&device_pk);
        let hk = Hkdf::<Sha256>::new(Some(b"handler.remote.v1"), shared.as_bytes());
        let mut okm = [0u8; 64];
        hk.expand(&info, &mut okm)
            .expect("64 bytes is a valid HKDF-SHA256 length");
        let (d2v, v2d) = okm.split_at(32);
        let (d2v, v2d): ([u8; 32], [u8; 32]) = (d2v.try_into().unwrap(), v2d.try_into().unwrap());
        let (send, recv) = match role {
            Role::Daemon => (d2v, v2d),
            Role::Device => (v2d, d2v),
        };
        Ok(Link {
            me: me.to_owned(),
            peer: peer.to_owned(),
            send,
            recv,
        })
    }

    /// `plaintext` sealed to the peer with counter `n`, time `t_ms` and `nonce` (12 random
    /// bytes, never used twice with this link).
    pub fn seal(&self, n: u64, t_ms: u64, nonce: [u8; 12], plaintext: &[u8]) -> Envelope {
        let cipher = Aes256Gcm::new(&self.send.into());
        let aad = aad(&self.me, &self.peer, n, t_ms);
        let ct = cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .expect("AES-GCM seals any plaintext under 64 GiB");
        Envelope {
            v: VERSION,
            from: self.me.clone(),
            to: self.peer.clone(),
            n,
            t: t_ms,
            nonce: b64(&nonce),
            ct: b64(&ct),
        }
    }

    /// The plaintext of an envelope from the peer, at `now_ms`, when its counter is above
    /// `last_n` (the last one accepted from the peer); else why not. Checked in this order:
    /// it authenticates (or is this side's own: reflected), it is for this side from the
    /// peer, it is not expired nor ahead, it is not replayed.
    pub fn open(&self, e: &Envelope, now_ms: u64, last_n: u64) -> Result<Vec<u8>, Refusal> {
        if e.v != VERSION {
            return Err(Refusal::Malformed);
        }
        let nonce: [u8; 12] = unb64(&e.nonce)
            .and_then(|n| n.try_into().ok())
            .ok_or(Refusal::Malformed)?;
        let ct = unb64(&e.ct).ok_or(Refusal::Malformed)?;
        let try_open = |key: &[u8; 32], from: &str, to: &str| {
            Aes256Gcm::new(key.into())
                .decrypt(
                    Nonce::from_slice(&nonce),
                    Payload {
                        msg: &ct,
                        aad: &aad(from, to, e.n, e.t),
                    },
                )
                .ok()
        };
        // One this side sealed, whatever header it came back with.
        let own = |from: &str, to: &str| try_open(&self.send, from, to).is_some();
        if own(&self.me, &self.peer) {
            return Err(Refusal::Reflected);
        }
        if e.to != self.me || e.from != self.peer {
            return Err(Refusal::Misrouted);
        }
        let plain = try_open(&self.recv, &e.from, &e.to).ok_or(Refusal::Altered)?;
        if now_ms.saturating_sub(e.t) > MAX_AGE_MS {
            return Err(Refusal::Expired);
        }
        if e.t.saturating_sub(now_ms) > MAX_AHEAD_MS {
            return Err(Refusal::Ahead);
        }
        if e.n <= last_n {
            return Err(Refusal::Replayed);
        }
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_806_400_000;

    fn pair() -> (Link, Link) {
        let d = KeyPair::from_secret([7; 32]);
        let v = KeyPair::from_secret([9; 32]);
        let dl = Link::new(Role::Daemon, "d_1", "v_2", &d, &v.public()).unwrap();
        let vl = Link::new(Role::Device, "v_2", "d_1", &v, &d.public()).unwrap();
        (dl, vl)
    }

    #[test]
    fn a_sealed_envelope_opens_on_the_other_side_only() {
        let (d, v) = pair();
        let e = v.seal(1, NOW, [1; 12], b"prompt: hello");
        assert!(!e.ct.contains("hello"));
        assert_eq!(d.open(&e, NOW + 5, 0).unwrap(), b"prompt: hello");
        let back = d.seal(1, NOW, [2; 12], b"an update");
        assert_eq!(v.open(&back, NOW, 0).unwrap(), b"an update");
        // A third party's link with the daemon's id and the device's cannot open it.
        let other = KeyPair::from_secret([11; 32]);
        let dk = KeyPair::from_secret([7; 32]);
        let x = Link::new(Role::Device, "v_2", "d_1", &other, &dk.public()).unwrap();
        assert_eq!(x.open(&back, NOW, 0), Err(Refusal::Altered));
    }

    #[test]
    fn replayed_old_altered_reflected_and_misrouted_envelopes_are_refused() {
        let (d, v) = pair();
        let e = v.seal(5, NOW, [3; 12], b"x");
        assert_eq!(d.open(&e, NOW, 5), Err(Refusal::Replayed));
        assert_eq!(d.open(&e, NOW, 9), Err(Refusal::Replayed));
        let old = v.seal(6, NOW - MAX_AGE_MS - 1, [4; 12], b"x");
        assert_eq!(d.open(&old, NOW, 0), Err(Refusal::Expired));
        let ahead = v.seal(7, NOW + MAX_AHEAD_MS + 1, [5; 12], b"x");
        assert_eq!(d.open(&ahead, NOW, 0), Err(Refusal::Ahead));
        // The header changed: a newer time on an old envelope, another counter.
        let mut later = old.clone();
        later.t = NOW;
        assert_eq!(d.open(&later, NOW, 0), Err(Refusal::Altered));
        let mut n = e.clone();
        n.n = 99;
        assert_eq!(d.open(&n, NOW, 0), Err(Refusal::Altered));
        // The ciphertext changed.
        let mut ct = unb64(&e.ct).unwrap();
        ct[0] ^= 1;
        let mut bad = e.clone();
        bad.ct = b64(&ct);
        assert_eq!(d.open(&bad, NOW, 0), Err(Refusal::Altered));
        // The daemon's own envelope sent back to it, as it was or with its header swapped.
        let own = d.seal(3, NOW, [6; 12], b"x");
        assert_eq!(d.open(&own, NOW, 0), Err(Refusal::Reflected));
        let mut swapped = own.clone();
        std::mem::swap(&mut swapped.from, &mut swapped.to);
        assert_eq!(d.open(&swapped, NOW, 0), Err(Refusal::Reflected));
        // For someone else.
        let mut elsewhere = e.clone();
        elsewhere.to = "d_other".into();
        assert_eq!(d.open(&elsewhere, NOW, 0), Err(Refusal::Misrouted));
        let mut malformed = e.clone();
        malformed.nonce = "short".into();
        assert_eq!(d.open(&malformed, NOW, 0), Err(Refusal::Malformed));
        assert_eq!(d.open(&e, NOW, 4).unwrap(), b"x");
    }

    #[test]
    fn a_low_order_public_key_makes_no_link() {
        let d = KeyPair::from_secret([7; 32]);
        assert_eq!(
            Link::new(Role::Daemon, "d", "v", &d, &[0; 32]).unwrap_err(),
            KeyError::LowOrder
        );
    }

    /// The vector docs/remote.md gives and the Python device checks (fixtures/remote).
    #[test]
    fn the_documented_test_vector_holds() {
        let (_, v) = pair();
        let e = v.seal(1, NOW, [1; 12], b"{}");
        insta::assert_json_snapshot!(e);
    }
}
