//! `handler-sandbox-podman keep` (issue 28 item 6): runs `launch` (the SandboxSpec it was given
//! on fd 3 passed on) and holds its stdio, so the agent outlives the daemon that started it. It
//! serves one daemon at a time on a unix socket in the user's 0700 folder (peers of another uid
//! refused), keeps the agent's lines until a daemon acknowledges them (bounded: beyond, the agent
//! waits — nothing is dropped) and the launch's last stderr lines, and says what is still open
//! (`handler_sandbox::keep`). With no daemon for `timeout` seconds it stops the sandbox (SIGTERM
//! to launch, which removes everything, A4); `launch` gets SIGTERM too when the keeper dies
//! (PR_SET_PDEATHSIG), so nothing is ever left running unaccounted. Exits with launch's code.

use std::collections::VecDeque;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use handler_contracts::sandbox::exit;
use handler_sandbox::keep::{Down, Frames, Kept, MAX_SMALL_FRAME, Up};
use handler_sandbox::verbs::Keep;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::runtime::signals::{STOPPING, Signals};

/// How many stderr lines are kept while no daemon reads them.
const ERR_KEPT: usize = 2000;

/// `keep`: its exit code (launch's, or 66 when it cannot start).
pub fn run(k: &Keep) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            super::log(&format!("keep: setup failed: {e}"));
            return exit::SETUP_FAILED;
        }
    };
    rt.block_on(keep(k))
}

/// Binds `path` for this user only: its folder must be this user's and closed to others; a
/// socket left there by an earlier keeper is replaced, anything else refused.
fn bind(path: &Path) -> Result<UnixListener, String> {
    let uid = nix::unistd::getuid().as_raw();
    let parent = path.parent().ok_or("the socket has no folder")?;
    let m = std::fs::symlink_metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    if !m.is_dir() || m.uid() != uid || m.mode() & 0o077 != 0 {
        return Err(format!(
            "{}: the socket's folder must be a folder of this user closed to others (0700)",
            parent.display()
        ));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(_) => return Err(format!("{}: exists and is not a socket", path.display())),
        Err(_) => {}
    }
    let l = UnixListener::bind(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(l)
}

/// `launch` (or `machine exec ID`, a machine's session) with this process's fd 3, its stdio
/// piped; SIGTERM when the keeper dies.
fn spawn_launch(machine: Option<&str>) -> std::io::Result<tokio::process::Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    match machine {
        Some(id) => cmd.args(
            handler_sandbox::verbs::Verb::Machine(handler_sandbox::verbs::MachineVerb::Exec {
                id: id.to_string(),
            })
            .to_args(),
        ),
        None => cmd.arg("launch"),
    };
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs between fork and exec and only makes two system calls (prctl,
    // getppid), both async-signal-safe; it allocates nothing.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    // The spec's descriptor is launch's now: ours closed, so nothing else holds it.
    let _ = nix::unistd::close(3);
    Ok(child)
}

/// What the keeper's loop hears from its tasks.
enum Event {
    /// A stderr piece: whole or not, its bytes (None: stderr ended).
    Err(Option<(bool, Vec<u8>)>),
    /// A frame from connection `gen` (None: it closed or sent garbage).
    Down(u64, Option<Down>),
}

/// The connected daemon: its writer's queue.
struct Conn {
    generation: u64,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    /// It said hello: lines go to it.
    ready: bool,
}

/// The keeper's state, owned by its loop.
struct State {
    kept: Kept,
    errs: VecDeque<(bool, Vec<u8>)>,
    dropped_err: u64,
    conn: Option<Conn>,
    alone_since: tokio::time::Instant,
    too_big: bool,
    launch_pid: u32,
    to_agent: mpsc::UnboundedSender<Vec<u8>>,
}

impl State {
    /// To the daemon, once it said hello.
    fn send(&self, up: &Up) -> bool {
        match self.conn.as_ref().filter(|c| c.ready) {
            Some(c) => c.tx.send(up.encode()).is_ok(),
            None => false,
        }
    }

    /// The agent's output: a line (kept, and sent), its end, or a line over the bound.
    /// Whether the output goes on.
    fn out(&mut self, o: Result<Option<Vec<u8>>, ()>) -> bool {
        match o {
            Ok(Some(line)) => {
                let up = self.kept.agent_line(line);
                self.send(&up);
                true
            }
            Ok(None) => false,
            Err(()) => {
                self.too_big = true;
                self.send(&Up::TooBig);
                false
            }
        }
    }

    /// A piece of the launch's stderr: sent, or kept (the last [`ERR_KEPT`]).
    fn err(&mut self, whole: bool, line: Vec<u8>) {
        if self.conn.as_ref().is_some_and(|c| c.ready) {
            self.send(&Up::Err { whole, line });
            return;
        }
        self.errs.push_back((whole, line));
        if self.errs.len() > ERR_KEPT {
            self.errs.pop_front();
            self.dropped_err += 1;
        }
    }

    /// A frame of the connected daemon (None: it went away).
    fn down(&mut self, d: Option<Down>) {
        match d {
            Some(Down::Hello { from }) => {
                let (w, lines) = self.kept.hello(from, self.launch_pid, self.dropped_err);
                self.dropped_err = 0;
                let Some(c) = self.conn.as_mut() else { return };
                let _ = c.tx.send(Up::Welcome(w).encode());
                for l in lines {
                    let _ = c.tx.send(l.encode());
                }
                if self.too_big {
                    let _ = c.tx.send(Up::TooBig.encode());
                }
                for (whole, line) in self.errs.drain(..) {
                    let _ = c.tx.send(Up::Err { whole, line }.encode());
                }
                c.ready = true;
            }
            Some(Down::In(line)) => {
                self.kept.daemon_line(&line);
                let _ = self.to_agent.send(line);
            }
            Some(Down::Ack(n)) => self.kept.ack(n),
            None => {
                self.conn = None;
                self.alone_since = tokio::time::Instant::now();
            }
        }
    }
}

/// Reads the agent's output one bounded line at a time into `tx` (Err: a line over `max`).
fn read_output(
    stdout: tokio::process::ChildStdout,
    max: usize,
) -> mpsc::Receiver<Result<Option<Vec<u8>>, ()>> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        let mut r = BufReader::with_capacity(256 * 1024, stdout);
        loop {
            let item = match crate::lines::read_line(&mut r, max).await {
                Ok(Some(l)) => Ok(Some(l)),
                Ok(None) | Err(false) => Ok(None),
                Err(true) => Err(()),
            };
            let last = !matches!(item, Ok(Some(_)));
            if tx.send(item).await.is_err() || last {
                return;
            }
        }
    });
    rx
}

