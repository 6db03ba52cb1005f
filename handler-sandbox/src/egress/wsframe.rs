//! WebSocket frame boundaries in a relayed byte stream (RFC 6455 §5.2), and the close frame the
//! proxy sends when a policy change revokes a WebSocket (code 1012, egress-lessons): the proxy
//! relays frames, and needs to know where one frame ends so that a close frame is never put in
//! the middle of another; towards and from an injection's hosts it also swaps phantoms and values
//! inside payloads, across the frames of a fragmented message (same length: headers unchanged). Pure: bytes in, bytes and
//! positions out; the mask key comes in as an argument.

use std::collections::VecDeque;

use crate::egress::inject::{Hits, Rules};
use crate::egress::replace::Replacer;

/// "Service restart" (RFC 6455 §7.4.1, IANA registry): the code of the close frame a policy
/// change sends, so that a client knows it may reconnect (and be judged again).
pub const SERVICE_RESTART: u16 = 1012;

/// The reason the proxy gives in its close frames.
pub const POLICY_CHANGED: &str = "egress policy changed";

/// Why the byte stream is not a sequence of WebSocket frames (tracking stops there; the relay
/// goes on, but can no longer insert a close frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("reserved WebSocket opcode {0:#x}")]
    /// A frame uses a reserved opcode.
    ReservedOpcode(u8),
    #[error("WebSocket control frame longer than 125 bytes ({0})")]
    /// A control frame's payload is longer than 125 bytes.
    LongControl(u64),
    #[error("fragmented WebSocket control frame")]
    /// A control frame is fragmented.
    FragmentedControl,
    #[error("WebSocket frame length with the most significant bit set")]
    /// A frame's 64-bit length has its most significant bit set.
    OversizedLength,
}

/// Where a stream of frames is: between frames, in a header, in a payload, or lost.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// In a header, `len` bytes of it read so far (0: between frames).
    Header {
        buf: [u8; 14],
        len: usize,
    },
    /// In a payload, `left` bytes of it still to come, `done` read; masked with `mask`.
    Payload {
        left: u64,
        done: u64,
        mask: Option<[u8; 4]>,
    },
    Broken(FrameError),
}

/// Follows one direction of a WebSocket connection, frame by frame, without holding payloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameTracker {
    state: State,
    close_seen: bool,
    frames: u64,
    /// The opcode and FIN bit of the frame in flight, or of the last one read whole.
    kind: Option<(u8, bool)>,
}

impl Default for FrameTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameTracker {
    /// A tracker at the start of a stream (between frames).
    pub fn new() -> Self {
        FrameTracker {
            state: State::Header {
                buf: [0; 14],
                len: 0,
            },
            close_seen: false,
            frames: 0,
            kind: None,
        }
    }

    /// The opcode and FIN bit of the frame in flight (its header read whole), or else of the
    /// last frame read whole.
    pub fn kind(&self) -> Option<(u8, bool)> {
        self.kind
    }

    /// Whether the stream is between two frames (a frame may be inserted here).
    pub fn at_boundary(&self) -> bool {
        matches!(self.state, State::Header { len: 0, .. })
    }

    /// Whether this direction has already sent a close frame (whose header was read whole).
    pub fn close_seen(&self) -> bool {
        self.close_seen
    }

    /// How many frames have been read whole.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Why tracking stopped, if it did.
    pub fn broken(&self) -> Option<FrameError> {
        match self.state {
            State::Broken(e) => Some(e),
            _ => None,
        }
    }

