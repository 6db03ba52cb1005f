//! A harness's own terminal program (D.16): `POST /v1/agents/{id}/terminal` renders the launch
//! with `terminal`, composes it with `tty`, and starts the launcher out of handlerd's reach (a
//! session of its own, a systemd scope when handlerd runs as a unit, its output into a file);
//! once the sandbox waits for `attach`, the client gets the sandbox's name and the attach argv.
//! While handlerd runs, the sandbox is one of the agent's connections (with `terminal`); deleting
//! the agent stops it; handlerd stopping leaves it running. Its egress events are followed in
//! its launcher's file (`terminal_egress`).

use std::sync::Arc;
use std::time::Duration;

use handler_contracts::control::{ModelAccess, TerminalStart, TerminalStarted};
use handler_contracts::sandbox::TTY_READY_LINE;

use crate::daemon::fsutil;
use crate::daemon::launch::agent::{self as start_path, Place, Registration, STOP_GRACE};
use crate::daemon::launch::launcher::stop_and_sweep;
use crate::daemon::launch::prepare::{Purpose, prepare};
use crate::daemon::launch::records::{self, TerminalRecord};
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::new_id;

/// How long the sandbox has to get ready (an image's first start can be slow).
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// `term` and `colorterm`: `[A-Za-z0-9._+-]{1,64}` (422 naming the field otherwise).
fn check_term(field: &str, v: &Option<String>) -> ApiResult<()> {
    let Some(v) = v else { return Ok(()) };
    let ok = (1..=64).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ApiError::unprocessable(
            "invalid body",
            format!("{field}: must match [A-Za-z0-9._+-]{{1,64}}"),
        ))
    }
}

/// Starts the agent's terminal; 201's body once the sandbox waits for `attach`.
pub async fn start(app: &AppState, id: &str, req: TerminalStart) -> ApiResult<TerminalStarted> {
    check_term("term", &req.term)?;
    check_term("colorterm", &req.colorterm)?;
    let agent = app
        .agents
        .agent(id)
        .ok_or_else(|| ApiError::not_found(format!("agent {id:?}")))?;
    let access: ModelAccess = match req.model.clone() {
        Some(m) => m,
        None => agent.models.first().cloned().ok_or_else(|| {
            ApiError::bad_request("model access unusable", "the agent has no model")
        })?,
    };
    let conn = new_id("c");
    let place = Place::connection(app, &conn);
    let env = [("TERM", &req.term), ("COLORTERM", &req.colorterm)]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
        .collect();
    let purpose = Purpose::Terminal {
        args: req.args.clone(),
        env,
    };
    let prepared = {
        let (app, agent, access, place) =
            (app.clone(), agent.clone(), access.clone(), place.clone());
        tokio::task::spawn_blocking(move || prepare(&app, &agent, &access, &place, purpose))
            .await
            .map_err(ApiError::internal)??
    };
    super::images::await_network_filter(app, &prepared.spec).await?;
    // The same start path as a connection's (security F7): the copy or the scope's git guard.
    let guard = start_path::make(app, &place, &prepared).await?;
    let allow = super::running::allow_of(app, &agent, &prepared);
    let log_path = log_of(app, &conn);
    fsutil::create_dir_private(log_path.parent().unwrap_or(&app.config.state_dir))
        .map_err(ApiError::internal)?;
    let log = std::fs::File::create(&log_path).map_err(ApiError::internal)?;
    let in_unit = std::env::var_os("INVOCATION_ID").is_some();
    let (mut child, attach) = app
        .launcher
        .launch_terminal(&prepared.spec, log, in_unit)
        .map_err(|e| ApiError::conflict("the terminal cannot start", e.to_string()))?;
    if let Err(why) = ready(&mut child, &log_path).await {
        let _ = stop_and_sweep(&*app.launcher, &mut child, STOP_GRACE).await;
        return Err(ApiError::conflict(
            "the terminal cannot start",
            why.to_string(),
        ));
    }
    let sandbox = prepared.spec.name.clone();
    let registration = Registration::new(
        app,
        id,
        (&conn, &sandbox),
        Some(access.clone()),
        allow.clone(),
    );
    tracing::info!(agent = %id, connection = %conn, %sandbox, "terminal started");
    if let Some(pid) = child.id() {
        record(app, id, &registration, allow.as_ref(), &sandbox, pid);
    }
    let follower = tokio::spawn(super::terminal_egress::follow(
        app.clone(),
        id.to_string(),
        sandbox.clone(),
        log_path,
        0,
    ));
    let app = app.clone();
    tokio::spawn(async move {
        watch(app, child, registration, guard).await;
        follower.abort();
    });
    Ok(TerminalStarted { sandbox, attach })
}

/// Recorded, so a handlerd started after this one takes it back (security F13).
fn record(
    app: &AppState,
    agent: &str,
    registration: &Registration,
    allow: Option<&crate::daemon::state::LiveAllow>,
    sandbox: &str,
    pid: u32,
) {
    let term = TerminalRecord {
        agent: agent.to_string(),
        connection: registration.info.clone(),
        allow: allow.map(Into::into),
    };
    if let Err(e) = records::record(&app.config.state_dir, sandbox, pid, Some(term)) {
        tracing::warn!(%sandbox, error = %e, "terminal not recorded: a later handlerd will not know it");
    }
}

/// Where connection `conn`'s launcher writes its stderr: `<state>/terminals/<conn>.log`.
fn log_of(app: &AppState, conn: &str) -> std::path::PathBuf {
    app.config
        .state_dir
        .join("terminals")
        .join(format!("{conn}.log"))
}

