//! The runtime's one way to wait for a signal: `Signals` listens for a set of them (SIGTERM,
//! SIGINT, SIGHUP…) and says which came, as the number that makes the exit code 128 + n. Every
//! verb that stops on a signal (launch, attach, the proxy) uses it instead of its own handlers.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// A process's end as an exit code: its own code, or 128 + the signal that ended it.
pub fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// SIGTERM, SIGINT and SIGHUP: what ends a launcher (a kill, a terminal's ^C, a closed terminal).
pub const STOPPING: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Listeners for some signals, from the moment they are made.
#[derive(Debug)]
pub struct Signals {
    listeners: Vec<(i32, Signal)>,
}

impl Signals {
    /// Listens for each of `numbers` (e.g. [`STOPPING`]); fails when one cannot be handled.
    pub fn new(numbers: &[i32]) -> std::io::Result<Signals> {
        let listeners = numbers
            .iter()
            .map(|&n| signal(SignalKind::from_raw(n)).map(|s| (n, s)))
            .collect::<std::io::Result<_>>()?;
        Ok(Signals { listeners })
    }

    /// The next signal that comes (its number); pending forever without listeners.
    pub async fn recv(&mut self) -> i32 {
        std::future::poll_fn(|cx| {
            for (n, s) in &mut self.listeners {
                if s.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*n);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_signal_that_came_is_named() {
        let mut s = Signals::new(&[libc::SIGUSR1, libc::SIGUSR2]).unwrap();
        // This process handles it (tokio's handler is installed): it is not killed.
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGUSR2).unwrap();
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.recv())
            .await
            .unwrap();
        assert_eq!(n, libc::SIGUSR2);
    }
}
