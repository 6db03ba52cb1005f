//! A mini app's origin, `http://<name>.localhost:<port>/` (H.4, decision 0157): dispatched before
//! Handler's own Host, Origin and token checks, to the app alone — `/v1`, `/openapi.json` and
//! the web UI are not routes here. The login takes a one-time code for the cookie; everything
//! else needs that cookie (401); `/api` refuses cross-site requests (403) first; every answer
//! carries H.4's Content-Security-Policy. The UI is served from Handler's copy of the version
//! deployed, read one name at a time like every agent-written file.

use std::path::PathBuf;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::daemon::agentfs;
use crate::daemon::services::apps;
use crate::daemon::state::AppState;

/// H.4's policy, on every answer of an app's origin.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; \
base-uri 'none'; form-action 'self'";

/// The cookie an app's origin keeps its browser session in.
pub const COOKIE: &str = "handler_app";

/// The largest UI file served.
const FILE_MAX: u64 = 64 << 20;

/// The app a `Host` names: `<name>.localhost:<port>` with the daemon's port exactly and a name
/// that is a mini app's (H.1), any case. `None`: not an app's origin.
pub fn app_host(host: &str, port: u16) -> Option<String> {
    let (name, p) = host.rsplit_once(':')?;
    if p != port.to_string() {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    let app = lower.strip_suffix(".localhost")?;
    handler_contracts::validate::validate_miniapp_name(app).ok()?;
    Some(app.to_string())
}

/// H.4's rules for `/api`: why a request is refused (403), if it is. `own` is the app's origin.
pub fn api_refusal(
    method: &Method,
    fetch_site: Option<&str>,
    origin: Option<&str>,
    own: &str,
) -> Option<&'static str> {
    if let Some(site) = fetch_site
        && site != "same-origin"
        && site != "none"
    {
        return Some("a cross-site request (Sec-Fetch-Site) is refused");
    }
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe && origin != Some(own) {
        return Some("a request that changes something must come from the app's own origin");
    }
    None
}

/// The files a request path may name in the UI folder, in order: the path itself, its
/// `index.html`, then `index.html` for a last name without an extension (client-side routes).
/// `None`: a path that is not a plain path below the folder (`..`, an encoded `/`, a NUL).
pub fn ui_candidates(path: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        let n = percent_encoding::percent_decode_str(seg)
            .decode_utf8()
            .ok()?
            .into_owned();
        if n == "." || n == ".." || n.contains('/') || n.contains('\0') || n.starts_with('.') {
            return None;
        }
        names.push(n);
    }
    let joined = names.join("/");
    if joined.is_empty() {
        return Some(vec!["index.html".into()]);
    }
    let mut out = vec![joined.clone(), format!("{joined}/index.html")];
    if !names.last().is_some_and(|l| l.contains('.')) {
        out.push("index.html".into());
    }
    Some(out)
}

/// The headers every answer of an app's origin carries.
fn harden(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}

fn page(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{text}\n"),
    )
        .into_response()
}

/// Middleware, outermost: a request for an app's origin is the app's, whatever its path; any
/// other goes on to Handler's own checks and routes.
pub async fn dispatch(State(app): State<AppState>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match host.as_deref().and_then(|h| app_host(h, app.port())) {
        Some(name) => harden(serve(&app, &name, req).await),
        None => next.run(req).await,
    }
}

fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_string())
}

async fn serve(app: &AppState, name: &str, req: Request) -> Response {
    if !apps::exists(app, name) {
        return page(
            StatusCode::NOT_FOUND,
            &format!("No mini app named {name} is registered here."),
        );
    }
    let path = req.uri().path().to_string();
    if path == "/_handler/login" {
        return login(app, name, req.uri().query().unwrap_or(""));
    }
    let is_api = path == "/api" || path.starts_with("/api/");
    if is_api {
        let own = apps::url_of(app, name);
        let own = own.trim_end_matches('/');
        let h = req.headers();
        let site = h.get("sec-fetch-site").and_then(|v| v.to_str().ok());
        let origin = h.get(header::ORIGIN).and_then(|v| v.to_str().ok());
        if let Some(why) = api_refusal(req.method(), site, origin, own) {
            return page(StatusCode::FORBIDDEN, why);
        }
    }
    if !cookie_of(req.headers()).is_some_and(|c| app.apps.session_ok(name, &c)) {
        return page(
            StatusCode::UNAUTHORIZED,
            &format!(
                "Open this app from Handler: handler app open {name} (or Open on the Apps page)."
            ),
        );
    }
    if is_api {
        if !apps::serves_backend(app, name) {
            return page(
                StatusCode::NOT_FOUND,
                &format!("{name} has no backend: /api is not served."),
            );
        }
        if apps::queue::is_queued(app, name, req.method().as_str(), &path) {
            return apps::queue::enqueue(app, name, req).await;
        }
        return match apps::backend::ensure(app, name).await {
            Ok(h) => apps::proxy::forward(&h, req).await,
            Err(e) => page(
                e.status,
                &e.detail
                    .unwrap_or_else(|| "the backend is not available".into()),
            ),
        };
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return page(
            StatusCode::METHOD_NOT_ALLOWED,
            "the UI's files are read only",
        );
    }
    static_file(app, name, &path).await
}

