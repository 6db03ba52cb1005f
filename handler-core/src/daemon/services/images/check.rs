//! The check (D.4): a new image started through the real pipeline — the dummy model access
//! resolved, rendered and composed as any launch is (`launch::resolve`), the sandbox started by
//! the launcher with no network — must answer initialize and session/new and offer every
//! mapped session mode and the model option; for a harness taking stdio MCP servers, a probe
//! server given at session/new must start and must not see the dummy secret (B6). What it
//! lacks is the error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use handler_contracts::HarnessDescriptor;
use handler_contracts::control::{AgentOptions, NetworkMode};
use handler_contracts::harness::{McpServer, McpTransport};
use handler_contracts::sandbox::GeneratedFile;
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
    let (prepared, probe, login_file) = prepare(app, d, work, conn)?;
    let servers = serde_json::to_value(&prepared.policy.session_defaults.mcp_servers)
        .map_err(|e| e.to_string())?;
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
    let tail = launcher::StderrTail::collect(stderr, 200);
    let talk = Talk {
        d,
        cwd: &spec.workdir,
        login_file,
        log,
    };
    let mut result = converse(&mut stdin, &mut stdout, &talk, servers).await;
    if let (Ok(()), Some(p)) = (&result, &probe) {
        log(&format!(
            "check {}: waiting for the probe MCP server",
            d.name
        ));
        result = mcp_probe(p, log).await;
    }
    drop(stdin);
    launcher::stop_and_sweep(&*app.launcher, &mut child, Duration::from_secs(10)).await;
    for l in tail.finish(Duration::from_secs(5)).await {
        log(&format!("check {}: sandbox: {l}", d.name));
    }
    result
}

/// The probe stdio MCP server of a harness taking stdio servers (B6): where it records the env
/// it sees, and the dummy secrets it must not see.
struct McpProbe {
    record: PathBuf,
    secrets: Vec<String>,
}

/// How long the probe has to start once session/new is answered.
const PROBE_STARTS_WITHIN: Duration = Duration::from_secs(30);

/// Waits for the probe's record (it started), then B6's verdict over it.
async fn mcp_probe(p: &McpProbe, log: &(dyn Fn(&str) + Sync)) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + PROBE_STARTS_WITHIN;
    let record = loop {
        if let Ok(t) = std::fs::read_to_string(&p.record) {
            break Some(t);
        }
        if tokio::time::Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if let Some(r) = &record {
        let names: Vec<&str> = r
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        log(&format!(
            "the probe MCP server started with {}",
            names.join(" ")
        ));
    }
    let secrets: Vec<&str> = p.secrets.iter().map(String::as_str).collect();
    verdict::mcp_probe(record.as_deref(), &secrets)
}

/// The probe server and what it must not see, for a harness taking stdio MCP servers.
fn probe_server(
    d: &HarnessDescriptor,
    scope: &Path,
    dummy: &Dummy,
) -> Option<(McpServer, McpProbe)> {
    if !d.mcp_transports.contains(&McpTransport::Stdio) {
        return None;
    }
    let record = scope.join(".handler-mcp-probe.env");
    let secrets = match dummy {
        Dummy::Token(_, t) => vec![t.clone()],
        Dummy::Provider(_, k) => vec![k.clone()],
        Dummy::LoginFile(_) => vec![verdict::DUMMY_ACP_KEY.to_string()],
    };
    let server = McpServer::Stdio {
        name: verdict::MCP_PROBE_NAME.into(),
        command: handler_harness::descriptors::MCP_PROBE_PATH.into(),
        args: vec![record.display().to_string()],
        env: Vec::new(),
    };
    Some((server, McpProbe { record, secrets }))
}

