//! The check (D.4): a new image started through the real pipeline — the dummy model access
//! resolved, rendered and composed as any launch is (`launch::resolve`), the sandbox started by
//! the launcher with no network — must answer initialize and session/new and offer every
//! mapped session mode and the model option. What it lacks is the error.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use handler_contracts::HarnessDescriptor;
use handler_contracts::control::{AgentOptions, NetworkMode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::verdict::{self, CHECK_NAME, Dummy};
use crate::daemon::launch::gather::{OsRandom, make_state};
use crate::daemon::launch::launcher::{self, Instance};
use crate::daemon::launch::resolve::{self, AgentFacts, Credential, ResolveInput};
use crate::daemon::state::AppState;
use crate::daemon::store::catalog::Snapshot;

/// How long the image has to answer each request (the conformance's 10 s, with room for a
/// loaded machine).
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

/// Runs the check of `image` (an id) for harness `d` in folder `work`; `log` gets its lines.
pub async fn check(
    app: &AppState,
    d: &HarnessDescriptor,
    image: &str,
    work: &Path,
    conn: &str,
    log: &(dyn Fn(&str) + Sync),
) -> Result<(), String> {
    let prepared = prepare(app, d, work, conn)?;
    let mut spec = prepared.spec;
    spec.image = image.to_string();
    log(&format!(
        "check {}: starting {} without network",
        d.name, spec.name
    ));
    let Instance {
        mut child,
        mut stdin,
        mut stdout,
        stderr,
        ..
    } = app
        .launcher
        .launch(&spec)
        .map_err(|e| format!("the sandbox did not start: {e}"))?;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let l2 = lines.clone();
    let reader = tokio::spawn(async move {
        launcher::read_stderr(
            stderr,
            |_| {},
            |t| {
                let mut v = l2.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if v.len() < 200 {
                    v.push(t);
                }
            },
        )
        .await;
    });
    let result = converse(&mut stdin, &mut stdout, d, &spec.workdir).await;
    drop(stdin);
    launcher::stop_and_sweep(&*app.launcher, &mut child, Duration::from_secs(10)).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
    for l in lines
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        log(&format!("check {}: sandbox: {l}", d.name));
    }
    result
}

/// The dummy launch resolved, as any launch is.
fn prepare(
    app: &AppState,
    d: &HarnessDescriptor,
    work: &Path,
    conn: &str,
) -> Result<resolve::Prepared, String> {
    let (access, dummy) = verdict::dummy(d)?;
    let scope = work.join("scope");
    let data = work.join("data");
    for p in [&scope, &data] {
        crate::daemon::fsutil::create_dir_private(p)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let scope = std::fs::canonicalize(&scope).map_err(|e| e.to_string())?;
    let data = std::fs::canonicalize(&data).map_err(|e| e.to_string())?;
    let mut catalog = Snapshot::default();
    catalog.descriptors.insert(d.name.clone(), d.clone());
    let credential = match dummy {
        Dummy::Token(a, t) => {
            catalog.accounts.insert(CHECK_NAME.into(), Ok(a));
            Credential::Token(Some((format!("accounts/{CHECK_NAME}/token"), t)))
        }
        Dummy::Provider(p, k) => {
            catalog.providers.insert(CHECK_NAME.into(), Ok(p));
            Credential::Provider {
                api_key: Some((format!("providers/{CHECK_NAME}/apiKey"), k)),
                files: BTreeMap::new(),
            }
        }
        Dummy::LoginFile(a) => {
            catalog.accounts.insert(CHECK_NAME.into(), Ok(a));
            let f = data.join("credential");
            crate::daemon::fsutil::write_atomic(&f, b"{}", 0o600).map_err(|e| e.to_string())?;
            Credential::LoginFile(f.display().to_string())
        }
    };
    let agent = AgentFacts {
        id: "check".into(),
        options: AgentOptions {
            network: Some(NetworkMode::None),
            permissions: d.permissions.keys().next().copied(),
            ..AgentOptions::default()
        },
        instructions: None,
    };
    let data_dir = data.display().to_string();
    make_state(&resolve::state_slots(&data_dir, &agent.id, d, CHECK_NAME))
        .map_err(|e| format!("state folders: {e:?}"))?;
    let input = ResolveInput {
        catalog: &catalog,
        access: &access,
        context: None,
        agent: &agent,
        conn,
        data_dir: &data_dir,
        max_message_bytes: app.config.max_message_bytes,
        scope: scope.display().to_string(),
        terminal: None,
        knowledge: Vec::new(),
        addons: resolve::AddonLaunch::default(),
        skills: Vec::new(),
        caches: BTreeMap::new(),
        credential,
        display: None,
    };
    resolve::resolve(input, &mut OsRandom).map_err(|e| format!("the launch does not resolve: {e}"))
}

/// initialize, then session/new, each answered in time; what session/new lacks.
async fn converse(
    stdin: &mut tokio::process::ChildStdin,
    stdout: &mut tokio::process::ChildStdout,
    d: &HarnessDescriptor,
    cwd: &str,
) -> Result<(), String> {
    let mut out = BufReader::new(stdout).lines();
    let init = json!({"protocolVersion": 1, "clientCapabilities":
        {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}});
    request(stdin, &mut out, 1, "initialize", init).await?;
    let new = json!({"cwd": cwd, "mcpServers": []});
    let answer = request(stdin, &mut out, 2, "session/new", new).await?;
    let missing = verdict::missing(d, &answer);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("; "))
    }
}

async fn request(
    stdin: &mut tokio::process::ChildStdin,
    out: &mut tokio::io::Lines<BufReader<&mut tokio::process::ChildStdout>>,
    id: u64,
    method: &str,
    params: Value,
) -> Result<Value, String> {
    let mut line =
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
    line.push('\n');
    stdin
        .write_all(line.as_bytes())
        .await
        .map_err(|e| format!("{method}: the agent is gone ({e})"))?;
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    loop {
        let next = tokio::time::timeout_at(deadline, out.next_line())
            .await
            .map_err(|_| format!("{method}: no answer within {} s", ANSWER_WITHIN.as_secs()))?;
        let Some(l) = next.map_err(|e| format!("{method}: {e}"))? else {
            return Err(format!("{method}: the agent exited without answering"));
        };
        let Ok(v) = serde_json::from_str::<Value>(&l) else {
            continue;
        };
        if v["id"] != json!(id) {
            continue;
        }
        if let Some(e) = v.get("error") {
            return Err(format!("{method} answered an error: {e}"));
        }
        return Ok(v["result"].clone());
    }
}
