//! A small ACP client over WebSocket for the tests (tokio-tungstenite): one JSON-RPC message per
//! text frame, requests answered by id, everything else kept in `seen`.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Acp {
    pub ws: Ws,
    pub next: u64,
    /// Messages that were not the awaited response.
    pub seen: Vec<Value>,
    pub protocol: Option<String>,
}

/// Opens a socket offering `protocols`, with `origin` when given.
pub async fn open(
    url: &str,
    protocols: &[String],
    origin: Option<&str>,
) -> Result<Acp, tungstenite::Error> {
    let mut req = url.into_client_request()?;
    if !protocols.is_empty() {
        req.headers_mut().insert(
            "sec-websocket-protocol",
            protocols.join(", ").parse().unwrap(),
        );
    }
    if let Some(o) = origin {
        req.headers_mut().insert("origin", o.parse().unwrap());
    }
    let (ws, res) = tokio_tungstenite::connect_async(req).await?;
    let protocol = res
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    Ok(Acp {
        ws,
        next: 0,
        seen: Vec::new(),
        protocol,
    })
}

/// The HTTP status a refused handshake got.
pub fn refused_status(e: &tungstenite::Error) -> Option<u16> {
    match e {
        tungstenite::Error::Http(r) => Some(r.status().as_u16()),
        _ => None,
    }
}

impl Acp {
    pub async fn send(&mut self, v: &Value) {
        self.ws
            .send(Message::Text(v.to_string().into()))
            .await
            .expect("send");
    }

    /// The next JSON message, or the close frame as `Err`.
    pub async fn next(&mut self) -> Result<Value, Option<CloseFrame>> {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .expect("a message within 30 s");
            match m {
                Some(Ok(Message::Text(t))) => {
                    return Ok(serde_json::from_str(&t).expect("one JSON message per frame"));
                }
                Some(Ok(Message::Close(c))) => return Err(c),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return Err(None),
            }
        }
    }

    /// A request; its response (other messages go to `seen`).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            match self.next().await {
                Ok(m) if m.get("id") == Some(&json!(id)) && m.get("method").is_none() => return m,
                Ok(m) => self.seen.push(m),
                Err(c) => panic!("closed while waiting for {method}: {c:?}"),
            }
        }
    }

    /// Waits for the close frame.
    pub async fn closed(&mut self) -> Option<CloseFrame> {
        loop {
            match self.next().await {
                Ok(m) => self.seen.push(m),
                Err(c) => return c,
            }
        }
    }

    /// initialize, then session/new in `cwd`: the session id.
    pub async fn start_session(&mut self, cwd: &str) -> String {
        let r = self
            .request(
                "initialize",
                json!({"protocolVersion": 1, "clientCapabilities": {}}),
            )
            .await;
        assert!(r["result"].is_object(), "{r}");
        let r = self
            .request("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await;
        r["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"))
            .to_string()
    }
}
