//! "Start from my own settings" (issue 30 item 4, decision 0154): an agent with `seedState` has
//! its state slots seeded from the person's own harness files, as its harness's descriptor
//! lists them (`stateSlots.<slot>.seed`). Once: at the launch that first finds a seed not yet
//! copied. A later change on the host is offered (`GET /v1/agents/{id}/seed` says `changed`)
//! and copied only when the person asks (`POST …/seed`). The pure decisions are
//! `handler_harness::seed` (what to copy, what a file becomes); here the host is read and the
//! slots written (the API's side is `services::seeds`).
//!
//! The person's files are read bounded and without blocking (a FIFO is refused); a link is
//! followed only as the seed's own source, never inside a seeded folder; a login or credential
//! file is never copied. A slot is the agent's to write, so it is written one name at a time
//! from a folder descriptor, each name `O_NOFOLLOW`, each file made anew and renamed into place
//! (a link the agent left at a target is replaced, never written through). The record of what
//! was copied is the daemon's own (`<state>/.seed.json`, beside the slots, never in one).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use handler_contracts::control::{SeedInfo, SeedStatus};
use handler_contracts::harness::{
    HarnessDescriptor, SlotKind, StateSeed, StateSlot, is_credential_name,
};
use handler_harness::seed::{Copied, Record, Stamp, Step, filter, plan};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::daemon::agentfs;
use crate::daemon::fsutil;
use crate::daemon::state::AppState;
use crate::daemon::store::StoredAgent;

/// A seeded file's bound (a settings file, an instructions file).
const MAX_FILE: u64 = 1 << 20;
/// A seeded folder's bounds: its files, their bytes, its depth.
const MAX_FILES: usize = 2000;
const MAX_BYTES: u64 = 32 << 20;
const MAX_DEPTH: usize = 16;
/// The record's name in a state folder (a slot's name is an identifier: never this).
const RECORD: &str = ".seed.json";

/// Why a seed was not copied (each names the path).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeedIoError {
    /// The host's file cannot be read as a seed (not a regular file, too large, unreadable).
    #[error("{path}: {why}")]
    Source {
        /// The host path.
        path: String,
        /// Why.
        why: String,
    },
    /// The slot cannot be written there (a link or a non-folder the agent left on the way).
    #[error("{path}: {why}")]
    Slot {
        /// The slot path.
        path: String,
        /// Why.
        why: String,
    },
    /// The harness's filter refused the file.
    #[error(transparent)]
    Filter(#[from] handler_harness::seed::SeedError),
}