    /// Reads all of `bytes` (the next bytes of the stream).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.broken().is_none() {
            let n = self.step(bytes);
            bytes = &bytes[n..];
        }
    }

    /// Reads `bytes` up to the end of the frame in progress and returns how many it read: 0 when
    /// already between frames (or when tracking stopped); `bytes.len()` when the frame goes on
    /// past them. Afterwards [`Self::at_boundary`] says whether the frame ended.
    pub fn to_boundary(&mut self, bytes: &[u8]) -> usize {
        if self.at_boundary() || bytes.is_empty() || self.broken().is_some() {
            return 0;
        }
        self.step(bytes)
    }

    /// Reads from `bytes` until the end of `bytes` or of the current frame (a boundary), whichever
    /// comes first; returns the number read (at least one when `bytes` is not empty and tracking
    /// goes on).
    fn step(&mut self, bytes: &[u8]) -> usize {
        let mut used = 0;
        while used < bytes.len() {
            let frames = self.frames;
            let (n, span) = self.advance(&bytes[used..]);
            used += n;
            if self.frames != frames || span == Span::Untracked || n == 0 {
                break;
            }
        }
        used
    }

    /// Reads the next piece of `bytes` of one kind: header bytes (up to the header's end), or
    /// payload bytes (up to the payload's end), or, once tracking stopped, everything. Returns how
    /// many it read and what they were.
    pub fn advance(&mut self, bytes: &[u8]) -> (usize, Span) {
        if bytes.is_empty() {
            return (0, Span::Header);
        }
        match &mut self.state {
            State::Broken(_) => (bytes.len(), Span::Untracked),
            State::Header { buf, len } => {
                let mut used = 0;
                loop {
                    let need = header_len(&buf[..*len]);
                    let take = (need - *len).min(bytes.len() - used);
                    buf[*len..*len + take].copy_from_slice(&bytes[used..used + take]);
                    *len += take;
                    used += take;
                    if *len < header_len(&buf[..*len]) {
                        if used == bytes.len() {
                            return (used, Span::Header);
                        }
                        continue;
                    }
                    break;
                }
                let head = &buf[..*len];
                match parse_header(head) {
                    Err(e) => self.state = State::Broken(e),
                    Ok((opcode, payload)) => {
                        self.kind = Some((opcode, head[0] & 0x80 != 0));
                        let mask = (head[1] & 0x80 != 0).then(|| {
                            let k = &head[head.len() - 4..];
                            [k[0], k[1], k[2], k[3]]
                        });
                        if opcode == 0x8 {
                            self.close_seen = true;
                        }
                        if payload == 0 {
                            self.end_frame();
                        } else {
                            self.state = State::Payload {
                                left: payload,
                                done: 0,
                                mask,
                            };
                        }
                    }
                }
                (used, Span::Header)
            }
            State::Payload { left, done, mask } => {
                let take = (bytes.len() as u64).min(*left);
                let span = Span::Payload {
                    mask: *mask,
                    offset: *done,
                };
                *left -= take;
                *done += take;
                if *left == 0 {
                    self.end_frame();
                }
                (take as usize, span)
            }
        }
    }

    fn end_frame(&mut self) {
        self.frames += 1;
        self.state = State::Header {
            buf: [0; 14],
            len: 0,
        };
    }
}

/// What a piece of the stream read by [`FrameTracker::advance`] was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// (Part of) a frame's header.
    Header,
    /// (Part of) a payload, starting `offset` bytes into it, masked with `mask`.
    Payload {
        /// The frame's masking key, if it is masked.
        mask: Option<[u8; 4]>,
        /// How far into the payload the span starts.
        offset: u64,
    },
    /// Bytes after tracking stopped.
    Untracked,
}

/// XORs `bytes`, which start `offset` bytes into a payload, with the mask `key` (masking and
/// unmasking are the same operation).
pub fn apply_mask(bytes: &mut [u8], key: [u8; 4], offset: u64) {
    for (i, b) in bytes.iter_mut().enumerate() {
        *b ^= key[((offset + i as u64) % 4) as usize];
    }
}

