//! File logins (D.9): the harness's own login command run on the host, on a terminal of its own
//! (a pseudo-terminal made by util-linux `script`, relayed to the caller's: raw while it runs,
//! resized with it), with
//! `login.env` where `{dir}` is a new private temporary folder; when it ends, the file named
//! `login.file` in that folder is the account's credential, and the folder is removed. The
//! credential goes to handlerd (`PUT /v1/accounts/{name}/login`), which keeps it 0600.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use handler_contracts::harness::Login;

use super::Discovery;

/// The largest credential file kept (PUT …/login takes at most 1 MiB).
pub const MAX_CREDENTIAL_BYTES: u64 = 1024 * 1024;

/// What can go wrong with a file login.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The account's harness logs in with a pasted token (harness, how).
    #[error("{0} logs in with a token, not a file: {1}")]
    TokenLogin(String, String),
    /// The harness has no login at all.
    #[error("{0} has no login: it runs on providers only")]
    NoLogin(String),
    /// The harness's file login names no command to run.
    #[error("{0}'s login names no command")]
    NoCommand(String),
    /// The private temporary folder could not be made.
    #[error("cannot make the login's folder: {0}")]
    Folder(std::io::Error),
    /// No pseudo-terminal could be opened for the login command.
    #[error("cannot open a terminal for the login: {0}")]
    Terminal(String),
    /// The login command could not be started.
    #[error("cannot run the login command {program:?}: {source}")]
    Spawn {
        /// The program that was run.
        program: String,
        /// Why it could not start.
        source: std::io::Error,
    },
    /// The login command failed and left no credential.
    #[error("the login command ended with {status} and left no {file}")]
    Failed {
        /// How it ended.
        status: String,
        /// The credential file it should have left.
        file: String,
    },
    /// The login command succeeded but left no credential file.
    #[error("the login left no {0} in its folder")]
    NoFile(String),
    /// The credential file is unusable (path, why: too large, unreadable).
    #[error("the credential file {0}: {1}")]
    Credential(String, String),
    /// handlerd refused or failed to store the credential.
    #[error("handlerd: {0}")]
    Api(String),
}

/// A private temporary folder, removed when dropped.
struct TempFolder(PathBuf);

impl TempFolder {
    fn new() -> std::io::Result<TempFolder> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        for _ in 0..16 {
            let p = base.join(format!(
                "handler-login-{}-{:016x}",
                std::process::id(),
                rand::random::<u64>()
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(TempFolder(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other("no free temporary folder name"))
    }
}

impl Drop for TempFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn substitute(s: &str, dir: &Path) -> String {
    s.replace("{dir}", &dir.display().to_string())
}

/// Where the login's terminal is relayed.
pub enum Relay {
    /// This process's own terminal (stdin, stdout, stderr): raw while the login runs, the
    /// login's terminal resized with it (util-linux `script` does both).
    Terminal,
    /// Pipes (tests): what is typed, where its terminal's output goes.
    Pipes {
        /// What the login command reads as typed input.
        input: Box<dyn Read + Send>,
        /// Where its terminal output goes.
        output: Box<dyn Write + Send>,
    },
}

/// A word for `sh -c`, single-quoted.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Runs a file login (`login.command` with `login.env`) on a terminal of its own (a
/// pseudo-terminal made by util-linux `script`, relayed to `relay`), and returns the content of
/// the file `login.file` it left in `{dir}`. The folder is removed whatever happens.
pub fn run_file_login(harness: &str, login: &Login, relay: Relay) -> Result<String, LoginError> {
    let Some(file) = login.file.clone() else {
        return Err(LoginError::TokenLogin(
            harness.to_string(),
            match &login.token_command {
                Some(c) => format!(
                    "run `{c}` yourself, then give Handler the token it prints (handler account token)"
                ),
                None => "give Handler its token (handler account token)".into(),
            },
        ));
    };
    let command = login
        .command
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| LoginError::NoCommand(harness.to_string()))?;
    let folder = TempFolder::new().map_err(LoginError::Folder)?;
    let dir = folder.0.clone();
    let line = command
        .iter()
        .map(|a| sh_quote(&substitute(a, &dir)))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = std::process::Command::new("script");
    // -q: no banner; -e: its exit status; the typescript to /dev/null.
    cmd.args(["-q", "-e", "-c", &line, "/dev/null"]);
    cmd.env("SHELL", "/bin/sh");
    for (k, v) in login.env.clone().unwrap_or_default() {
        cmd.env(k, substitute(&v, &dir));
    }
    let status = match relay {
        Relay::Terminal => cmd.status().map_err(|source| LoginError::Spawn {
            program: "script (util-linux)".into(),
            source,
        })?,
        Relay::Pipes { input, output } => relay_pipes(&mut cmd, input, output)?,
    };

    let content = read_credential(&dir, file, status)?;
    drop(folder);
    Ok(content)
}

/// Runs the login's `script` with its terminal relayed over pipes (tests): what is typed goes to
/// its stdin, its output and then its stderr to `output`.
fn relay_pipes(
    cmd: &mut std::process::Command,
    mut input: Box<dyn Read + Send>,
    mut output: Box<dyn Write + Send>,
) -> Result<std::process::ExitStatus, LoginError> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| LoginError::Spawn {
            program: "script (util-linux)".into(),
            source,
        })?;
    let mut stdin = child.stdin.take();
    std::thread::spawn(move || {
        if let Some(w) = stdin.as_mut() {
            let _ = std::io::copy(&mut input, w);
        }
        drop(stdin);
    });
    let mut err = child.stderr.take();
    let errs = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut v);
        }
        v
    });
    if let Some(mut out) = child.stdout.take() {
        let mut buf = [0u8; 4096];
        loop {
            match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let _ = output.write_all(&buf[..n]);
                    let _ = output.flush();
                }
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| LoginError::Terminal(e.to_string()))?;
    let _ = output.write_all(&errs.join().unwrap_or_default());
    let _ = output.flush();
    Ok(status)
}