fn login(app: &AppState, name: &str, query: &str) -> Response {
    let code = url_code(query);
    let Some(cookie) = code.and_then(|c| app.apps.redeem(name, &c, std::time::Instant::now()))
    else {
        return page(
            StatusCode::UNAUTHORIZED,
            &format!(
                "This login address was used or is too old: handler app open {name} makes a new one."
            ),
        );
    };
    let set = cookie::Cookie::build((COOKIE, cookie))
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .path("/")
        .build();
    // A page that goes on by itself: a redirect would keep the cross-site navigation's context,
    // on which a SameSite=Strict cookie is not sent (decision 0157).
    let body = "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=\"0;url=/\"><title>Opening…</title><a href=\"/\">Open the app</a>\n";
    let mut res = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&set.to_string()) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

fn url_code(query: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "code" && v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| v.to_string())
    })
}

async fn static_file(app: &AppState, name: &str, path: &str) -> Response {
    let Some(candidates) = ui_candidates(path) else {
        return page(StatusCode::NOT_FOUND, "no such file");
    };
    let ui: PathBuf = match apps::served_ui(app, name) {
        Ok(Some(ui)) => ui,
        Ok(None) => {
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("{name} is registered but not deployed yet: handler app deploy {name}"),
            );
        }
        Err(e) => return e.into_response(),
    };
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::task::spawn_blocking(move || {
            for c in candidates {
                if let Ok(Some(bytes)) = agentfs::read_in(&ui, std::path::Path::new(&c), FILE_MAX) {
                    return Some((c, bytes));
                }
            }
            None
        }),
    )
    .await;
    match read {
        Ok(Ok(Some((file, bytes)))) => {
            let kind = mime_guess::from_path(&file).first_or_octet_stream();
            let mut res = Response::new(Body::from(bytes));
            if let Ok(v) = HeaderValue::from_str(kind.essence_str()) {
                res.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            res.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            res
        }
        Ok(Ok(None)) => page(StatusCode::NOT_FOUND, "no such file"),
        _ => page(
            StatusCode::SERVICE_UNAVAILABLE,
            "the file could not be read in time",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apps_host_is_its_name_dot_localhost_with_the_port_exactly() {
        assert_eq!(
            app_host("counter.localhost:7430", 7430).as_deref(),
            Some("counter")
        );
        assert_eq!(
            app_host("Counter.LocalHost:7430", 7430).as_deref(),
            Some("counter")
        );
        for h in [
            "counter.localhost:7431",
            "counter.localhost",
            "localhost:7430",
            "a.b.localhost:7430",
            "counter.localhost.:7430",
            "-x.localhost:7430",
            "counter.example:7430",
            "127.0.0.1:7430",
            "x_y.localhost:7430",
        ] {
            assert_eq!(app_host(h, 7430), None, "{h}");
        }
    }

    #[test]
    fn api_refuses_cross_site_and_foreign_origins_on_changes() {
        let own = "http://counter.localhost:7430";
        assert_eq!(api_refusal(&Method::GET, None, None, own), None);
        assert_eq!(
            api_refusal(&Method::GET, Some("same-origin"), None, own),
            None
        );
        assert_eq!(api_refusal(&Method::GET, Some("none"), None, own), None);
        assert!(api_refusal(&Method::GET, Some("cross-site"), None, own).is_some());
        assert!(api_refusal(&Method::GET, Some("same-site"), None, own).is_some());
        assert_eq!(api_refusal(&Method::POST, None, Some(own), own), None);
        assert!(
            api_refusal(&Method::POST, None, None, own).is_some(),
            "no Origin"
        );
        assert!(
            api_refusal(
                &Method::POST,
                None,
                Some("http://other.localhost:7430"),
                own
            )
            .is_some()
        );
        assert!(api_refusal(&Method::DELETE, None, Some("null"), own).is_some());
    }

    #[test]
    fn ui_paths_stay_below_the_folder_and_fall_back_to_index_for_routes() {
        assert_eq!(ui_candidates("/").unwrap(), ["index.html"]);
        assert_eq!(
            ui_candidates("/assets/app.js").unwrap(),
            ["assets/app.js", "assets/app.js/index.html"]
        );
        assert_eq!(
            ui_candidates("/runs/42").unwrap(),
            ["runs/42", "runs/42/index.html", "index.html"]
        );
        for bad in ["/../x", "/a/%2e%2e/b", "/a%2Fb", "/.env", "/a/%00"] {
            assert!(ui_candidates(bad).is_none(), "{bad}");
        }
    }
}