/// Follows a frame stream and swaps phantoms and values inside payloads (unmasked, swapped,
/// masked again with the same key). A data message's payload goes through one replacer across
/// all its frames, so a phantom or a value split between two continuation frames is still
/// found: the end of a frame that is not its message's last is then held (at most a pattern's
/// length less one byte, with what follows it) until the next frame tells. A control frame
/// between two fragments has its own replacer. Lengths never change, so headers pass through as
/// they are.
#[derive(Debug, Clone)]
pub struct PayloadRewriter {
    tracker: FrameTracker,
    rules: Rules,
    /// The data message in flight.
    msg: Replacer,
    /// The control frame in flight.
    ctl: Replacer,
    /// What goes out next, in stream order; payload pieces wait for their swapped bytes.
    queue: VecDeque<Piece>,
    hits: Hits,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Channel {
    Message,
    Control,
}

#[derive(Debug, Clone)]
enum Piece {
    Raw(Vec<u8>),
    Payload {
        channel: Channel,
        mask: Option<[u8; 4]>,
        /// Where the piece starts in its frame's payload (for the mask).
        offset: u64,
        len: usize,
        filled: Vec<u8>,
    },
}

impl PayloadRewriter {
    /// A rewriter with `rules` (empty rules: frames are only followed).
    pub fn new(rules: Rules) -> Self {
        PayloadRewriter {
            tracker: FrameTracker::new(),
            msg: rules.replacer(),
            ctl: rules.replacer(),
            rules,
            queue: VecDeque::new(),
            hits: Hits::default(),
        }
    }

    /// Where the stream is.
    pub fn tracker(&self) -> &FrameTracker {
        &self.tracker
    }

    /// What was injected or leaked so far (the frames in flight included).
    pub fn hits(&self) -> Hits {
        let mut h = self.hits.clone();
        h.merge(self.rules.hits_of(self.msg.hits()));
        h.merge(self.rules.hits_of(self.ctl.hits()));
        h
    }

    /// Whether bytes read are still held back (the end of a fragment that could begin a
    /// pattern the next fragment completes).
    pub fn holding(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Reads `input` (all of it, or with `to_boundary` only up to the end of the frame in flight:
    /// nothing when between frames) and appends to `out` what can go on: headers, payload bytes
    /// swapped, less what could still begin a phantom (held until its message's or control
    /// frame's end, or the next call with `to_boundary`, which gives out everything up to the
    /// boundary). Returns how many bytes of `input` it read.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>, to_boundary: bool) -> usize {
        if to_boundary && self.tracker.at_boundary() {
            self.flush(out);
            return 0;
        }
        let mut used = 0;
        while used < input.len() {
            let frames = self.tracker.frames();
            let (n, span) = self.tracker.advance(&input[used..]);
            let chunk = &input[used..used + n];
            used += n;
            match span {
                _ if self.rules.is_empty() => out.extend_from_slice(chunk),
                Span::Header => self.queue.push_back(Piece::Raw(chunk.to_vec())),
                Span::Untracked => {
                    self.flush(out);
                    out.extend_from_slice(chunk);
                }
                Span::Payload { mask, offset } => {
                    let channel = self.channel();
                    let mut plain = chunk.to_vec();
                    if let Some(k) = mask {
                        apply_mask(&mut plain, k, offset);
                    }
                    self.queue.push_back(Piece::Payload {
                        channel,
                        mask,
                        offset,
                        len: plain.len(),
                        filled: Vec::new(),
                    });
                    let mut swapped = Vec::with_capacity(plain.len());
                    match channel {
                        Channel::Message => self.msg.push(&plain, &mut swapped),
                        Channel::Control => self.ctl.push(&plain, &mut swapped),
                    }
                    self.fill(channel, swapped);
                }
            }
            if self.tracker.frames() != frames {
                match self.tracker.kind() {
                    Some((op, _)) if op >= 0x8 => self.end(Channel::Control),
                    Some((_, true)) => self.end(Channel::Message),
                    _ => {}
                }
                if to_boundary {
                    self.flush(out);
                    break;
                }
            }
            self.drain(out);
            if n == 0 {
                break;
            }
        }
        self.drain(out);
        used
    }

    /// Gives out everything held back (a partial pattern is no match): before a close frame is
    /// put in, or at the stream's end.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        self.end(Channel::Message);
        self.end(Channel::Control);
        self.drain(out);
    }