/// The credential the login left in its folder: a regular file of at most 1 MiB.
fn read_credential(
    dir: &Path,
    file: String,
    status: std::process::ExitStatus,
) -> Result<String, LoginError> {
    let path = dir.join(&file);
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(_) if !status.success() => {
            return Err(LoginError::Failed {
                status: status.to_string(),
                file,
            });
        }
        Err(_) => return Err(LoginError::NoFile(file)),
    };
    if !meta.is_file() {
        return Err(LoginError::Credential(file, "not a regular file".into()));
    }
    if meta.len() == 0 || meta.len() > MAX_CREDENTIAL_BYTES {
        return Err(LoginError::Credential(
            file,
            "empty, or larger than 1 MiB".into(),
        ));
    }
    let content = std::fs::read_to_string(&path)
        .map_err(|e| LoginError::Credential(file.clone(), e.to_string()))?;
    Ok(content)
}

/// A small HTTP/1 JSON call to handlerd (its token in Authorization), by [`super::api::Api`]:
/// the same transport as every other call.
pub async fn api(
    d: &Discovery,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<(u16, serde_json::Value), LoginError> {
    let (status, bytes) = super::api::Api::new(d.clone())
        .raw(method, path, body.as_ref())
        .await
        .map_err(|e| LoginError::Api(e.to_string()))?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    ))
}

fn problem(what: &str, status: u16, v: &serde_json::Value) -> LoginError {
    LoginError::Api(format!(
        "{what}: {status} {}",
        v["detail"].as_str().or(v["title"].as_str()).unwrap_or("")
    ))
}

/// The login of an account's harness, asked of handlerd (GET /v1/accounts, /v1/harnesses).
pub async fn account_login_of(d: &Discovery, account: &str) -> Result<(String, Login), LoginError> {
    let (s, a) = api(d, "GET", &format!("/v1/accounts/{account}"), None).await?;
    if s != 200 {
        return Err(problem(&format!("account {account}"), s, &a));
    }
    let harness = a["harness"]
        .as_str()
        .ok_or_else(|| LoginError::Api(format!("account {account} names no harness")))?
        .to_string();
    let (s, h) = api(d, "GET", &format!("/v1/harnesses/{harness}"), None).await?;
    if s != 200 {
        return Err(problem(&format!("harness {harness}"), s, &h));
    }
    let login: Login = match h.get("login") {
        Some(l) if !l.is_null() => serde_json::from_value(l.clone())
            .map_err(|e| LoginError::Api(format!("harness {harness}: its login: {e}")))?,
        _ => return Err(LoginError::NoLogin(harness)),
    };
    Ok((harness, login))
}

/// `handler account login NAME`: runs the account's file login on `relay` and gives the file to
/// handlerd (PUT /v1/accounts/{name}/login), which keeps it 0600.
pub async fn account_login(d: &Discovery, account: &str, relay: Relay) -> Result<(), LoginError> {
    let (harness, login) = account_login_of(d, account).await?;
    let content = tokio::task::spawn_blocking(move || run_file_login(&harness, &login, relay))
        .await
        .map_err(|e| LoginError::Terminal(e.to_string()))??;
    let (s, v) = api(
        d,
        "PUT",
        &format!("/v1/accounts/{account}/login"),
        Some(serde_json::json!({ "content": content })),
    )
    .await?;
    if s != 200 {
        return Err(problem(&format!("keeping {account}'s credential"), s, &v));
    }
    Ok(())
}
