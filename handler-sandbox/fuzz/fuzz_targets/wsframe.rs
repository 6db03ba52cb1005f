//! Fuzz target: the WebSocket frame tracker and payload rewriter (RFC 6455 §5.2) the proxy runs
//! on a relayed WebSocket, fed in arbitrary pieces.
//!
//! Input: `FLAGS CUTS CUT… REST`. FLAGS bit 0: REST is the raw byte stream; else REST describes
//! frames that this target encodes itself (independently of the tracker): per frame a header byte
//! (FIN, opcode, mask, length form), a length byte, the mask key, the payload (a byte 0xFF stands
//! for the phantom). Bit 1: rules that swap the phantom for its value; bit 2: push with
//! `to_boundary` (as the proxy does before it inserts a close frame).
//!
//! Oracles: no panic; the output never grows; pieces give the same output and state as one
//! push (without `to_boundary`, which gives out what a message holds at each frame's end); the
//! tracker alone agrees with the rewriter's; after the final flush nothing is lost. For encoded
//! frames: every header passes unchanged, every data message (its frames joined) is the
//! whole-buffer replace of the original (no phantom left when rules are on), each control frame
//! its own, a phantom inside one frame is swapped however the stream was cut, the frame count is
//! right, and the injection is reported used exactly when a phantom was sent.
#![no_main]

use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::Injection;
use handler_sandbox::egress::InjectionSet;
use handler_sandbox::egress::inject::Rules;
use handler_sandbox::egress::wsframe::{FrameTracker, PayloadRewriter};
use libfuzzer_sys::fuzz_target;

const PHANTOM: &str = "PHANTOM_token_0123456789";
const VALUE: &str = "secretval_zyxwvutsrqponm";

fn rules(on: bool) -> Rules {
    let set = InjectionSet::new(vec![Injection {
        name: "k".into(),
        phantom: PHANTOM.into(),
        value: VALUE.into(),
        hosts: vec![AllowEntry::parse("api.x.com:443").unwrap()],
        body: true,
    }])
    .unwrap();
    if on {
        set.request_rules("api.x.com", 443)
    } else {
        set.response_rules("other.com", 443)
    }
}

struct Frame {
    header: Vec<u8>,
    mask: Option<[u8; 4]>,
    payload: Vec<u8>,
}

/// Encodes frames from the description (RFC 6455 §5.2); only valid frames.
fn frames(mut d: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    let take = |n: usize, d: &mut &[u8]| -> Option<Vec<u8>> {
        if d.len() < n {
            return None;
        }
        let (a, b) = d.split_at(n);
        *d = b;
        Some(a.to_vec())
    };
    while let Some(h) = take(2, &mut d) {
        let (h, l) = (h[0], h[1]);
        let control = h & 3 == 3;
        let opcode = if control { 8 + (h >> 2) % 3 } else { h & 3 };
        let fin = control || h & 0x80 != 0;
        let mask = if h & 0x40 != 0 {
            match take(4, &mut d) {
                Some(k) => Some([k[0], k[1], k[2], k[3]]),
                None => break,
            }
        } else {
            None
        };
        let want = if h & 0x20 != 0 && !control {
            l as usize * 37
        } else {
            l as usize % 126
        };
        let mut payload = Vec::new();
        while payload.len() < want {
            let Some((&b, rest)) = d.split_first() else {
                break;
            };
            d = rest;
            if b == 0xFF {
                payload.extend_from_slice(PHANTOM.as_bytes());
            } else {
                payload.push(b);
            }
        }
        if control {
            payload.truncate(125);
        }
        let n = payload.len();
        let m = if mask.is_some() { 0x80 } else { 0 };
        let mut header = vec![(if fin { 0x80 } else { 0 }) | opcode];
        if h & 0x10 != 0 && !control {
            // The 64-bit form even for a short payload (not minimal: still to be followed).
            header.push(m | 127);
            header.extend_from_slice(&(n as u64).to_be_bytes());
        } else if n < 126 {
            header.push(m | n as u8);
        } else if n <= 0xFFFF {
            header.push(m | 126);
            header.extend_from_slice(&(n as u16).to_be_bytes());
        } else {
            header.push(m | 127);
            header.extend_from_slice(&(n as u64).to_be_bytes());
        }
        if let Some(k) = mask {
            header.extend_from_slice(&k);
        }
        out.push(Frame {
            header,
            mask,
            payload,
        });
    }
    out
}

fn masked(p: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut p = p.to_vec();
    if let Some(k) = mask {
        for (i, b) in p.iter_mut().enumerate() {
            *b ^= k[i % 4];
        }
    }
    p
}