    fn channel(&self) -> Channel {
        match self.tracker.kind() {
            Some((op, _)) if op >= 0x8 => Channel::Control,
            _ => Channel::Message,
        }
    }

    /// Ends a channel's replacer (its message or control frame is complete).
    fn end(&mut self, channel: Channel) {
        let rep = match channel {
            Channel::Message => &mut self.msg,
            Channel::Control => &mut self.ctl,
        };
        let mut rest = Vec::new();
        rep.finish(&mut rest);
        self.hits.merge(self.rules.hits_of(rep.hits()));
        *rep = self.rules.replacer();
        self.fill(channel, rest);
    }

    /// Hands a channel's swapped bytes to its waiting pieces, in order.
    fn fill(&mut self, channel: Channel, bytes: Vec<u8>) {
        let mut bytes = &bytes[..];
        for piece in self.queue.iter_mut() {
            if bytes.is_empty() {
                break;
            }
            if let Piece::Payload {
                channel: c,
                len,
                filled,
                ..
            } = piece
            {
                if *c == channel && filled.len() < *len {
                    let take = (*len - filled.len()).min(bytes.len());
                    filled.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                }
            }
        }
        debug_assert!(bytes.is_empty(), "a replacer gives out what it was given");
    }

    /// Gives out the pieces at the front that are complete, and what is swapped of the first
    /// one that is not.
    fn drain(&mut self, out: &mut Vec<u8>) {
        while let Some(front) = self.queue.front_mut() {
            match front {
                Piece::Raw(b) => out.append(b),
                Piece::Payload {
                    mask,
                    offset,
                    len,
                    filled,
                    ..
                } => {
                    let n = filled.len();
                    if let Some(k) = mask {
                        apply_mask(filled, *k, *offset);
                    }
                    out.append(filled);
                    *offset += n as u64;
                    *len -= n;
                    if *len > 0 {
                        break;
                    }
                }
            }
            self.queue.pop_front();
        }
    }
}

/// How long the header is, as far as its first bytes tell (2 until the second byte is known).
fn header_len(head: &[u8]) -> usize {
    if head.len() < 2 {
        return 2;
    }
    let ext = match head[1] & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if head[1] & 0x80 != 0 { 4 } else { 0 };
    2 + ext + mask
}

/// A whole header: its opcode and payload length.
fn parse_header(head: &[u8]) -> Result<(u8, u64), FrameError> {
    let fin = head[0] & 0x80 != 0;
    let opcode = head[0] & 0x0F;
    let len = match head[1] & 0x7F {
        126 => u64::from(u16::from_be_bytes([head[2], head[3]])),
        127 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&head[2..10]);
            let n = u64::from_be_bytes(b);
            if n >> 63 != 0 {
                return Err(FrameError::OversizedLength);
            }
            n
        }
        n => u64::from(n),
    };
    match opcode {
        0x0..=0x2 => {}
        0x8..=0xA => {
            if len > 125 {
                return Err(FrameError::LongControl(len));
            }
            if !fin {
                return Err(FrameError::FragmentedControl);
            }
        }
        other => return Err(FrameError::ReservedOpcode(other)),
    }
    Ok((opcode, len))
}

