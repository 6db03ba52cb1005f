//! Pure: when automatic image updates run next (D.4) — a function of the last run, the first
//! start the period counts from, the setting, the version that last ran them and this one. Off:
//! never; a Handler upgrade (a recorded version that differs): now; else a period (a day or a
//! week) after the last run, or after the first start when none ran yet.

use std::time::{Duration, SystemTime};

use handler_contracts::control::UpdateSchedule;

/// What the decision reads.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The setting.
    pub schedule: UpdateSchedule,
    /// When handlerd first started (the period counts from it).
    pub first_start: SystemTime,
    /// When the last run started.
    pub last_run: Option<SystemTime>,
    /// The Handler version that last ran them (or first started).
    pub last_version: Option<&'a str>,
    /// This handlerd's version.
    pub version: &'a str,
    /// Now.
    pub now: SystemTime,
}

/// The schedule's period.
pub fn period(s: UpdateSchedule) -> Option<Duration> {
    match s {
        UpdateSchedule::Off => None,
        UpdateSchedule::Daily => Some(Duration::from_secs(24 * 3600)),
        UpdateSchedule::Weekly => Some(Duration::from_secs(7 * 24 * 3600)),
    }
}

/// When the next run starts (none: off).
pub fn next_run(f: &Facts<'_>) -> Option<SystemTime> {
    let p = period(f.schedule)?;
    if f.last_version.is_some_and(|v| v != f.version) {
        return Some(f.now);
    }
    Some(f.last_run.unwrap_or(f.first_start) + p)
}

/// Whether a run is due now.
pub fn due(f: &Facts<'_>) -> bool {
    next_run(f).is_some_and(|t| t <= f.now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 24 * 3600;

    fn at(days: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + days * DAY)
    }

    fn facts(schedule: UpdateSchedule, last_run: Option<u64>, now: u64) -> Facts<'static> {
        Facts {
            schedule,
            first_start: at(0),
            last_run: last_run.map(at),
            last_version: Some("0.1.0"),
            version: "0.1.0",
            now: at(now),
        }
    }

    #[test]
    fn weekly_counts_from_the_first_start_then_from_the_last_run() {
        let f = facts(UpdateSchedule::Weekly, None, 6);
        assert_eq!(next_run(&f), Some(at(7)));
        assert!(!due(&f));
        assert!(due(&facts(UpdateSchedule::Weekly, None, 7)));
        let f = facts(UpdateSchedule::Weekly, Some(8), 14);
        assert_eq!(next_run(&f), Some(at(15)));
        assert!(!due(&f));
        assert!(due(&facts(UpdateSchedule::Daily, Some(8), 9)));
        assert!(!due(&facts(UpdateSchedule::Daily, Some(8), 8)));
    }

    #[test]
    fn off_never_runs_and_an_upgrade_runs_now() {
        let mut f = facts(UpdateSchedule::Off, None, 100);
        f.last_version = Some("0.0.9");
        assert_eq!(next_run(&f), None);
        assert!(!due(&f));
        let mut f = facts(UpdateSchedule::Weekly, Some(1), 2);
        f.last_version = Some("0.0.9");
        assert_eq!(next_run(&f), Some(at(2)));
        assert!(due(&f));
        f.last_version = None;
        assert!(!due(&f), "no version recorded is not an upgrade");
    }
}
