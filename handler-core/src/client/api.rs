//! A small JSON client of handlerd's Control API: one call = one HTTP/1 request on a connection
//! of its own ([`super::transport::connect`]: the unix socket, or the port once its holder is
//! known to be this user) with the token in `Authorization`, a problem detail (D, errors) turned
//! into [`ApiError::Problem`].

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::Discovery;
use super::transport::{self, TransportError};

/// What a Control API call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// handlerd is not listening (not started, or on another socket or port).
    #[error("cannot reach handlerd at {url}: {message} (start it with `handler daemon start`)")]
    Unreachable {
        /// The URL called.
        url: String,
        /// What failed.
        message: String,
    },
    /// handlerd answered with an error status and its problem detail.
    #[error("{}", problem_line(*status, title, detail))]
    Problem {
        /// The HTTP status.
        status: u16,
        /// The problem's title.
        title: String,
        /// The problem's detail (names the field or path at fault).
        detail: String,
        /// The whole problem document, for `--json`.
        body: serde_json::Value,
    },
    /// What answered is not this user's: nothing was sent to it.
    #[error(transparent)]
    Refused(TransportError),
    /// handlerd's answer was not the JSON it should be.
    #[error("handlerd answered {status} with a body that is not JSON: {message}")]
    BadBody {
        /// The HTTP status.
        status: u16,
        /// The parse error.
        message: String,
    },
}

fn problem_line(status: u16, title: &str, detail: &str) -> String {
    match (title.is_empty(), detail.is_empty()) {
        (_, false) if !title.is_empty() && !detail.starts_with(title) => {
            format!("{title}: {detail} ({status})")
        }
        (_, false) => format!("{detail} ({status})"),
        (false, true) => format!("{title} ({status})"),
        (true, true) => format!("handlerd answered {status}"),
    }
}

/// A Control API client bound to one handlerd.
#[derive(Clone, Debug)]
pub struct Api {
    discovery: Discovery,
}

impl Api {
    /// A client of the handlerd `discovery` names.
    pub fn new(discovery: Discovery) -> Api {
        Api { discovery }
    }

    /// The handlerd this client talks to.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://127.0.0.1:{}{path_and_query}", self.discovery.port)
    }

    /// One call; a 2xx answer's JSON body (`null` for an empty one), else the problem.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, ApiError> {
        let (status, bytes) = self.raw(method, path, body).await?;
        answer(status, &bytes)
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<serde_json::Value, ApiError> {
        self.call("GET", path, None).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, ApiError> {
        self.call("POST", path, Some(body)).await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, ApiError> {
        self.call("PUT", path, Some(body)).await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> Result<serde_json::Value, ApiError> {
        self.call("DELETE", path, None).await
    }

    /// `POST path` with a body of bytes (e.g. a zip archive) of `content_type`; the answer as
    /// [`Api::call`]'s.
    pub async fn post_bytes(
        &self,
        path: &str,
        body: bytes::Bytes,
        content_type: &str,
    ) -> Result<serde_json::Value, ApiError> {
        let (status, bytes) = self.send("POST", path, body, content_type).await?;
        answer(status, &bytes)
    }

    /// One call, its status and raw body (for text answers such as a Containerfile).
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(u16, bytes::Bytes), ApiError> {
        let body = bytes::Bytes::from(body.map(ToString::to_string).unwrap_or_default());
        self.send(method, path, body, "application/json").await
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: bytes::Bytes,
        content_type: &str,
    ) -> Result<(u16, bytes::Bytes), ApiError> {
        let at = self.discovery.endpoint.to_string();
        let unreachable = |message: String| ApiError::Unreachable {
            url: format!("{at} ({method} {path})"),
            message,
        };
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", format!("127.0.0.1:{}", self.discovery.port))
            .header("authorization", format!("Bearer {}", self.discovery.token))
            .header("content-type", content_type)
            .body(Full::new(body))
            .map_err(|e| unreachable(e.to_string()))?;
        let stream = match transport::connect(&self.discovery.endpoint).await {
            Ok(s) => s,
            Err(TransportError::Connect { source, .. }) => {
                return Err(unreachable(source.to_string()));
            }
            Err(e) => return Err(ApiError::Refused(e)),
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = res.status().as_u16();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok((status, bytes))
    }
}

/// A 2xx answer's JSON body (`null` for an empty one), else the problem it holds.
fn answer(status: u16, bytes: &[u8]) -> Result<serde_json::Value, ApiError> {
    let value = if bytes.is_empty() {
        serde_json::Value::Null
    } else {
        match serde_json::from_slice(bytes) {
            Ok(v) => v,
            Err(e) if (200..300).contains(&status) => {
                return Err(ApiError::BadBody {
                    status,
                    message: e.to_string(),
                });
            }
            Err(_) => serde_json::Value::Null,
        }
    };
    if (200..300).contains(&status) {
        return Ok(value);
    }
    let text = |k: &str| value[k].as_str().unwrap_or_default().to_string();
    Err(ApiError::Problem {
        status,
        title: text("title"),
        detail: text("detail"),
        body: value,
    })
}

/// Percent-encodes one path segment or query value.
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_reads_as_one_line_naming_the_detail() {
        assert_eq!(
            problem_line(404, "not found", "no agent named x"),
            "not found: no agent named x (404)"
        );
        assert_eq!(
            problem_line(400, "", "models[0]: empty"),
            "models[0]: empty (400)"
        );
        assert_eq!(problem_line(503, "", ""), "handlerd answered 503");
        assert_eq!(encode("a b/é"), "a%20b%2F%C3%A9");
    }
}
