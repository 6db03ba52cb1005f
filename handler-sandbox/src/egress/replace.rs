//! The streaming replacer: swaps each pattern for its same-length replacement in a byte stream
//! read in arbitrary pieces, so a phantom split across two reads is still found (A.3: streamed
//! bodies, SSE). It holds back at most the longest pattern's length minus one byte, and only
//! while those bytes could still begin a match; everything else goes out at once.

/// Patterns and replacements of unequal lengths, or an empty pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pattern {index} is empty or not as long as its replacement")]
pub struct BadPattern {
    /// The position of the pattern in the list.
    pub index: usize,
}

/// A streaming, leftmost-first, non-overlapping replacer (earlier pairs win at one position).
#[derive(Debug, Clone)]
pub struct Replacer {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    first: [bool; 256],
    pending: Vec<u8>,
    hits: Vec<usize>,
}

impl Replacer {
    /// A replacer for `(pattern, replacement)` pairs of equal lengths.
    pub fn new(pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Self, BadPattern> {
        let mut first = [false; 256];
        for (index, (from, to)) in pairs.iter().enumerate() {
            if from.is_empty() || from.len() != to.len() {
                return Err(BadPattern { index });
            }
            first[from[0] as usize] = true;
        }
        let hits = vec![0; pairs.len()];
        Ok(Replacer {
            pairs,
            first,
            pending: Vec::new(),
            hits,
        })
    }

    /// Whether it has nothing to replace (then it passes bytes through untouched).
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// How many times each pair was applied so far.
    pub fn hits(&self) -> &[usize] {
        &self.hits
    }

    /// Feeds `input`; appends to `out` every byte that can no longer be part of a match.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.pairs.is_empty() {
            out.extend_from_slice(input);
            return;
        }
        self.pending.extend_from_slice(input);
        let stop = self.scan(false);
        out.extend(self.pending.drain(..stop));
    }

    /// Ends the stream: appends what was held back (a partial match at the end is no match).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let stop = self.scan(true);
        debug_assert_eq!(stop, self.pending.len());
        out.append(&mut self.pending);
    }

    /// How many bytes are held back.
    pub fn held(&self) -> usize {
        self.pending.len()
    }

    /// Replaces matches in `pending` in place; returns how many bytes are final.
    fn scan(&mut self, at_end: bool) -> usize {
        let buf = &mut self.pending;
        let mut i = 0;
        'outer: while i < buf.len() {
            if !self.first[buf[i] as usize] {
                i += 1;
                continue;
            }
            let avail = buf.len() - i;
            for (k, (from, to)) in self.pairs.iter().enumerate() {
                if avail >= from.len() {
                    if buf[i..i + from.len()] == from[..] {
                        buf[i..i + from.len()].copy_from_slice(to);
                        self.hits[k] += 1;
                        i += from.len();
                        continue 'outer;
                    }
                } else if !at_end && buf[i..] == from[..avail] {
                    // Could still become this pattern: wait for more bytes.
                    return i;
                }
            }
            i += 1;
        }
        buf.len()
    }
}

