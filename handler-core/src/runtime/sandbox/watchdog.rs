//! The launcher's watchdog: a small process (`handler-sandbox-podman watchdog`, hidden) each
//! `launch` starts before it creates anything, in a process group of its own, holding only the
//! read end of a pipe whose write end is the launcher's alone. When that pipe ends without the
//! launcher saying it cleaned up — the launcher was killed, SIGKILL included — the watchdog
//! removes the launcher's containers (by its labels) and its instance folder, with or without a
//! daemon around (decision 0038). The launcher's podman children die with it
//! (`podman::die_with_parent`), so nothing is created after the watchdog looked.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use handler_sandbox::facts::LauncherId;

use super::{launch, log};

/// Sent by the launcher: it owns the instance folder now.
const OWNS_FOLDER: u8 = b'D';
/// Sent by the launcher: it removed everything itself; the watchdog just ends.
const CLEANED_UP: u8 = b'X';

/// The launcher's end of the watchdog's pipe.
#[derive(Debug)]
pub struct Watchdog {
    pipe: std::fs::File,
}

impl Watchdog {
    /// Starts the watchdog of launcher `l` and its instance folder `dir`. Fails only when it
    /// cannot be started (the launch then does not go on: a launcher that could leave its
    /// containers behind is not started).
    pub fn start(l: &LauncherId, dir: &Path) -> std::io::Result<Watchdog> {
        // Close-on-exec: no podman child of the launcher holds the write end.
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
        let exe = std::env::current_exe()?;
        Command::new(exe)
            .args([
                "watchdog",
                "--pid",
                &l.pid.to_string(),
                "--start",
                &l.start.to_string(),
                "--boot",
                &l.boot,
                "--dir",
            ])
            .arg(dir)
            .stdin(Stdio::from(r))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // Not in the launcher's group: a signal to the group (a terminal's ^C, a kill of
            // the group) leaves the watchdog to clean up after the launcher.
            .process_group(0)
            .spawn()?;
        // The child is not waited for: it outlives the launcher by design.
        Ok(Watchdog {
            pipe: std::fs::File::from(w),
        })
    }

    fn say(&self, b: u8) {
        let _ = (&self.pipe).write_all(&[b]);
    }

    /// The instance folder exists and is this launcher's (made by it just now).
    pub fn owns_folder(&self) {
        self.say(OWNS_FOLDER);
    }

    /// Everything is removed: the watchdog ends without doing anything.
    pub fn cleaned_up(&self) {
        self.say(CLEANED_UP);
    }
}

use std::os::unix::process::CommandExt as _;

/// `watchdog`: waits for the pipe of launcher `pid` (started at `start` in boot `boot`) to end;
/// 0.
pub fn run(pid: u32, start: u64, boot: String, dir: PathBuf) -> i32 {
    let l = LauncherId { pid, start, boot };
    // Signals a terminal or a group kill sends must not stop it before it has cleaned up:
    // blocked (pending until it ends).
    let mut set = nix::sys::signal::SigSet::empty();
    for s in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGHUP,
        nix::sys::signal::Signal::SIGTERM,
    ] {
        set.add(s);
    }
    let _ = set.thread_block();
    let mut owns = false;
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                for &b in &buf[..n] {
                    match b {
                        CLEANED_UP => return 0,
                        OWNS_FOLDER => owns = true,
                        _ => {}
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    log(&format!(
        "watchdog: launcher {} ended without cleaning up: removing its containers",
        l.pid
    ));
    // Twice: a podman that was creating a container when the launcher died is killed with it,
    // but what it had written may show only after it is gone.
    launch::remove_containers_of(&l);
    std::thread::sleep(Duration::from_secs(2));
    launch::remove_containers_of(&l);
    // The folder the launcher made: removed when it names this launcher, or nothing yet (killed
    // between making it and writing its launcher file).
    let named = launch::instance_dir_launcher(&dir);
    let unnamed = !dir.join(launch::LAUNCHER_FILE).exists();
    if owns && dir.is_dir() && (named.as_ref() == Some(&l) || unnamed) {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            log(&format!("watchdog: cannot remove {}: {e}", dir.display()));
        }
    }
    0
}
