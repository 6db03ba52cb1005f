//! Fuzz target: the streaming replacer (phantom → value across chunk boundaries). Oracle: fed in
//! arbitrary pieces, it gives exactly what a naive whole-buffer, leftmost-first replace gives
//! (so no pattern is ever left in place or half-replaced), with the same hit counts, and never
//! holds back more than the longest pattern's length minus one byte.
//!
//! Input: `N` (1 + N % 4 patterns), for each pattern a length byte (1 + b % 12) and that many
//! bytes (mapped onto `a`–`d` so that they occur in the body), then `K` and K cut positions, then
//! the body (bytes ≥ 0x80 are mapped onto `a`–`d` too, the others pass as they are).
#![no_main]

use handler_sandbox::egress::replace::{Replacer, replace_all};
use libfuzzer_sys::fuzz_target;

fn letter(b: u8) -> u8 {
    b'a' + (b & 3)
}

/// The reference: at each position the first pattern (in order) that matches there is
/// replaced, and scanning goes on after it; else one byte is kept.
fn naive(pairs: &[(Vec<u8>, Vec<u8>)], input: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::with_capacity(input.len());
    let mut hits = vec![0; pairs.len()];
    let mut i = 0;
    'outer: while i < input.len() {
        for (k, (from, to)) in pairs.iter().enumerate() {
            if input[i..].starts_with(from) {
                out.extend_from_slice(to);
                hits[k] += 1;
                i += from.len();
                continue 'outer;
            }
        }
        out.push(input[i]);
        i += 1;
    }
    (out, hits)
}

fuzz_target!(|data: &[u8]| {
    let mut it = data.iter().copied();
    let Some(n) = it.next() else { return };
    let mut pairs = Vec::new();
    for k in 0..(1 + n % 4) {
        let Some(l) = it.next() else { return };
        let from: Vec<u8> = (0..1 + l % 12)
            .map_while(|_| it.next().map(letter))
            .collect();
        if from.is_empty() {
            return;
        }
        // Replacements in their own alphabet, one per pattern.
        let to = vec![b'P' + k; from.len()];
        pairs.push((from, to));
    }
    let Some(k) = it.next() else { return };
    let cuts: Vec<u8> = (0..k % 16).map_while(|_| it.next()).collect();
    let body: Vec<u8> = it.map(|b| if b >= 0x80 { letter(b) } else { b }).collect();
    let longest = pairs.iter().map(|(f, _)| f.len()).max().unwrap_or(1);

    let (want, want_hits) = naive(&pairs, &body);
    let mut cuts: Vec<usize> = cuts
        .iter()
        .map(|c| (*c as usize * body.len()) / 255)
        .collect();
    cuts.sort_unstable();

    let mut r = Replacer::new(pairs.clone()).expect("equal lengths");
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts {
        r.push(&body[last..c], &mut out);
        assert!(r.held() < longest, "held {} of {longest}", r.held());
        last = c;
    }
    r.push(&body[last..], &mut out);
    assert!(r.held() < longest);
    r.finish(&mut out);
    assert_eq!(r.held(), 0);
    assert_eq!(
        out, want,
        "streamed output differs from a whole-buffer replace"
    );
    assert_eq!(r.hits(), &want_hits[..]);

    let (whole, whole_hits) = replace_all(&pairs, &body).expect("equal lengths");
    assert_eq!(whole, want);
    assert_eq!(whole_hits, want_hits);
});
