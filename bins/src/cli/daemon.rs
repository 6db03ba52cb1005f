//! `handler daemon start|stop|status|logs|install` and `handler ui`: handlerd as a systemd user
//! service where `systemctl --user` works, else a process of its own (its log in a file of the
//! state folder, its pid beside it).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Subcommand;
use handler_core::client::Discovery;
use handler_core::client::api::Api;

use super::out::{Refused, exit};

/// The unit's name.
pub(crate) const UNIT: &str = "handlerd.service";

/// `handler daemon …`.
#[derive(Subcommand, Debug)]
pub enum DaemonCommand {
    /// Start handlerd (its unit, when installed; else in the background) and wait until it answers.
    Start,
    /// Stop handlerd; its sandboxes stop with it.
    Stop,
    /// Say whether handlerd runs, where, how it was started and which sandbox runtime it uses.
    Status,
    /// Print handlerd's log (journald's for the unit, else its log file).
    Logs {
        /// Keep printing what it writes.
        #[arg(long, short)]
        follow: bool,
        /// How many of the last lines.
        #[arg(long, short = 'n', default_value_t = 100)]
        lines: usize,
    },
    /// Write the systemd user unit (`~/.config/systemd/user/handlerd.service`), enable and start it.
    Install {
        /// Write it only: neither enable nor start it.
        #[arg(long)]
        no_start: bool,
    },
}

/// The environment as a function, for the folders' defaults.
fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

fn home() -> anyhow::Result<PathBuf> {
    env("HOME")
        .map(PathBuf::from)
        .ok_or_else(|| Refused("HOME is not set".into()).into())
}

/// handlerd's state folder: `$HANDLER_STATE_DIR`, else `~/.local/state/handler-ai`.
pub(crate) fn state_dir() -> anyhow::Result<PathBuf> {
    Ok(match env("HANDLER_STATE_DIR") {
        Some(d) => PathBuf::from(d),
        None => home()?
            .join(".local/state")
            .join(handler_contracts::APP_DIR_NAME),
    })
}

/// Where the unit is written: `$XDG_CONFIG_HOME/systemd/user`, else `~/.config/systemd/user`.
pub(crate) fn unit_path() -> anyhow::Result<PathBuf> {
    let base = match env("XDG_CONFIG_HOME") {
        Some(d) => PathBuf::from(d),
        None => home()?.join(".config"),
    };
    Ok(base.join("systemd/user").join(UNIT))
}

fn log_path() -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join("handlerd.log"))
}

fn pid_path() -> anyhow::Result<PathBuf> {
    Ok(state_dir()?.join("handlerd.pid"))
}

