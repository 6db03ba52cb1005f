//! Accounts (E, D.9): `<accounts>/<name>.toml`, written through the API with toml_edit; a pasted
//! token goes to the secret store (`accounts/<name>/token`), a file login's credential file is
//! kept in `<data>/accounts/<name>/credential` (0600).

use std::time::{SystemTime, UNIX_EPOCH};

use handler_contracts::account::{BuildError, TokenExpiry, build_account, token_expiry};
use handler_contracts::api_version::AccountApiVersion;
use handler_contracts::validate::UnusableDocument;
use handler_contracts::{Account, HarnessDescriptor, SecretRef};

use crate::daemon::fsutil;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::accounts::{credential_path, login_state, token_secret_path};
use crate::daemon::store::catalog::{Snapshot, read_account, valid_name};
use crate::daemon::store::tomldoc;
use handler_contracts::control::{AccountInfo, AccountRequest, LoginFileRequest, TokenInput};

/// When a token login's token expires and how it stands at `now` (B.1 `tokenLifetimeDays`,
/// decision 0150): none for a file login, a login without a lifetime, or a token whose time of
/// giving is unknown (a reference to the person's own file or variable).
fn expiry(
    d: Option<&HarnessDescriptor>,
    given: Option<&str>,
    now: SystemTime,
) -> (Option<String>, Option<TokenExpiry>) {
    let login = d
        .and_then(|d| d.login.as_ref())
        .filter(|l| !l.is_file_login());
    let (Some(days), Some(given)) = (login.and_then(|l| l.token_lifetime_days), given) else {
        return (None, None);
    };
    let Ok(given) = humantime::parse_rfc3339_weak(given) else {
        return (None, None);
    };
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (expires, state) = token_expiry(secs(given), days, secs(now));
    let at = UNIX_EPOCH + std::time::Duration::from_secs(expires);
    (
        Some(humantime::format_rfc3339_seconds(at).to_string()),
        Some(state),
    )
}

fn info(
    app: &AppState,
    snap: &Snapshot,
    name: &str,
    r: &Result<Account, UnusableDocument>,
) -> AccountInfo {
    match r {
        Ok(a) => {
            let d = snap.descriptors.get(&a.harness);
            let (logged_in, logged_in_at) = login_state(&app.config, &app.secrets, name, a, d);
            let (expires_at, expiry) = expiry(d, logged_in_at.as_deref(), SystemTime::now());
            AccountInfo {
                name: name.to_string(),
                harness: Some(a.harness.clone()),
                description: a.description.clone(),
                plan: a.plan.clone(),
                connectors: a.connectors,
                contexts: a.contexts.clone(),
                login: d
                    .and_then(|d| d.login.as_ref())
                    .map(|l| if l.is_file_login() { "file" } else { "token" }.to_string()),
                logged_in,
                logged_in_at,
                token: a.token.clone(),
                expires_at,
                expiry,
                error: None,
            }
        }
        Err(why) => AccountInfo {
            name: name.to_string(),
            harness: None,
            description: None,
            plan: None,
            connectors: false,
            contexts: None,
            login: None,
            logged_in: false,
            logged_in_at: None,
            token: None,
            expires_at: None,
            expiry: None,
            error: Some(why.to_string()),
        },
    }
}

/// The rules behind GET /v1/accounts
pub async fn list(app: &AppState) -> ApiResult<Vec<AccountInfo>> {
    let snap = app.snapshot();
    Ok(snap
        .accounts
        .iter()
        .map(|(n, r)| info(app, &snap, n, r))
        .collect())
}

/// The rules behind GET /v1/accounts/{name}
pub async fn get(app: &AppState, name: String) -> ApiResult<AccountInfo> {
    let snap = app.snapshot();
    let r = snap
        .accounts
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("account {name:?}")))?;
    Ok(info(app, &snap, &name, r))
}

