//! The client side of handlerd: discovery of its socket, port and token (D, discovery; the
//! transport is [`transport`]'s, decision 0135) and the ACP bridge `handler acp` runs for
//! editors — the editor's stdio NDJSON to the agent's WebSocket (C.1), one message per line
//! each way.

pub mod api;
pub mod login;
pub mod transport;

use std::path::{Path, PathBuf};

use futures_util::{SinkExt, StreamExt};
use handler_contracts::acp::{SUBPROTOCOL_ACP, SUBPROTOCOL_BEARER_PREFIX};
use handler_contracts::{APP_DIR_NAME, DEFAULT_PORT, TOKEN_FILE_NAME};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};

/// What went wrong talking to handlerd.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// HANDLER_PORT is set to something that is not a port number.
    #[error("HANDLER_PORT: {0:?} is not a port number")]
    BadPort(String),
    /// HANDLER_TRANSPORT is neither `unix` nor `tcp`.
    #[error("HANDLER_TRANSPORT: {0:?} is not a transport: unix (the default) or tcp")]
    BadTransport(String),
    /// handlerd could not be dialled, or what answered is not this user's.
    #[error(transparent)]
    Transport(#[from] transport::TransportError),
    /// handlerd's token file cannot be read (handlerd never started, or its folder is elsewhere).
    #[error(
        "cannot read handlerd's token at {path}: {source} (is handlerd started? it creates the token on its first start)"
    )]
    Token {
        /// Where the token was looked for.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// Neither HOME nor HANDLER_CONFIG_DIR says where Handler's configuration is.
    #[error("no home folder: set HOME or HANDLER_CONFIG_DIR")]
    NoHome,
    /// handlerd did not accept the WebSocket connection.
    #[error("cannot connect to handlerd at {url}: {message}")]
    Connect {
        /// The URL dialled.
        url: String,
        /// What failed.
        message: String,
    },
    /// The WebSocket to the agent failed after it was open.
    #[error("the agent's connection failed: {0}")]
    WebSocket(String),
    /// The editor's stdin or stdout failed.
    #[error("standard input or output failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Where handlerd listens and the token it accepts.
#[derive(Clone)]
pub struct Discovery {
    /// The loopback port handlerd listens on (the browser's; the CLI's with
    /// `HANDLER_TRANSPORT=tcp`).
    pub port: u16,
    /// Where the CLI dials handlerd: its unix socket, unless `HANDLER_TRANSPORT=tcp`.
    pub endpoint: transport::Endpoint,
    /// The bearer token handlerd accepts (never printed: Debug redacts it).
    pub token: String,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("port", &self.port)
            .field("endpoint", &self.endpoint)
            .field("token", &"[redacted]")
            .finish()
    }
}

/// `$HANDLER_CONFIG_DIR`, else `~/.config/handler-ai`.
pub fn config_dir(env: &dyn Fn(&str) -> Option<String>) -> Result<PathBuf, ClientError> {
    if let Some(d) = env("HANDLER_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d));
    }
    let home = env("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(ClientError::NoHome)?;
    Ok(Path::new(&home).join(".config").join(APP_DIR_NAME))
}

impl Discovery {
    /// Reads `$HANDLER_PORT` (default 7430), `$HANDLER_TRANSPORT` (`unix`, the default: the
    /// socket [`crate::socket::path`] names; `tcp`: the port) and the token file, from the
    /// given environment.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ClientError> {
        let port = match env("HANDLER_PORT").filter(|p| !p.is_empty()) {
            None => DEFAULT_PORT,
            Some(p) => p.parse().map_err(|_| ClientError::BadPort(p))?,
        };
        let config = config_dir(env)?;
        let endpoint = match env("HANDLER_TRANSPORT")
            .filter(|t| !t.is_empty())
            .as_deref()
        {
            None | Some("unix") => transport::Endpoint::Socket(crate::socket::path(env, &config)),
            Some("tcp") => transport::Endpoint::Tcp(port),
            Some(other) => return Err(ClientError::BadTransport(other.to_string())),
        };
        let path = config.join(TOKEN_FILE_NAME);
        let token = std::fs::read_to_string(&path)
            .map_err(|source| ClientError::Token { path, source })?
            .trim()
            .to_string();
        Ok(Discovery {
            port,
            endpoint,
            token,
        })
    }

    /// The process's environment.
    pub fn from_process_env() -> Result<Self, ClientError> {
        Self::from_env(&|k| std::env::var(k).ok())
    }

    /// `ws://127.0.0.1:<port><path>`.
    pub fn ws_url(&self, path_and_query: &str) -> String {
        format!("ws://127.0.0.1:{}{path_and_query}", self.port)
    }
}

/// A WebSocket to handlerd, over its socket or port.
pub type WebSocket = tokio_tungstenite::WebSocketStream<transport::Stream>;

/// Opens an ACP WebSocket of handlerd (C.1) at `path_and_query`, the token offered as the
/// `bearer.<token>` subprotocol, over [`transport::connect`] (nothing is sent to a peer that is
/// not this user).
pub async fn connect_ws(
    discovery: &Discovery,
    path_and_query: &str,
    config: Option<WebSocketConfig>,
) -> Result<WebSocket, ClientError> {
    connect_ws_as(discovery, path_and_query, SUBPROTOCOL_ACP, config).await
}

