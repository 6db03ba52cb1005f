//! The `keep` verb's wire (issue 28 item 6): frames between a keeper — the process that holds a
//! launch's stdio so its agent outlives the daemon — and whichever daemon connects to its
//! socket, and what the keeper tracks of the ACP traffic so a new daemon can take the agent
//! over mid-turn. Pure: bytes in, frames and facts out.
//!
//! A frame is `[tag: u8][length: u32, big-endian][payload]`. The daemon speaks first
//! ([`Down::Hello`]: the first agent line it wants); the keeper answers [`Up::Welcome`], then
//! the agent's lines from there, numbered from 1 in the order the agent wrote them. The daemon
//! acknowledges what it has processed ([`Down::Ack`]): the keeper keeps every line not yet
//! acknowledged, bounded in bytes, so a daemon that dies mid-line misses nothing.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The longest frame besides an agent line (a stderr line, the welcome).
pub const MAX_SMALL_FRAME: usize = 4 << 20;

/// From the keeper to the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Up {
    /// The answer to [`Down::Hello`].
    Welcome(Welcome),
    /// Agent line `n` (its `\n` left out).
    Out {
        /// Its number, from 1.
        n: u64,
        /// The line.
        line: Vec<u8>,
    },
    /// The agent wrote a line over the bound: its output ends there.
    TooBig,
    /// A line of the launch's stderr (logs, egress events); `whole`: not a piece of a longer
    /// line, so it may be an event.
    Err {
        /// A whole line.
        whole: bool,
        /// The bytes.
        line: Vec<u8>,
    },
    /// The launch ended with this code: nothing follows.
    Exit(i32),
}

/// What a keeper says to a daemon that connects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Welcome {
    /// The launch's pid (the process the keeper runs).
    pub launch_pid: u32,
    /// The first line that follows (a line acknowledged by an earlier daemon is not sent again).
    pub next: u64,
    /// The daemon's requests the agent has not answered yet: `(id as raw JSON, method)`.
    pub in_flight: Vec<(String, String)>,
    /// The agent's requests not answered yet whose line comes before `next`: sent again, so a
    /// new daemon can ask its clients.
    pub asked: Vec<String>,
    /// stderr lines dropped while no daemon read them (the keeper keeps the last ones).
    pub dropped_err: u64,
}

/// From the daemon to the keeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Down {
    /// The first message on a connection: send the agent's lines from `from`.
    Hello {
        /// The first line wanted (1: all the keeper still has).
        from: u64,
    },
    /// A line for the agent's stdin (a `\n` is added).
    In(Vec<u8>),
    /// Every line up to `n` is processed: the keeper may forget them.
    Ack(u64),
}

const T_WELCOME: u8 = b'W';
const T_OUT: u8 = b'O';
const T_TOO_BIG: u8 = b'B';
const T_ERR: u8 = b'E';
const T_ERR_PIECE: u8 = b'e';
const T_EXIT: u8 = b'X';
const T_HELLO: u8 = b'H';
const T_IN: u8 = b'I';
const T_ACK: u8 = b'A';

/// A frame that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Longer than the reader accepts.
    #[error("a frame of {len} bytes is over the limit of {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An unknown tag or a payload of the wrong shape.
    #[error("malformed frame (tag {tag:?}): {why}")]
    Malformed {
        /// Its tag.
        tag: char,
        /// What is wrong.
        why: String,
    },
}

fn frame(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(5 + len);
    out.push(tag);
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}