/// A close frame with `code` and `reason` (cut to the 123 bytes a control frame has room for, at
/// a character boundary). Towards a server it must be masked (`mask`: the key, which the caller
/// draws at random, RFC 6455 §5.3); towards a client it must not be (`None`).
pub fn close_frame(code: u16, reason: &str, mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut cut = reason.len().min(123);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(&reason.as_bytes()[..cut]);
    let mut out = vec![0x88, payload.len() as u8];
    if let Some(key) = mask {
        out[1] |= 0x80;
        out.extend_from_slice(&key);
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= key[i % 4];
        }
    }
    out.extend_from_slice(&payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodes one frame (test side, written from RFC 6455 §5.2 independently of the tracker).
    fn frame(fin: bool, opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
        let mut out = vec![(if fin { 0x80 } else { 0 }) | opcode];
        let m = if mask.is_some() { 0x80 } else { 0 };
        let n = payload.len();
        if n < 126 {
            out.push(m | n as u8);
        } else if n <= 0xFFFF {
            out.push(m | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            out.push(m | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        let mut p = payload.to_vec();
        if let Some(k) = mask {
            out.extend_from_slice(&k);
            for (i, b) in p.iter_mut().enumerate() {
                *b ^= k[i % 4];
            }
        }
        out.extend_from_slice(&p);
        out
    }

    /// A stream of frames of every length form, masked and not, fragmented, with control frames
    /// between fragments; and the offsets where each frame ends.
    fn stream() -> (Vec<u8>, Vec<usize>) {
        let k = Some([0x37, 0xfa, 0x21, 0x3d]);
        let frames = [
            frame(true, 0x1, b"hello", None),
            frame(true, 0x1, b"", k),
            frame(false, 0x2, &[7u8; 126], k),
            frame(true, 0x9, b"ping", None),
            frame(false, 0x0, &[1u8; 300], None),
            frame(true, 0x0, &[2u8; 65_536], k),
            frame(true, 0xA, b"", None),
            frame(true, 0x2, &[3u8; 125], None),
            frame(true, 0x8, &[0x03, 0xE8], k),
        ];
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for f in frames {
            bytes.extend_from_slice(&f);
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    /// The offsets at which the tracker finds itself between frames, reading `pieces` in turn
    /// with `to_boundary` (one `feed` byte to start each frame).
    fn boundaries_reading(pieces: &[&[u8]]) -> Vec<usize> {
        let mut t = FrameTracker::new();
        let mut at = 0;
        let mut seen = Vec::new();
        for piece in pieces {
            let mut rest: &[u8] = piece;
            while !rest.is_empty() {
                if t.at_boundary() {
                    // Step over the next frame's first byte, then run to its end.
                    t.feed(&rest[..1]);
                    at += 1;
                    rest = &rest[1..];
                    if t.at_boundary() {
                        seen.push(at);
                    }
                    continue;
                }
                let n = t.to_boundary(rest);
                assert!(n > 0, "progress");
                at += n;
                rest = &rest[n..];
                if t.at_boundary() {
                    seen.push(at);
                }
            }
        }
        assert!(t.broken().is_none());
        seen
    }

    #[test]
    fn boundaries_are_found_whole() {
        let (bytes, ends) = stream();
        assert_eq!(boundaries_reading(&[&bytes]), ends);
        let mut t = FrameTracker::new();
        t.feed(&bytes);
        assert!(t.at_boundary());
        assert_eq!(t.frames(), ends.len() as u64);
        assert!(t.close_seen());
    }

    #[test]
    fn boundaries_are_found_with_the_stream_cut_anywhere() {
        let (bytes, ends) = stream();
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(boundaries_reading(&[a, b]), ends, "cut at {cut}");
        }
    }

    #[test]
    fn a_stream_read_one_byte_at_a_time_is_between_frames_exactly_at_their_ends() {
        let (bytes, ends) = stream();
        let mut t = FrameTracker::new();
        for (i, b) in bytes.iter().enumerate() {
            // The close frame is the last one: its header is 6 bytes (masked), payload 2.
            assert_eq!(t.close_seen(), i >= bytes.len() - 2, "before byte {i}");
            t.feed(std::slice::from_ref(b));
            assert_eq!(t.at_boundary(), ends.contains(&(i + 1)), "after byte {i}");
        }
        assert!(t.close_seen());
    }

    #[test]
    fn feeding_in_pieces_at_every_cut_of_every_header_agrees() {
        // Each header form split at each of its bytes, followed by part of the next frame.
        for f in [
            frame(true, 0x1, b"abc", Some([1, 2, 3, 4])),
            frame(true, 0x2, &[9u8; 200], Some([5, 6, 7, 8])),
            frame(true, 0x2, &[9u8; 70_000], None),
            frame(true, 0x2, &[9u8; 70_000], Some([5, 6, 7, 8])),
        ] {
            let mut s = f.clone();
            s.extend_from_slice(&frame(true, 0x1, b"next", None)[..3]);
            for cut in 1..=14.min(f.len() - 1) {
                let mut t = FrameTracker::new();
                t.feed(&s[..cut]);
                assert!(!t.at_boundary());
                let n = t.to_boundary(&s[cut..]);
                assert_eq!(cut + n, f.len(), "cut {cut}");
                assert!(t.at_boundary());
                assert_eq!(t.to_boundary(&s[f.len()..]), 0, "already between frames");
                t.feed(&s[f.len()..]);
                assert!(!t.at_boundary(), "in the next header");
            }
        }
    }

    #[test]
    fn to_boundary_stops_where_the_frame_ends_and_not_beyond() {
        let two = [
            frame(true, 0x1, b"first", None),
            frame(true, 0x1, b"second", None),
        ]
        .concat();
        let mut t = FrameTracker::new();
        t.feed(&two[..3]);
        assert_eq!(t.to_boundary(&two[3..]), 7 - 3);
        assert!(t.at_boundary());
        let mut t = FrameTracker::new();
        t.feed(&two[..3]);
        assert_eq!(t.to_boundary(&two[3..5]), 2, "the frame goes on");
        assert!(!t.at_boundary());
    }

    #[test]
    fn what_is_not_a_frame_stops_tracking() {
        for (bytes, e) in [
            (vec![0x83, 0x00], FrameError::ReservedOpcode(3)),
            (vec![0x8F, 0x00], FrameError::ReservedOpcode(0xF)),
            (vec![0x89, 126, 0, 126], FrameError::LongControl(126)),
            (vec![0x08, 0x00], FrameError::FragmentedControl),
            (
                vec![0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0],
                FrameError::OversizedLength,
            ),
        ] {
            let mut t = FrameTracker::new();
            t.feed(&bytes);
            assert_eq!(t.broken(), Some(e));
            assert!(!t.at_boundary());
            assert_eq!(t.to_boundary(b"more"), 0);
        }
    }

    #[test]
    fn the_close_frame_to_a_client_is_unmasked_1012() {
        let f = close_frame(SERVICE_RESTART, POLICY_CHANGED, None);
        let mut want = vec![0x88, 23, 0x03, 0xF4];
        want.extend_from_slice(b"egress policy changed");
        assert_eq!(f, want);
        let mut t = FrameTracker::new();
        t.feed(&f);
        assert!(t.at_boundary() && t.close_seen());
    }

    #[test]
    fn the_close_frame_to_a_server_is_masked_1012() {
        let key = [0xA1, 0x02, 0xFF, 0x40];
        let f = close_frame(SERVICE_RESTART, POLICY_CHANGED, Some(key));
        assert_eq!(&f[..2], &[0x88, 0x80 | 23]);
        assert_eq!(&f[2..6], &key);
        let payload: Vec<u8> = f[6..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 4])
            .collect();
        assert_eq!(&payload[..2], &[0x03, 0xF4]);
        assert_eq!(&payload[2..], POLICY_CHANGED.as_bytes());
        assert_eq!(f, frame(true, 0x8, &payload, Some(key)));
    }

    #[test]
    fn a_long_reason_is_cut_to_fit_a_control_frame_at_a_character() {
        let reason = "é".repeat(100);
        let f = close_frame(1000, &reason, None);
        assert_eq!(f[1] as usize, f.len() - 2);
        assert!(f[1] <= 125);
        assert!(std::str::from_utf8(&f[4..]).is_ok());
        assert_eq!(f.len() - 4, 122, "61 two-byte characters");
    }

    const PH: &str = "sk-test-AbCdEfGh0123456789xyzwABCDEFGH";
    const VA: &str = "sk-test-QwErTyUi9876543210abcdZYXWVUTS";
    const OTHER_PH: &str = "tok-Zz99Yy88Xx77Ww66Vv55Uu44Tt33";
    const OTHER_VA: &str = "tok-Aa11Bb22Cc33Dd44Ee55Ff66Gg77";

    fn injections() -> crate::egress::InjectionSet {
        use handler_contracts::allow::AllowEntry;
        use handler_contracts::sandbox::Injection;
        let inj = |name: &str, phantom: &str, value: &str, host: &str| Injection {
            name: name.into(),
            phantom: phantom.into(),
            value: value.into(),
            hosts: vec![AllowEntry::parse(host).unwrap()],
            body: false,
        };
        crate::egress::InjectionSet::new(vec![
            inj("providers/x/apiKey", PH, VA, "api.x.com:443"),
            inj("bindings/b/tok", OTHER_PH, OTHER_VA, "b.io:443"),
        ])
        .unwrap()
    }

    /// Rewrites `input` read in the pieces cut at `cuts`; the output and the hits.
    fn rewrite(rules: &Rules, input: &[u8], cuts: &[usize]) -> (Vec<u8>, Hits) {
        let mut r = PayloadRewriter::new(rules.clone());
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&input.len())) {
            assert_eq!(r.push(&input[at..c], &mut out, false), c - at);
            at = c;
        }
        assert!(r.tracker().at_boundary());
        (out, r.hits())
    }

    fn client_frames(secret: &str) -> Vec<u8> {
        let k = Some([0x11, 0x22, 0x33, 0x44]);
        [
            frame(true, 0x1, format!("{{\"key\":\"{secret}\"}}").as_bytes(), k),
            frame(true, 0x2, &[7u8; 300], Some([9, 8, 7, 6])),
            frame(true, 0x9, b"ping", k),
            frame(
                true,
                0x1,
                format!("{secret}{secret}").as_bytes(),
                Some([1, 0, 0, 1]),
            ),
        ]
        .concat()
    }

    #[test]
    fn a_phantom_in_masked_client_frames_becomes_the_value_wherever_the_stream_is_cut() {
        let rules = injections().request_rules("api.x.com", 443);
        let input = client_frames(PH);
        let want = client_frames(VA);
        for cut in 0..=input.len() {
            let (out, hits) = rewrite(&rules, &input, &[cut]);
            assert_eq!(out, want, "cut at {cut}");
            assert!(hits.injected.contains("providers/x/apiKey") && !hits.is_leak());
        }
        for step in [1, 3, 5] {
            let cuts: Vec<usize> = (step..input.len()).step_by(step).collect();
            assert_eq!(rewrite(&rules, &input, &cuts).0, want, "pieces of {step}");
        }
    }

    #[test]
    fn a_value_in_server_frames_becomes_the_phantom_again() {
        let rules = injections().response_rules("api.x.com", 443);
        let msg = |s: &str| {
            [
                frame(true, 0x1, format!("echo {s} and {s}").as_bytes(), None),
                frame(true, 0x2, &vec![b'x'; 70_000], None),
            ]
            .concat()
        };
        for cut in [0, 1, 2, 9, 20, 40, 100] {
            let (out, _) = rewrite(&rules, &msg(VA), &[cut]);
            assert_eq!(out, msg(PH), "cut at {cut}");
        }
    }

    #[test]
    fn another_injections_phantom_is_a_leak_and_nothing_changes_without_rules() {
        let rules = injections().request_rules("api.x.com", 443);
        let input = client_frames(OTHER_PH);
        let (out, hits) = rewrite(&rules, &input, &[5]);
        assert_eq!(out, input);
        assert!(hits.leaked.contains("bindings/b/tok"), "{hits:?}");
        // Towards a host without injections of its own, every phantom is a leak.
        let rules = injections().request_rules("elsewhere.com", 443);
        assert!(rewrite(&rules, &client_frames(PH), &[]).1.is_leak());
        // Server frames from a host without injections: nothing to swap.
        let rules = injections().response_rules("elsewhere.com", 443);
        let server = frame(true, 0x1, VA.as_bytes(), None);
        assert_eq!(rewrite(&rules, &server, &[3]).0, server);
    }

    #[test]
    fn pushing_to_the_boundary_ends_the_frame_in_flight_with_nothing_held_back() {
        let rules = injections().request_rules("api.x.com", 443);
        let input = client_frames(PH);
        let want = client_frames(VA);
        let first_end = frame(
            true,
            0x1,
            format!("{{\"key\":\"{PH}\"}}").as_bytes(),
            Some([0; 4]),
        )
        .len();
        for cut in 1..first_end {
            let mut r = PayloadRewriter::new(rules.clone());
            let mut out = Vec::new();
            r.push(&input[..cut], &mut out, false);
            let n = r.push(&input[cut..], &mut out, true);
            assert_eq!(cut + n, first_end, "cut at {cut}");
            assert!(r.tracker().at_boundary());
            assert_eq!(out, want[..first_end], "the whole first frame, swapped");
            assert_eq!(r.push(&input[first_end..], &mut out, true), 0);
        }
    }

    #[test]
    fn a_phantom_split_between_the_frames_of_a_message_is_swapped() {
        let rules = injections().request_rules("api.x.com", 443);
        let (k, j) = (Some([5, 6, 7, 8]), Some([1, 9, 2, 8]));
        let split = |s: &str, ping: bool| {
            let mut v = vec![
                frame(false, 0x1, format!("say {}", &s[..10]).as_bytes(), k),
                frame(false, 0x0, &s.as_bytes()[10..20], j),
            ];
            if ping {
                v.push(frame(true, 0x9, b"ping", None));
            }
            v.push(frame(true, 0x0, format!("{} now", &s[20..]).as_bytes(), k));
            v.push(frame(true, 0x1, b"next", j));
            v.concat()
        };
        for ping in [false, true] {
            let input = split(PH, ping);
            let want = split(VA, ping);
            for cut in 0..=input.len() {
                let (out, hits) = rewrite(&rules, &input, &[cut]);
                assert_eq!(out, want, "ping {ping}, cut at {cut}");
                assert!(hits.injected.contains("providers/x/apiKey"));
            }
        }
        // From the server: a value split between fragments comes back as the phantom.
        let back = injections().response_rules("api.x.com", 443);
        let server = |s: &str| {
            [
                frame(false, 0x1, &s.as_bytes()[..7], None),
                frame(true, 0x0, &s.as_bytes()[7..], None),
            ]
            .concat()
        };
        assert_eq!(rewrite(&back, &server(VA), &[3, 12]).0, server(PH));
        // Another injection's phantom split so is a leak.
        assert!(rewrite(&rules, &split(OTHER_PH, true), &[]).1.is_leak());
    }

    #[test]
    fn the_end_of_a_fragment_is_held_only_while_it_could_begin_a_phantom() {
        let rules = injections().request_rules("api.x.com", 443);
        let first = frame(false, 0x1, format!("abc {}", &PH[..6]).as_bytes(), None);
        let mut r = PayloadRewriter::new(rules.clone());
        let mut out = Vec::new();
        r.push(&first, &mut out, false);
        assert_eq!(
            out.len(),
            first.len() - 6,
            "the phantom's beginning is held"
        );
        assert!(r.holding());
        // Going to the boundary (a policy change) gives it out as it is.
        assert_eq!(r.push(b"", &mut out, true), 0);
        assert_eq!(out, first);
        assert!(!r.holding());
        let plain = frame(false, 0x1, b"nothing to see", None);
        let mut r = PayloadRewriter::new(rules);
        let mut out = Vec::new();
        r.push(&plain, &mut out, false);
        assert_eq!(out, plain, "nothing held");
    }
}
