//! The gateway's HTTP API (docs/remote.md § The gateway): registration, pairings, revocation,
//! mail. Errors are problem+json with a title and a detail that name what is wrong, never a
//! credential.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use handler_contracts::remote::envelope::Envelope;
use handler_contracts::remote::gateway::{
    Claim, Claimed, MAX_BODY, MAX_WAIT_SECS, Mail, MailBatch, PairingOffer, PairingView, Registered,
};
use handler_contracts::remote::{b64, key32, pairing, same_secret};
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::Gateway;
use super::store::{Identity, Pairing};

type G = State<Arc<Gateway>>;

/// The routes.
pub fn router(state: Arc<Gateway>) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/device",
            get(|| async { page("text/html; charset=utf-8", DEVICE_HTML) }),
        )
        .route(
            "/device.js",
            get(|| async { page("text/javascript; charset=utf-8", DEVICE_JS) }),
        )
        .route(
            "/device.css",
            get(|| async { page("text/css; charset=utf-8", DEVICE_CSS) }),
        )
        .route("/v1/daemons", post(register))
        .route("/v1/pairings", post(offer))
        .route("/v1/pairings/{id}", get(view))
        .route("/v1/pairings/{id}/claim", post(claim))
        .route("/v1/devices/{id}", delete(revoke))
        .route("/v1/mail", get(mail))
        .route("/v1/mail/{to}", post(send))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

const DEVICE_HTML: &str = include_str!("device/index.html");
const DEVICE_JS: &str = include_str!("device/device.js");
const DEVICE_CSS: &str = include_str!("device/device.css");

/// The device page's files (decision 0146): static, this origin's scripts only, nothing framed,
/// no referrer (the code is in the fragment, never sent).
fn page(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// An answer that is not a success.
#[derive(Debug)]
struct Problem(StatusCode, &'static str, String);

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body =
            serde_json::json!({"title": self.1, "status": self.0.as_u16(), "detail": self.2});
        (
            self.0,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body.to_string(),
        )
            .into_response()
    }
}

impl From<super::store::StoreError> for Problem {
    fn from(e: super::store::StoreError) -> Self {
        tracing::error!(error = %e, "store");
        Problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "store failed",
            "see the gateway's log".into(),
        )
    }
}

type R<T> = Result<T, Problem>;

/// The most messages one poll answers (each under 1 MiB: a batch stays under the daemon's bound).
const BATCH: usize = 50;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rng().fill_bytes(&mut b);
    b
}

fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A new identity's id and credential (`<id>.<secret>`).
fn new_identity(prefix: &str) -> (String, String) {
    let id = format!("{prefix}{}", hex(&random::<8>()));
    let token = format!("{id}.{}", b64(&random::<32>()));
    (id, token)
}

fn bearer(h: &HeaderMap) -> Option<&str> {
    h.get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

fn unauthorized() -> Problem {
    Problem(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "a valid credential is needed (a revoked device's is not)".into(),
    )
}

/// The caller's id and identity, from its credential (401 otherwise).
fn caller(g: &Gateway, h: &HeaderMap) -> R<(String, Identity)> {
    let token = bearer(h).ok_or_else(unauthorized)?;
    let id = token.split('.').next().unwrap_or_default();
    let i = g.store.identity(id)?.ok_or_else(unauthorized)?;
    if !same_secret(&hash(token), &i.token_hash) || i.revoked {
        return Err(unauthorized());
    }
    Ok((id.to_owned(), i))
}

fn daemon_caller(g: &Gateway, h: &HeaderMap) -> R<String> {
    match caller(g, h)? {
        (id, i) if i.daemon.is_none() => Ok(id),
        _ => Err(Problem(
            StatusCode::FORBIDDEN,
            "not a daemon",
            "only a daemon may do this".into(),
        )),
    }
}

fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> R<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| Problem(StatusCode::BAD_REQUEST, "body invalid", e.to_string()))
}

async fn register(State(g): G, h: HeaderMap) -> R<(StatusCode, Json<Registered>)> {
    if let Some(want) = &g.registration_token
        && bearer(&h) != Some(want.as_str())
    {
        return Err(Problem(
            StatusCode::UNAUTHORIZED,
            "registration closed",
            "this gateway registers daemons with its registration token only".into(),
        ));
    }
    let (id, token) = new_identity("d_");
    g.store.put_identity(
        &id,
        &Identity {
            token_hash: hash(&token),
            daemon: None,
            revoked: false,
        },
    )?;
    tracing::info!(daemon = %id, "daemon registered");
    Ok((
        StatusCode::CREATED,
        Json(Registered {
            daemon_id: id,
            token,
        }),
    ))
}

fn hexlen(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit())
}

async fn offer(State(g): G, h: HeaderMap, b: axum::body::Bytes) -> R<StatusCode> {
    let daemon = daemon_caller(&g, &h)?;
    let o: PairingOffer = body(&b)?;
    if !hexlen(&o.pairing_id, 32) || !hexlen(&o.claim_hash, 64) || key32(&o.daemon_pk).is_none() {
        return Err(Problem(
            StatusCode::BAD_REQUEST,
            "pairing invalid",
            "pairingId: 32 hex, claimHash: 64 hex, daemonPk: 32 bytes of base64url".into(),
        ));
    }
    let p = Pairing {
        daemon: daemon.clone(),
        claim_hash: o.claim_hash,
        daemon_pk: o.daemon_pk,
        tag: o.tag,
        expires: now() + pairing::TTL_SECS,
        failures: 0,
    };
    g.store.put_pairing(&o.pairing_id, &p, now())?;
    tracing::info!(%daemon, "pairing offered");
    Ok(StatusCode::CREATED)
}