/// At handlerd's start (security F13): each terminal a previous handlerd left running is one of
/// its agent's connections again — its allow-list and egress brought up to the agent's settings
/// now (they may have changed meanwhile), stopped when the agent is deleted, forgotten when it
/// ends; one whose agent is gone is stopped at once. Its work, if it had the git guard, stays in
/// its guard folder (the guard's state was the old handlerd's).
pub async fn take_back(app: &AppState, terminals: Vec<records::Record>) {
    for r in terminals {
        let Some(t) = r.terminal.clone() else {
            continue;
        };
        let Some(agent) = app.agents.agent(&t.agent) else {
            tracing::info!(sandbox = %r.name, agent = %t.agent, "a terminal of a deleted agent: stopping it");
            tokio::spawn(stop_taken(app.clone(), r));
            continue;
        };
        let info = t.connection.clone();
        let registration =
            Registration::again(app, &t.agent, info.clone(), t.allow.clone().map(Into::into));
        tracing::info!(agent = %t.agent, connection = %info.id, sandbox = %r.name, "terminal taken back");
        if let Err(e) = super::running::apply_allow(app, &agent).await {
            tracing::warn!(sandbox = %r.name, error = %e.problem().detail.unwrap_or_default(), "a terminal taken back kept its allow-list");
        }
        if let (Some(e), Some(_)) = (agent.options.egress, &t.allow)
            && let Err(err) = app.launcher.set_egress(&r.name, e).await
        {
            tracing::warn!(sandbox = %r.name, error = %err, "a terminal taken back kept its egress");
        }
        let log = log_of(app, &info.id);
        let follower = tokio::spawn(super::terminal_egress::follow(
            app.clone(),
            t.agent.clone(),
            r.name.clone(),
            log.clone(),
            super::terminal_egress::end_of(&log),
        ));
        let app2 = app.clone();
        tokio::spawn(async move {
            watch_taken(app2, r, registration).await;
            follower.abort();
        });
    }
}

/// A terminal taken back: until its launcher ends (polled: it is not this handlerd's child) or
/// its agent is deleted (then stopped).
async fn watch_taken(app: AppState, r: records::Record, registration: Registration) {
    let Some(t) = r.terminal.clone() else { return };
    let mut ended = true;
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                if !r.launcher.alive() {
                    tracing::info!(agent = %t.agent, connection = %t.connection.id, "terminal ended");
                    break;
                }
            }
            () = registration.stop.notified() => {
                if app.agents.agent(&t.agent).is_none() {
                    stop_pid(&app, &r).await;
                    tracing::info!(agent = %t.agent, connection = %t.connection.id, "terminal stopped: its agent was deleted");
                } else {
                    ended = false;
                }
                break;
            }
        }
    }
    if ended {
        records::forget(&app.config.state_dir, &r.name);
    }
    drop(registration);
}

/// Stops a terminal whose agent is gone and forgets it.
async fn stop_taken(app: AppState, r: records::Record) {
    stop_pid(&app, &r).await;
    records::forget(&app.config.state_dir, &r.name);
}

/// SIGTERM to a launcher that is not this handlerd's child, SIGKILL after [`STOP_GRACE`], then
/// a sweep (a killed launcher leaves its sandbox).
async fn stop_pid(app: &AppState, r: &records::Record) {
    use nix::sys::signal::Signal;
    r.launcher.signal(Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + STOP_GRACE;
    while r.launcher.alive() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if r.launcher.alive() {
        r.launcher.signal(Signal::SIGKILL);
        if let Err(e) = app.launcher.sweep().await {
            tracing::warn!(error = %e, "sweep after a killed terminal failed");
        }
    }
}

/// Why a terminal's sandbox never said it was ready.
#[derive(Debug, thiserror::Error)]
enum NotReady {
    #[error("its sandbox exited ({status}) before it was ready: {tail}")]
    Exited {
        status: std::process::ExitStatus,
        tail: String,
    },
    #[error("its sandbox was not ready in time")]
    Late,
}

/// Waits for the launcher's ready line in its log; the log's end when it exits first.
async fn ready(child: &mut tokio::process::Child, log: &std::path::Path) -> Result<(), NotReady> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.lines().any(|l| l.trim() == TTY_READY_LINE) {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            let tail: Vec<&str> = text.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(NotReady::Exited {
                status: st,
                tail: tail.join(" / "),
            });
        }
        if tokio::time::Instant::now() > deadline {
            return Err(NotReady::Late);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Until the program ends: then the connection is forgotten. A stop asked because the agent was
/// deleted stops the sandbox; one asked because handlerd stops leaves it running (D.16).
async fn watch(
    app: AppState,
    mut child: tokio::process::Child,
    registration: Registration,
    guard: Option<Arc<crate::daemon::launch::gitguard::GuardSession>>,
) {
    let (agent, conn) = (
        registration.agent().to_string(),
        registration.info.id.clone(),
    );
    let mut ended = true;
    tokio::select! {
        st = child.wait() => {
            tracing::info!(agent = %agent, connection = %conn, status = ?st.ok(), "terminal ended");
        }
        () = registration.stop.notified() => {
            if app.agents.agent(&agent).is_none() {
                let exit = stop_and_sweep(&*app.launcher, &mut child, STOP_GRACE).await;
                tracing::info!(agent = %agent, connection = %conn, exit = ?exit, "terminal stopped: its agent was deleted");
            } else {
                ended = false;
                tracing::info!(agent = %agent, connection = %conn, "handlerd stops: the terminal goes on");
            }
        }
    }
    // Its work comes back once its sandbox is gone (a terminal left running when handlerd
    // stops keeps it in its guard folder).
    if let Some(g) = guard.filter(|_| ended) {
        g.bring_back_at_end(&*app.launcher, "terminal end").await;
    }
    if ended {
        records::forget(&app.config.state_dir, &registration.info.sandbox);
    }
    drop(registration);
}