/// The dummy launch resolved, as any launch is (with the probe MCP server when the harness
/// takes stdio servers), and whether it is on a file login.
#[expect(
    clippy::too_many_lines,
    reason = "the dummy model access for each kind of login, in one place so every check resolves as a launch does"
)]
fn prepare(
    app: &AppState,
    d: &HarnessDescriptor,
    work: &Path,
    conn: &str,
) -> Result<(resolve::Prepared, Option<McpProbe>, bool), String> {
    let (access, dummy) = verdict::dummy(d)?;
    let login_file = matches!(dummy, Dummy::LoginFile(_));
    let scope = work.join("scope");
    let data = work.join("data");
    for p in [&scope, &data] {
        crate::daemon::fsutil::create_dir_private(p)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    let scope = std::fs::canonicalize(&scope).map_err(|e| e.to_string())?;
    let data = std::fs::canonicalize(&data).map_err(|e| e.to_string())?;
    let probe = probe_server(d, &scope, &dummy);
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
    let work_dir = work.display().to_string();
    let mut slots = resolve::state_slots(
        &data_dir,
        resolve::StateOwner::Agent(&agent.id),
        d,
        CHECK_NAME,
    );
    if login_file {
        // What a file login's state starts with is for the real login (gemini's settings
        // select it, and gemini then logs in as it starts): the check, which authenticates
        // with a dummy key instead, starts them empty (decision 0077).
        for s in &mut slots {
            s.initial = verdict::empty_initial(&s.mount.target).into();
        }
    }
    make_state(&slots).map_err(|e| format!("state folders: {e:?}"))?;
    let input = ResolveInput {
        catalog: &catalog,
        access: &access,
        context: None,
        agent: &agent,
        conn,
        // A connection's plan, in a fresh folder that is no repository: no guard.
        place_dir: &work_dir,
        purpose: resolve::Purpose::Connection,
        guard: resolve::GuardFacts {
            tree: handler_sandbox::copytree::SessionTree::Shared,
            repo: None,
        },
        skills_dir: &work_dir,
        data_dir: &data_dir,
        max_message_bytes: app.config.max_message_bytes,
        scope: scope.display().to_string(),
        knowledge: Vec::new(),
        addons: resolve::AddonLaunch {
            mcp_servers: probe.iter().map(|(s, _)| s.clone()).collect(),
            ..resolve::AddonLaunch::default()
        },
        skills: Vec::new(),
        caches: BTreeMap::new(),
        credential,
        display: None,
        shared_state: None,
    };
    let mut prepared = resolve::resolve(input, &mut OsRandom)
        .map_err(|e| format!("the launch does not resolve: {e}"))?;
    let mut probe = probe.map(|(_, p)| p);
    if let Some(p) = probe.as_mut() {
        // What the sandbox holds for them: the phantoms the proxy would swap (E3), the login's
        // variable as the harness gets it.
        p.secrets
            .extend(prepared.spec.injections.iter().map(|i| i.phantom.clone()));
        let login = d.login.as_ref().and_then(|l| l.token.as_ref());
        p.secrets
            .extend(login.and_then(|t| prepared.spec.env.get(t)).cloned());
        prepared.spec.files.push(GeneratedFile {
            target: handler_harness::descriptors::MCP_PROBE_PATH.into(),
            content: handler_harness::descriptors::MCP_PROBE_SCRIPT.into(),
            mode: Some("0755".into()),
            seed: false,
        });
    }
    Ok((prepared, probe, login_file))
}

/// What the check's conversation is about.
struct Talk<'a> {
    d: &'a HarnessDescriptor,
    cwd: &'a str,
    /// On a file login: an ACP auth method taking an API key is used with a dummy key.
    login_file: bool,
    log: &'a (dyn Fn(&str) + Sync),
}

/// initialize, (for a file login offering an API-key auth method) authenticate, then
/// session/new, each answered in time; what session/new lacks.
async fn converse(
    stdin: &mut tokio::process::ChildStdin,
    stdout: &mut tokio::process::ChildStdout,
    t: &Talk<'_>,
    mcp_servers: Value,
) -> Result<(), String> {
    let mut out = BufReader::new(stdout).lines();
    let init = json!({"protocolVersion": 1, "clientCapabilities":
        {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}});
    let init = request(stdin, &mut out, 1, "initialize", init).await?;
    if t.login_file
        && let Some(auth) = verdict::offline_authenticate(&init)
    {
        (t.log)(&format!(
            "check {}: its login is validated online: authenticate {} with a dummy key",
            t.d.name, auth["methodId"]
        ));
        request(stdin, &mut out, 2, "authenticate", auth).await?;
    }
    let new = json!({"cwd": t.cwd, "mcpServers": mcp_servers});
    let answer = request(stdin, &mut out, 3, "session/new", new).await?;
    let missing = verdict::missing(t.d, &answer);
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
