//! A warm pool member's side (decision 0175): `handler-egress-proxy --claim SOCKET --idle SECS`
//! waits, unconfigured, for one connection of its own user on SOCKET; that connection becomes
//! its stdin, stdout and stderr (the configuration comes as one line, the ready line and the
//! events go back), and its end — the launcher gone, whatever the way — ends the proxy. Unclaimed
//! after SECS, it ends.

use std::io::ErrorKind;
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

use super::{ProxyError, Running, start};
use crate::runtime::egress::events::Events;

/// The longest configuration line a claim may give.
pub const MAX_CONFIG_LINE: u64 = 4 << 20;

/// Waits on `path` (a stale socket replaced; mode 0600) until one connection of this process's
/// user comes, at most `idle`; then makes it stdin, stdout and stderr and says true. False when
/// nobody came in time (the socket is then gone, so no launcher takes this member any more).
pub fn wait(path: &Path, idle: Duration) -> std::io::Result<bool> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let deadline = Instant::now() + idle;
    let me = nix::unistd::geteuid().as_raw();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            // The socket first: a launcher that finds no socket takes another member.
            let _ = std::fs::remove_file(path);
            return Ok(false);
        }
        let ms = u16::try_from(left.as_millis().min(60_000)).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let conn = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                continue;
            }
            Err(e) => return Err(e),
        };
        // Only this user (its folder is 0700 too): anyone else is dropped, the wait goes on.
        match getsockopt(&conn, PeerCredentials) {
            Ok(c) if c.uid() == me => {}
            _ => continue,
        }
        let _ = std::fs::remove_file(path);
        drop(listener);
        nix::unistd::dup2_stdin(&conn)?;
        nix::unistd::dup2_stdout(&conn)?;
        nix::unistd::dup2_stderr(&conn)?;
        return Ok(true);
    }
}

/// After [`wait`]: reads the configuration line on stdin, starts, prints the ready line, and
/// runs until its stdin ends (the launcher closed the connection or died) or SIGTERM.
pub async fn run_claimed() -> Result<(), ProxyError> {
    let mut stdin = BufReader::new(tokio::io::stdin().take(MAX_CONFIG_LINE));
    let mut line = String::new();
    stdin
        .read_line(&mut line)
        .await
        .map_err(ProxyError::Stdin)?;
    let config = handler_sandbox::egress::ProxyConfig::parse(&line)?;
    drop(line);
    let running: Running = start(config, Events::stderr()).await?;
    println!(
        "{}",
        serde_json::to_string(&running.ready).expect("ready line")
    );
    let mut signals = crate::runtime::signals::Signals::new(&[libc::SIGTERM, libc::SIGINT])
        .map_err(ProxyError::Stdin)?;
    let mut rest = stdin.into_inner().into_inner();
    let mut buf = [0u8; 64];
    // The launcher writes nothing more: any read that returns is its end (or a stray byte,
    // read past until the end).
    let ended = async {
        loop {
            match rest.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        () = ended => {}
        _ = signals.recv() => {}
    }
    drop(running);
    Ok(())
}
