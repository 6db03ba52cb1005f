//! The runtime's side of a machine's exec server (decision 0171): whether it is there (its
//! `alive` lock held), and an exec through it — a socket bound in the machine's own `exec-ctl`
//! folder (the host's; read-only in the machine), one request with this process's stdio as
//! descriptors, then its signals passed on until the process's end comes back. The host only
//! binds and accepts: it never connects to, nor follows, a name the machine could have made.

use std::io::IoSlice;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::Path;
use std::time::Duration;

use handler_contracts::machine::ExecSpec;
use handler_contracts::sandbox::exit;
use handler_sandbox::machine::exec_server::{
    ALIVE, ClientMessage, EXEC_CTL, ExecRequest, MAX_REQUEST, ServerMessage, fits, socket_name,
};
use nix::sys::socket::{
    AddressFamily, Backlog, ControlMessage, MsgFlags, SockFlag, SockType, UnixAddr, accept4, bind,
    listen, recv, send, sendmsg, setsockopt, socket, sockopt,
};

use crate::runtime::signals::{STOPPING, Signals};

/// How long a live server may take to answer a socket.
const CONNECT_WAIT: Duration = Duration::from_secs(3);

/// The machine (staged folder `dir`) has a running exec server and `exec` fits it.
pub fn usable(dir: &Path, exec: &ExecSpec) -> bool {
    fits(exec) && alive(&dir.join(EXEC_CTL))
}

/// Waits (`within` at most) for the server of a machine made with one (its `alive` file staged)
/// to hold its lock, so that the exec right after a create or a start goes its way: the engine's
/// `start` returns before the machine's first process has run. False when the machine has no
/// server or it did not come up in time (execs then go by the engine).
pub fn wait_ready(dir: &Path, within: Duration) -> bool {
    let ctl = dir.join(EXEC_CTL);
    if std::fs::symlink_metadata(ctl.join(ALIVE)).is_err() {
        return false;
    }
    let deadline = std::time::Instant::now() + within;
    loop {
        if alive(&ctl) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long a create or a start waits for the server.
pub const READY_WAIT: Duration = Duration::from_secs(3);

/// Whether the server holds its lock: ours cannot be taken while it does.
fn alive(ctl: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt as _;
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(ctl.join(ALIVE))
    else {
        return false;
    };
    match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        // Taken: nobody holds it (dropping it unlocks).
        Ok(_) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// What an exec by the server came to.
pub enum Outcome {
    /// The server did not take it (it did not connect): nothing ran, the engine may.
    NotTaken(String),
    /// It ran (or failed to start): its exit code.
    Code(i32),
}

/// Runs `exec` by the server of the machine staged in `dir`, with this process's stdio.
pub fn run(dir: &Path, exec: &ExecSpec) -> Outcome {
    run_with(dir, exec, [0, 1, 2])
}

/// Runs `exec` by the server with `stdio` as its stdin, stdout and stderr.
fn run_with(dir: &Path, exec: &ExecSpec, stdio: [std::os::fd::RawFd; 3]) -> Outcome {
    let request = match serde_json::to_vec(&ExecRequest::of(exec)) {
        Ok(r) if r.len() <= MAX_REQUEST => r,
        Ok(_) => return Outcome::NotTaken("the exec is larger than a request".into()),
        Err(e) => return Outcome::NotTaken(e.to_string()),
    };
    let conn = match connection(&dir.join(EXEC_CTL)) {
        Ok(c) => c,
        Err(e) => return Outcome::NotTaken(e),
    };
    let sent = sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(&request)],
        &[ControlMessage::ScmRights(&stdio)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    );
    if let Err(e) = sent {
        return Outcome::NotTaken(format!("sending the request: {e}"));
    }
    // From here the process may run: no going back to the engine.
    let _ = setsockopt(
        &conn,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(10, 0),
    );
    match next(&conn) {
        Some(ServerMessage::Started { .. }) => {}
        Some(ServerMessage::Failed { code, error }) => {
            super::log(&format!("machine exec: {error}"));
            return Outcome::Code(code);
        }
        Some(ServerMessage::Exited { code }) => return Outcome::Code(code),
        None => {
            super::log("machine exec: the machine's exec server answered nothing readable");
            return Outcome::Code(exit::SETUP_FAILED);
        }
    }
    let _ = setsockopt(
        &conn,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(0, 0),
    );
    Outcome::Code(wait(conn))
}

/// Folder `dir` opened (`O_PATH`, not through a final link) and how to name a file in it
/// through that descriptor (`/proc/self/fd/N/NAME`): a socket's path is at most 107 bytes,
/// and a machine's folder under the user's data folder can be longer. Keep the descriptor
/// while the names are used.
pub(super) fn through(dir: &Path) -> std::io::Result<(OwnedFd, impl Fn(&str) -> String)> {
    use nix::fcntl::{OFlag, open};
    let fd = open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    let raw = fd.as_raw_fd();
    Ok((fd, move |name: &str| format!("/proc/self/fd/{raw}/{name}")))
}

/// A socket bound in `ctl`, the server's connection accepted on it, the name removed.
fn connection(ctl: &Path) -> Result<OwnedFd, String> {
    let (dirfd, at) = through(ctl).map_err(|e| format!("{}: {e}", ctl.display()))?;
    let name = socket_name(rand::random());
    let via = at(&name);
    let listener = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )
    .map_err(|e| e.to_string())?;
    let addr = UnixAddr::new(via.as_str()).map_err(|e| e.to_string())?;
    bind(listener.as_raw_fd(), &addr).map_err(|e| format!("binding {name}: {e}"))?;
    let remove = || {
        let _ = nix::unistd::unlinkat(
            &dirfd,
            name.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    };
    // The machine's user may be another uid than ours (Docker's mapping): it connects all the
    // same; the folder is reachable from the host by this user only.
    let _ = nix::sys::stat::fchmodat(
        &dirfd,
        name.as_str(),
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    );
    let accepted = listen(&listener, Backlog::new(1).unwrap_or(Backlog::MAXCONN))
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let mut pfd = [nix::poll::PollFd::new(
                std::os::fd::AsFd::as_fd(&listener),
                nix::poll::PollFlags::POLLIN,
            )];
            let ms = u16::try_from(CONNECT_WAIT.as_millis()).unwrap_or(u16::MAX);
            match nix::poll::poll(&mut pfd, ms) {
                Ok(n) if n > 0 => {
                    accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC).map_err(|e| e.to_string())
                }
                Ok(_) => Err("the machine's exec server did not connect".into()),
                Err(e) => Err(e.to_string()),
            }
        });
    remove();
    let fd = accepted?;
    // SAFETY: accept4 made this descriptor for this process just now.
    #[allow(unsafe_code)]
    let conn = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    Ok(conn)
}