/// Applies a token input: a pasted one goes to the store (checked against the login's
/// prefix, 422), a reference is written as given.
fn apply_token(
    app: &AppState,
    name: &str,
    d: &HarnessDescriptor,
    t: &TokenInput,
) -> ApiResult<SecretRef> {
    let login = d.login.as_ref().ok_or_else(|| {
        ApiError::bad_request(
            "account invalid",
            format!("harness: {} has no login", d.name),
        )
    })?;
    if login.is_file_login() {
        return Err(ApiError::bad_request(
            "account invalid",
            format!(
                "token: {} logs in with a file Handler keeps: an account of it has no token (PUT …/login)",
                d.name
            ),
        ));
    }
    Ok(match t {
        TokenInput::Value(v) => {
            let v = v.trim();
            if let Some(prefix) = &login.token_prefix
                && !v.starts_with(prefix.as_str())
            {
                return Err(ApiError::unprocessable(
                    "token invalid",
                    format!("token: a {} token starts with {prefix}", d.name),
                ));
            }
            if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(ApiError::unprocessable(
                    "token invalid",
                    "token: empty, or holds spaces or control characters",
                ));
            }
            let path = token_secret_path(name);
            app.secrets
                .set(
                    &path,
                    v,
                    Some(format!("{} token of account {name}", d.product)),
                    login
                        .hosts
                        .iter()
                        .map(std::string::ToString::to_string)
                        .collect(),
                )
                .map_err(ApiError::internal)?;
            SecretRef::Secret(path)
        }
        TokenInput::Env(v) => checked_ref(SecretRef::Env(v.clone()))?,
        TokenInput::File(v) => {
            let r = checked_ref(SecretRef::File(v.clone()))?;
            // E1: refused at save as at start — a regular file of at most 1 MiB now, never a
            // device such as /dev/zero, a FIFO or a folder.
            let home = app.config.home.to_string_lossy().into_owned();
            let path = handler_contracts::validate::expand_home("token.file", v, &home)
                .map_err(|e| ApiError::bad_request("token invalid", e.to_string()))?;
            crate::daemon::secretref::check_small_file(&path)
                .map_err(|e| ApiError::bad_request("token invalid", format!("token.file: {e}")))?;
            r
        }
        TokenInput::Command(v) => checked_ref(SecretRef::Command(v.clone()))?,
    })
}

/// A reference given through the API, checked before it is stored (E2): 400 naming the field.
fn checked_ref(r: SecretRef) -> ApiResult<SecretRef> {
    handler_contracts::validate::validate_secret_ref("token", &r)
        .map_err(|e| ApiError::bad_request("token invalid", e.to_string()))?;
    Ok(r)
}

fn write_account(app: &AppState, name: &str, a: &Account) -> ApiResult<()> {
    app.accounts.update::<_, ApiError>(name, |doc| {
        tomldoc::set_str(doc, "apiVersion", Some(AccountApiVersion::STR));
        tomldoc::set_str(doc, "harness", Some(&a.harness));
        tomldoc::set_str(doc, "description", a.description.as_deref());
        tomldoc::set_str(doc, "plan", a.plan.as_deref());
        if a.connectors {
            tomldoc::set_value(doc, "connectors", true.into());
        } else {
            doc.remove("connectors");
        }
        match &a.token {
            Some(t) => tomldoc::set_value(doc, "token", tomldoc::secret_ref_value(t)),
            None => {
                doc.remove("token");
            }
        }
        tomldoc::set_str_list(doc, "contexts", a.contexts.as_deref());
        Ok(())
    })
}

fn build(
    app: &AppState,
    snap: &Snapshot,
    name: &str,
    req: &AccountRequest,
    old_token: Option<SecretRef>,
) -> ApiResult<Account> {
    let draft = Account {
        api_version: AccountApiVersion,
        harness: req.harness.clone(),
        description: req.description.clone(),
        plan: req.plan.clone(),
        connectors: req.connectors,
        token: None,
        contexts: req.contexts.clone(),
    };
    let d = snap.descriptors.get(&req.harness);
    build_account(draft, d, |d| match &req.token {
        Some(t) => apply_token(app, name, d, t).map(Some),
        None => Ok(old_token),
    })
    .map_err(|e| match e {
        BuildError::Token(e) => e,
        e => ApiError::bad_request("account invalid", e.to_string()),
    })
}

/// The rules behind POST /v1/accounts
pub async fn create(app: &AppState, req: AccountRequest) -> ApiResult<AccountInfo> {
    let _w = app.write_lock.lock().await;
    let name = req
        .name
        .clone()
        .ok_or_else(|| ApiError::unprocessable("invalid body", "name: required"))?;
    if !valid_name(&name) {
        return Err(ApiError::bad_request(
            "account invalid",
            format!("name: {name:?} is not a name (letters, digits, '-', '_', '.')"),
        ));
    }
    let snap = app.snapshot();
    if snap.accounts.contains_key(&name) {
        return Err(ApiError::conflict(
            "account exists",
            format!("account {name:?} exists"),
        ));
    }
    let a = build(app, &snap, &name, &req, None)?;
    write_account(app, &name, &a)?;
    tracing::info!(account = %name, harness = %a.harness, "account created");
    let snap = app.snapshot();
    Ok(info(app, &snap, &name, &Ok(a)))
}