fn no_pairing() -> Problem {
    Problem(
        StatusCode::NOT_FOUND,
        "no such pairing",
        "the code is wrong, used or expired: make a new one with `handler remote pair`".into(),
    )
}

async fn view(State(g): G, Path(id): Path<String>) -> R<Json<PairingView>> {
    let p = g.store.pairing(&id, now())?.ok_or_else(no_pairing)?;
    Ok(Json(PairingView {
        daemon_id: p.daemon,
        daemon_pk: p.daemon_pk,
        tag: p.tag,
    }))
}

async fn claim(State(g): G, Path(id): Path<String>, b: axum::body::Bytes) -> R<Json<Claimed>> {
    let c: Claim = body(&b)?;
    let p = g.store.pairing(&id, now())?.ok_or_else(no_pairing)?;
    if !same_secret(&pairing::claim_hash(&c.claim), &p.claim_hash) {
        g.store.end_pairing(&id, true)?;
        tracing::info!("pairing claim refused: wrong claim");
        return Err(Problem(
            StatusCode::FORBIDDEN,
            "claim refused",
            "not the code's claim".into(),
        ));
    }
    if key32(&c.device_pk).is_none() || c.name.chars().count() > 64 {
        return Err(Problem(
            StatusCode::BAD_REQUEST,
            "claim invalid",
            "devicePk: 32 bytes of base64url; name: at most 64 characters".into(),
        ));
    }
    g.store.end_pairing(&id, false)?;
    let (device, token) = new_identity("v_");
    g.store.put_identity(
        &device,
        &Identity {
            token_hash: hash(&token),
            daemon: Some(p.daemon.clone()),
            revoked: false,
        },
    )?;
    let notice = |seq| Mail::Paired {
        seq,
        pairing_id: id.clone(),
        device_id: device.clone(),
        device_pk: c.device_pk.clone(),
        proof: c.proof.clone(),
        name: c.name.clone(),
    };
    // A full daemon mailbox: the device cannot be paired (the daemon would never hear of it).
    if g.store
        .deliver(&p.daemon, "gateway", now(), notice)?
        .is_err()
    {
        g.store.revoke(&device)?;
        return Err(full());
    }
    g.waiter(&p.daemon).notify_waiters();
    tracing::info!(daemon = %p.daemon, %device, "device paired");
    Ok(Json(Claimed {
        device_id: device,
        daemon_id: p.daemon,
        token,
    }))
}

async fn revoke(State(g): G, h: HeaderMap, Path(id): Path<String>) -> R<StatusCode> {
    let daemon = daemon_caller(&g, &h)?;
    match g.store.identity(&id)? {
        Some(i) if i.daemon.as_deref() == Some(daemon.as_str()) => {
            g.store.revoke(&id)?;
            g.waiter(&id).notify_waiters();
            tracing::info!(%daemon, device = %id, "device revoked");
            Ok(StatusCode::NO_CONTENT)
        }
        _ => Err(Problem(
            StatusCode::NOT_FOUND,
            "no such device",
            format!("{id} is not a device of this daemon"),
        )),
    }
}

fn full() -> Problem {
    Problem(
        StatusCode::TOO_MANY_REQUESTS,
        "mailbox full",
        "the recipient's mailbox is full: try again once it has read it".into(),
    )
}

async fn send(
    State(g): G,
    h: HeaderMap,
    Path(to): Path<String>,
    b: axum::body::Bytes,
) -> R<StatusCode> {
    let (me, i) = caller(&g, &h)?;
    let e: Envelope = body(&b)?;
    if e.from != me || e.to != to {
        return Err(Problem(
            StatusCode::BAD_REQUEST,
            "envelope misaddressed",
            "from must be the caller's id and to the path's".into(),
        ));
    }
    // A device talks to its daemon only; a daemon to its own devices only.
    let allowed = match &i.daemon {
        Some(d) => *d == to,
        None => g
            .store
            .identity(&to)?
            .is_some_and(|t| t.daemon.as_deref() == Some(me.as_str()) && !t.revoked),
    };
    if !allowed {
        return Err(Problem(
            StatusCode::FORBIDDEN,
            "not your peer",
            format!("{to} is not paired with {me}"),
        ));
    }
    if g.store
        .deliver(&to, &me, now(), |seq| Mail::Envelope { seq, envelope: e })?
        .is_err()
    {
        return Err(full());
    }
    g.waiter(&to).notify_waiters();
    Ok(StatusCode::ACCEPTED)
}

#[derive(Debug, Deserialize)]
struct Poll {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    wait: u64,
}

async fn mail(State(g): G, h: HeaderMap, Query(q): Query<Poll>) -> R<Json<MailBatch>> {
    let (me, _) = caller(&g, &h)?;
    let waiter = g.waiter(&me);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(q.wait.min(MAX_WAIT_SECS));
    loop {
        let notified = waiter.notified();
        let messages = g.store.take(&me, q.after, BATCH)?;
        if !messages.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(Json(MailBatch { messages }));
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            let messages = g.store.take(&me, q.after, BATCH)?;
            return Ok(Json(MailBatch { messages }));
        }
        // A revoked device waiting: its next look is refused.
        caller(&g, &h)?;
    }
}
