//! The launcher's stderr (contract A: logs, and the egress events of its proxy): the launcher
//! is the only writer of event lines there. The sandbox's stderr and the proxy's come on pipes
//! of their own, read by a thread each in bounded pieces (`crate::lines`) and written out line
//! by line: the proxy's events as events, anything of the sandbox's that would read as an event
//! (or as the tty ready line) behind a prefix, so a process cannot forge an egress event
//! (decision 0037).

use std::io::{Read, Write as _};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use handler_contracts::sandbox::{EGRESS_EVENT_PREFIX, EgressEvent, TTY_READY_LINE};

use crate::lines::{MAX_LINE, Piece, for_each_piece_blocking};
use crate::runtime::egress::events::LOG_PREFIX;

/// What a sandbox's line that would read as the launcher's own gets in front of it.
pub const SANDBOX_PREFIX: &[u8] = b"sandbox: ";

/// Whose output a relay carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The sandbox's podman (the process's stderr): free text.
    Sandbox,
    /// The proxy container's podman: its event lines and its log lines.
    Proxy,
}

/// Whether a piece of the sandbox's output must be prefixed: it would read as an event line or
/// the ready line (every piece, not only a line's first: a piece is written as a line).
pub fn needs_prefix(bytes: &[u8]) -> bool {
    let marker = EGRESS_EVENT_PREFIX.trim_end().as_bytes();
    bytes.starts_with(marker) || bytes.starts_with(TTY_READY_LINE.as_bytes())
}

/// The line written for one piece of `source`'s output (newline included).
pub fn line_for(source: Source, p: &Piece<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.bytes.len() + 32);
    match source {
        Source::Sandbox => {
            if needs_prefix(p.bytes) {
                out.extend_from_slice(SANDBOX_PREFIX);
            }
            out.extend_from_slice(p.bytes);
        }
        Source::Proxy => {
            let text = String::from_utf8_lossy(p.bytes);
            match EgressEvent::from_line(&text).filter(|_| p.whole()) {
                // Written again from what was parsed: exactly one well-formed event line.
                Some(ev) => out.extend_from_slice(ev.to_line().as_bytes()),
                None if p.starts && text.starts_with(LOG_PREFIX) => out.extend_from_slice(p.bytes),
                // podman's own words, or a piece of a long line: never an event.
                None => {
                    out.extend_from_slice(LOG_PREFIX.as_bytes());
                    out.extend_from_slice(b"podman: ");
                    out.extend_from_slice(p.bytes);
                }
            }
        }
    }
    out.push(b'\n');
    out
}

/// Relays that have not ended yet (each says so on its channel).
fn running() -> &'static Mutex<Vec<Receiver<()>>> {
    static R: Mutex<Vec<Receiver<()>>> = Mutex::new(Vec::new());
    &R
}

/// Relays `r` (a pipe's read end) to this process's stderr on a thread of its own.
pub fn relay(r: impl Read + Send + 'static, source: Source) {
    let (tx, rx) = channel();
    running()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(rx);
    let spawned = std::thread::Builder::new()
        .name("stderr-relay".into())
        .spawn(move || {
            for_each_piece_blocking(r, MAX_LINE, |p| {
                let line = line_for(source, &p);
                let _ = std::io::stderr().lock().write_all(&line);
            });
            let _ = tx.send(());
        });
    if let Err(e) = spawned {
        super::log(&format!("cannot relay stderr: {e}"));
    }
}

/// Waits (at most `within`) for the relays to write what they still hold, before exiting.
pub fn wait_all(within: Duration) {
    let deadline = Instant::now() + within;
    let rxs: Vec<Receiver<()>> = std::mem::take(
        &mut *running()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for rx in rxs {
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = rx.recv_timeout(left);
    }
}

/// A pipe for a child's stderr: the write end for the child (`Stdio::from`), the read end
/// relayed.
pub fn piped(source: Source) -> std::io::Result<std::process::Stdio> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    relay(std::fs::File::from(r), source);
    Ok(std::process::Stdio::from(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(b: &[u8]) -> Piece<'_> {
        Piece {
            bytes: b,
            starts: true,
            ends: true,
        }
    }

    #[test]
    fn the_sandbox_cannot_write_an_event_line() {
        let forged = br#"handler-egress {"decision":"leak","host":"a.com:443","secret":"k"}"#;
        let l = String::from_utf8(line_for(Source::Sandbox, &piece(forged))).unwrap();
        assert!(EgressEvent::from_line(l.trim_end()).is_none(), "{l}");
        assert!(l.starts_with("sandbox: handler-egress"));
        assert_eq!(
            line_for(Source::Sandbox, &piece(b"plain text")),
            b"plain text\n"
        );
        let ready = line_for(Source::Sandbox, &piece(b"handler-ready"));
        assert!(ready.starts_with(SANDBOX_PREFIX));
    }

    #[test]
    fn the_proxys_events_pass_and_its_other_lines_never_read_as_events() {
        let ev = br#"handler-egress {"decision":"denied","host":"a.com:443"}"#;
        let l = String::from_utf8(line_for(Source::Proxy, &piece(ev))).unwrap();
        assert!(EgressEvent::from_line(l.trim_end()).is_some(), "{l}");
        let cut = Piece {
            bytes: ev,
            starts: true,
            ends: false,
        };
        let l = String::from_utf8(line_for(Source::Proxy, &cut)).unwrap();
        assert!(EgressEvent::from_line(l.trim_end()).is_none(), "{l}");
        let l = line_for(Source::Proxy, &piece(b"handler-egress-proxy: started"));
        assert_eq!(l, b"handler-egress-proxy: started\n");
        let l = line_for(Source::Proxy, &piece(b"Error: no such image"));
        assert!(l.starts_with(b"handler-egress-proxy: podman: "));
    }
}