impl Up {
    /// Its bytes on the wire.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Up::Welcome(w) => frame(
                T_WELCOME,
                &[&serde_json::to_vec(w).unwrap_or_else(|_| b"{}".to_vec())],
            ),
            Up::Out { n, line } => frame(T_OUT, &[&n.to_be_bytes(), line]),
            Up::TooBig => frame(T_TOO_BIG, &[]),
            Up::Err { whole, line } => frame(if *whole { T_ERR } else { T_ERR_PIECE }, &[line]),
            Up::Exit(code) => frame(T_EXIT, &[&code.to_be_bytes()]),
        }
    }

    fn decode(tag: u8, p: &[u8]) -> Result<Up, FrameError> {
        let bad = |why: &str| FrameError::Malformed {
            tag: char::from(tag),
            why: why.into(),
        };
        Ok(match tag {
            T_WELCOME => Up::Welcome(serde_json::from_slice(p).map_err(|e| bad(&e.to_string()))?),
            T_OUT => {
                let (n, line) = p.split_at_checked(8).ok_or_else(|| bad("no line number"))?;
                Up::Out {
                    n: u64::from_be_bytes(n.try_into().map_err(|_| bad("line number"))?),
                    line: line.to_vec(),
                }
            }
            T_TOO_BIG => Up::TooBig,
            T_ERR | T_ERR_PIECE => Up::Err {
                whole: tag == T_ERR,
                line: p.to_vec(),
            },
            T_EXIT => Up::Exit(i32::from_be_bytes(
                p.try_into().map_err(|_| bad("an exit code is 4 bytes"))?,
            )),
            _ => return Err(bad("unknown tag")),
        })
    }
}

impl Down {
    /// Its bytes on the wire.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Down::Hello { from } => frame(T_HELLO, &[&from.to_be_bytes()]),
            Down::In(line) => frame(T_IN, &[line]),
            Down::Ack(n) => frame(T_ACK, &[&n.to_be_bytes()]),
        }
    }

    fn decode(tag: u8, p: &[u8]) -> Result<Down, FrameError> {
        let bad = |why: &str| FrameError::Malformed {
            tag: char::from(tag),
            why: why.into(),
        };
        let number = |p: &[u8]| {
            p.try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| bad("a number is 8 bytes"))
        };
        Ok(match tag {
            T_HELLO => Down::Hello { from: number(p)? },
            T_IN => Down::In(p.to_vec()),
            T_ACK => Down::Ack(number(p)?),
            _ => return Err(bad("unknown tag")),
        })
    }
}

/// Splits a byte stream into frames, none longer than its limit.
#[derive(Debug)]
pub struct Frames {
    buf: Vec<u8>,
    max: usize,
}

impl Frames {
    /// A reader of frames of at most `max` payload bytes.
    #[must_use]
    pub fn new(max: usize) -> Self {
        Frames {
            buf: Vec::new(),
            max,
        }
    }

    /// Accepts frames of up to `max` payload bytes from now on (the bytes held are kept).
    pub fn set_limit(&mut self, max: usize) {
        self.max = max;
    }

    /// Bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn next_raw(&mut self) -> Result<Option<(u8, Vec<u8>)>, FrameError> {
        let Some(head) = self.buf.get(..5) else {
            return Ok(None);
        };
        let tag = head[0];
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > self.max {
            return Err(FrameError::TooLong { len, max: self.max });
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let payload = self.buf[5..5 + len].to_vec();
        self.buf.drain(..5 + len);
        Ok(Some((tag, payload)))
    }

    /// The next whole frame from the keeper, if one is there.
    pub fn next_up(&mut self) -> Result<Option<Up>, FrameError> {
        self.next_raw()?.map(|(t, p)| Up::decode(t, &p)).transpose()
    }

    /// The next whole frame from the daemon, if one is there.
    pub fn next_down(&mut self) -> Result<Option<Down>, FrameError> {
        self.next_raw()?
            .map(|(t, p)| Down::decode(t, &p))
            .transpose()
    }
}

/// A JSON-RPC message's head: its id (raw) and method, nothing else read.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<String>,
}

/// `(id, method)` of a message: `method` None for a response; None for a notification or what
/// is not JSON-RPC.
fn head(line: &[u8]) -> Option<(String, Option<String>)> {
    let h: Head<'_> = serde_json::from_slice(line).ok()?;
    let id = h.id?.get().to_string();
    (id != "null").then_some((id, h.method))
}

/// The most requests a keeper tracks each way (beyond, the oldest are forgotten).
const MAX_TRACKED: usize = 256;

