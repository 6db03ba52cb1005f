//! Remote control (D.7, `docs/remote.md`): the sealed envelopes between handlerd and one paired
//! device, the pairing code's derivations, the gateway's wire bodies, what a device may say, and
//! the daemon API's bodies. Pure: keys, nonces and times come in as arguments.

pub mod api;
pub mod device;
pub mod envelope;
pub mod gateway;
pub mod pairing;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Bytes as unpadded base64url (every binary field of the wire).
pub fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Unpadded base64url back to bytes (None: not base64url).
pub fn unb64(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

/// Whether two credentials are the same, in time that depends only on their length: the one
/// comparison of secrets (handlerd's token, the gateway's credentials and pairing claims).
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A 32-byte key or public key from base64url (None: not one).
pub fn key32(text: &str) -> Option<[u8; 32]> {
    unb64(text)?.try_into().ok()
}