/// Reads the launch's stderr in bounded pieces into `events`, then says it ended.
fn read_errors(stderr: tokio::process::ChildStderr, events: mpsc::Sender<Event>) {
    tokio::spawn(async move {
        let (ptx, mut prx) = mpsc::unbounded_channel();
        let reader = crate::lines::for_each_piece(stderr, crate::lines::MAX_LINE + 64, move |p| {
            let _ = ptx.send((p.whole(), p.bytes.to_vec()));
        });
        let forward = async {
            while let Some(p) = prx.recv().await {
                if events.send(Event::Err(Some(p))).await.is_err() {
                    return;
                }
            }
        };
        tokio::join!(reader, forward);
        let _ = events.send(Event::Err(None)).await;
    });
}

/// Writes the lines it is given to the agent's stdin, in order.
fn write_input(mut stdin: tokio::process::ChildStdin) -> mpsc::UnboundedSender<Vec<u8>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(mut line) = rx.recv().await {
            line.push(b'\n');
            if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                return;
            }
        }
    });
    tx
}

fn code_of(st: std::io::Result<std::process::ExitStatus>) -> i32 {
    st.map_or(exit::SETUP_FAILED, crate::runtime::signals::exit_code)
}

async fn keep(k: &Keep) -> i32 {
    let listener = match bind(&k.socket) {
        Ok(l) => l,
        Err(e) => {
            super::log(&format!("keep: setup failed: {e}"));
            return exit::SETUP_FAILED;
        }
    };
    let Ok(mut signals) = Signals::new(&STOPPING) else {
        super::log("keep: setup failed: cannot handle signals");
        return exit::SETUP_FAILED;
    };
    let mut child = match spawn_launch(k.machine.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            super::log(&format!("keep: cannot start launch: {e}"));
            let _ = std::fs::remove_file(&k.socket);
            return exit::SETUP_FAILED;
        }
    };
    let (Some(stdout), Some(stderr), Some(stdin)) =
        (child.stdout.take(), child.stderr.take(), child.stdin.take())
    else {
        return exit::SETUP_FAILED;
    };
    let (ev_tx, mut ev) = mpsc::channel::<Event>(64);
    let mut out_rx = read_output(stdout, k.max_line);
    read_errors(stderr, ev_tx.clone());
    let mut st = State {
        kept: Kept::new(),
        errs: VecDeque::new(),
        dropped_err: 0,
        conn: None,
        alone_since: tokio::time::Instant::now(),
        too_big: false,
        launch_pid: child.id().unwrap_or(0),
        to_agent: write_input(stdin),
    };
    let uid = nix::unistd::getuid().as_raw();
    let timeout = Duration::from_secs(k.timeout);
    let mut generation = 0u64;
    let (mut out_done, mut err_done, mut code, mut stopping) = (false, false, None, false);
    while !(out_done && err_done && code.is_some()) {
        tokio::select! {
            o = out_rx.recv(), if !out_done && st.kept.bytes() < k.buffer => {
                out_done = !st.out(o.unwrap_or(Ok(None)));
            }
            Some(e) = ev.recv() => match e {
                Event::Err(Some((whole, line))) => st.err(whole, line),
                Event::Err(None) => err_done = true,
                Event::Down(g, d) if st.conn.as_ref().is_some_and(|c| c.generation == g) => st.down(d),
                Event::Down(..) => {}
            },
            a = listener.accept() => {
                let Ok((stream, _)) = a else { continue };
                if stream.peer_cred().map(|c| c.uid()).ok() != Some(uid) {
                    continue;
                }
                generation += 1;
                // A new daemon replaces the one before (it died, or was replaced).
                st.conn = Some(serve(stream, generation, ev_tx.clone()));
            }
            s = child.wait(), if code.is_none() => code = Some(code_of(s)),
            _ = signals.recv() => stop(st.launch_pid, &mut stopping),
            () = tokio::time::sleep_until(st.alone_since + timeout), if st.conn.is_none() && !stopping && code.is_none() => {
                super::log(&format!("keep: no daemon for {} s: stopping the sandbox", k.timeout));
                stop(st.launch_pid, &mut stopping);
            }
        }
    }
    let code = code.unwrap_or(exit::SETUP_FAILED);
    if st.send(&Up::Exit(code)) {
        st.conn = None;
        // What is queued reaches the daemon (a short wait: it reads as it goes).
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let _ = std::fs::remove_file(&k.socket);
    code
}

/// SIGTERM to launch, once.
fn stop(launch_pid: u32, stopping: &mut bool) {
    if *stopping {
        return;
    }
    *stopping = true;
    if let Ok(pid) = i32::try_from(launch_pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// A daemon's connection: its frames to the loop (tagged `generation`), the loop's to it.
fn serve(stream: UnixStream, generation: u64, events: mpsc::Sender<Event>) -> Conn {
    let (mut r, mut w) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if w.write_all(&b).await.is_err() {
                return;
            }
        }
    });
    tokio::spawn(async move {
        let mut frames = Frames::new(MAX_SMALL_FRAME.max(64 << 20));
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            loop {
                match frames.next_down() {
                    Ok(Some(d)) => {
                        if events.send(Event::Down(generation, Some(d))).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(_) => {
                        let _ = events.send(Event::Down(generation, None)).await;
                        return;
                    }
                }
            }
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = events.send(Event::Down(generation, None)).await;
                    return;
                }
                Ok(n) => frames.push(&buf[..n]),
            }
        }
    });
    Conn {
        generation,
        tx,
        ready: false,
    }
}
