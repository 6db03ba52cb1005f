//! The gateway's store (redb, one file): identities (a daemon, or a device of one daemon, each
//! by its credential's hash), the open pairings, and the mailboxes. Everything in it is
//! routing data, hashes, public keys and sealed envelopes: no plaintext, no credential.

use std::path::Path;

use handler_contracts::remote::gateway::Mail;
use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

const IDS: TableDefinition<&str, &[u8]> = TableDefinition::new("ids");
const PAIRINGS: TableDefinition<&str, &[u8]> = TableDefinition::new("pairings");
const MAIL: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("mail");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The store could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("the gateway's store: {0}")]
pub struct StoreError(Box<redb::Error>);

fn err<E: Into<redb::Error>>(e: E) -> StoreError {
    StoreError(Box::new(e.into()))
}

/// A daemon or a device, as the gateway knows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// SHA-256 of its credential (hex).
    pub token_hash: String,
    /// A device's daemon (none: this is a daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<String>,
    /// Revoked by its daemon: its credential gets 401.
    #[serde(default)]
    pub revoked: bool,
}

/// An open pairing.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pairing {
    /// Whose.
    pub daemon: String,
    /// The claim's hash.
    pub claim_hash: String,
    /// The daemon's public key and tag.
    pub daemon_pk: String,
    /// The daemon's tag.
    pub tag: String,
    /// Until when (Unix seconds).
    pub expires: u64,
    /// Wrong claims so far (at 5 the pairing is dropped).
    pub failures: u32,
}

/// One stored message.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    /// When it arrived (Unix seconds).
    at: u64,
    /// Who sent it (a pair's share of the mailbox is bounded).
    #[serde(default)]
    from: String,
    mail: Mail,
}

/// A mailbox is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// The store.
#[derive(Debug)]
pub struct Store {
    db: Database,
    /// The most messages one mailbox holds
    /// ([`MAILBOX_MESSAGES`](handler_contracts::remote::gateway::MAILBOX_MESSAGES); fewer in tests).
    max_messages: usize,
}