/// Pushes `stream` in the pieces `cuts` gives; returns the output.
fn run(rw: &mut PayloadRewriter, stream: &[u8], cuts: &[usize], to_boundary: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut last = 0;
    for &c in cuts.iter().chain(std::iter::once(&stream.len())) {
        let mut piece = &stream[last..c];
        last = c;
        while !piece.is_empty() {
            let mut n = rw.push(piece, &mut out, to_boundary);
            assert!(n <= piece.len());
            if to_boundary && n < piece.len() {
                assert!(
                    rw.tracker().at_boundary() || n == 0,
                    "to_boundary stopped inside a frame"
                );
            }
            if n == 0 {
                // Between frames, a push to the boundary gives out what was held, nothing more.
                assert!(!rw.holding(), "a push to the boundary left bytes held");
                n = rw.push(piece, &mut out, false);
                assert_eq!(
                    n,
                    piece.len(),
                    "a push without to_boundary reads everything"
                );
            }
            piece = &piece[n..];
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Some((&ncuts, rest)) = rest.split_first() else {
        return;
    };
    let ncuts = (ncuts % 12) as usize;
    if rest.len() < ncuts {
        return;
    }
    let (cut_bytes, rest) = rest.split_at(ncuts);
    let raw = flags & 1 != 0;
    let rules_on = flags & 2 != 0;
    let to_boundary = flags & 4 != 0;

    let encoded = if raw { Vec::new() } else { frames(rest) };
    let stream: Vec<u8> = if raw {
        rest.to_vec()
    } else {
        encoded
            .iter()
            .flat_map(|f| {
                let mut v = f.header.clone();
                v.extend(masked(&f.payload, f.mask));
                v
            })
            .collect()
    };
    let mut cuts: Vec<usize> = cut_bytes
        .iter()
        .map(|c| (*c as usize * stream.len()) / 255)
        .collect();
    cuts.sort_unstable();

    let r = rules(rules_on);
    let mut pieces = PayloadRewriter::new(r.clone());
    let mut out = run(&mut pieces, &stream, &cuts, to_boundary);
    let mut whole = PayloadRewriter::new(r.clone());
    let mut out_whole = run(&mut whole, &stream, &[], false);
    assert!(out.len() <= stream.len(), "the output grew");
    if !to_boundary {
        // `to_boundary` gives out what a message holds at each frame's end (as the proxy does
        // before it puts in a close frame), so only plain pushes must agree with one push.
        assert_eq!(out, out_whole, "pieces and one push differ");
        assert_eq!(pieces.hits(), whole.hits());
    }
    assert_eq!(pieces.tracker(), whole.tracker());

    let mut tracker = FrameTracker::new();
    let mut last = 0;
    for &c in &cuts {
        tracker.feed(&stream[last..c]);
        last = c;
    }
    tracker.feed(&stream[last..]);
    assert_eq!(
        &tracker,
        pieces.tracker(),
        "tracker alone and rewriter disagree"
    );
    // What a message's end still holds comes out at the stream's end (flush): nothing is lost.
    pieces.flush(&mut out);
    whole.flush(&mut out_whole);
    if tracker.at_boundary() {
        assert_eq!(out.len(), stream.len(), "bytes lost at a frame boundary");
        assert_eq!(out_whole.len(), stream.len(), "bytes lost at a frame boundary");
    }

    if raw {
        return;
    }
    assert!(tracker.broken().is_none(), "valid frames broke the tracker");
    assert!(tracker.at_boundary());
    assert_eq!(tracker.frames(), encoded.len() as u64);
    assert_eq!(
        tracker.close_seen(),
        encoded.iter().any(|f| f.header[0] & 0x0F == 8)
    );
    // Headers pass unchanged; each payload is read back unmasked.
    let read_back = |out: &[u8]| -> Vec<Vec<u8>> {
        let mut at = 0;
        let mut got = Vec::new();
        for f in &encoded {
            assert_eq!(
                &out[at..at + f.header.len()],
                &f.header[..],
                "a header changed"
            );
            at += f.header.len();
            got.push(masked(&out[at..at + f.payload.len()], f.mask));
            at += f.payload.len();
        }
        assert_eq!(at, out.len());
        got
    };
    let got_whole = read_back(&out_whole);
    let got = read_back(&out);
    // One push: a data message's payload is the whole-buffer replace of the message (its frames
    // joined), a control frame's its own.
    let mut message: Vec<usize> = Vec::new();
    let mut sent_phantom = false;
    let mut check = |frames: &[usize], got: &[Vec<u8>]| {
        let joined: Vec<u8> = frames
            .iter()
            .flat_map(|&i| encoded[i].payload.clone())
            .collect();
        let (want, _) = r.bytes(&joined);
        let have: Vec<u8> = frames.iter().flat_map(|&i| got[i].clone()).collect();
        assert_eq!(have, want, "a message is not its whole-buffer replace");
        sent_phantom |= memchr::memmem::find(&joined, PHANTOM.as_bytes()).is_some();
        if rules_on {
            assert!(
                memchr::memmem::find(&have, PHANTOM.as_bytes()).is_none(),
                "a phantom was left in a message"
            );
        }
    };
    for (i, f) in encoded.iter().enumerate() {
        let opcode = f.header[0] & 0x0F;
        let fin = f.header[0] & 0x80 != 0;
        if opcode >= 8 {
            check(&[i], &got_whole);
            continue;
        }
        message.push(i);
        if fin {
            check(&message, &got_whole);
            message.clear();
        }
    }
    if !message.is_empty() {
        check(&message, &got_whole);
    }
    if rules_on {
        assert_eq!(whole.hits().injected.contains("k"), sent_phantom);
    }
    // In pieces (to_boundary or not), a phantom inside one frame's payload is always swapped.
    if rules_on {
        for (f, g) in encoded.iter().zip(&got) {
            if memchr::memmem::find(&f.payload, PHANTOM.as_bytes()).is_some() {
                assert!(
                    memchr::memmem::find(g, PHANTOM.as_bytes()).is_none(),
                    "a phantom inside one frame was left"
                );
            }
        }
    }
});