/// handlerd beside this `handler`, else the one on PATH.
pub(crate) fn handlerd_path() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("handlerd")))
        .filter(|p| p.is_file())
    {
        return Ok(p);
    }
    let path = env("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("handlerd"))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow::anyhow!("handlerd is neither beside handler nor on PATH (install Handler's binaries: .ci/install.sh ~/.local/bin)"))
}

/// The systemd user unit that runs `handlerd` with the given environment (Handler's own
/// variables, as `handler daemon install` saw them).
pub(crate) fn unit_text(handlerd: &Path, env: &[(String, String)]) -> String {
    let mut s = String::from(
        "[Unit]\nDescription=Handler's daemon: AI coding agents in sandboxes\nDocumentation=man:handler(1)\n\n[Service]\nType=simple\n",
    );
    for (k, v) in env {
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('%', "%%");
        s.push_str(&format!("Environment=\"{k}={v}\"\n"));
    }
    s.push_str(&format!(
        "ExecStart={}\nRestart=on-failure\nRestartSec=2\n# handlerd stops its sandboxes itself; an agent mid-turn outlives a restart (its keeper).\nKillMode=process\n\n[Install]\nWantedBy=default.target\n",
        handlerd.display()
    ));
    s
}

/// Whether `systemctl --user` reaches a user manager here.
pub(crate) fn systemd_user() -> bool {
    Command::new("systemctl")
        .args(["--user", "show-environment"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn managed_by_unit() -> bool {
    unit_path().is_ok_and(|p| p.is_file()) && systemd_user()
}

fn systemctl(args: &[&str]) -> anyhow::Result<()> {
    let st = Command::new("systemctl")
        .arg("--user")
        .args(args)
        .status()
        .context("running systemctl --user")?;
    anyhow::ensure!(
        st.success(),
        "systemctl --user {} failed ({st}); see: handler daemon logs",
        args.join(" ")
    );
    Ok(())
}

/// The handlerd the environment names, when it answers.
pub(crate) async fn reachable() -> Option<Api> {
    let api = Api::new(Discovery::from_process_env().ok()?);
    api.get("/v1/harnesses").await.ok().map(|_| api)
}

/// Starts handlerd unless it answers already; waits (30 s) until it does. Says how.
pub(crate) async fn start() -> anyhow::Result<Api> {
    if let Some(api) = reachable().await {
        eprintln!(
            "handler: handlerd is running on 127.0.0.1:{}",
            api.discovery().port
        );
        return Ok(api);
    }
    if managed_by_unit() {
        systemctl(&["start", UNIT])?;
    } else {
        spawn_detached()?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(api) = reachable().await {
            eprintln!(
                "handler: handlerd started on 127.0.0.1:{}",
                api.discovery().port
            );
            return Ok(api);
        }
        if Instant::now() > deadline {
            anyhow::bail!("handlerd did not answer within 30 s; see: handler daemon logs");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// handlerd in a process group of its own, out of this terminal's, its log appended to the file.
fn spawn_detached() -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let log = log_path()?;
    std::fs::create_dir_all(log.parent().unwrap_or(Path::new(".")))
        .with_context(|| format!("making {}", log.display()))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening {}", log.display()))?;
    let child = Command::new(handlerd_path()?)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0)
        .spawn()
        .context("starting handlerd")?;
    std::fs::write(pid_path()?, format!("{}\n", child.id()))
        .context("writing handlerd's pid file")?;
    Ok(())
}

/// Stops the handlerd `daemon start` started (its unit, or its pid), waits (30 s) until it is gone.
async fn stop() -> anyhow::Result<i32> {
    if managed_by_unit() {
        systemctl(&["stop", UNIT])?;
        println!("handlerd stopped");
        return Ok(exit::OK);
    }
    let pid_file = pid_path()?;
    let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    else {
        if reachable().await.is_some() {
            return Err(Refused("handlerd runs, but was not started by `handler daemon start`: stop it where it was started".into()).into());
        }
        println!("handlerd is not running");
        return Ok(exit::OK);
    };
    let pid = nix::unistd::Pid::from_raw(pid);
    if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_ok() {
        let deadline = Instant::now() + Duration::from_secs(30);
        while nix::sys::signal::kill(pid, None).is_ok() && reachable().await.is_some() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "handlerd (pid {pid}) did not stop within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let _ = std::fs::remove_file(&pid_file);
    println!("handlerd stopped");
    Ok(exit::OK)
}

async fn status(json: bool) -> anyhow::Result<i32> {
    let how = if managed_by_unit() {
        format!("systemd user unit {UNIT}")
    } else {
        format!("log {}", log_path()?.display())
    };
    let Some(api) = reachable().await else {
        if json {
            super::out::print_json(&serde_json::json!({"running": false}));
        } else {
            println!("handlerd is not running (start it: handler daemon start)");
        }
        return Ok(exit::UNREACHABLE);
    };
    let runtime = api.get("/v1/runtime").await?;
    if json {
        super::out::print_json(
            &serde_json::json!({"running": true, "port": api.discovery().port, "runtime": runtime}),
        );
        return Ok(exit::OK);
    }
    println!(
        "handlerd is running on 127.0.0.1:{} ({how})",
        api.discovery().port
    );
    let ok = if runtime["ok"].as_bool() == Some(true) {
        "can run sandboxes"
    } else {
        "CANNOT run sandboxes: handler setup says why"
    };
    println!("runtime: {} ({ok})", super::out::text(&runtime, "runtime"));
    if let Some(sel) = runtime["items"]
        .as_array()
        .and_then(|i| i.iter().find(|i| i["name"] == "selected"))
    {
        println!("selected: {}", super::out::text(sel, "detail"));
    }
    Ok(exit::OK)
}

fn logs(follow: bool, lines: usize) -> anyhow::Result<i32> {
    if managed_by_unit() {
        let mut c = Command::new("journalctl");
        c.args(["--user", "-u", UNIT, "-n", &lines.to_string(), "--no-pager"]);
        if follow {
            c.arg("-f");
        }
        return Ok(c
            .status()
            .context("running journalctl")?
            .code()
            .unwrap_or(1));
    }
    let path = log_path()?;
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Refused(format!(
            "{}: {e} (handlerd was not started by `handler daemon start`?)",
            path.display()
        ))
    })?;
    let all: Vec<&str> = text.lines().collect();
    let mut out = std::io::stdout();
    for l in &all[all.len().saturating_sub(lines)..] {
        writeln!(out, "{l}")?;
    }
    if follow {
        let mut offset = text.len() as u64;
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let mut f = std::fs::File::open(&path)?;
            let len = f.metadata()?.len();
            if len > offset {
                use std::io::{Read, Seek, SeekFrom};
                f.seek(SeekFrom::Start(offset))?;
                let mut buf = Vec::new();
                f.read_to_end(&mut buf)?;
                out.write_all(&buf)?;
                out.flush()?;
            }
            offset = len;
        }
    }
    Ok(exit::OK)
}

fn install(no_start: bool) -> anyhow::Result<i32> {
    let path = unit_path()?;
    let vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("HANDLER_") && k != "HANDLER_TOKEN")
        .collect();
    let text = unit_text(&handlerd_path()?, &vars);
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))
        .with_context(|| format!("making {}", path.display()))?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    if no_start {
        println!("start it: systemctl --user enable --now {UNIT}");
    } else if systemd_user() {
        systemctl(&["daemon-reload"])?;
        systemctl(&["enable", "--now", UNIT])?;
        println!(
            "handlerd is enabled and started (it starts with your session; logs: handler daemon logs)"
        );
    } else {
        println!(
            "systemctl --user is not available here (no user session manager): start it with `handler daemon start`"
        );
    }
    Ok(exit::OK)
}

/// Runs `handler daemon …`; returns the exit code.
pub(crate) async fn run(cmd: DaemonCommand, json: bool) -> anyhow::Result<i32> {
    match cmd {
        DaemonCommand::Start => start().await.map(|_| exit::OK),
        DaemonCommand::Stop => stop().await,
        DaemonCommand::Status => status(json).await,
        DaemonCommand::Logs { follow, lines } => logs(follow, lines),
        DaemonCommand::Install { no_start } => install(no_start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_unit_runs_handlerd_with_handlers_variables() {
        let unit = unit_text(
            Path::new("/home/me/.local/bin/handlerd"),
            &[
                ("HANDLER_PORT".into(), "7431".into()),
                ("HANDLER_DATA_DIR".into(), "/d \"q\"".into()),
            ],
        );
        insta::assert_snapshot!(unit);
    }
}