impl Store {
    /// Opens (or makes) `<dir>/gateway.redb`.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let db = Database::create(dir.join("gateway.redb")).map_err(err)?;
        let w = db.begin_write().map_err(err)?;
        {
            w.open_table(IDS).map_err(err)?;
            w.open_table(PAIRINGS).map_err(err)?;
            w.open_table(MAIL).map_err(err)?;
            w.open_table(META).map_err(err)?;
        }
        w.commit().map_err(err)?;
        Ok(Store {
            db,
            max_messages: handler_contracts::remote::gateway::MAILBOX_MESSAGES,
        })
    }

    /// An identity.
    pub fn identity(&self, id: &str) -> Result<Option<Identity>, StoreError> {
        let r = self.db.begin_read().map_err(err)?;
        let t = r.open_table(IDS).map_err(err)?;
        Ok(t.get(id)
            .map_err(err)?
            .and_then(|v| serde_json::from_slice(v.value()).ok()))
    }

    /// Puts an identity.
    pub fn put_identity(&self, id: &str, i: &Identity) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(i).expect("an identity serializes");
        let w = self.db.begin_write().map_err(err)?;
        w.open_table(IDS)
            .map_err(err)?
            .insert(id, bytes.as_slice())
            .map_err(err)?;
        w.commit().map_err(err)
    }

    /// Revokes a device and empties its mailbox.
    pub fn revoke(&self, id: &str) -> Result<bool, StoreError> {
        let Some(mut i) = self.identity(id)? else {
            return Ok(false);
        };
        i.revoked = true;
        self.put_identity(id, &i)?;
        self.take(id, u64::MAX, 0).map(|_| true)
    }

    /// Puts an open pairing (at most 8 per daemon: the oldest go).
    pub fn put_pairing(&self, id: &str, p: &Pairing, now: u64) -> Result<(), StoreError> {
        let w = self.db.begin_write().map_err(err)?;
        {
            let mut t = w.open_table(PAIRINGS).map_err(err)?;
            let mut theirs: Vec<(String, u64)> = Vec::new();
            let mut stale = Vec::new();
            for row in t.iter().map_err(err)? {
                let (k, v) = row.map_err(err)?;
                if let Ok(o) = serde_json::from_slice::<Pairing>(v.value()) {
                    if o.expires <= now {
                        stale.push(k.value().to_owned());
                    } else if o.daemon == p.daemon {
                        theirs.push((k.value().to_owned(), o.expires));
                    }
                }
            }
            theirs.sort_by_key(|(_, e)| *e);
            while theirs.len() >= 8 {
                stale.push(theirs.remove(0).0);
            }
            for k in stale {
                t.remove(k.as_str()).map_err(err)?;
            }
            let bytes = serde_json::to_vec(p).expect("a pairing serializes");
            t.insert(id, bytes.as_slice()).map_err(err)?;
        }
        w.commit().map_err(err)
    }

    /// An open pairing (None: unknown or expired).
    pub fn pairing(&self, id: &str, now: u64) -> Result<Option<Pairing>, StoreError> {
        let r = self.db.begin_read().map_err(err)?;
        let t = r.open_table(PAIRINGS).map_err(err)?;
        Ok(t.get(id)
            .map_err(err)?
            .and_then(|v| serde_json::from_slice::<Pairing>(v.value()).ok())
            .filter(|p| p.expires > now))
    }

    /// Drops a pairing, or counts a wrong claim against it.
    pub fn end_pairing(&self, id: &str, wrong_claim: bool) -> Result<(), StoreError> {
        let w = self.db.begin_write().map_err(err)?;
        {
            let mut t = w.open_table(PAIRINGS).map_err(err)?;
            let p = t
                .get(id)
                .map_err(err)?
                .and_then(|v| serde_json::from_slice::<Pairing>(v.value()).ok());
            match p {
                Some(mut p) if wrong_claim && p.failures < 4 => {
                    p.failures += 1;
                    let bytes = serde_json::to_vec(&p).expect("a pairing serializes");
                    t.insert(id, bytes.as_slice()).map_err(err)?;
                }
                _ => {
                    t.remove(id).map_err(err)?;
                }
            }
        }
        w.commit().map_err(err)
    }

    /// Puts a message from `from` in `to`'s mailbox, numbered by `number(seq)`; Full beyond the
    /// pair's bounds — what `from` has waiting there — so one device filling its daemon's
    /// mailbox never stops another's (messages over an hour old are dropped first).
    pub fn deliver(
        &self,
        to: &str,
        from: &str,
        now: u64,
        number: impl FnOnce(u64) -> Mail,
    ) -> Result<Result<u64, Full>, StoreError> {
        use handler_contracts::remote::gateway::{MAILBOX_AGE_SECS, MAILBOX_BYTES};
        let w = self.db.begin_write().map_err(err)?;
        let seq;
        {
            let mut meta = w.open_table(META).map_err(err)?;
            seq = meta.get("seq").map_err(err)?.map_or(0, |v| v.value()) + 1;
            let mut t = w.open_table(MAIL).map_err(err)?;
            let (mut count, mut bytes, mut old) = (0usize, 0usize, Vec::new());
            for row in t.range((to, 0)..=(to, u64::MAX)).map_err(err)? {
                let (k, v) = row.map_err(err)?;
                let (at, sender) = serde_json::from_slice::<Stored>(v.value())
                    .map_or((0, String::new()), |s| (s.at, s.from));
                if now.saturating_sub(at) > MAILBOX_AGE_SECS {
                    old.push(k.value().1);
                } else if sender == from {
                    count += 1;
                    bytes += v.value().len();
                }
            }
            for n in old {
                t.remove((to, n)).map_err(err)?;
            }
            let stored = serde_json::to_vec(&Stored {
                at: now,
                from: from.to_owned(),
                mail: number(seq),
            })
            .expect("mail serializes");
            if count >= self.max_messages || bytes + stored.len() > MAILBOX_BYTES {
                drop(t);
                drop(meta);
                w.abort().map_err(err)?;
                return Ok(Err(Full));
            }
            t.insert((to, seq), stored.as_slice()).map_err(err)?;
            meta.insert("seq", seq).map_err(err)?;
        }
        w.commit().map_err(err)?;
        Ok(Ok(seq))
    }

    /// Drops `to`'s messages up to `after` (acknowledged) and answers up to `max` after it.
    pub fn take(&self, to: &str, after: u64, max: usize) -> Result<Vec<Mail>, StoreError> {
        // Nothing to acknowledge: a read, no commit (a poll that finds its mailbox as it left it).
        {
            let r = self.db.begin_read().map_err(err)?;
            let t = r.open_table(MAIL).map_err(err)?;
            let acked = t
                .range((to, 0)..=(to, after))
                .map_err(err)?
                .next()
                .is_some();
            if !acked {
                return waiting(&t, to, after, max);
            }
        }
        let w = self.db.begin_write().map_err(err)?;
        let out;
        {
            let mut t = w.open_table(MAIL).map_err(err)?;
            let acked: Vec<u64> = t
                .range((to, 0)..=(to, after))
                .map_err(err)?
                .filter_map(|r| r.ok().map(|(k, _)| k.value().1))
                .collect();
            for n in acked {
                t.remove((to, n)).map_err(err)?;
            }
            out = waiting(&t, to, after, max)?;
        }
        w.commit().map_err(err)?;
        Ok(out)
    }
}