/// The server's next message (bounded), or none when the connection ends or says nonsense.
fn next(conn: &OwnedFd) -> Option<ServerMessage> {
    let mut buf = [0u8; 4096];
    match recv(conn.as_raw_fd(), &mut buf, MsgFlags::empty()) {
        Ok(n) if n > 0 => serde_json::from_slice(&buf[..n]).ok(),
        _ => None,
    }
}

/// Waits for the process's end, passing this process's stopping signals on; 128 + n when one
/// came (as the engine's exec does), the process's code otherwise.
fn wait(conn: OwnedFd) -> i32 {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return exit::SETUP_FAILED;
    };
    rt.block_on(async move {
        let Ok(mut signals) = Signals::new(&STOPPING) else {
            return exit::SETUP_FAILED;
        };
        let Ok(reader) = conn.try_clone() else {
            return exit::SETUP_FAILED;
        };
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let end = loop {
                match next(&reader) {
                    Some(ServerMessage::Exited { code }) => break code,
                    Some(_) => {}
                    None => break exit::SETUP_FAILED,
                }
            };
            let _ = tx.send(end);
        });
        tokio::select! {
            code = &mut rx => code.unwrap_or(exit::SETUP_FAILED),
            sig = signals.recv() => {
                if let Ok(b) = serde_json::to_vec(&ClientMessage::Signal { number: sig }) {
                    let _ = send(conn.as_raw_fd(), &b, MsgFlags::MSG_NOSIGNAL);
                }
                let _ = tokio::time::timeout(Duration::from_secs(10), rx).await;
                128 + sig
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::io::Read as _;
    use std::os::fd::AsRawFd as _;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A machine's staged folder as a create stages it: `exec-ctl/alive`, no server.
    fn staged() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(EXEC_CTL)).unwrap();
        std::fs::write(d.path().join(EXEC_CTL).join(ALIVE), "").unwrap();
        d
    }

    /// A machine's staged folder with a server of this process's own watching it.
    fn served() -> tempfile::TempDir {
        let d = staged();
        let execs: Arc<Mutex<BTreeSet<i32>>> = Arc::default();
        crate::runtime::exec_server::serve(&d.path().join(EXEC_CTL), &execs).unwrap();
        d
    }

    fn spec(argv: &[&str]) -> ExecSpec {
        ExecSpec {
            argv: argv.iter().map(|a| (*a).to_string()).collect(),
            ..Default::default()
        }
    }

    /// Runs `exec` with a pipe as stdout and /dev/null for the rest: its code and its output.
    fn run_piped(dir: &Path, exec: &ExecSpec) -> (i32, String) {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut r = std::fs::File::from(r);
        let null = std::fs::File::open("/dev/null").unwrap();
        let out = run_with(
            dir,
            exec,
            [null.as_raw_fd(), w.as_raw_fd(), null.as_raw_fd()],
        );
        drop(w);
        let mut text = String::new();
        r.read_to_string(&mut text).unwrap();
        match out {
            Outcome::Code(c) => (c, text),
            Outcome::NotTaken(why) => panic!("not taken: {why}"),
        }
    }

    #[test]
    fn an_exec_by_the_server_has_its_variables_folder_stdio_and_code() {
        let d = served();
        let mut e = spec(&["sh", "-c", "echo \"$GREETING\"; pwd; exit 3"]);
        e.env = BTreeMap::from([("GREETING".into(), "hello".into())]);
        e.cwd = Some("/tmp".into());
        assert!(usable(d.path(), &e));
        assert_eq!(run_piped(d.path(), &e), (3, "hello\n/tmp\n".into()));
        // Its socket is gone once the server connected: only `alive` is left.
        let names: Vec<_> = std::fs::read_dir(d.path().join(EXEC_CTL))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [ALIVE]);
    }

    #[test]
    fn a_server_that_sees_the_name_before_it_is_listened_on_still_takes_the_exec() {
        // The name appears at bind, before listen: the server's first connect is refused. A
        // socket bound and listened on only 50 ms later is still taken.
        let d = served();
        let ctl = d.path().join(EXEC_CTL);
        let name = socket_name(7);
        let sock = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        bind(sock.as_raw_fd(), &UnixAddr::new(&ctl.join(&name)).unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        listen(&sock, Backlog::new(1).unwrap()).unwrap();
        let mut pfd = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&sock),
            nix::poll::PollFlags::POLLIN,
        )];
        assert_eq!(
            nix::poll::poll(&mut pfd, 3000u16).unwrap(),
            1,
            "the server never connected"
        );
    }

    #[test]
    fn a_program_that_is_not_there_ends_as_the_engines_exec_would() {
        let d = served();
        assert_eq!(run_piped(d.path(), &spec(&["/no/such/program"])).0, 127);
    }

    #[test]
    fn without_a_server_holding_its_lock_nothing_goes_its_way() {
        let d = staged();
        assert!(!usable(d.path(), &spec(&["true"])));
        // Nor without the folder (a machine made before the server), nor for a terminal or
        // another user even with one.
        assert!(!usable(&d.path().join("none"), &spec(&["true"])));
        let served = served();
        let tty = ExecSpec {
            tty: true,
            ..spec(&["true"])
        };
        assert!(!usable(served.path(), &tty));
    }

    #[test]
    fn a_start_waits_for_the_server_only_where_there_is_one() {
        let none = tempfile::tempdir().unwrap();
        let t = std::time::Instant::now();
        assert!(!wait_ready(none.path(), Duration::from_secs(5)));
        assert!(t.elapsed() < Duration::from_secs(1), "no server: no wait");
        let d = served();
        assert!(wait_ready(d.path(), Duration::from_secs(5)));
        // Staged, but nobody holds the lock: it gives up after its time.
        let late = staged();
        assert!(!wait_ready(late.path(), Duration::from_millis(100)));
    }

    #[test]
    fn a_server_that_does_not_connect_leaves_the_exec_to_the_engine() {
        // The lock held by someone that is not watching: the exec is not taken, nothing ran.
        let d = staged();
        let f = std::fs::File::open(d.path().join(EXEC_CTL).join(ALIVE)).unwrap();
        let _held = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockShared).unwrap();
        assert!(usable(d.path(), &spec(&["true"])));
        let null = std::fs::File::open("/dev/null").unwrap();
        let fd = null.as_raw_fd();
        assert!(matches!(
            run_with(d.path(), &spec(&["true"]), [fd, fd, fd]),
            Outcome::NotTaken(_)
        ));
    }
}
