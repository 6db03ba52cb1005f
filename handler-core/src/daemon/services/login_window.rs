//! The web UI's Log in for a file login (D.9): `handler account login --keep-open -- NAME` in a
//! terminal window of the person's desktop, opened by handlerd (the login's own program runs
//! on the host, as its authors meant it). Which terminal and how it takes a command are pure
//! functions; the window is started detached and reaped, never waited for.

use std::path::Path;
use std::process::Stdio;

use handler_contracts::control::LoginWindow;

use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;

/// The terminal emulators tried, in order, when `HANDLER_TERMINAL` and `TERMINAL` name none.
pub const TERMINALS: &[&str] = &[
    "x-terminal-emulator",
    "gnome-terminal",
    "konsole",
    "xfce4-terminal",
    "alacritty",
    "kitty",
    "foot",
    "xterm",
];

/// Pure: the argv that opens `command` in terminal `program`, in the form that terminal takes
/// (`-e PROGRAM ARGS…` for most; `--` for gnome-terminal; `-x` for xfce4-terminal, whose `-e`
/// takes one string; the command itself for kitty and foot).
pub fn window_argv(program: &str, command: &[String]) -> Vec<String> {
    let name = Path::new(program)
        .file_name()
        .map_or(program.into(), |n| n.to_string_lossy().into_owned());
    let flag: Option<&str> = match name.as_str() {
        "gnome-terminal" | "kgx" => Some("--"),
        "xfce4-terminal" => Some("-x"),
        "kitty" | "foot" | "wezterm" => None,
        _ => Some("-e"),
    };
    let mut argv = vec![program.to_string()];
    argv.extend(flag.map(String::from));
    argv.extend(command.iter().cloned());
    argv
}

/// Pure: the terminal to use — the one set (`HANDLER_TERMINAL`, else `TERMINAL`), else the
/// first of [`TERMINALS`] that `found` says is installed.
pub fn choose(set: Option<&str>, found: impl Fn(&str) -> bool) -> Option<String> {
    set.filter(|s| !s.trim().is_empty())
        .map(String::from)
        .or_else(|| {
            TERMINALS
                .iter()
                .find(|t| found(t))
                .map(|t| (*t).to_string())
        })
}

/// Whether `program` is an executable file on `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(d.join(program)).is_ok_and(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
        })
    })
}

/// The `handler` CLI the window runs: `HANDLER_CLI`, else the one beside this handlerd, else
/// `handler` on PATH.
fn handler_cli(app: &AppState) -> String {
    if let Some(p) = &app.config.handler_cli {
        return p.display().to_string();
    }
    std::env::current_exe()
        .ok()
        .map(|e| e.with_file_name("handler"))
        .filter(|p| p.is_file())
        .map_or("handler".into(), |p| p.display().to_string())
}

/// POST /v1/accounts/{name}/login/window: 404 for an unknown account, 409 for a token login
/// (its token is pasted instead), 503 when no terminal emulator is found or it cannot start.
pub async fn open(app: &AppState, name: String) -> ApiResult<LoginWindow> {
    let account = super::accounts::get(app, name.clone()).await?;
    if account.login.as_deref() != Some("file") {
        return Err(ApiError::conflict(
            "not a file login",
            format!(
                "account {name:?} logs in with a token: paste it (PUT /v1/accounts/{name}/token, or the Accounts page)"
            ),
        ));
    }
    let Some(terminal) = choose(app.config.terminal.as_deref(), on_path) else {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "no terminal emulator",
            format!(
                "none of {} is installed and HANDLER_TERMINAL is not set: install one, or run `handler account login {name}` in a terminal",
                TERMINALS.join(", ")
            ),
        ));
    };
    // `--` before the name: an account name may start with `-` (a hand-written file's).
    let command = vec![
        handler_cli(app),
        "account".into(),
        "login".into(),
        "--keep-open".into(),
        "--".into(),
        name,
    ];
    let argv = window_argv(&terminal, &command);
    spawn_detached(&argv).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "terminal did not start",
            format!("{terminal}: {e}: set HANDLER_TERMINAL to a terminal emulator"),
        )
    })?;
    tracing::info!(terminal = %terminal, "login window opened");
    Ok(LoginWindow { terminal, command })
}

/// Starts `argv` in a process group of its own, its stdio closed; reaped in the background.
fn spawn_detached(argv: &[String]) -> std::io::Result<()> {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn()?;
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{choose, window_argv};

    fn cmd() -> Vec<String> {
        [
            "/opt/h/handler",
            "account",
            "login",
            "--keep-open",
            "--",
            "work",
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn each_terminal_gets_the_command_in_the_form_it_takes() {
        let w = |t: &str| window_argv(t, &cmd()).join(" ");
        let tail = "/opt/h/handler account login --keep-open -- work";
        assert_eq!(w("xterm"), format!("xterm -e {tail}"));
        assert_eq!(
            w("/usr/bin/x-terminal-emulator"),
            format!("/usr/bin/x-terminal-emulator -e {tail}")
        );
        assert_eq!(w("gnome-terminal"), format!("gnome-terminal -- {tail}"));
        assert_eq!(w("xfce4-terminal"), format!("xfce4-terminal -x {tail}"));
        assert_eq!(w("kitty"), format!("kitty {tail}"));
        assert_eq!(w("konsole"), format!("konsole -e {tail}"));
    }

    #[test]
    fn the_terminal_set_wins_else_the_first_installed() {
        let found = |t: &str| t == "xterm" || t == "konsole";
        assert_eq!(choose(None, found).as_deref(), Some("konsole"));
        assert_eq!(choose(None, |_| false), None);
        assert_eq!(
            choose(Some("/my/term"), |_| true).as_deref(),
            Some("/my/term")
        );
        assert_eq!(choose(Some(" "), found).as_deref(), Some("konsole"));
    }
}
