//! WebSocket helpers shared by the ACP endpoint (`connections`) and session attachments
//! (`sessions::attach`): close frames and their bounded reasons, the size-limit error.

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes};

pub(crate) fn close_msg(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from(reason.to_string()),
    }))
}

pub(crate) fn truncate(s: &str, n: usize) -> String {
    // A close reason is at most 123 bytes.
    let mut out = String::new();
    for c in s.chars() {
        if out.len() + c.len_utf8() > n {
            break;
        }
        out.push(c);
    }
    out
}

pub(crate) fn is_capacity(e: &axum::Error) -> bool {
    // tungstenite's CapacityError, as axum wraps it: "Space limit exceeded: Message too long: …".
    let text = format!("{e} {:?}", e);
    text.contains("Message too long")
        || text.contains("Space limit exceeded")
        || text.contains("Capacity")
}