/// Up to `max` of `to`'s messages after `after`, oldest first (read or write transaction alike).
fn waiting(
    t: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    to: &str,
    after: u64,
    max: usize,
) -> Result<Vec<Mail>, StoreError> {
    let mut out = Vec::new();
    if after == u64::MAX {
        return Ok(out);
    }
    for row in t.range((to, after + 1)..=(to, u64::MAX)).map_err(err)? {
        let (_, v) = row.map_err(err)?;
        if let Ok(s) = serde_json::from_slice::<Stored>(v.value()) {
            out.push(s.mail);
        }
        if out.len() >= max {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use handler_contracts::remote::envelope::Envelope;
    const MAILBOX_MESSAGES: usize = 30;

    fn mail(seq: u64) -> Mail {
        Mail::Envelope {
            seq,
            envelope: Envelope {
                v: 1,
                from: "v_1".into(),
                to: "d_1".into(),
                n: seq,
                t: 0,
                nonce: "AAAAAAAAAAAAAAAA".into(),
                ct: "AAAA".into(),
            },
        }
    }

    #[test]
    fn a_mailbox_is_bounded_acknowledged_by_after_and_kept_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        s.max_messages = MAILBOX_MESSAGES;
        for _ in 0..MAILBOX_MESSAGES {
            s.deliver("d_1", "v_1", 100, mail).unwrap().unwrap();
        }
        assert_eq!(s.deliver("d_1", "v_1", 100, mail).unwrap(), Err(Full));
        // Another mailbox is not full, nor this one for another sender (per pair).
        s.deliver("v_9", "d_1", 100, mail).unwrap().unwrap();
        s.deliver("d_1", "v_2", 100, mail).unwrap().unwrap();
        let first = s.take("d_1", 0, 10).unwrap();
        assert_eq!(first.len(), 10);
        let last = first.last().unwrap().seq();
        drop(s);
        let mut s = Store::open(dir.path()).unwrap();
        s.max_messages = MAILBOX_MESSAGES;
        let next = s.take("d_1", last, 10).unwrap();
        assert_eq!(
            next[0].seq(),
            last + 1,
            "acknowledged ones are gone, the rest kept"
        );
        assert_eq!(
            s.take("d_1", 0, usize::MAX).unwrap().len(),
            MAILBOX_MESSAGES + 1 - 10
        );
        // An hour later the old ones go at the next delivery.
        s.deliver("d_1", "v_1", 100 + 3601, mail).unwrap().unwrap();
        assert_eq!(s.take("d_1", 0, usize::MAX).unwrap().len(), 1);
    }

    #[test]
    fn revoking_a_device_empties_its_mailbox_and_pairings_expire_and_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let id = Identity {
            token_hash: "h".into(),
            daemon: Some("d_1".into()),
            revoked: false,
        };
        s.put_identity("v_1", &id).unwrap();
        s.deliver("v_1", "d_1", 0, mail).unwrap().unwrap();
        assert!(s.revoke("v_1").unwrap());
        assert!(s.identity("v_1").unwrap().unwrap().revoked);
        assert!(s.take("v_1", 0, 10).unwrap().is_empty());
        assert!(!s.revoke("v_unknown").unwrap());
        let p = |expires| Pairing {
            daemon: "d_1".into(),
            claim_hash: "c".into(),
            daemon_pk: "k".into(),
            tag: "t".into(),
            expires,
            failures: 0,
        };
        for i in 0..9 {
            s.put_pairing(&format!("p{i}"), &p(1000 + i), 10).unwrap();
        }
        assert!(
            s.pairing("p0", 10).unwrap().is_none(),
            "at most 8 open per daemon: the oldest went"
        );
        assert!(s.pairing("p8", 10).unwrap().is_some());
        assert!(s.pairing("p8", 2000).unwrap().is_none(), "expired");
        for _ in 0..4 {
            s.end_pairing("p8", true).unwrap();
            assert!(s.pairing("p8", 10).unwrap().is_some());
        }
        s.end_pairing("p8", true).unwrap();
        assert!(
            s.pairing("p8", 10).unwrap().is_none(),
            "the fifth wrong claim drops it"
        );
    }
}
