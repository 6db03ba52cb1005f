//! `GET /v1/machines/{id}/exec` (issue 29 item 7, decision 0144): a process in a machine over a
//! WebSocket. The client's first message is the [`ExecSpec`](super::ExecSpec) as text; then
//! binary frames carry the streams, their first byte naming which ([`STDIN`], [`STDOUT`],
//! [`STDERR`]; a [`STDIN`] frame with nothing after it closes the process's stdin); the last
//! message is an [`ExecEnd`] as text, then the close.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The WebSocket subprotocol (offered beside `bearer.<token>`).
pub const SUBPROTOCOL_EXEC: &str = "handler.exec.v1";
/// The client's bytes for the process's stdin.
pub const STDIN: u8 = 0;
/// The process's stdout.
pub const STDOUT: u8 = 1;
/// The process's stderr.
pub const STDERR: u8 = 2;

/// How the process ended: its exit code, or why it could not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecEnd {
    /// Its exit code (none: it was not run, or killed by a signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// Why it did not run (the field named) or how it was ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A frame of stream `stream` holding `bytes`.
pub fn frame(stream: u8, bytes: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(bytes.len() + 1);
    f.push(stream);
    f.extend_from_slice(bytes);
    f
}

/// A frame's stream and bytes (None: an empty frame, which names no stream).
pub fn unframe(f: &[u8]) -> Option<(u8, &[u8])> {
    f.split_first().map(|(s, b)| (*s, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_its_stream_then_its_bytes() {
        assert_eq!(frame(STDOUT, b"hi"), b"\x01hi");
        assert_eq!(unframe(b"\x02err"), Some((STDERR, &b"err"[..])));
        assert_eq!(unframe(&frame(STDIN, b"")), Some((STDIN, &b""[..])));
        assert_eq!(unframe(b""), None);
        let end = serde_json::to_value(ExecEnd {
            exit: Some(3),
            error: None,
        })
        .unwrap();
        assert_eq!(end, serde_json::json!({"exit": 3}));
    }
}