/// What a keeper knows of the traffic it carries: the agent's lines not yet acknowledged, the
/// daemon's requests the agent has not answered, the agent's requests the daemon has not
/// answered.
#[derive(Debug, Default)]
pub struct Kept {
    lines: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
    next: u64,
    in_flight: BTreeMap<String, String>,
    order: VecDeque<String>,
    asked: BTreeMap<String, (u64, Vec<u8>)>,
}

impl Kept {
    /// Nothing seen yet.
    #[must_use]
    pub fn new() -> Self {
        Kept {
            next: 1,
            ..Kept::default()
        }
    }

    /// The bytes of agent lines kept (not acknowledged).
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// An agent line: numbered, kept until acknowledged; the encoded frame to send.
    pub fn agent_line(&mut self, line: Vec<u8>) -> Up {
        let n = self.next;
        self.next += 1;
        if let Some((id, method)) = head(&line) {
            match method {
                Some(_) => {
                    self.asked.insert(id, (n, line.clone()));
                    if self.asked.len() > MAX_TRACKED
                        && let Some(k) = self.asked.keys().next().cloned()
                    {
                        self.asked.remove(&k);
                    }
                }
                None => {
                    self.in_flight.remove(&id);
                }
            }
        }
        self.bytes += line.len();
        self.lines.push_back((n, line.clone()));
        Up::Out { n, line }
    }

    /// A line the daemon sent to the agent.
    pub fn daemon_line(&mut self, line: &[u8]) {
        let Some((id, method)) = head(line) else {
            return;
        };
        match method {
            Some(m) => {
                self.in_flight.insert(id.clone(), m);
                self.order.push_back(id);
                while self.order.len() > MAX_TRACKED {
                    if let Some(old) = self.order.pop_front() {
                        self.in_flight.remove(&old);
                    }
                }
            }
            None => {
                self.asked.remove(&id);
            }
        }
    }

    /// The daemon processed every line up to `n`.
    pub fn ack(&mut self, n: u64) {
        while self.lines.front().is_some_and(|(k, _)| *k <= n) {
            if let Some((_, l)) = self.lines.pop_front() {
                self.bytes -= l.len();
            }
        }
    }

