//! A machine's proxy's control socket (decision 0166): each exec gives the running proxy its own
//! injections and they are held for as long as its connection stays open — an exec that ends,
//! or whose runtime dies, takes its keys with it. [`LiveInjections`] is the set every request
//! consults.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use handler_contracts::sandbox::Injection;
use handler_sandbox::egress::control::{ControlAnswer, ControlRequest, MAX_REQUEST, combine};
use handler_sandbox::egress::inject::InjectionError;
use handler_sandbox::egress::{InjectionSet, Rules};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixListener;

/// How long an exec may take to say what it holds.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The injections in force: the configuration's, and each live exec's.
pub struct LiveInjections {
    base: Vec<Injection>,
    held: Mutex<(u64, BTreeMap<u64, Vec<Injection>>)>,
    set: RwLock<Arc<InjectionSet>>,
}

impl std::fmt::Debug for LiveInjections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveInjections").finish_non_exhaustive()
    }
}

impl LiveInjections {
    /// The configuration's injections (checked), none held by an exec yet.
    pub fn new(base: Vec<Injection>) -> Result<Self, InjectionError> {
        let set = InjectionSet::new(base.clone())?;
        Ok(LiveInjections {
            base,
            held: Mutex::new((0, BTreeMap::new())),
            set: RwLock::new(Arc::new(set)),
        })
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<InjectionSet> {
        self.set.read().expect("injections").clone()
    }

    /// Holds `items` for one exec: its key for [`LiveInjections::release`]; refused (nothing
    /// changed) when the set they would make is not valid.
    pub fn hold(&self, items: Vec<Injection>) -> Result<u64, InjectionError> {
        let mut held = self.held.lock().expect("held");
        let set = combine(
            &self.base,
            held.1
                .values()
                .map(Vec::as_slice)
                .chain(std::iter::once(items.as_slice())),
        )?;
        held.0 += 1;
        let key = held.0;
        held.1.insert(key, items);
        *self.set.write().expect("injections") = Arc::new(set);
        Ok(key)
    }

    /// Lets go of what exec `key` held.
    pub fn release(&self, key: u64) {
        let mut held = self.held.lock().expect("held");
        if held.1.remove(&key).is_none() {
            return;
        }
        // What was valid with it is valid without it.
        if let Ok(set) = combine(&self.base, held.1.values().map(Vec::as_slice)) {
            *self.set.write().expect("injections") = Arc::new(set);
        }
    }

    /// Whether an injection is given to `host:port` now.
    pub fn injects_into(&self, host: &str, port: u16) -> bool {
        self.current().injects_into(host, port)
    }

    /// [`InjectionSet::request_rules`] of the set in force.
    pub fn request_rules(&self, host: &str, port: u16) -> Rules {
        self.current().request_rules(host, port)
    }

    /// [`InjectionSet::request_body_rules`] of the set in force.
    pub fn request_body_rules(&self, host: &str, port: u16, tls: bool) -> Rules {
        self.current().request_body_rules(host, port, tls)
    }

    /// [`InjectionSet::response_rules`] of the set in force.
    pub fn response_rules(&self, host: &str, port: u16) -> Rules {
        self.current().response_rules(host, port)
    }
}

/// Serves the control socket: each connection says one [`ControlRequest`] line, is answered
/// one [`ControlAnswer`] line, and its injections are held until it closes.
pub async fn serve_control(listener: UnixListener, live: Arc<LiveInjections>) {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        tokio::spawn(one_exec(conn, live.clone()));
    }
}

async fn one_exec(conn: tokio::net::UnixStream, live: Arc<LiveInjections>) {
    let (read, mut write) = conn.into_split();
    let mut reader = BufReader::new(read.take(MAX_REQUEST));
    let mut line = Vec::new();
    let got = tokio::time::timeout(REQUEST_TIMEOUT, reader.read_until(b'\n', &mut line)).await;
    let answer = match got {
        Ok(Ok(n)) if n > 0 && line.ends_with(b"\n") => {
            match serde_json::from_slice::<ControlRequest>(&line) {
                Ok(r) => live.hold(r.injections).map_err(|e| e.to_string()),
                // Never echo the line: it holds values.
                Err(e) => Err(format!(
                    "not a control request (line {}, column {})",
                    e.line(),
                    e.column()
                )),
            }
        }
        Ok(Ok(_)) => Err(format!("no request line within {MAX_REQUEST} bytes")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no request within {} s", REQUEST_TIMEOUT.as_secs())),
    };
    line.clear();
    let (key, said) = match answer {
        Ok(k) => (
            Some(k),
            ControlAnswer {
                ok: true,
                error: None,
            },
        ),
        Err(e) => (
            None,
            ControlAnswer {
                ok: false,
                error: Some(e),
            },
        ),
    };
    let mut text = serde_json::to_vec(&said).expect("an answer serializes");
    text.push(b'\n');
    if write.write_all(&text).await.is_ok() && key.is_some() {
        // Held until the exec closes its end (or dies): whatever it sends meanwhile is dropped.
        let mut inner = reader.into_inner().into_inner();
        let mut sink = [0u8; 512];
        while matches!(inner.read(&mut sink).await, Ok(n) if n > 0) {}
    }
    if let Some(k) = key {
        live.release(k);
    }
}
