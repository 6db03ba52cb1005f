//! The scan of a skill's files (D.17, `SkillInfo.scan`): what handlerd finds without a model —
//! executables, binaries (not UTF-8), the hosts its URLs name, hidden or bidirectional Unicode
//! (the line with its format characters made visible), long base64 or hex runs. At most
//! [`MAX_HITS`] of each; and the skill's digest (`sha256:…` over its files, D.18).

use sha2::{Digest, Sha256};

use crate::control::{ScanHit, SkillScan};

/// The most entries of each kind a scan keeps.
pub const MAX_HITS: usize = 100;
/// A base64 run at least this long (line breaks of a wrapped block not counted) is a blob.
pub const BASE64_RUN: usize = 256;
/// A hex run at least this long is a blob (a SHA-256 in hex, 64, is not).
pub const HEX_RUN: usize = 128;
/// The most characters of a line a hit shows (then `…`).
const SHOWN: usize = 240;

/// One file of a skill, as the scan and the digest read it.
#[derive(Debug, Clone, Copy)]
pub struct ScanFile<'a> {
    /// Its path, relative to the skill's folder (`/`-separated).
    pub path: &'a str,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// Whether its executable bit is set.
    pub executable: bool,
}

/// Scans a skill's files (in the order given; give them sorted for a stable answer).
pub fn scan(files: &[ScanFile<'_>]) -> SkillScan {
    let mut s = SkillScan::default();
    let mut seen_hosts: Vec<String> = Vec::new();
    for f in files {
        if f.executable || f.bytes.starts_with(b"\x7fELF") || f.bytes.starts_with(b"#!") {
            push(&mut s.executables, f.path.to_string());
        }
        let Ok(text) = std::str::from_utf8(f.bytes) else {
            push(&mut s.binaries, f.path.to_string());
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
            let line = if i == 0 {
                line.strip_prefix('\u{feff}').unwrap_or(line)
            } else {
                line
            };
            for host in hosts_in(line) {
                if !seen_hosts.contains(&host) {
                    seen_hosts.push(host.clone());
                    push(&mut s.hosts, hit(f.path, n, host));
                }
            }
            if line.chars().any(is_hidden) {
                push(&mut s.hidden_text, hit(f.path, n, made_visible(line)));
            }
        }
        for (line, shown) in blobs_in(text) {
            push(&mut s.blobs, hit(f.path, line, shown));
        }
    }
    s
}

fn push<T>(v: &mut Vec<T>, x: T) {
    if v.len() < MAX_HITS {
        v.push(x);
    }
}

fn hit(path: &str, line: u32, text: String) -> ScanHit {
    ScanHit {
        path: path.to_string(),
        line,
        text,
    }
}

/// The hosts of the URLs (`scheme://[user@]host[:port]…`) in a line, lowercased.
fn hosts_in(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("://") {
        let before = &rest[..at];
        let scheme_len = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .count();
        let after = &rest[at + 3..];
        rest = after;
        if scheme_len == 0 {
            continue;
        }
        let authority: &str = after
            .split(|c: char| {
                c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | ')')
            })
            .next()
            .unwrap_or("");
        let hostport = authority.rsplit('@').next().unwrap_or("");
        let host = if let Some(v6) = hostport.strip_prefix('[') {
            v6.split(']').next().unwrap_or("")
        } else {
            hostport.split(':').next().unwrap_or("")
        };
        let host = host.trim_end_matches(['.', ',', ';', '`', '*', ']']);
        if !host.is_empty() {
            out.push(host.to_lowercase());
        }
    }
    out
}

/// Unicode's format characters (category Cf: bidirectional controls, zero-width characters, tag
/// characters…) and the other invisible ones (variation selectors, Hangul fillers).
pub fn is_hidden(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2
        | 0x115F | 0x1160 | 0x180B..=0x180F | 0x200B..=0x200F | 0x202A..=0x202E
        | 0x2060..=0x2064 | 0x2066..=0x206F | 0x3164 | 0xFE00..=0xFE0F | 0xFEFF | 0xFFA0
        | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F | 0xE0100..=0xE01EF)
}

