//! Pure readings of host files and pure decisions around them: a process's start time from
//! `/proc/<pid>/stat`, subordinate id ranges from /etc/subuid, whether a launcher is still alive,
//! which cache folders a sandbox holds, and the RuntimeCheck verdict (A.8).

use handler_contracts::sandbox::{RuntimeCheck, RuntimeCheckItem};

use crate::facts::LauncherId;
use crate::validate::is_within;

/// Field 22 (starttime) of a `/proc/<pid>/stat` line; the command name may hold spaces and
/// parentheses, so fields are counted after its last `)`.
pub fn stat_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After ")": field 3 (state) is the first; starttime is field 22, the 20th from there.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The size of the first subordinate range of `user` (name or uid) in an /etc/subuid or
/// /etc/subgid text.
pub fn subid_count(text: &str, user: &str, id: u32) -> Option<u32> {
    let id = id.to_string();
    text.lines().find_map(|l| {
        let mut f = l.trim().split(':');
        let who = f.next()?;
        let _start: u64 = f.next()?.parse().ok()?;
        let count: u32 = f.next()?.parse().ok()?;
        (who == user || who == id).then_some(count)
    })
}

/// The host's own IPv4 addresses in a `/proc/net/fib_trie` text (for the egress proxy's
/// DNS-rebinding guard): each `|-- a.b.c.d` line followed by a `/32 host LOCAL` line, once.
pub fn fib_trie_local_addresses(text: &str) -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for w in lines.windows(2) {
        if w[1].contains("/32 host LOCAL")
            && let Some(ip) = w[0]
                .trim()
                .strip_prefix("|-- ")
                .and_then(|s| s.parse().ok())
            && !out.contains(&ip)
        {
            out.push(ip);
        }
    }
    out
}

/// Whether the launcher named by a resource's labels is still the live process: same boot, and
/// the pid's current start time equals the recorded one. `observed_start`: the start time of
/// that pid now (None: no such process); `boot`: this boot's id.
pub fn launcher_alive(recorded: &LauncherId, observed_start: Option<u64>, boot: &str) -> bool {
    recorded.boot == boot && observed_start == Some(recorded.start)
}

/// Reads a launcher id back from labels' text values; None when any is missing or malformed
/// (such a resource is not a launcher's and sweep leaves it alone).
pub fn launcher_from_labels(
    pid: Option<&str>,
    start: Option<&str>,
    boot: Option<&str>,
) -> Option<LauncherId> {
    Some(LauncherId {
        pid: pid?.parse().ok()?,
        start: start?.parse().ok()?,
        boot: boot?.to_string(),
    })
}

/// Whether a container mounting `mount_source` holds the cache folder `cache` (A.9): it mounts
/// the folder itself, one inside it, or one around it.
pub fn holds_cache(mount_source: &str, cache: &str) -> bool {
    is_within(mount_source, cache) || is_within(cache, mount_source)
}

/// The RuntimeCheck (A.8) of these items: ok when every required item is.
pub fn runtime_check(runtime: String, items: Vec<RuntimeCheckItem>) -> RuntimeCheck {
    let ok = items.iter().all(|i| i.ok || !i.required);
    RuntimeCheck { runtime, ok, items }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_addresses_of_a_fib_trie() {
        let t = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 10.0.0.5\n        /32 host LOCAL\n     |-- 10.0.0.255\n        /32 link BROADCAST\n     |-- 127.0.0.1\n        /32 host LOCAL\nLocal:\n     |-- 10.0.0.5\n        /32 host LOCAL\n";
        let want: Vec<std::net::IpAddr> =
            vec!["10.0.0.5".parse().unwrap(), "127.0.0.1".parse().unwrap()];
        assert_eq!(fib_trie_local_addresses(t), want);
        assert!(fib_trie_local_addresses("").is_empty());
    }
}
