//! Where the proxy reports: egress event lines (A.3, `handler-egress {…}`) and free-form log
//! lines, on stderr for the binary, into a closure for tests.

use std::io::Write as _;
use std::sync::Arc;

use handler_contracts::sandbox::{EgressDecision, EgressEvent};

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

impl Events {
    /// Event lines and log lines on stderr, one line each.
    pub fn stderr() -> Self {
        Events {
            event: Arc::new(|e| {
                let _ = writeln!(std::io::stderr().lock(), "{}", e.to_line());
            }),
            log: Arc::new(|m| {
                let _ = writeln!(std::io::stderr().lock(), "handler-egress-proxy: {m}");
            }),
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