    /// A daemon connected wanting lines from `from`: its welcome (with `launch_pid` and the
    /// stderr lines dropped) and the lines that follow it, in order.
    #[must_use]
    pub fn hello(&self, from: u64, launch_pid: u32, dropped_err: u64) -> (Welcome, Vec<Up>) {
        let first = self.lines.front().map_or(self.next, |(k, _)| *k);
        let next = from.max(first);
        let mut in_flight: Vec<(String, String)> = self
            .order
            .iter()
            .filter_map(|id| self.in_flight.get(id).map(|m| (id.clone(), m.clone())))
            .collect();
        in_flight.dedup();
        let mut asked: Vec<&(u64, Vec<u8>)> =
            self.asked.values().filter(|(k, _)| *k < next).collect();
        asked.sort_by_key(|(k, _)| *k);
        let w = Welcome {
            launch_pid,
            next,
            in_flight,
            asked: asked
                .into_iter()
                .map(|(_, l)| String::from_utf8_lossy(l).into_owned())
                .collect(),
            dropped_err,
        };
        let lines = self
            .lines
            .iter()
            .filter(|(k, _)| *k >= next)
            .map(|(n, l)| Up::Out {
                n: *n,
                line: l.clone(),
            })
            .collect();
        (w, lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_up(bytes: &[u8]) -> Vec<Up> {
        let mut f = Frames::new(1 << 20);
        // Byte by byte: a frame is only given whole.
        let mut out = Vec::new();
        for b in bytes {
            f.push(std::slice::from_ref(b));
            while let Some(u) = f.next_up().unwrap() {
                out.push(u);
            }
        }
        out
    }

    #[test]
    fn frames_round_trip_whatever_the_reads_cut() {
        let ups = vec![
            Up::Welcome(Welcome {
                launch_pid: 7,
                next: 3,
                in_flight: vec![("\"handler-prompt\"".into(), "session/prompt".into())],
                asked: vec![r#"{"id":1,"method":"session/request_permission"}"#.into()],
                dropped_err: 2,
            }),
            Up::Out {
                n: 9,
                line: b"{\"a\":1}".to_vec(),
            },
            Up::TooBig,
            Up::Err {
                whole: false,
                line: b"piece".to_vec(),
            },
            Up::Exit(-3),
        ];
        let bytes: Vec<u8> = ups.iter().flat_map(Up::encode).collect();
        assert_eq!(all_up(&bytes), ups);
        let downs = [
            Down::Hello { from: 5 },
            Down::In(b"x".to_vec()),
            Down::Ack(4),
        ];
        let mut f = Frames::new(16);
        for d in &downs {
            f.push(&d.encode());
        }
        for d in downs {
            assert_eq!(f.next_down().unwrap(), Some(d));
        }
        assert_eq!(f.next_down().unwrap(), None);
    }

    #[test]
    fn a_frame_over_the_limit_or_of_an_unknown_tag_is_refused() {
        let mut f = Frames::new(4);
        f.push(&Down::In(b"12345".to_vec()).encode());
        assert_eq!(f.next_down(), Err(FrameError::TooLong { len: 5, max: 4 }));
        let mut f = Frames::new(4);
        f.push(&[b'Z', 0, 0, 0, 0]);
        assert!(matches!(
            f.next_up(),
            Err(FrameError::Malformed { tag: 'Z', .. })
        ));
        let mut f = Frames::new(4);
        f.push(&[T_EXIT, 0, 0, 0, 1, 0]);
        assert!(f.next_up().is_err(), "an exit code is 4 bytes");
    }

    #[test]
    fn a_new_daemon_gets_what_was_not_acknowledged_and_what_is_still_open() {
        let mut k = Kept::new();
        k.daemon_line(br#"{"jsonrpc":"2.0","id":"handler-init","method":"initialize"}"#);
        k.agent_line(br#"{"jsonrpc":"2.0","id":"handler-init","result":{}}"#.to_vec());
        k.daemon_line(br#"{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{}}"#);
        // An agent's question, answered; another, not.
        k.agent_line(br#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission"}"#.to_vec());
        k.daemon_line(br#"{"jsonrpc":"2.0","id":0,"result":{"outcome":"x"}}"#);
        k.agent_line(br#"{"jsonrpc":"2.0","id":1,"method":"session/request_permission"}"#.to_vec());
        k.agent_line(br#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#.to_vec());
        k.ack(2);
        assert_eq!(
            k.bytes(),
            k.lines.iter().map(|(_, l)| l.len()).sum::<usize>()
        );
        // The daemon logged up to line 2 and then died: it asks from 3.
        let (w, lines) = k.hello(3, 42, 0);
        assert_eq!(w.next, 3);
        assert_eq!(w.launch_pid, 42);
        assert_eq!(
            w.in_flight,
            vec![("5".to_string(), "session/prompt".to_string())],
            "initialize was answered; the prompt is open"
        );
        assert!(
            w.asked.is_empty(),
            "question 1 is line 3: it comes again as a line"
        );
        assert_eq!(
            lines,
            vec![
                Up::Out {
                    n: 3,
                    line: br#"{"jsonrpc":"2.0","id":1,"method":"session/request_permission"}"#
                        .to_vec()
                },
                Up::Out {
                    n: 4,
                    line: br#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#.to_vec()
                },
            ]
        );
        // One that processed everything: no line again, the open question given in the welcome.
        k.ack(4);
        let (w, lines) = k.hello(5, 42, 0);
        assert!(lines.is_empty());
        assert_eq!(w.next, 5);
        assert_eq!(w.asked.len(), 1);
        assert!(w.asked[0].contains("\"id\":1"));
        // A daemon asking from before what is kept gets what is kept, never a gap filled twice.
        let (w, _) = k.hello(1, 42, 0);
        assert_eq!(w.next, 5);
        // The prompt's answer closes it.
        k.agent_line(br#"{"jsonrpc":"2.0","id":5,"result":{"stopReason":"end_turn"}}"#.to_vec());
        assert!(k.hello(7, 1, 0).0.in_flight.is_empty());
    }
}
