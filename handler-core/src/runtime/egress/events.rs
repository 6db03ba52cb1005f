//! Where the proxy reports: egress event lines (A.3, `handler-egress {…}`) and free-form log
//! lines, on stderr for the binary, into a closure for tests.
//!
//! Writing to stderr never holds up traffic: lines go into a bounded queue that one thread
//! writes out. When whoever reads the proxy's stderr falls behind and the queue is full, lines
//! are dropped and counted, and once the reader catches up a log line says how many were lost
//! (decision 0037).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use handler_contracts::sandbox::{EgressDecision, EgressEvent};

/// How many lines wait for stderr at most before new ones are dropped.
pub const QUEUE_LINES: usize = 1024;

/// The longest log line written (longer ones are cut): a reader bounds its lines too.
pub const MAX_LOG_LINE: usize = 4096;

/// The prefix of the proxy's log lines.
pub const LOG_PREFIX: &str = "handler-egress-proxy: ";

/// A sink for the proxy's events and log lines.
#[derive(Clone)]
pub struct Events {
    event: Arc<dyn Fn(&EgressEvent) + Send + Sync>,
    log: Arc<dyn Fn(&str) + Send + Sync>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Events")
    }
}

/// The stderr writer: a bounded queue, its thread, and the count of lines dropped.
struct Queue {
    tx: SyncSender<String>,
    dropped: Arc<AtomicU64>,
}

/// The line saying `n` lines were dropped.
pub fn dropped_line(n: u64) -> String {
    format!(
        "{LOG_PREFIX}{n} egress event or log lines were dropped: the proxy's output was not read fast enough (traffic was not held up)"
    )
}

/// Writes the queue's lines to `out`; after each line, and at least every 200 ms, says how many
/// were dropped since it last said so. Ends when every sender is gone.
pub fn write_queue(rx: Receiver<String>, dropped: &AtomicU64, out: &mut dyn std::io::Write) {
    loop {
        let ended = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let _ = out.write_all(line.as_bytes());
                let _ = out.flush();
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        let n = dropped.swap(0, Ordering::SeqCst);
        if n > 0 {
            let _ = writeln!(out, "{}", dropped_line(n));
            let _ = out.flush();
        }
        if ended {
            return;
        }
    }
}

fn queue() -> &'static Queue {
    static Q: OnceLock<Queue> = OnceLock::new();
    Q.get_or_init(|| {
        let (tx, rx) = sync_channel::<String>(QUEUE_LINES);
        let dropped = Arc::new(AtomicU64::new(0));
        let d = dropped.clone();
        std::thread::Builder::new()
            .name("egress-events".into())
            .spawn(move || write_queue(rx, &d, &mut std::io::stderr()))
            .expect("the event writer thread starts");
        Queue { tx, dropped }
    })
}

/// Queues one line (ending in a newline) for stderr; dropped and counted when the queue is full.
fn enqueue(line: String) {
    let q = queue();
    match q.tx.try_send(line) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            q.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A log message as one line: control characters (a newline in a host name a sandbox sent
/// could otherwise start a forged event line) escaped, cut at [`MAX_LOG_LINE`].
pub fn log_line(msg: &str) -> String {
    let mut out = String::with_capacity(LOG_PREFIX.len() + msg.len() + 1);
    out.push_str(LOG_PREFIX);
    for c in msg.chars() {
        if out.len() >= MAX_LOG_LINE {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\n');
    out
}

impl Events {
    /// Event lines and log lines on stderr, one line each, through the bounded queue.
    pub fn stderr() -> Self {
        Events {
            event: Arc::new(|e| enqueue(format!("{}\n", e.to_line()))),
            log: Arc::new(|m| enqueue(log_line(m))),
        }
    }

    /// Events given to a closure; log lines to stderr.
    pub fn with(f: impl Fn(&EgressEvent) + Send + Sync + 'static) -> Self {
        Events {
            event: Arc::new(f),
            ..Events::stderr()
        }
    }

    /// Reports one event.
    pub fn emit(&self, decision: EgressDecision, host: &str, secret: Option<&str>) {
        (self.event)(&EgressEvent {
            decision,
            host: host.to_string(),
            secret: secret.map(str::to_string),
        });
    }

    /// A free-form log line (never a secret).
    pub fn log(&self, msg: &str) {
        (self.log)(msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_message_stays_one_line() {
        let l = log_line("bad host a\nhandler-egress {\"decision\":\"leak\"}");
        assert_eq!(l.matches('\n').count(), 1);
        assert!(l.starts_with(LOG_PREFIX));
        assert!(l.len() <= MAX_LOG_LINE + 8);
        assert!(log_line(&"x".repeat(10_000)).len() <= MAX_LOG_LINE + 8);
    }
}