/// The rules behind PUT /v1/accounts/{name}
pub async fn replace(app: &AppState, name: String, req: AccountRequest) -> ApiResult<AccountInfo> {
    let _w = app.write_lock.lock().await;
    if req.name.as_ref().is_some_and(|n| *n != name) {
        return Err(ApiError::bad_request(
            "account invalid",
            "name: differs from the account's (renaming is not supported)",
        ));
    }
    let snap = app.snapshot();
    let old = snap
        .accounts
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("account {name:?}")))?;
    let old_token = old
        .as_ref()
        .ok()
        .and_then(|a| a.token.clone())
        .filter(|_| old.as_ref().is_ok_and(|a| a.harness == req.harness));
    let a = build(app, &snap, &name, &req, old_token)?;
    write_account(app, &name, &a)?;
    let snap = app.snapshot();
    Ok(info(app, &snap, &name, &Ok(a)))
}

/// The rules behind PUT /v1/accounts/{name}/token
pub async fn set_token(app: &AppState, name: String, t: TokenInput) -> ApiResult<AccountInfo> {
    let _w = app.write_lock.lock().await;
    let snap = app.snapshot();
    let a = valid_account(&snap, &name)?;
    let d = snap
        .descriptors
        .get(&a.harness)
        .ok_or_else(|| ApiError::bad_request("account invalid", "unknown harness"))?;
    let mut a2 = a.clone();
    a2.token = Some(apply_token(app, &name, d, &t)?);
    if !matches!(t, TokenInput::Value(_)) {
        let _ = app.secrets.remove(&token_secret_path(&name));
    }
    write_account(app, &name, &a2)?;
    let snap = app.snapshot();
    Ok(info(app, &snap, &name, &Ok(a2)))
}

/// The rules behind PUT /v1/accounts/{name}/login: keeps a file login's credential file (0600).
pub async fn set_login_file(
    app: &AppState,
    name: String,
    req: LoginFileRequest,
) -> ApiResult<AccountInfo> {
    let _w = app.write_lock.lock().await;
    let snap = app.snapshot();
    let a = valid_account(&snap, &name)?;
    let file_login = snap
        .descriptors
        .get(&a.harness)
        .and_then(|d| d.login.as_ref())
        .is_some_and(handler_contracts::harness::Login::is_file_login);
    if !file_login {
        return Err(ApiError::bad_request(
            "not a file login",
            format!("{} logs in with a token: PUT …/token", a.harness),
        ));
    }
    if req.content.is_empty() || req.content.len() > 1024 * 1024 {
        return Err(ApiError::unprocessable(
            "login invalid",
            "content: 1 byte to 1 MiB",
        ));
    }
    fsutil::write_atomic(
        &credential_path(&app.config, &name),
        req.content.as_bytes(),
        0o600,
    )
    .map_err(ApiError::internal)?;
    tracing::info!(account = %name, "credential file kept");
    let snap = app.snapshot();
    let r = snap.accounts.get(&name).cloned().unwrap_or(Ok(a));
    Ok(info(app, &snap, &name, &r))
}

/// The rules behind DELETE /v1/accounts/{name}: its file, its pasted token, its credential file.
pub async fn delete(app: &AppState, name: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    if !valid_name(&name) || !app.accounts.delete(&name)? {
        return Err(ApiError::not_found(format!("account {name:?}")));
    }
    app.secrets
        .remove_under(&format!("accounts/{name}"))
        .map_err(ApiError::internal)?;
    let _ = std::fs::remove_dir_all(app.config.data_dir.join("accounts").join(&name));
    Ok(())
}

/// Reads one account again (after a write), for callers outside this module.
pub fn reread(app: &AppState, name: &str) -> Option<Result<Account, UnusableDocument>> {
    let snap = app.snapshot();
    let p = app.accounts.path(name);
    p.exists()
        .then(|| read_account(&p, name, &snap.descriptors))
}

/// The account `name` as read: 404 when there is none, 400 when its file is invalid.
fn valid_account(snap: &crate::daemon::store::catalog::Snapshot, name: &str) -> ApiResult<Account> {
    match snap.accounts.get(name) {
        None => Err(ApiError::not_found(format!("account {name:?}"))),
        Some(Err(why)) => Err(ApiError::bad_request("account invalid", why.to_string())),
        Some(Ok(a)) => Ok(a.clone()),
    }
}
