//! The sandbox's side of its egress proxy (A.3, decision 0024): the network filter image's
//! binary run as `shim` before the process. It listens on the sandbox's loopback (where the
//! proxy variables point), waits for the proxy's unix socket (the process never starts without
//! its proxy, A1), leaves a forwarder behind (loopback TCP → the socket: this binary again,
//! reparented to the sandbox's init, out of the terminal's process group) and becomes the process (exec), whose
//! pid, stdio, environment and exit code are unchanged. It decides nothing: the sandbox has no
//! other way out, and the proxy judges every request.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the process waits for its proxy before the sandbox gives up (exit 66).
pub const PROXY_WAIT: Duration = Duration::from_secs(30);

/// The relay buffer of a forwarded connection, each way.
const BUF: usize = 64 * 1024;

/// Why the shim cannot start the process (it then exits 66 before the process starts, or 127
/// when the process cannot be run).
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("egress forwarder: cannot listen on {addr}: {source}")]
    /// The forwarder cannot listen on the sandbox's loopback.
    Listen {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    #[error("egress forwarder: the proxy did not answer on {path} within {secs} s: {last}")]
    /// The proxy's socket did not answer in time.
    NoProxy {
        /// The socket's path.
        path: String,
        /// How long the forwarder waited.
        secs: u64,
        /// The last error seen.
        last: String,
    },
    #[error("egress forwarder: cannot start the forwarder: {0}")]
    /// The forwarder's thread or runtime could not be started.
    Forwarder(std::io::Error),
    #[error("cannot run {program}: {source}")]
    /// The process could not be executed.
    Exec {
        /// Its program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    #[error("egress forwarder: no command to run")]
    /// The command line after `--` is empty.
    NoCommand,
}

impl ShimError {
    /// The exit code: 127 when the process cannot be run (as a shell), else 66 (setup failed).
    pub fn exit_code(&self) -> i32 {
        match self {
            ShimError::Exec { .. } | ShimError::NoCommand => 127,
            _ => handler_contracts::sandbox::exit::SETUP_FAILED,
        }
    }
}

/// Waits until `socket` accepts a connection (the proxy binds it once ready), at most `within`.
pub fn wait_for(socket: &Path, within: Duration) -> Result<(), ShimError> {
    let deadline = Instant::now() + within;
    // A refused connect costs microseconds: poll often, the process waits on it.
    let pause = Duration::from_millis(3);
    loop {
        match UnixStream::connect(socket) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(ShimError::NoProxy {
                    path: socket.display().to_string(),
                    secs: within.as_secs(),
                    last: e.to_string(),
                });
            }
            Err(_) => std::thread::sleep(pause),
        }
    }
}

/// Runs the shim: returns only on failure (on success the process has replaced it). `exe` is
/// this binary (it is run again as the forwarder, `FORWARD_VERB`).
pub fn run(exe: &Path, listen: &str, socket: &Path, argv: &[String]) -> ShimError {
    let Some((program, args)) = argv.split_first() else {
        return ShimError::NoCommand;
    };
    let listener = match TcpListener::bind(listen) {
        Ok(l) => l,
        Err(source) => {
            return ShimError::Listen {
                addr: listen.to_string(),
                source,
            };
        }
    };
    if let Err(e) = wait_for(socket, PROXY_WAIT) {
        return e;
    }
    if let Err(e) = spawn_forwarder(exe, listener, socket, true) {
        return e;
    }
    // The listener is close-on-exec: only the forwarder keeps it.
    let source = std::process::Command::new(program).args(args).exec();
    ShimError::Exec {
        program: program.clone(),
        source,
    }
}

/// The hidden verb that runs the forwarder: its listener is its stdin.
pub const FORWARD_VERB: &str = "shim-forward";

