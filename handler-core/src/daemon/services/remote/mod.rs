//! Remote control (D.7, docs/remote.md): the daemon's side. `mod` holds the rules behind
//! `/v1/remote…` and sharing (set up a gateway, pair, list and revoke devices, share and unshare
//! a session); `record` what is kept (`<state>/remote/remote.json`, the keys and the gateway's
//! credential in the secret store); `connector` the outbound poll of the gateway, the envelopes
//! opened and sealed, and each device's attachments (ordinary F.7 attachments, through the
//! policy). handlerd never listens for a device: it only calls the gateway.

mod connector;
mod record;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use handler_contracts::acp::close;
use handler_contracts::remote::api::{
    DeviceInfo, PairingStarted, RemoteSetup, RemoteState, RemoteStatus,
};
use handler_contracts::remote::envelope::KeyPair;
use handler_contracts::remote::gateway::{PairingOffer, Registered};
use handler_contracts::remote::{b64, pairing};
use handler_contracts::session::{Session, SessionState};

pub use connector::run as connector;
use record::{Devices, Settings};

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
pub(crate) use crate::daemon::state::remote::{Attached, Outbox};

/// The secret store's path of the daemon's X25519 secret key.
const KEY_SECRET: &str = "remote/daemon-key";
/// The secret store's path of the gateway's credential.
const TOKEN_SECRET: &str = "remote/gateway-token";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The HTTP client every gateway call uses.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(45))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

/// The gateway's URL checked: `https://`, or `http://` to a loopback host only.
fn check_gateway(url: &str) -> ApiResult<String> {
    let bad =
        |why: &str| ApiError::unprocessable("remote setup invalid", format!("gateway: {why}"));
    let u = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    let loopback = matches!(u.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
    match u.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => return Err(bad("http:// only to a loopback host; use https://")),
        _ => return Err(bad("not an http(s) URL")),
    }
    if u.query().is_some() || u.fragment().is_some() || !u.username().is_empty() {
        return Err(bad("no query, fragment or user in it"));
    }
    Ok(u.as_str().trim_end_matches('/').to_owned())
}

fn bad_gateway(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::BAD_GATEWAY,
        "gateway unusable",
        format!("{what}: {e}"),
    )
}

/// The daemon's key pair: made once, kept in the secret store.
fn key_pair(app: &AppState) -> ApiResult<KeyPair> {
    if let Ok(v) = app.secrets.value(KEY_SECRET)
        && let Some(k) = handler_contracts::remote::key32(&v)
    {
        return Ok(KeyPair::from_secret(k));
    }
    let k = KeyPair::from_secret(rand::random());
    app.secrets
        .set(
            KEY_SECRET,
            &b64(&k.secret_bytes()),
            Some("remote control: this daemon's key (D.7)".into()),
            Vec::new(),
        )
        .map_err(ApiError::internal)?;
    Ok(k)
}

/// GET /v1/remote: the light.
pub fn status(app: &AppState) -> RemoteStatus {
    let s = Settings::read(&app.config.state_dir);
    let (state, detail) = lock(&app.remote.light).clone();
    let shared = app.sessions.list().iter().filter(|x| x.remote).count();
    RemoteStatus {
        state: if s.is_none() { RemoteState::Off } else { state },
        gateway: s.as_ref().map(|s| s.gateway.clone()),
        daemon_id: s.as_ref().map(|s| s.daemon_id.clone()),
        devices: Devices::read(&app.config.state_dir).list.len(),
        shared,
        attached: app.remote.attached_count(),
        detail: if s.is_none() { None } else { detail },
    }
}

/// PUT /v1/remote: registers with the gateway (502 when it does not answer) and polls it.
pub async fn setup(app: &AppState, req: RemoteSetup) -> ApiResult<RemoteStatus> {
    let gateway = check_gateway(&req.gateway)?;
    let r = http()
        .post(format!("{gateway}/v1/daemons"))
        .send()
        .await
        .map_err(|e| bad_gateway("registering", e))?;
    if !r.status().is_success() {
        return Err(bad_gateway(
            "registering",
            format!("the gateway answered {}", r.status()),
        ));
    }
    let reg: Registered = r.json().await.map_err(|e| bad_gateway("registering", e))?;
    key_pair(app)?;
    app.secrets
        .set(
            TOKEN_SECRET,
            &reg.token,
            Some("remote control: the gateway's credential (D.7)".into()),
            Vec::new(),
        )
        .map_err(ApiError::internal)?;
    {
        let _g = lock(&app.remote.records);
        Settings {
            gateway,
            daemon_id: reg.daemon_id.clone(),
        }
        .write(&app.config.state_dir)
        .map_err(ApiError::internal)?;
        // Devices of another gateway or registration cannot reach this one.
        Devices::default()
            .write(&app.config.state_dir)
            .map_err(ApiError::internal)?;
    }
    app.remote.set_light(RemoteState::Idle, None);
    app.remote.changed.notify_one();
    tracing::info!(daemon = %reg.daemon_id, "remote control set up");
    Ok(status(app))
}

/// DELETE /v1/remote: every device detached (told 4004) and revoked at the gateway, then the
/// gateway, the devices and the credential forgotten.
pub async fn forget(app: &AppState) -> ApiResult<()> {
    connector::close_all(
        app,
        |_| true,
        close::REMOTE_DISABLED,
        "remote access disabled",
    );
    let until = Instant::now() + Duration::from_secs(3);
    while app.remote.attached_count() > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The attachments' last frames sealed and posted before the records go.
    tokio::time::sleep(Duration::from_millis(500)).await;
    if let Some(s) = Settings::read(&app.config.state_dir) {
        for d in Devices::read(&app.config.state_dir).list {
            if let Err(e) = connector::revoke_at_gateway(app, &s, &d.id).await {
                tracing::warn!(device = %d.id, error = %e, "device not revoked at the gateway");
            }
        }
    }
    {
        let _g = lock(&app.remote.records);
        record::remove(&app.config.state_dir).map_err(ApiError::internal)?;
    }
    let _ = app.secrets.remove(TOKEN_SECRET);
    app.remote.changed.notify_one();
    Ok(())
}