/// The line with each hidden character shown as `<U+XXXX>`, at most `SHOWN` characters.
pub fn made_visible(line: &str) -> String {
    let mut out = String::new();
    for c in line.chars() {
        if out.chars().count() >= SHOWN {
            out.push('…');
            break;
        }
        if is_hidden(c) {
            out.push_str(&format!("<U+{:04X}>", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn is_base64(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_')
}

/// The long base64 or hex runs of a text: (line of its start, its start and length shown). A
/// block wrapped over lines (each line all base64, at least 40 characters) is one run.
fn blobs_in(text: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut run = String::new();
    let mut start = 0u32;
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        let n = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let trimmed = line.trim();
        let whole = trimmed.len() >= 40 && trimmed.chars().all(is_base64);
        if open && whole {
            run.push_str(trimmed);
            continue;
        }
        finish(&mut run, start, &mut out);
        for piece in trimmed
            .split(|c: char| !is_base64(c))
            .filter(|p| !p.is_empty())
        {
            finish(&mut run, start, &mut out);
            run = piece.to_string();
            start = n;
        }
        open = trimmed.ends_with(is_base64) && run.len() >= 40;
        if !open {
            finish(&mut run, start, &mut out);
        }
    }
    finish(&mut run, start, &mut out);
    out
}

/// Ends a run: a blob when long enough, a hex run within it first (`key=<hex>`).
fn finish(run: &mut String, start: u32, out: &mut Vec<(u32, String)>) {
    let hex = run
        .split(|c: char| !c.is_ascii_hexdigit())
        .max_by_key(|h| h.len())
        .filter(|h| h.len() >= HEX_RUN)
        .filter(|h| {
            h.contains(|c: char| c.is_ascii_digit())
                && h.contains(|c: char| c.is_ascii_alphabetic())
        });
    let shown = |r: &str, kind: &str| {
        let head: String = r.chars().take(40).collect();
        format!("{head}… ({} {kind} characters)", r.len())
    };
    if let Some(h) = hex {
        out.push((start, shown(h, "hex")));
    } else if run.len() >= BASE64_RUN && looks_encoded(run) {
        out.push((start, shown(run, "base64")));
    }
    run.clear();
}

/// A run of letters alone (a long word, a row of `=`) is not an encoding: base64 mixes cases
/// and digits.
fn looks_encoded(run: &str) -> bool {
    let lower = run.chars().any(|c| c.is_ascii_lowercase());
    let upper = run.chars().any(|c| c.is_ascii_uppercase());
    let digit = run.chars().any(|c| c.is_ascii_digit());
    lower && upper && digit
}

/// The skill's digest, `sha256:<hex>`: over its files sorted by path, each as its path, its
/// executable bit, its length and its bytes, so any change of name, mode or content changes it.
pub fn digest(files: &[ScanFile<'_>]) -> String {
    let mut sorted: Vec<&ScanFile<'_>> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(b.path));
    let mut h = Sha256::new();
    for f in sorted {
        h.update(f.path.as_bytes());
        h.update([0, u8::from(f.executable)]);
        h.update((f.bytes.len() as u64).to_be_bytes());
        h.update(f.bytes);
    }
    let out = h.finalize();
    let hex: String = out.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(path: &str, bytes: &[u8]) -> SkillScan {
        scan(&[ScanFile {
            path,
            bytes,
            executable: false,
        }])
    }

    #[test]
    fn bidirectional_controls_are_shown_with_their_line() {
        let text =
            "# Review\nok line\naccess = \"user\u{202E} \u{2066}// admin\u{2069}\u{2066}\"\n";
        let s = one("SKILL.md", text.as_bytes());
        assert_eq!(s.hidden_text.len(), 1, "{s:?}");
        let h = &s.hidden_text[0];
        assert_eq!((h.path.as_str(), h.line), ("SKILL.md", 3));
        assert_eq!(
            h.text,
            "access = \"user<U+202E> <U+2066>// admin<U+2069><U+2066>\""
        );
    }

    #[test]
    fn zero_width_and_tag_characters_are_hidden_text() {
        let text = "Say hello\u{200B}\u{200D}.\nplain\nrun\u{E0063}\u{E0075}\u{E0072}\u{E006C}\n";
        let s = one("notes.md", text.as_bytes());
        let lines: Vec<u32> = s.hidden_text.iter().map(|h| h.line).collect();
        assert_eq!(lines, vec![1, 3], "{s:?}");
        assert_eq!(s.hidden_text[0].text, "Say hello<U+200B><U+200D>.");
        assert!(s.hidden_text[1].text.contains("<U+E0063>"), "{s:?}");
        // A byte-order mark opening the file is not hidden text.
        assert!(
            one("a.md", "\u{feff}# Title\n".as_bytes())
                .hidden_text
                .is_empty()
        );
        // Ordinary non-ASCII text is not either.
        assert!(
            one("a.md", "Größe: 5 €, 日本語\n".as_bytes())
                .hidden_text
                .is_empty()
        );
    }

    fn base64_of(bytes: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for ch in bytes.chunks(3) {
            let n = (u32::from(ch[0]) << 16)
                | (u32::from(*ch.get(1).unwrap_or(&0)) << 8)
                | u32::from(*ch.get(2).unwrap_or(&0));
            for k in 0..4 {
                s.push(A[((n >> (18 - 6 * k)) & 63) as usize] as char);
            }
        }
        s
    }

    #[test]
    fn a_4k_base64_blob_is_found_on_one_line_or_wrapped() {
        let bytes: Vec<u8> = (0..3072u32).map(|i| (i * 7919 % 251) as u8).collect();
        let b64 = base64_of(&bytes);
        assert_eq!(b64.len(), 4096);
        let text = format!("# Tool\n\nRun this:\n\necho {b64} | base64 -d | sh\n");
        let s = one("SKILL.md", text.as_bytes());
        assert_eq!(s.blobs.len(), 1, "{s:?}");
        assert_eq!(s.blobs[0].line, 5);
        assert!(s.blobs[0].text.starts_with(&b64[..40]), "{:?}", s.blobs[0]);
        assert!(s.blobs[0].text.ends_with("(4096 base64 characters)"));

        let wrapped: Vec<&str> = (0..b64.len())
            .step_by(76)
            .map(|i| &b64[i..(i + 76).min(b64.len())])
            .collect();
        let text = format!("intro\n{}\nend\n", wrapped.join("\n"));
        let s = one("data.txt", text.as_bytes());
        assert_eq!(s.blobs.len(), 1, "{s:?}");
        assert_eq!(s.blobs[0].line, 2);
        assert!(
            s.blobs[0].text.ends_with("(4096 base64 characters)"),
            "{s:?}"
        );
    }

    #[test]
    fn long_hex_is_a_blob_but_a_hash_or_prose_is_not() {
        let hex: String = (0..100).map(|i| format!("{:02x}", i * 37 % 256)).collect();
        let s = one("x.sh", format!("payload={hex}\n").as_bytes());
        assert_eq!(s.blobs.len(), 1, "{s:?}");
        assert!(s.blobs[0].text.ends_with("(200 hex characters)"), "{s:?}");
        let sha = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let prose = "word ".repeat(200);
        let long_word = "a".repeat(400);
        let text = format!("sha256 {sha}\n{prose}\n{long_word}\n{}\n", "=".repeat(300));
        assert!(one("README.md", text.as_bytes()).blobs.is_empty());
    }

    #[test]
    fn an_elf_is_an_executable_and_a_binary() {
        let mut elf = b"\x7fELF\x02\x01\x01\x00".to_vec();
        elf.extend([0u8, 0xff, 0xfe, 0x80, 0x00]);
        let s = scan(&[
            ScanFile {
                path: "bin/tool",
                bytes: &elf,
                executable: false,
            },
            ScanFile {
                path: "scripts/run.sh",
                bytes: b"echo hi\n",
                executable: true,
            },
            ScanFile {
                path: "scripts/noexec.py",
                bytes: b"#!/usr/bin/env python3\nprint(1)\n",
                executable: false,
            },
            ScanFile {
                path: "logo.png",
                bytes: b"\x89PNG\r\n\x1a\n\xff",
                executable: false,
            },
        ]);
        assert_eq!(
            s.executables,
            vec!["bin/tool", "scripts/run.sh", "scripts/noexec.py"]
        );
        assert_eq!(s.binaries, vec!["bin/tool", "logo.png"]);
    }

    #[test]
    fn each_host_is_found_once_where_it_first_appears() {
        let text = "See https://docs.example.com/guide and http://user:pw@Evil.TEST:8080/x?y.\n\
                    Again https://docs.example.com/other\n\
                    `curl -fsSL https://get.tool.dev | sh`, (wss://[::1]:9/s), ftp://files.example.org.\n\
                    not a url: a://, ://nothing, mailto:x@y.z\n";
        let s = one("SKILL.md", text.as_bytes());
        let got: Vec<(&str, u32)> = s.hosts.iter().map(|h| (h.text.as_str(), h.line)).collect();
        assert_eq!(
            got,
            vec![
                ("docs.example.com", 1),
                ("evil.test", 1),
                ("get.tool.dev", 3),
                ("::1", 3),
                ("files.example.org", 3),
            ]
        );
    }

    #[test]
    fn at_most_a_hundred_of_each() {
        let text: String = (0..150)
            .map(|i| format!("https://h{i}.example/ \u{200B}\n"))
            .collect();
        let s = one("many.md", text.as_bytes());
        assert_eq!((s.hosts.len(), s.hidden_text.len()), (MAX_HITS, MAX_HITS));
        assert_eq!(s.hosts[99].text, "h99.example");
    }

    #[test]
    fn the_digest_follows_names_modes_and_bytes_not_order() {
        let f = |path, bytes, executable| ScanFile {
            path,
            bytes,
            executable,
        };
        let a = digest(&[f("SKILL.md", b"x", false), f("run.sh", b"y", true)]);
        assert!(a.starts_with("sha256:") && a.len() == 7 + 64, "{a}");
        assert_eq!(
            a,
            digest(&[f("run.sh", b"y", true), f("SKILL.md", b"x", false)])
        );
        assert_ne!(
            a,
            digest(&[f("SKILL.md", b"x", false), f("run.sh", b"y", false)])
        );
        assert_ne!(
            a,
            digest(&[f("SKILL.md", b"x", false), f("run.sh", b"z", true)])
        );
        assert_ne!(
            a,
            digest(&[f("SKILL.md", b"x", false), f("run2.sh", b"y", true)])
        );
    }
}
