//! Reading the host-side secret references (E2) and a provider's `{ file }` config files (E)
//! safely: a `{ file }` only from a regular file and at most 1 MiB (a device such as `/dev/zero`, a FIFO or a folder is refused, whatever
//! `stat` says its size is); a `{ command }` with a time limit, its output bounded, killed when
//! late. Errors name the reference (the path, the program), never what it printed.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The largest `{ file }` a secret is read from.
pub(crate) const FILE_MAX_BYTES: u64 = 1024 * 1024;
/// The most of a `{ command }`'s output that is read.
pub(crate) const COMMAND_MAX_BYTES: u64 = 1024 * 1024;
/// How long a `{ command }` may run by default (`HANDLER_SECRET_COMMAND_TIMEOUT`, seconds).
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// A reference that gave no value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretRefError {
    #[error("file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("file {path}: not a regular file")]
    NotRegular { path: String },
    #[error("file {path}: larger than 1 MiB")]
    TooLarge { path: String },
    #[error("command {program:?}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("command {program:?}: an empty command")]
    Empty { program: String },
    #[error("command {program:?} failed ({status})")]
    Failed { program: String, status: String },
    #[error("command {program:?} did not finish within {secs} s: killed")]
    Timeout { program: String, secs: u64 },
    #[error("command {program:?}: printed more than 1 MiB")]
    TooMuchOutput { program: String },
}

/// The first line of a regular file of at most 1 MiB, trimmed.
pub(crate) fn read_file(path: &str) -> Result<String, SecretRefError> {
    Ok(first_line(&read_small_file(path)?))
}

/// A regular file opened for reading, without waiting on a FIFO or a terminal.
fn open_regular(path: &str) -> Result<std::fs::File, SecretRefError> {
    let io = |source| SecretRefError::Io {
        path: path.to_string(),
        source,
    };
    // O_NONBLOCK: opening a FIFO does not wait for a writer (it is refused just after).
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    if !f.metadata().map_err(io)?.file_type().is_file() {
        return Err(SecretRefError::NotRegular {
            path: path.to_string(),
        });
    }
    Ok(f)
}

/// The whole of a regular file of at most 1 MiB (a provider's `{ file }` config file, E): the
/// bytes read are bounded whatever `stat` says.
pub(crate) fn read_small_file(path: &str) -> Result<Vec<u8>, SecretRefError> {
    let f = open_regular(path)?;
    let mut bytes = Vec::new();
    f.take(FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| SecretRefError::Io {
            path: path.to_string(),
            source,
        })?;
    if bytes.len() as u64 > FILE_MAX_BYTES {
        return Err(SecretRefError::TooLarge {
            path: path.to_string(),
        });
    }
    Ok(bytes)
}

/// Whether `path` is now a regular file of at most 1 MiB, read from nowhere (a save's check:
/// `/dev/zero`, a FIFO or a folder refused, E1).
pub(crate) fn check_small_file(path: &str) -> Result<(), SecretRefError> {
    let f = open_regular(path)?;
    let len = f
        .metadata()
        .map_err(|source| SecretRefError::Io {
            path: path.to_string(),
            source,
        })?
        .len();
    if len > FILE_MAX_BYTES {
        return Err(SecretRefError::TooLarge {
            path: path.to_string(),
        });
    }
    Ok(())
}

/// The first line a command prints, trimmed; killed after `timeout`. Its stdin is empty and
/// its stderr dropped (it might print the secret there too).
pub(crate) fn run_command(argv: &[String], timeout: Duration) -> Result<String, SecretRefError> {
    let Some(program) = argv.first().filter(|p| !p.is_empty()) else {
        return Err(SecretRefError::Empty {
            program: String::new(),
        });
    };
    let mut child = Command::new(program)
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|source| SecretRefError::Spawn {
            program: program.clone(),
            source,
        })?;
    let stdout = child.stdout.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stdout {
            let _ = s.take(COMMAND_MAX_BYTES + 1).read_to_end(&mut out);
        }
        let _ = tx.send(out);
    });
    let deadline = Instant::now() + timeout;
    let late = |child: &mut std::process::Child| {
        // The whole group: what the command started must not keep the secret's pipe open.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = child.kill();
        let _ = child.wait();
        SecretRefError::Timeout {
            program: program.clone(),
            secs: timeout.as_secs(),
        }
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() >= deadline => return Err(late(&mut child)),
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(source) => {
                return Err(SecretRefError::Spawn {
                    program: program.clone(),
                    source,
                });
            }
        }
    };
    let out = rx
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .map_err(|_| late(&mut child))?;
    if !status.success() {
        return Err(SecretRefError::Failed {
            program: program.clone(),
            status: status.to_string(),
        });
    }
    if out.len() as u64 > COMMAND_MAX_BYTES {
        return Err(SecretRefError::TooMuchOutput {
            program: program.clone(),
        });
    }
    Ok(first_line(&out))
}

fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(std::string::ToString::to_string).collect()
    }

    #[test]
    fn a_file_is_regular_and_small() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "tok-1\nsecond\n").unwrap();
        assert_eq!(read_file(p.to_str().unwrap()).unwrap(), "tok-1");
        std::fs::write(&p, vec![b'a'; FILE_MAX_BYTES as usize]).unwrap();
        assert!(read_file(p.to_str().unwrap()).is_ok());
        std::fs::write(&p, vec![b'a'; FILE_MAX_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            read_file(p.to_str().unwrap()),
            Err(SecretRefError::TooLarge { .. })
        ));
        for dev in ["/dev/zero", "/dev/null", "/"] {
            assert!(
                matches!(read_file(dev), Err(SecretRefError::NotRegular { .. })),
                "{dev}"
            );
        }
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(matches!(
            read_file(fifo.to_str().unwrap()),
            Err(SecretRefError::NotRegular { .. })
        ));
    }

    /// A provider's `{ file }` (issue 27): whole, bounded, regular only, at save and at start.
    #[test]
    fn a_config_file_is_regular_and_small_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c");
        std::fs::write(&p, "line 1\nline 2\n").unwrap();
        let path = p.to_str().unwrap();
        assert_eq!(read_small_file(path).unwrap(), b"line 1\nline 2\n");
        check_small_file(path).unwrap();
        std::fs::write(&p, vec![b'a'; FILE_MAX_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            read_small_file(path),
            Err(SecretRefError::TooLarge { .. })
        ));
        assert!(matches!(
            check_small_file(path),
            Err(SecretRefError::TooLarge { .. })
        ));
        for dev in ["/dev/zero", "/dev/urandom", "/"] {
            assert!(
                matches!(read_small_file(dev), Err(SecretRefError::NotRegular { .. })),
                "{dev}"
            );
            assert!(
                matches!(
                    check_small_file(dev),
                    Err(SecretRefError::NotRegular { .. })
                ),
                "{dev}"
            );
        }
        assert!(matches!(
            check_small_file(dir.path().join("none").to_str().unwrap()),
            Err(SecretRefError::Io { .. })
        ));
    }

    #[test]
    fn a_command_has_a_time_limit_and_its_output_stays_out_of_errors() {
        assert_eq!(
            run_command(&argv(&["/bin/echo", "tok-2"]), Duration::from_secs(5)).unwrap(),
            "tok-2"
        );
        let started = Instant::now();
        let e = run_command(&argv(&["/bin/sleep", "30"]), Duration::from_millis(300)).unwrap_err();
        assert!(matches!(e, SecretRefError::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // A child keeping the pipe open after the command exits is not waited for past the limit.
        let started = Instant::now();
        let e = run_command(
            &argv(&["/bin/sh", "-c", "echo x; sleep 30 &"]),
            Duration::from_millis(500),
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{e:?}");
        let e = run_command(
            &argv(&["/bin/sh", "-c", "echo leaked-value; exit 3"]),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(!e.to_string().contains("leaked-value"), "{e}");
        assert!(matches!(
            run_command(&[], Duration::from_secs(1)),
            Err(SecretRefError::Empty { .. })
        ));
        assert!(matches!(
            run_command(&argv(&[""]), Duration::from_secs(1)),
            Err(SecretRefError::Empty { .. })
        ));
    }
}