/// POST /v1/remote/pairings: a one-time code offered at the gateway (409 without one).
pub async fn pair(app: &AppState) -> ApiResult<PairingStarted> {
    let s = Settings::read(&app.config.state_dir).ok_or_else(|| {
        ApiError::conflict(
            "remote control off",
            "no gateway: `handler remote setup URL` first",
        )
    })?;
    let token = app
        .secrets
        .value(TOKEN_SECRET)
        .map_err(ApiError::internal)?;
    let key = key_pair(app)?;
    let code = pairing::code(rand::random());
    let keys = pairing::code_keys(&pairing::normalize(&code).expect("a made code normalizes"));
    let offer = PairingOffer {
        pairing_id: keys.pairing_id.clone(),
        claim_hash: pairing::claim_hash(&keys.claim),
        daemon_pk: b64(&key.public()),
        tag: keys.daemon_tag(&s.daemon_id, &key.public()),
    };
    let r = http()
        .post(format!("{}/v1/pairings", s.gateway))
        .bearer_auth(token)
        .json(&offer)
        .send()
        .await
        .map_err(|e| bad_gateway("offering the pairing", e))?;
    if !r.status().is_success() {
        return Err(bad_gateway(
            "offering the pairing",
            format!("the gateway answered {}", r.status()),
        ));
    }
    let ttl = Duration::from_secs(pairing::TTL_SECS);
    {
        let mut p = lock(&app.remote.pending);
        p.retain(|_, (_, until)| *until > Instant::now());
        p.insert(keys.pairing_id.clone(), (keys, Instant::now() + ttl));
    }
    let uri = format!("{}/device#code={code}", s.gateway);
    let qr_svg = qrcode::QrCode::new(uri.as_bytes())
        .map(|q| {
            q.render::<qrcode::render::svg::Color<'_>>()
                .min_dimensions(200, 200)
                .build()
        })
        .unwrap_or_default();
    let expires = std::time::SystemTime::now() + ttl;
    Ok(PairingStarted {
        code,
        uri,
        qr_svg,
        expires_at: humantime::format_rfc3339_seconds(expires).to_string(),
    })
}

/// GET /v1/remote/devices
pub fn devices(app: &AppState) -> Vec<DeviceInfo> {
    let attached = lock(&app.remote.attached);
    Devices::read(&app.config.state_dir)
        .list
        .into_iter()
        .map(|d| DeviceInfo {
            attached: attached
                .iter()
                .filter(|a| a.device == d.id)
                .map(|a| a.session.clone())
                .collect(),
            id: d.id,
            name: d.name,
            paired_at: d.paired_at,
            last_seen_at: d.last_seen_at,
        })
        .collect()
}

/// DELETE /v1/remote/devices/{id}: revoked at the gateway (its credential then gets 401),
/// forgotten here, its attachments closed.
pub async fn revoke(app: &AppState, id: &str) -> ApiResult<()> {
    let s = Settings::read(&app.config.state_dir)
        .ok_or_else(|| ApiError::not_found(format!("device {id:?}")))?;
    if !Devices::read(&app.config.state_dir)
        .list
        .iter()
        .any(|d| d.id == id)
    {
        return Err(ApiError::not_found(format!("device {id:?}")));
    }
    connector::revoke_at_gateway(app, &s, id)
        .await
        .map_err(|e| bad_gateway("revoking", e))?;
    {
        let _g = lock(&app.remote.records);
        let mut d = Devices::read(&app.config.state_dir);
        d.list.retain(|x| x.id != id);
        d.write(&app.config.state_dir).map_err(ApiError::internal)?;
    }
    connector::close_all(
        app,
        |a| a.device == id,
        close::REMOTE_DISABLED,
        "device revoked",
    );
    tracing::info!(device = %id, "device revoked");
    Ok(())
}

/// POST /v1/sessions/{id}/share: reachable from paired devices; a stopped session cannot be
/// shared (409).
pub fn share(app: &AppState, id: &str) -> ApiResult<Session> {
    let s = app
        .sessions
        .get(id)
        .ok_or_else(|| ApiError::not_found(format!("session {id:?}")))?;
    if matches!(s.state, SessionState::Stopped | SessionState::Failed) {
        return Err(ApiError::conflict(
            "session stopped",
            "a stopped session cannot be shared: attach to it to restart it, then share it",
        ));
    }
    tracing::info!(session = %id, "session shared");
    app.sessions
        .update(id, |s| s.remote = true)
        .ok_or_else(|| ApiError::not_found(format!("session {id:?}")))
}

/// DELETE /v1/sessions/{id}/share: no longer shared; its devices' attachments closed (4004).
pub fn unshare(app: &AppState, id: &str) -> ApiResult<Session> {
    let s = app
        .sessions
        .update(id, |s| s.remote = false)
        .ok_or_else(|| ApiError::not_found(format!("session {id:?}")))?;
    connector::close_all(
        app,
        |a| a.session == id,
        close::REMOTE_DISABLED,
        "remote access disabled",
    );
    tracing::info!(session = %id, "session unshared");
    Ok(s)
}
