//! The gateway's wire (docs/remote.md § The gateway): JSON bodies of its HTTP API. The gateway
//! routes [`Envelope`]s by their header and keeps each recipient's mailbox; what it learns is
//! opaque ids, public keys, a claim's hash and sizes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::envelope::Envelope;

/// The largest request body the gateway reads.
pub const MAX_BODY: usize = 1024 * 1024;
/// The most messages one sender has waiting in one mailbox (per pair); beyond, it gets 429 and
/// tries again.
pub const MAILBOX_MESSAGES: usize = 1000;
/// The most bytes one sender has waiting in one mailbox.
pub const MAILBOX_BYTES: usize = 16 * 1024 * 1024;
/// How long a message waits in a mailbox before the gateway drops it (an envelope is refused
/// as expired after 10 minutes anyway).
pub const MAILBOX_AGE_SECS: u64 = 3600;
/// The longest `wait` of a mail poll.
pub const MAX_WAIT_SECS: u64 = 30;

/// `POST /v1/daemons`: a daemon's registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registered {
    /// The daemon's opaque id (`d_` + 16 hex).
    pub daemon_id: String,
    /// Its credential for every later call (Bearer); the gateway keeps only its hash.
    pub token: String,
}

/// `POST /v1/pairings` (a daemon): a pairing a device may claim once, within its time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PairingOffer {
    /// Derived from the code (32 hex).
    pub pairing_id: String,
    /// The SHA-256 of the claim (64 hex).
    pub claim_hash: String,
    /// The daemon's X25519 public key (base64url).
    pub daemon_pk: String,
    /// The daemon's tag on its id and key (base64url).
    pub tag: String,
}

/// `GET /v1/pairings/{id}`: what a device reads before it claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PairingView {
    /// The daemon's id.
    pub daemon_id: String,
    /// The daemon's public key.
    pub daemon_pk: String,
    /// The daemon's tag.
    pub tag: String,
}

/// `POST /v1/pairings/{id}/claim` (a device).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Claim {
    /// The claim derived from the code.
    pub claim: String,
    /// The device's X25519 public key.
    pub device_pk: String,
    /// Its proof on the two public keys.
    pub proof: String,
    /// What the person calls it (at most 64 characters).
    pub name: String,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Claimed {
    /// The device's opaque id (`v_` + 16 hex).
    pub device_id: String,
    /// The daemon it is paired with.
    pub daemon_id: String,
    /// The device's credential (Bearer); revoked, it gets 401.
    pub token: String,
}

/// One message of a mailbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", tag = "kind", deny_unknown_fields)]
pub enum Mail {
    /// A sealed envelope.
    Envelope {
        /// Its place in the mailbox (acknowledged with `after`).
        seq: u64,
        /// The envelope.
        envelope: Envelope,
    },
    /// The gateway's notice to a daemon: a device claimed one of its pairings.
    Paired {
        /// Its place in the mailbox.
        seq: u64,
        /// Which pairing.
        pairing_id: String,
        /// The new device's id.
        device_id: String,
        /// Its public key.
        device_pk: String,
        /// Its proof, which the daemon checks (and revokes the device when it does not hold).
        proof: String,
        /// Its name.
        name: String,
    },
}

impl Mail {
    /// Its place in the mailbox.
    pub fn seq(&self) -> u64 {
        match self {
            Mail::Envelope { seq, .. } | Mail::Paired { seq, .. } => *seq,
        }
    }
}

/// `GET /v1/mail?after=N&wait=S`: the messages after `N` (those up to `N` are acknowledged and
/// dropped), waiting up to `S` seconds for one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MailBatch {
    /// Oldest first.
    pub messages: Vec<Mail>,
}
