//! Bounded line reading for what comes out of a launcher or a sandbox (stderr, egress events):
//! a line longer than the bound comes in pieces of at most the bound, so no reader ever holds an
//! unbounded line in memory, and a piece that does not start a line is never taken for an
//! event.

use std::io::Read;

use tokio::io::{AsyncRead, AsyncReadExt as _};

/// The longest line a launcher's stderr reader takes in one piece (an event line is far
/// shorter; a process's long line comes in pieces).
pub const MAX_LINE: usize = 16 * 1024;

/// A piece of a line: the whole line unless it was longer than the bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece<'a> {
    /// The bytes, without the newline (nor a `\r` before it).
    pub bytes: &'a [u8],
    /// This piece begins its line.
    pub starts: bool,
    /// This piece ends its line.
    pub ends: bool,
}

impl Piece<'_> {
    /// A whole line (not cut).
    pub fn whole(&self) -> bool {
        self.starts && self.ends
    }
}

/// Splits a byte stream into bounded pieces of lines.
#[derive(Debug)]
pub struct Splitter {
    max: usize,
    buf: Vec<u8>,
    /// The piece in `buf` continues a line already given in part.
    continued: bool,
}

impl Splitter {
    /// Pieces of at most `max` bytes (at least 1).
    pub fn new(max: usize) -> Self {
        Splitter {
            max: max.max(1),
            buf: Vec::new(),
            continued: false,
        }
    }

    fn give(&mut self, ends: bool, out: &mut dyn FnMut(Piece<'_>)) {
        let mut bytes: &[u8] = &self.buf;
        if ends && bytes.last() == Some(&b'\r') {
            bytes = &bytes[..bytes.len() - 1];
        }
        out(Piece {
            bytes,
            starts: !self.continued,
            ends,
        });
        self.continued = !ends;
        self.buf.clear();
    }

    /// Feeds bytes; gives every complete piece to `out`.
    pub fn push(&mut self, mut data: &[u8], out: &mut dyn FnMut(Piece<'_>)) {
        while !data.is_empty() {
            let room = self.max - self.buf.len();
            match data.iter().take(room + 1).position(|&b| b == b'\n') {
                Some(i) => {
                    self.buf.extend_from_slice(&data[..i]);
                    data = &data[i + 1..];
                    self.give(true, out);
                }
                None => {
                    let n = room.min(data.len());
                    self.buf.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    if self.buf.len() >= self.max {
                        self.give(false, out);
                    }
                }
            }
        }
    }

    /// The stream ended: gives what is left (a last line without its newline).
    pub fn finish(&mut self, out: &mut dyn FnMut(Piece<'_>)) {
        if !self.buf.is_empty() {
            self.give(true, out);
        }
    }
}

/// Reads `r` to its end, giving each piece to `f` (blocking; for a thread).
pub fn for_each_piece_blocking(mut r: impl Read, max: usize, mut f: impl FnMut(Piece<'_>)) {
    let mut s = Splitter::new(max);
    let mut buf = vec![0u8; 8192];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => s.push(&buf[..n], &mut f),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    s.finish(&mut f);
}

/// Reads `r` to its end, giving each piece to `f`.
pub async fn for_each_piece(
    mut r: impl AsyncRead + Unpin,
    max: usize,
    mut f: impl FnMut(Piece<'_>),
) {
    let mut s = Splitter::new(max);
    let mut buf = vec![0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => s.push(&buf[..n], &mut f),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    s.finish(&mut f);
}

/// Reads one line (without its `\n`), at most `max` bytes; `Err(true)` when longer.
pub async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Option<Vec<u8>>, bool> {
    let mut line = Vec::new();
    loop {
        let buf = tokio::io::AsyncBufReadExt::fill_buf(r)
            .await
            .map_err(|_| false)?;
        if buf.is_empty() {
            return Ok(if line.is_empty() { None } else { Some(line) });
        }
        match buf.iter().position(|&c| c == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..i]);
                tokio::io::AsyncBufReadExt::consume(r, i + 1);
                if line.len() > max {
                    return Err(true);
                }
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(line));
            }
            None => {
                let n = buf.len();
                line.extend_from_slice(buf);
                tokio::io::AsyncBufReadExt::consume(r, n);
                if line.len() > max {
                    return Err(true);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, chunks: &[&[u8]]) -> Vec<(String, bool, bool)> {
        let mut s = Splitter::new(max);
        let mut got = Vec::new();
        let mut f = |p: Piece<'_>| {
            got.push((
                String::from_utf8_lossy(p.bytes).into_owned(),
                p.starts,
                p.ends,
            ));
        };
        for c in chunks {
            s.push(c, &mut f);
        }
        s.finish(&mut f);
        got
    }

    #[test]
    fn lines_come_whole_and_long_ones_in_bounded_pieces() {
        assert_eq!(
            split(8, &[b"ab\r\ncd", b"e\nlast"]),
            [
                ("ab".into(), true, true),
                ("cde".into(), true, true),
                ("last".into(), true, true)
            ]
        );
        // 20 bytes with a bound of 8: 8 + 8 + 4, only the first starts the line.
        let got = split(8, &[b"aaaaaaaaaaaaaaaaaaaa\nx\n"]);
        assert_eq!(got.len(), 4);
        assert_eq!(got[0], ("aaaaaaaa".into(), true, false));
        assert_eq!(got[1], ("aaaaaaaa".into(), false, false));
        assert_eq!(got[2], ("aaaa".into(), false, true));
        assert_eq!(got[3], ("x".into(), true, true));
        // Exactly the bound, then its newline: one whole line.
        assert_eq!(split(4, &[b"abcd\n"]), [("abcd".into(), true, true)]);
        // A forged event after a bound's worth of padding never starts a line.
        let mut data = vec![b'a'; 8];
        data.extend_from_slice(b"handler-egress {}\n");
        let got = split(8, &[&data]);
        assert!(
            got.iter()
                .all(|(t, starts, _)| !t.starts_with("handler-egress") || !starts)
        );
    }
}
