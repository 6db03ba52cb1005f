//! `handler-egress-proxy exec-server --dir DIR -- COMMAND…` (decision 0171): a machine's first
//! process under its init. It starts COMMAND (the machine's argv) and ends with it, passes the
//! stopping signals on to it, and meanwhile runs execs: the runtime binds a socket in DIR (the
//! machine's `exec-ctl` folder, read-only here), the server sees the name appear (inotify),
//! connects, reads one request with the caller's stdio as three descriptors, starts the process
//! with them and says when it started and how it ended. While it runs it holds a shared lock on
//! DIR's `alive` file: the host's sign that an exec may come this way.
//!
//! Nothing here trusts what it reads more than `engine exec` would: a request is bounded, its
//! fields are what an ExecSpec gives, and a process runs as the server itself does (the
//! machine's user, its capabilities, its limits).

use std::collections::BTreeSet;
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::runtime::signals::exit_code;
use handler_sandbox::machine::exec_server::{
    ALIVE, ClientMessage, ExecRequest, MAX_REQUEST, ServerMessage, VERSION, is_socket_name,
    start_failure_code,
};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, pthread_sigmask};
use nix::sys::socket::{
    AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr, connect, recv,
    recvmsg, send, setsockopt, socket, sockopt,
};
use nix::unistd::Pid;

/// The signals passed on to the machine's command (and to the execs' processes).
const STOPPING: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

/// Runs the server and COMMAND; the exit code is COMMAND's (127 when it cannot start).
pub fn run(dir: &Path, command: &[String]) -> i32 {
    let mut stopping = SigSet::empty();
    for s in STOPPING {
        stopping.add(s);
    }
    // Blocked in every thread made from now on; waited for below. Processes started here get
    // an empty mask back (`unmasked`).
    if let Err(e) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stopping), None) {
        eprintln!("exec-server: signals: {e}");
    }
    let Some(program) = command.first() else {
        eprintln!("exec-server: no command");
        return 64;
    };
    let mut main = match unmasked(Command::new(program).args(&command[1..])).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("exec-server: {program}: {e}");
            return start_failure_code(e.kind() == std::io::ErrorKind::NotFound);
        }
    };
    let execs: Arc<Mutex<BTreeSet<i32>>> = Arc::default();
    {
        let main_pid = pid_of(main.id());
        let execs = Arc::clone(&execs);
        std::thread::spawn(move || pass_signals(&stopping, main_pid, &execs));
    }
    // Without its folder the machine still runs: every exec goes by the engine then.
    match serve(dir, &execs) {
        Ok(()) => {}
        Err(e) => eprintln!(
            "exec-server: {}: {e} (execs go by the engine)",
            dir.display()
        ),
    }
    match main.wait() {
        Ok(s) => exit_code(s),
        Err(_) => 1,
    }
}

/// `cmd` started with no signal blocked: not the server's mask (its stopping signals), nor
/// what its init left blocked — as the engine's exec starts a process.
fn unmasked(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: between fork and exec the closure only calls pthread_sigmask, which is
    // async-signal-safe, on a set made before the fork.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
                .map_err(std::io::Error::from)
        })
    }
}

fn pid_of(id: u32) -> i32 {
    i32::try_from(id).unwrap_or(0)
}

/// Passes each stopping signal on to the command and the execs' processes.
fn pass_signals(set: &SigSet, main: i32, execs: &Mutex<BTreeSet<i32>>) {
    while let Ok(sig) = set.wait() {
        let _ = kill(Pid::from_raw(main), sig);
        let pids: Vec<i32> = execs
            .lock()
            .map(|e| e.iter().copied().collect())
            .unwrap_or_default();
        for p in pids {
            let _ = kill(Pid::from_raw(p), sig);
        }
    }
}

/// Watches `dir` (then takes its `alive` lock) on a thread of its own.
pub(crate) fn serve(dir: &Path, execs: &Arc<Mutex<BTreeSet<i32>>>) -> nix::Result<()> {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC)?;
    // Watching first, then the lock: the host never sees the lock before a socket would be seen.
    inotify.add_watch(dir, AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)?;
    let alive = std::fs::File::open(dir.join(ALIVE))
        .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    let lock =
        nix::fcntl::Flock::lock(alive, nix::fcntl::FlockArg::LockShared).map_err(|(_, e)| e)?;
    let dir = dir.to_path_buf();
    let execs = Arc::clone(execs);
    std::thread::spawn(move || {
        let _lock = lock;
        while let Ok(events) = inotify.read_events() {
            for ev in events {
                let Some(name) = ev.name.as_ref().and_then(|n| n.to_str()) else {
                    continue;
                };
                if !is_socket_name(name) {
                    continue;
                }
                let path = dir.join(name);
                let execs = Arc::clone(&execs);
                std::thread::spawn(move || {
                    if let Err(e) = one_exec(&path, &execs) {
                        eprintln!("exec-server: {name}: {e}", name = path.display());
                    }
                });
            }
        }
    });
    Ok(())
}