/// [`connect_ws`] offering `protocol` (e.g. the machines' change channel's) instead of ACP's.
pub async fn connect_ws_as(
    discovery: &Discovery,
    path_and_query: &str,
    protocol: &str,
    config: Option<WebSocketConfig>,
) -> Result<WebSocket, ClientError> {
    let url = discovery.ws_url(path_and_query);
    let mut request = url
        .clone()
        .into_client_request()
        .map_err(|e| ClientError::Connect {
            url: url.clone(),
            message: e.to_string(),
        })?;
    let protocols = format!("{protocol}, {SUBPROTOCOL_BEARER_PREFIX}{}", discovery.token);
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_str(&protocols).map_err(|_| ClientError::Connect {
            url: url.clone(),
            message: "the token holds characters a header cannot carry".into(),
        })?,
    );
    let stream = transport::connect(&discovery.endpoint).await?;
    let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, config)
        .await
        .map_err(|e| ClientError::Connect {
            url: format!("{} ({})", path_and_query, discovery.endpoint),
            message: describe(&e),
        })?;
    Ok(ws)
}

/// How the bridge ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BridgeEnd {
    /// The editor closed stdin: the connection was closed (the agent's sandbox stops, C.3).
    InputClosed,
    /// handlerd closed the connection, with its code and reason (1011 `agent exited (<code>)`).
    Closed {
        /// The WebSocket close code.
        code: u16,
        /// The close reason.
        reason: String,
    },
}

impl BridgeEnd {
    /// The exit code `handler acp` ends with: 0 when the editor closed, else the agent's exit code
    /// when the reason says it, else 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            BridgeEnd::InputClosed => 0,
            BridgeEnd::Closed { code: 1000, .. } => 0,
            BridgeEnd::Closed { reason, .. } => reason
                .strip_prefix("agent exited (")
                .and_then(|r| r.strip_suffix(')'))
                .and_then(|c| c.parse().ok())
                .unwrap_or(1),
        }
    }
}

/// Connects to an ACP WebSocket of handlerd (C.1) and relays: each line of `input` is one text
/// frame, each text frame one line of `output`.
pub async fn acp_bridge<R, W>(
    discovery: &Discovery,
    path_and_query: &str,
    input: R,
    mut output: W,
    max_message_bytes: usize,
) -> Result<BridgeEnd, ClientError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes));
    let ws = connect_ws(discovery, path_and_query, Some(config)).await?;
    let (mut sink, mut stream) = ws.split();
    let mut lines = BufReader::new(input).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => match line? {
                Some(line) if line.trim().is_empty() => {}
                Some(line) => sink.send(Message::text(line)).await.map_err(|e| ClientError::WebSocket(describe(&e)))?,
                None => {
                    let _ = sink.send(Message::Close(None)).await;
                    return Ok(BridgeEnd::InputClosed);
                }
            },
            msg = stream.next() => match msg {
                Some(Ok(Message::Text(t))) => {
                    output.write_all(t.as_bytes()).await?;
                    output.write_all(b"\n").await?;
                    output.flush().await?;
                }
                Some(Ok(Message::Close(frame))) => return Ok(closed(frame)),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(ClientError::WebSocket(describe(&e))),
                None => return Ok(BridgeEnd::Closed { code: 1006, reason: "connection lost".into() }),
            },
        }
    }
}

fn closed(frame: Option<CloseFrame>) -> BridgeEnd {
    match frame {
        Some(f) => BridgeEnd::Closed {
            code: f.code.into(),
            reason: f.reason.to_string(),
        },
        None => BridgeEnd::Closed {
            code: 1005,
            reason: String::new(),
        },
    }
}

fn describe(e: &tungstenite::Error) -> String {
    match e {
        tungstenite::Error::Http(resp) => {
            let body = resp
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            format!("HTTP {} {}", resp.status(), body.trim())
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_agent() {
        assert_eq!(BridgeEnd::InputClosed.exit_code(), 0);
        assert_eq!(
            BridgeEnd::Closed {
                code: 1011,
                reason: "agent exited (3)".into()
            }
            .exit_code(),
            3
        );
        assert_eq!(
            BridgeEnd::Closed {
                code: 1009,
                reason: "message too big".into()
            }
            .exit_code(),
            1
        );
    }

    #[test]
    fn discovery_reads_port_and_token() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "abc123\n").unwrap();
        let d = dir.path().to_string_lossy().into_owned();
        let env = |k: &str| match k {
            "HANDLER_CONFIG_DIR" => Some(d.clone()),
            "HANDLER_PORT" => Some("7999".into()),
            _ => None,
        };
        let disc = Discovery::from_env(&env).unwrap();
        assert_eq!((disc.port, disc.token.as_str()), (7999, "abc123"));
        assert_eq!(
            disc.endpoint,
            transport::Endpoint::Socket(dir.path().join("run/handlerd.sock"))
        );
        let tcp = |k: &str| match k {
            "HANDLER_TRANSPORT" => Some("tcp".into()),
            _ => env(k),
        };
        assert_eq!(
            Discovery::from_env(&tcp).unwrap().endpoint,
            transport::Endpoint::Tcp(7999)
        );
        assert!(!format!("{disc:?}").contains("abc123"));
        let bad = |k: &str| {
            if k == "HANDLER_PORT" {
                Some("http".into())
            } else {
                Some(d.clone())
            }
        };
        assert!(matches!(
            Discovery::from_env(&bad),
            Err(ClientError::BadPort(_))
        ));
        let missing = |k: &str| {
            if k == "HANDLER_CONFIG_DIR" {
                Some("/nonexistent/x".into())
            } else {
                None
            }
        };
        let e = Discovery::from_env(&missing).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/x/token"), "{e}");
    }
}