/// Replaces in a whole buffer; returns the result and the hits of each pair.
pub fn replace_all(
    pairs: &[(Vec<u8>, Vec<u8>)],
    input: &[u8],
) -> Result<(Vec<u8>, Vec<usize>), BadPattern> {
    let mut r = Replacer::new(pairs.to_vec())?;
    let mut out = Vec::with_capacity(input.len());
    r.push(input, &mut out);
    r.finish(&mut out);
    Ok((out, r.hits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        p.iter()
            .map(|(a, b)| (a.as_bytes().to_vec(), b.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn replaces_across_every_split_point() {
        let p = pairs(&[("PHANTOM1", "SECRET01")]);
        let input = b"a PHANTOM1 b PHANTOM1PHANTOM1 PHANTOM";
        let want = b"a SECRET01 b SECRET01SECRET01 PHANTOM";
        for split in 0..=input.len() {
            let mut r = Replacer::new(p.clone()).unwrap();
            let mut out = Vec::new();
            r.push(&input[..split], &mut out);
            assert!(r.held() < 8, "holds back at most len-1 bytes");
            r.push(&input[split..], &mut out);
            r.finish(&mut out);
            assert_eq!(out, want, "split at {split}");
            assert_eq!(r.hits(), &[3]);
        }
    }

    #[test]
    fn byte_by_byte() {
        let p = pairs(&[("abcabd", "XXXXXX"), ("bd", "YY")]);
        let input = b"abcabcabdxabd";
        let mut r = Replacer::new(p.clone()).unwrap();
        let mut out = Vec::new();
        for b in input {
            r.push(&[*b], &mut out);
        }
        r.finish(&mut out);
        assert_eq!(out, b"abcXXXXXXxaYY");
        assert_eq!(out, replace_all(&p, input).unwrap().0);
    }

    #[test]
    fn releases_bytes_that_cannot_start_a_match() {
        let mut r = Replacer::new(pairs(&[("secret12", "phantom1")])).unwrap();
        let mut out = Vec::new();
        r.push(b"data: hello\n\n", &mut out);
        assert_eq!(out, b"data: hello\n\n", "an SSE event is not held back");
        r.push(b"data: sec", &mut out);
        assert_eq!(
            out.len(),
            13 + 6,
            "only the possible start of a match is held"
        );
        r.push(b"ret12!", &mut out);
        r.finish(&mut out);
        assert_eq!(&out[13..], b"data: phantom1!");
    }

    #[test]
    fn refuses_unequal_lengths() {
        assert_eq!(
            Replacer::new(pairs(&[("ab", "abc")])).unwrap_err(),
            BadPattern { index: 0 }
        );
        assert!(Replacer::new(pairs(&[("", "")])).is_err());
    }

    proptest! {
        #[test]
        fn streaming_equals_whole_buffer(
            body in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c'), any::<u8>()], 0..300),
            splits in proptest::collection::vec(0usize..300, 0..8),
            pat1 in "[abc]{1,6}", pat2 in "[abc]{1,4}",
        ) {
            let p = vec![
                (pat1.as_bytes().to_vec(), vec![b'X'; pat1.len()]),
                (pat2.as_bytes().to_vec(), vec![b'Y'; pat2.len()]),
            ];
            let (whole, whole_hits) = replace_all(&p, &body).unwrap();
            let mut cuts: Vec<usize> = splits.into_iter().map(|s| s.min(body.len())).collect();
            cuts.sort();
            let mut r = Replacer::new(p).unwrap();
            let mut out = Vec::new();
            let mut last = 0;
            for c in cuts {
                r.push(&body[last..c], &mut out);
                last = c;
            }
            r.push(&body[last..], &mut out);
            r.finish(&mut out);
            prop_assert_eq!(out.len(), body.len());
            prop_assert_eq!(&out, &whole);
            prop_assert_eq!(r.hits(), &whole_hits[..]);
        }

        #[test]
        fn a_phantom_never_survives_any_split(
            pre in "[ -~]{0,50}", post in "[ -~]{0,50}", cut in 0usize..120,
        ) {
            let phantom = "sk-AbCd1234EfGh5678";
            let value = "sk-ZyXw9876VuTs5432";
            let body = format!("{pre}{phantom}{post}");
            let cut = cut.min(body.len());
            let mut r = Replacer::new(vec![(phantom.into(), value.into())]).unwrap();
            let mut out = Vec::new();
            r.push(&body.as_bytes()[..cut], &mut out);
            r.push(&body.as_bytes()[cut..], &mut out);
            r.finish(&mut out);
            let out = String::from_utf8(out).unwrap();
            prop_assert!(!out.contains(phantom));
            prop_assert!(out.contains(value));
        }
    }
}