/// The errors of one exec's connection.
#[derive(Debug, thiserror::Error)]
enum ExecFailure {
    #[error("{0}")]
    Sys(#[from] nix::Error),
    #[error("a request that is not one: {0}")]
    Request(String),
}

/// Connects to the exec's socket, reads its request and descriptors, runs it.
fn one_exec(path: &Path, execs: &Mutex<BTreeSet<i32>>) -> Result<(), ExecFailure> {
    let sock = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // The name appears when the runtime binds it, a moment before it listens: refused until
    // then (a second at most).
    let addr = UnixAddr::new(path)?;
    let mut tries = 0;
    loop {
        match connect(sock.as_raw_fd(), &addr) {
            Err(nix::errno::Errno::ECONNREFUSED) if tries < 200 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            r => break r?,
        }
    }
    // A request arrives at once or not at all.
    setsockopt(
        &sock,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(5, 0),
    )?;
    let (req, fds) = read_request(sock.as_raw_fd())?;
    let [stdin, stdout, stderr] = fds;
    let mut cmd = Command::new(&req.argv[0]);
    cmd.args(&req.argv[1..])
        .envs(&req.env)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    if let Some(c) = &req.cwd {
        cmd.current_dir(c);
    }
    let spawned = unmasked(&mut cmd).spawn();
    // The descriptors are the child's alone now (`cmd` holds the server's copies).
    drop(cmd);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let code = start_failure_code(e.kind() == std::io::ErrorKind::NotFound);
            let what = format!("{}: {e}", req.argv[0]);
            say(
                sock.as_raw_fd(),
                &ServerMessage::Failed { code, error: what },
            );
            return Ok(());
        }
    };
    let pid = pid_of(child.id());
    if let Ok(mut e) = execs.lock() {
        e.insert(pid);
    }
    say(
        sock.as_raw_fd(),
        &ServerMessage::Started { pid: child.id() },
    );
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listener = {
        let fd = sock
            .try_clone()
            .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let done = Arc::clone(&done);
        std::thread::spawn(move || listen(&fd, pid, &done))
    };
    let code = child.wait().map_or(1, exit_code);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Ok(mut e) = execs.lock() {
        e.remove(&pid);
    }
    say(sock.as_raw_fd(), &ServerMessage::Exited { code });
    // The runtime closes its end once it read this; the listener then returns.
    drop(sock);
    let _ = listener.join();
    Ok(())
}

/// One datagram: the request, and exactly three descriptors with it.
fn read_request(fd: RawFd) -> Result<(ExecRequest, [OwnedFd; 3]), ExecFailure> {
    let mut buf = vec![0u8; MAX_REQUEST + 1];
    let mut space = nix::cmsg_space!([RawFd; 3]);
    let (len, fds) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::ScmRights(got) = c {
                // SAFETY: the kernel made these descriptors for this process just now.
                #[allow(unsafe_code)]
                fds.extend(got.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
            }
        }
        (msg.bytes, fds)
    };
    if len > MAX_REQUEST {
        return Err(ExecFailure::Request("too long".into()));
    }
    let fds: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|v: Vec<OwnedFd>| ExecFailure::Request(format!("{} descriptors", v.len())))?;
    let req: ExecRequest =
        serde_json::from_slice(&buf[..len]).map_err(|e| ExecFailure::Request(e.to_string()))?;
    if req.v != VERSION {
        return Err(ExecFailure::Request(format!("version {}", req.v)));
    }
    if req.argv.first().is_none_or(String::is_empty) {
        return Err(ExecFailure::Request("no program".into()));
    }
    Ok((req, fds))
}

/// Passes the runtime's signals on to the process; when the runtime goes away first (its
/// connection closed), the process ends too: SIGTERM, then SIGKILL after a grace.
fn listen(fd: &OwnedFd, pid: i32, done: &std::sync::atomic::AtomicBool) {
    let running = || !done.load(std::sync::atomic::Ordering::SeqCst);
    let _ = setsockopt(
        fd,
        sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(0, 0),
    );
    let mut buf = [0u8; 256];
    loop {
        match recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Ok(ClientMessage::Signal { number }) = serde_json::from_slice(&buf[..n])
                    && let Ok(sig) = Signal::try_from(number)
                    && (STOPPING.contains(&sig) || sig == Signal::SIGKILL)
                    && running()
                {
                    let _ = kill(Pid::from_raw(pid), sig);
                }
            }
        }
    }
    if running() {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        for _ in 0..50 {
            std::thread::sleep(Duration::from_millis(100));
            if !running() {
                return;
            }
        }
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

fn say(fd: RawFd, m: &ServerMessage) {
    if let Ok(b) = serde_json::to_vec(m) {
        let _ = send(fd, &b, MsgFlags::MSG_NOSIGNAL);
    }
}
