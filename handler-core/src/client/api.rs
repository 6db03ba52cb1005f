//! A small JSON client of handlerd's Control API: one call = one HTTP/1 request with the token in
//! `Authorization`, a problem detail (D, errors) turned into [`ApiError::Problem`].

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::Discovery;

/// What a Control API call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// handlerd is not listening (not started, or on another port).
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
    client: Client<HttpConnector, Full<bytes::Bytes>>,
}

impl Api {
    /// A client of the handlerd `discovery` names.
    pub fn new(discovery: Discovery) -> Api {
        Api {
            discovery,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
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
        let url = self.url(path);
        let req = hyper::Request::builder()
            .method(method)
            .uri(&url)
            .header("authorization", format!("Bearer {}", self.discovery.token))
            .header("content-type", content_type)
            .body(Full::new(body))
            .map_err(|e| ApiError::Unreachable {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let res = self
            .client
            .request(req)
            .await
            .map_err(|e| ApiError::Unreachable {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let status = res.status().as_u16();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| ApiError::Unreachable {
                url,
                message: e.to_string(),
            })?
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
