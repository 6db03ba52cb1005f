//! Errors of the Control API as `application/problem+json` (RFC 9457), and the JSON body
//! extractor whose rejections are problems too.

use axum::extract::{FromRequest, Request, rejection::JsonRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use handler_contracts::control::Problem;
use serde::de::DeserializeOwned;

/// An API error: a status, a short title that names the kind of problem, a detail naming the
/// field or the reason. Never holds a secret value.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {title}: {}", detail.as_deref().unwrap_or(""))]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The problem's title.
    pub title: String,
    /// What went wrong, for a person.
    pub detail: Option<String>,
}

impl ApiError {
    /// Any status.
    pub fn new(status: StatusCode, title: impl Into<String>, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            title: title.into(),
            detail: Some(detail.into()),
        }
    }
    /// 400.
    pub fn bad_request(title: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, title, detail)
    }
    /// 404.
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not found", what)
    }
    /// 409.
    pub fn conflict(title: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, title, detail)
    }
    /// 422.
    pub fn unprocessable(title: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, title, detail)
    }
    /// 500: the detail is logged, the client gets a generic one.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            title: "internal error".into(),
            detail: Some(detail.to_string()),
        }
    }
    /// 401.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid Authorization: Bearer <token> is required (the token is in $HANDLER_CONFIG_DIR/token)",
        )
    }
    /// The RFC 9457 body.
    pub fn problem(&self) -> Problem {
        Problem {
            kind: "about:blank".into(),
            title: self.title.clone(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            instance: None,
        }
    }
}

/// The media type of problems.
pub const PROBLEM_JSON: &str = "application/problem+json";

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.problem()).unwrap_or_default();
        let mut r = (self.status, body).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// A JSON body; a malformed one is a 400 (syntax) or 422 (shape) problem naming the field.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rej) => Err(match rej {
                JsonRejection::JsonDataError(e) => {
                    ApiError::unprocessable("invalid body", strip_prefix(e.body_text()))
                }
                JsonRejection::JsonSyntaxError(e) => {
                    ApiError::bad_request("invalid JSON", strip_prefix(e.body_text()))
                }
                JsonRejection::MissingJsonContentType(_) => ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported media type",
                    "send Content-Type: application/json",
                ),
                other => ApiError::bad_request("invalid body", other.body_text()),
            }),
        }
    }
}

fn strip_prefix(s: String) -> String {
    for p in [
        "Failed to deserialize the JSON body into the target type: ",
        "Failed to parse the request body as JSON: ",
    ] {
        if let Some(rest) = s.strip_prefix(p) {
            return rest.to_string();
        }
    }
    s
}

/// Results of handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// A store's I/O failing is the daemon's fault (500).
impl From<std::io::Error> for ApiError {
    fn from(e: std::io::Error) -> Self {
        ApiError::internal(e)
    }
}