fn source_err(path: &Path, why: impl std::fmt::Display) -> SeedIoError {
    SeedIoError::Source {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

fn slot_err(path: &Path, why: impl std::fmt::Display) -> SeedIoError {
    SeedIoError::Slot {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// One state of an agent: a harness with the account or provider it runs as.
pub(crate) struct StatePlace {
    /// `<harness>@<who>`.
    pub name: String,
    /// `<data>/agent-state/<agent>/<harness>@<who>`.
    pub base: PathBuf,
    /// Its harness.
    pub descriptor: HarnessDescriptor,
}

/// The host path of seed source `~/…` in `home`.
fn host_path(home: &Path, source: &str) -> PathBuf {
    home.join(source.trim_start_matches("~/").trim_end_matches('/'))
}

/// The state base of `agent`'s state with harness `d` as `who` (as `resolve::state_slots`).
pub(crate) fn state_base(
    data_dir: &Path,
    agent: &str,
    d: &HarnessDescriptor,
    who: &str,
) -> PathBuf {
    data_dir
        .join("agent-state")
        .join(agent)
        .join(format!("{}@{who}", d.name))
}

/// Opens the host's `path` for reading: the link at the seed's source followed, never waiting
/// (a FIFO), no controlling terminal.
fn open_host(path: &Path) -> std::io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(std::io::Error::from)
}

/// A regular file of the host's, at most [`MAX_FILE`] bytes.
fn read_host_file(fd: OwnedFd, path: &Path) -> Result<Vec<u8>, SeedIoError> {
    let st = rustix::fs::fstat(&fd).map_err(|e| source_err(path, e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(source_err(path, "not a regular file"));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| source_err(path, e))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(source_err(path, format!("larger than {MAX_FILE} bytes")));
    }
    Ok(bytes)
}

/// A seeded folder's files: (relative path, bytes), each regular, links and credential files
/// left out (logged), within the bounds (past one: refused whole, nothing copied).
fn read_host_dir(dir: OwnedFd, path: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>, SeedIoError> {
    let mut out = Vec::new();
    let mut total = 0u64;
    let mut todo = vec![(dir, PathBuf::new(), 0usize)];
    while let Some((fd, rel, depth)) = todo.pop() {
        let shown = path.join(&rel);
        let entries = agentfs::list(&fd, &shown).map_err(|e| source_err(&shown, e))?;
        for (name, kind) in entries {
            let here = rel.join(&name);
            match kind {
                FileType::Symlink => {
                    tracing::info!(path = %path.join(&here).display(), "seed: a link in a seeded folder is never followed: skipped");
                }
                _ if is_credential_name(&name) => {
                    tracing::info!(path = %path.join(&here).display(), "seed: a login or credential file is never seeded: skipped");
                }
                FileType::Directory if depth + 1 < MAX_DEPTH => {
                    if let Some(sub) = agentfs::open_dir_at(&fd, &name, &path.join(&here))
                        .map_err(|e| source_err(&path.join(&here), e))?
                    {
                        todo.push((sub, here, depth + 1));
                    }
                }
                FileType::Directory => {
                    return Err(source_err(path, format!("deeper than {MAX_DEPTH} folders")));
                }
                FileType::RegularFile => {
                    let bytes = agentfs::read_at(&fd, &name, &path.join(&here), MAX_FILE)
                        .map_err(|e| source_err(&path.join(&here), e))?
                        .unwrap_or_default();
                    total += bytes.len() as u64;
                    if out.len() >= MAX_FILES || total > MAX_BYTES {
                        return Err(source_err(
                            path,
                            format!("more than {MAX_FILES} files or {MAX_BYTES} bytes"),
                        ));
                    }
                    out.push((here, bytes));
                }
                _ => {
                    tracing::info!(path = %path.join(&here).display(), "seed: not a regular file: skipped");
                }
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// What the host's seed source is now (None: absent); a folder's size is its files' and its
/// time its newest file's, as [`read_host_dir`] would copy them.
fn stamp_of(home: &Path, seed: &StateSeed) -> Result<Option<Stamp>, SeedIoError> {
    let path = host_path(home, &seed.source);
    let fd = match open_host(&path) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(source_err(&path, e)),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| source_err(&path, e))?;
    let ns = |st: &rustix::fs::Stat| {
        i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec)
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Ok(Some(Stamp {
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns: ns(&st),
        })),
        FileType::Directory => {
            let files = read_host_dir(fd, &path)?;
            let mut newest = 0i128;
            for (rel, _) in &files {
                if let Ok(m) = std::fs::symlink_metadata(path.join(rel)) {
                    use std::os::unix::fs::MetadataExt as _;
                    newest = newest
                        .max(i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()));
                }
            }
            Ok(Some(Stamp {
                size: files.iter().map(|(_, b)| b.len() as u64).sum(),
                mtime_ns: newest.max(ns(&st)),
            }))
        }
        _ => Err(source_err(&path, "not a regular file or folder")),
    }
}

/// Opens (making what is missing, 0700) the folder `rel` in Handler's folder `base`, one name
/// at a time: a link or a non-folder the agent left on the way is refused.
fn make_dirs_in(base: &Path, rel: &Path) -> Result<OwnedFd, SeedIoError> {
    let mut dir = agentfs::open_base(base).map_err(|e| slot_err(base, e))?;
    let mut walked = base.to_path_buf();
    for c in rel.components() {
        let std::path::Component::Normal(n) = c else {
            return Err(slot_err(&base.join(rel), "not a plain relative path"));
        };
        let n = n.to_string_lossy().into_owned();
        walked.push(&n);
        let next = match agentfs::open_dir_at(&dir, &n, &walked) {
            Ok(Some(d)) => d,
            Ok(None) => {
                match rustix::fs::mkdirat(&dir, n.as_str(), Mode::from_raw_mode(0o700)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(slot_err(&walked, e)),
                }
                agentfs::open_dir_at(&dir, &n, &walked)
                    .map_err(|e| slot_err(&walked, e))?
                    .ok_or_else(|| slot_err(&walked, "vanished while made"))?
            }
            Err(e) => return Err(slot_err(&walked, e)),
        };
        dir = next;
    }
    Ok(dir)
}

/// Writes `bytes` as `name` in folder `dir`: a new file (0600, never through a link) renamed
/// over whatever is there (a link the agent left is replaced, not followed).
fn write_at(dir: impl AsFd, name: &str, bytes: &[u8], shown: &Path) -> Result<(), SeedIoError> {
    let dir = dir.as_fd();
    let tmp = format!(".handler-seed-{}-{name}", std::process::id());
    let _ = rustix::fs::unlinkat(dir, tmp.as_str(), rustix::fs::AtFlags::empty());
    let fd = rustix::fs::openat(
        dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| slot_err(shown, e))?;
    let mut f = std::fs::File::from(fd);
    let written = f.write_all(bytes).and_then(|()| f.sync_all());
    drop(f);
    if let Err(e) = written.map_err(|e| slot_err(shown, e)).and_then(|()| {
        rustix::fs::renameat(dir, tmp.as_str(), dir, name).map_err(|e| slot_err(shown, e))
    }) {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), rustix::fs::AtFlags::empty());
        return Err(e);
    }
    Ok(())
}

/// What a file slot starts with (as `resolve::state_slots`): its `initial`, else `{}` for JSON.
fn initial_of(s: &StateSlot) -> Vec<u8> {
    s.initial
        .clone()
        .unwrap_or_else(|| {
            if s.target.ends_with(".json") {
                "{}".into()
            } else {
                String::new()
            }
        })
        .into_bytes()
}

/// Copies one seed of slot `slot` (`s`) of state `base` from `home`.
pub(crate) fn copy_seed(
    home: &Path,
    base: &Path,
    (slot, s): (&str, &StateSlot),
    seed: &StateSeed,
) -> Result<(), SeedIoError> {
    let kind = s.kind;
    let path = host_path(home, &seed.source);
    let fd = open_host(&path).map_err(|e| source_err(&path, e))?;
    let is_dir = rustix::fs::fstat(&fd)
        .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory)
        .map_err(|e| source_err(&path, e))?;
    let source_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match kind {
        SlotKind::File => {
            // The slot is a file in Handler's folder; its content is the agent's.
            let bytes = read_host_file(fd, &path)?;
            // Not made yet (no session so far): over what a launch would make it with.
            let current = agentfs::read_in(base, Path::new(slot), MAX_FILE)
                .map_err(|e| slot_err(&base.join(slot), e))?
                .unwrap_or_else(|| initial_of(s));
            let out = filter(seed, kind, &bytes, Some(&current))?;
            let dir = agentfs::open_base(base).map_err(|e| slot_err(base, e))?;
            write_at(&dir, slot, &out, &base.join(slot))
        }
        SlotKind::Dir => {
            let slot_dir = base.join(slot);
            let target = PathBuf::from(seed.target.clone().unwrap_or(source_name));
            if is_dir {
                for (rel, bytes) in read_host_dir(fd, &path)? {
                    let at = target.join(&rel);
                    let parent = at.parent().map(Path::to_path_buf).unwrap_or_default();
                    let name = at.file_name().unwrap_or_default().to_string_lossy();
                    let dir = make_dirs_in(&slot_dir, &parent)?;
                    write_at(&dir, &name, &bytes, &slot_dir.join(&at))?;
                }
                Ok(())
            } else {
                let bytes = read_host_file(fd, &path)?;
                let out = filter(seed, kind, &bytes, None)?;
                let parent = target.parent().map(Path::to_path_buf).unwrap_or_default();
                let name = target.file_name().unwrap_or_default().to_string_lossy();
                let dir = make_dirs_in(&slot_dir, &parent)?;
                write_at(&dir, &name, &out, &slot_dir.join(&target))
            }
        }
    }
}

fn read_record(base: &Path) -> Record {
    fsutil::read_optional(&base.join(RECORD))
        .ok()
        .flatten()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Every seed of `d`'s slots: (slot, the slot, the seed).
fn seeds_of(d: &HarnessDescriptor) -> Vec<(&str, &StateSlot, &StateSeed)> {
    d.state_slots
        .iter()
        .filter(|(_, s)| !s.credential && !s.per_session)
        .flat_map(|(name, s)| s.seed.iter().map(move |x| (name.as_str(), s, x)))
        .collect()
}

/// Seeds state `place` from `home`: the seeds whose step is in `steps` copied (a failure is
/// logged with its path and the rest go on), the record written; answers each seed's status
/// after. `now` is the clock (RFC 3339).
pub(crate) fn seed_place(
    home: &Path,
    place: &StatePlace,
    steps: &[Step],
    now: &str,
) -> Vec<SeedInfo> {
    let seeds = seeds_of(&place.descriptor);
    let mut stamps = BTreeMap::new();
    for (_, _, s) in &seeds {
        match stamp_of(home, s) {
            Ok(st) => {
                stamps.insert(s.source.clone(), st);
            }
            Err(e) => {
                tracing::warn!(state = %place.name, error = %e, "seed: the host's file cannot be read: skipped");
            }
        }
    }
    let mut record = read_record(&place.base);
    let only: Vec<StateSeed> = seeds.iter().map(|(_, _, s)| (*s).clone()).collect();
    let planned = plan(&only, &stamps, &record);
    let mut changed_record = false;
    for ((slot, s, seed), (_, step)) in seeds.iter().zip(&planned) {
        if !steps.contains(step) {
            continue;
        }
        let Some(Some(stamp)) = stamps.get(&seed.source) else {
            continue;
        };
        match copy_seed(home, &place.base, (slot, s), seed) {
            Ok(()) => {
                tracing::info!(state = %place.name, slot, source = %seed.source, "seeded from the person's own settings");
                record.seeds.insert(
                    seed.source.clone(),
                    Copied {
                        stamp: Some(*stamp),
                        at: now.to_string(),
                    },
                );
                changed_record = true;
            }
            Err(e) => {
                tracing::warn!(state = %place.name, slot, error = %e, "seed not copied");
            }
        }
    }
    if changed_record
        && let Ok(bytes) = serde_json::to_vec_pretty(&record)
        && let Err(e) = fsutil::write_atomic(&place.base.join(RECORD), &bytes, 0o600)
    {
        tracing::warn!(state = %place.name, error = %e, "seed record not written");
    }
    let after = plan(&only, &stamps, &record);
    seeds
        .iter()
        .zip(after)
        .map(|((slot, _, seed), (_, step))| SeedInfo {
            state: place.name.clone(),
            slot: (*slot).to_string(),
            source: seed.source.clone(),
            status: match step {
                Step::Copy => SeedStatus::New,
                Step::Unchanged => SeedStatus::Seeded,
                Step::Changed => SeedStatus::Changed,
                Step::Absent => SeedStatus::Absent,
            },
            seeded_at: record.seeds.get(&seed.source).map(|c| c.at.clone()),
        })
        .collect()
}

/// At a launch of `agent` with harness `d` as `who` (its state folders made): the seeds never
/// copied are copied, when the agent asks to start from the person's own settings. A seed that
/// cannot be copied is logged and the launch goes on (its status stays `new`).
pub(crate) fn at_launch(app: &AppState, agent: &StoredAgent, d: &HarnessDescriptor, who: &str) {
    if !agent.options.seed_state || seeds_of(d).is_empty() {
        return;
    }
    let place = StatePlace {
        name: format!("{}@{who}", d.name),
        base: state_base(&app.config.data_dir, &agent.id, d, who),
        descriptor: d.clone(),
    };
    let _ = seed_place(
        &app.config.home,
        &place,
        &[Step::Copy],
        &fsutil::now_rfc3339(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(toml_text: &str) -> StateSlot {
        toml::from_str(toml_text).unwrap()
    }

    /// A folder slot's seeds (a file filtered, a folder): copied with the credential file and
    /// the link inside the person's folder left out; a link the agent left at a target is
    /// replaced, never written through; one on the way (a folder swapped for a link) refused.
    #[test]
    fn a_folder_slot_is_written_one_name_at_a_time_and_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let (home, base) = (t.path().join("home"), t.path().join("state"));
        std::fs::create_dir_all(home.join(".x/skills/one")).unwrap();
        std::fs::write(
            home.join(".x/settings.json"),
            r#"{"a": 1, "env": {"KEY": "v"}}"#,
        )
        .unwrap();
        std::fs::write(home.join(".x/skills/one/SKILL.md"), "one").unwrap();
        std::fs::write(home.join(".x/skills/.credentials.json"), "secret").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", home.join(".x/skills/passwd")).unwrap();
        let s = slot(
            "target = \"~/.x\"\nkind = \"dir\"\nrequired = true\n\
             [[seed]]\nsource = \"~/.x/settings.json\"\ndrop = [\"env\"]\n\
             [[seed]]\nsource = \"~/.x/skills\"\n",
        );
        let dir = base.join("config");
        std::fs::create_dir_all(&dir).unwrap();
        // The agent left a link where settings.json goes: replaced, /tmp's file untouched.
        let outside = t.path().join("outside.json");
        std::fs::write(&outside, "mine").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("settings.json")).unwrap();
        for seed in &s.seed {
            copy_seed(&home, &base, ("config", &s), seed).unwrap();
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine");
        let written = std::fs::read_to_string(dir.join("settings.json")).unwrap();
        assert!(
            written.contains("\"a\": 1") && !written.contains("KEY"),
            "{written}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("skills/one/SKILL.md")).unwrap(),
            "one"
        );
        assert!(!dir.join("skills/.credentials.json").exists());
        assert!(std::fs::symlink_metadata(dir.join("skills/passwd")).is_err());
        // The agent swaps skills/one for a link to a folder of the host's: refused, nothing there.
        let victim = t.path().join("victim");
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::remove_dir_all(dir.join("skills/one")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("skills/one")).unwrap();
        let e = copy_seed(&home, &base, ("config", &s), &s.seed[1]).unwrap_err();
        assert!(e.to_string().contains("skills/one"), "{e}");
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0);
    }

    /// A file slot's seed merged over what the slot holds (or its initial content when not made
    /// yet); a FIFO as the person's source refused without waiting.
    #[test]
    fn a_file_slot_keeps_its_own_keys_and_a_fifo_source_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let (home, base) = (t.path().join("home"), t.path().join("state"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(
            home.join(".x.json"),
            r#"{"mcpServers": {"m": {"command": "c", "env": {"T": "v"}}}, "oauthAccount": {}}"#,
        )
        .unwrap();
        let s = slot(
            "target = \"~/.x.json\"\nkind = \"file\"\nrequired = true\n\
             initial = '{\"onboarded\": true}'\n\
             [[seed]]\nsource = \"~/.x.json\"\nkeep = [\"mcpServers\"]\ndrop = [\"mcpServers.*.env\"]\n",
        );
        copy_seed(&home, &base, ("settings", &s), &s.seed[0]).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(base.join("settings")).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"onboarded": true, "mcpServers": {"m": {"command": "c"}}})
        );
        std::fs::remove_file(home.join(".x.json")).unwrap();
        nix::unistd::mkfifo(&home.join(".x.json"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = copy_seed(&home, &base, ("settings", &s), &s.seed[0]).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}