/// Starts `exe shim-forward` with the listener as its stdin and no other stdio of ours (the
/// process's stdout is the ACP stream), in a process group of its own (a terminal's ^C does
/// not reach it). With `detach`, that first child starts the real forwarder and exits at once,
/// so the forwarder is reparented to the sandbox's init (which reaps it) rather than left a
/// child of the process; the first child is waited for.
fn spawn_forwarder(
    exe: &Path,
    listener: impl Into<std::os::fd::OwnedFd>,
    socket: &Path,
    detach: bool,
) -> Result<(), ShimError> {
    use std::os::unix::process::CommandExt as _;
    use std::process::Stdio;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg(FORWARD_VERB).arg("--socket").arg(socket);
    if detach {
        cmd.arg("--detach");
    }
    let mut child = cmd
        .stdin(Stdio::from(listener.into()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(ShimError::Forwarder)?;
    if detach {
        child.wait().map_err(ShimError::Forwarder)?;
    }
    Ok(())
}

/// The forwarder's body (`shim-forward`): the listener is stdin. With `detach`, starts the
/// forwarder proper and returns at once.
pub fn forward_main(exe: &Path, socket: &Path, detach: bool) -> Result<(), ShimError> {
    use std::os::fd::AsFd as _;
    let fd = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map_err(ShimError::Forwarder)?;
    if detach {
        return spawn_forwarder(exe, fd, socket, false);
    }
    forward(TcpListener::from(fd), socket);
    Ok(())
}

/// Accepts loopback connections and relays each to the proxy's socket, both ways.
pub fn forward(listener: TcpListener, socket: &Path) {
    for conn in listener.incoming() {
        let Ok(client) = conn else { continue };
        let socket = socket.to_path_buf();
        std::thread::spawn(move || {
            let Ok(proxy) = UnixStream::connect(&socket) else {
                return;
            };
            let _ = client.set_nodelay(true);
            relay(client, proxy);
        });
    }
}

/// Copies both ways until each side has ended, keeping half-closes.
fn relay(client: TcpStream, proxy: UnixStream) {
    let (Ok(client2), Ok(proxy2)) = (client.try_clone(), proxy.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        pump(client2, proxy2, |p| {
            let _ = p.shutdown(Shutdown::Write);
        });
    });
    pump(proxy, client, |c| {
        let _ = c.shutdown(Shutdown::Write);
    });
    let _ = up.join();
}

fn pump<R: Read, W: Write>(mut from: R, mut to: W, close: impl FnOnce(&W)) {
    let mut buf = vec![0u8; BUF];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    close(&to);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_both_ways_with_half_close_and_waits_for_the_socket() {
        let dir = std::env::temp_dir().join(format!("handler-shim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("proxy.sock");
        let _ = std::fs::remove_file(&sock);
        // No socket yet: the wait gives up naming it.
        let e = wait_for(&sock, Duration::from_millis(30)).unwrap_err();
        assert!(e.to_string().contains("proxy.sock"), "{e}");
        assert_eq!(e.exit_code(), 66);
        let proxy = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        wait_for(&sock, Duration::from_secs(1)).unwrap();
        let _probe = proxy.accept().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let s2 = sock.clone();
        std::thread::spawn(move || forward(listener, &s2));
        let mut c = TcpStream::connect(addr).unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let (mut p, _) = proxy.accept().unwrap();
        let expect = data.clone();
        let server = std::thread::spawn(move || {
            let mut got = Vec::new();
            p.read_to_end(&mut got).unwrap(); // the client's half-close arrives
            assert_eq!(got, expect);
            p.write_all(b"answer after the request ended").unwrap();
        });
        c.write_all(&data).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = String::new();
        c.read_to_string(&mut back).unwrap();
        server.join().unwrap();
        assert_eq!(back, "answer after the request ended");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_command_or_a_missing_one_is_127() {
        assert_eq!(
            run(Path::new("/x"), "127.0.0.1:0", Path::new("/x"), &[]).exit_code(),
            127
        );
        let e = ShimError::Exec {
            program: "nope".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(e.exit_code(), 127);
    }
}
