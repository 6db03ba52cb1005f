//! Installing addons (G.5): a source (`catalog:<name>`, an absolute folder, or an `https://`
//! `.tar.gz` fetched like a skill's archive) read whole into memory under the archive limits
//! (≤ 32 MiB, ≤ 2000 files, no link out, no device, no absolute path), named by its digest,
//! staged at `<state>/addon-staging/<digest>/<name>/` (stale stagings removed) and validated as
//! G.1; installed into `$HANDLER_ADDONS_DIR/<name>/` only when it still has the digest the
//! preview showed, and recorded in `<config>/addons.lock.toml`. Only what Handler installed is
//! replaced or removed; removing it removes its image too.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use handler_contracts::control::{
    AddonCatalogEntry, AddonInfo, AddonInstallRequest, AddonInstalled, AddonPreview,
    AddonPreviewRequest, AddonReplaces, AddonSlotInfo, BuildRequest, BuildState,
};
use handler_contracts::skill_archive::{
    ArchiveError, Entry, EntryKind, MAX_BYTES, MAX_FILES, check,
};
use sha2::{Digest, Sha256};
use toml_edit::{DocumentMut, Item, Table};

use crate::daemon::config::DaemonConfig;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::addons::{AddonSet, LoadedAddon, read_addon};
use crate::daemon::store::catalog::valid_name;

/// One entry of a source, its path relative to the addon's top (`/`-separated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceEntry {
    /// A folder.
    Dir(String),
    /// A regular file: its bytes and executable bit.
    File {
        /// Its path.
        path: String,
        /// Its content.
        bytes: Vec<u8>,
        /// Whether it is executable.
        exec: bool,
    },
    /// A symbolic link and its target (relative, staying inside the source).
    Link {
        /// Its path.
        path: String,
        /// Where it points.
        target: String,
    },
}

impl SourceEntry {
    fn path(&self) -> &str {
        match self {
            SourceEntry::Dir(p)
            | SourceEntry::File { path: p, .. }
            | SourceEntry::Link { path: p, .. } => p,
        }
    }
}

/// The digest of a source's content (G.5): every file's path, executable bit and bytes, every
/// link's target, in path order; folders add nothing of their own. 64 hex digits.
pub fn digest(entries: &[SourceEntry]) -> String {
    let mut sorted: Vec<&SourceEntry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path().cmp(b.path()));
    let mut h = Sha256::new();
    for e in sorted {
        match e {
            SourceEntry::Dir(_) => {}
            SourceEntry::File { path, bytes, exec } => {
                h.update(b"f\0");
                h.update(path.as_bytes());
                h.update([0, u8::from(*exec)]);
                h.update((bytes.len() as u64).to_be_bytes());
                h.update(bytes);
            }
            SourceEntry::Link { path, target } => {
                h.update(b"l\0");
                h.update(path.as_bytes());
                h.update([0]);
                h.update((target.len() as u64).to_be_bytes());
                h.update(target.as_bytes());
            }
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether a link at `path` (relative to the top) pointing at `target` stays inside the top.
pub fn link_stays_inside(path: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') {
        return false;
    }
    let mut depth: Vec<&str> = path.split('/').collect();
    depth.pop();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return false;
                }
            }
            p => depth.push(p),
        }
    }
    true
}

fn refused(detail: impl std::fmt::Display) -> ApiError {
    ApiError::unprocessable("source refused", detail.to_string())
}

struct Walk {
    out: Vec<SourceEntry>,
    bytes: u64,
}

fn walk(root: &Path, rel: &str, w: &mut Walk) -> ApiResult<()> {
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    let rd = std::fs::read_dir(&dir).map_err(|e| refused(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
    names.sort();
    for n in names {
        let name = n
            .to_str()
            .ok_or_else(|| refused(format!("{rel}: a name that is not UTF-8")))?;
        let path = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        if w.out.len() >= MAX_FILES {
            return Err(refused(format!("more than {MAX_FILES} files")));
        }
        let abs = root.join(&path);
        let m = std::fs::symlink_metadata(&abs).map_err(|e| refused(format!("{path}: {e}")))?;
        let t = m.file_type();
        if t.is_symlink() {
            let target = std::fs::read_link(&abs).map_err(|e| refused(format!("{path}: {e}")))?;
            let target = target.to_str().unwrap_or_default().to_string();
            if !link_stays_inside(&path, &target) {
                return Err(refused(format!(
                    "{path}: a link out of the addon ({target})"
                )));
            }
            w.out.push(SourceEntry::Link { path, target });
        } else if t.is_dir() {
            w.out.push(SourceEntry::Dir(path.clone()));
            walk(root, &path, w)?;
        } else if t.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let mut bytes = Vec::new();
            std::fs::File::open(&abs)
                .and_then(|f| f.take(MAX_BYTES + 1 - w.bytes).read_to_end(&mut bytes))
                .map_err(|e| refused(format!("{path}: {e}")))?;
            w.bytes += bytes.len() as u64;
            if w.bytes > MAX_BYTES {
                return Err(refused("more than 32 MiB"));
            }
            let exec = m.permissions().mode() & 0o111 != 0;
            w.out.push(SourceEntry::File { path, bytes, exec });
        } else {
            return Err(refused(format!("{path}: a device, socket or FIFO")));
        }
    }
    Ok(())
}

/// The entries below the addon's top: the source's own top when it has `addon.toml`, else its
/// only folder's (a forge's archive of a repository).
pub fn addon_top(entries: Vec<SourceEntry>) -> Result<Vec<SourceEntry>, String> {
    let has = |e: &SourceEntry, p: &str| matches!(e, SourceEntry::File { path, .. } if path == p);
    if entries.iter().any(|e| has(e, "addon.toml")) {
        return Ok(entries);
    }
    let tops: BTreeSet<&str> = entries
        .iter()
        .filter_map(|e| e.path().split('/').next())
        .collect();
    let tops: Vec<&str> = tops.into_iter().collect();
    let [only] = tops.as_slice() else {
        return Err("no addon.toml at its top or in its only folder".into());
    };
    let prefix = format!("{only}/");
    if !entries
        .iter()
        .any(|e| has(e, &format!("{prefix}addon.toml")))
    {
        return Err(format!("no addon.toml at its top or in {only}/"));
    }
    let strip = |p: &str| p.strip_prefix(&prefix).map(str::to_string);
    Ok(entries
        .into_iter()
        .filter_map(|e| match e {
            SourceEntry::Dir(p) => strip(&p).map(SourceEntry::Dir),
            SourceEntry::File { path, bytes, exec } => {
                strip(&path).map(|path| SourceEntry::File { path, bytes, exec })
            }
            SourceEntry::Link { path, target } => {
                strip(&path).map(|path| SourceEntry::Link { path, target })
            }
        })
        .collect())
}

/// Where a source's files are.
enum Origin {
    /// A catalog entry's folder, or the absolute folder given.
    Folder(PathBuf),
    /// The URL of an `https://` `.tar.gz` archive.
    Archive(String),
}

fn origin(config: &DaemonConfig, source: &str) -> ApiResult<Origin> {
    let bad = |d: &str| ApiError::bad_request("source invalid", format!("source: {d}"));
    if let Some(name) = source.strip_prefix("catalog:") {
        if !valid_name(name) || !config.catalog_dir.join(name).join("addon.toml").is_file() {
            return Err(ApiError::not_found(format!("catalog addon {name:?}")));
        }
        return Ok(Origin::Folder(config.catalog_dir.join(name)));
    }
    if source.starts_with("https://") {
        let u = reqwest::Url::parse(source).map_err(|e| bad(&format!("{source}: {e}")))?;
        if u.host_str().is_none() {
            return Err(bad("an https:// URL of a .tar.gz archive"));
        }
        return Ok(Origin::Archive(u.to_string()));
    }
    let p = PathBuf::from(source);
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(bad(
            "catalog:<name>, an absolute folder or an https:// .tar.gz",
        ));
    }
    if !p.is_dir() {
        return Err(bad(&format!("{source} is not a folder")));
    }
    Ok(Origin::Folder(p))
}

/// A tar entry's kind for the archive rules; a hard link is refused.
fn tar_kind<R: std::io::Read>(e: &tar::Entry<'_, R>, path: &str) -> ApiResult<EntryKind> {
    let h = e.header();
    let t = h.entry_type();
    Ok(if t.is_symlink() {
        let b = e.link_name_bytes().unwrap_or_default().into_owned();
        let target = String::from_utf8(b)
            .map_err(|_| refused(format!("{path}: a link target that is not UTF-8")))?;
        EntryKind::Link { target }
    } else if t.is_dir() {
        EntryKind::Dir
    } else if t.is_file() || t.is_contiguous() {
        EntryKind::File {
            executable: h.mode().unwrap_or(0o644) & 0o111 != 0,
        }
    } else if t.is_hard_link() {
        return Err(refused(format!("{path}: a hard link")));
    } else {
        EntryKind::Special
    })
}

/// The most bytes a `.tar.gz` may inflate to: its files' 32 MiB and its headers.
const MAX_TAR_BYTES: u64 = MAX_BYTES + (MAX_FILES as u64) * 4096 + (1 << 20);

/// A `.tar.gz`'s entries, judged by the archive rules (`skill_archive::check`) before any is
/// taken; extension headers (a forge's `pax_global_header`) are not entries.
pub fn untar(bytes: &[u8]) -> ApiResult<Vec<SourceEntry>> {
    let not = |e: std::io::Error| refused(format!("not a .tar.gz archive of at most 32 MiB ({e})"));
    let gz = flate2::read::GzDecoder::new(bytes).take(MAX_TAR_BYTES);
    let mut ar = tar::Archive::new(gz);
    let mut judged: Vec<Entry> = Vec::new();
    let mut data: Vec<Vec<u8>> = Vec::new();
    let mut total = 0u64;
    for e in ar.entries().map_err(not)? {
        let mut e = e.map_err(not)?;
        let t = e.header().entry_type();
        if t.is_pax_global_extensions()
            || t.is_pax_local_extensions()
            || t.is_gnu_longname()
            || t.is_gnu_longlink()
        {
            continue;
        }
        if judged.len() >= MAX_FILES {
            return Err(refused(ArchiveError::TooManyFiles(judged.len() + 1)));
        }
        let path = String::from_utf8(e.path_bytes().into_owned())
            .map_err(|_| refused(format!("entry {}: a name that is not UTF-8", judged.len())))?;
        let kind = tar_kind(&e, &path)?;
        let mut b = Vec::new();
        if matches!(kind, EntryKind::File { .. }) {
            e.by_ref()
                .take(MAX_BYTES + 1 - total)
                .read_to_end(&mut b)
                .map_err(|err| refused(format!("{path}: {err}")))?;
            total += b.len() as u64;
            if total > MAX_BYTES {
                return Err(refused(ArchiveError::TooLarge));
            }
        }
        judged.push(Entry {
            size: b.len() as u64,
            path,
            kind,
        });
        data.push(b);
    }
    check(&judged).map_err(refused)?;
    to_source(judged, data)
}

/// Judged archive entries as a source's: paths normalized (`./` dropped), each once.
fn to_source(judged: Vec<Entry>, data: Vec<Vec<u8>>) -> ApiResult<Vec<SourceEntry>> {
    let mut seen: HashMap<String, bool> = HashMap::new();
    let mut out = Vec::with_capacity(judged.len());
    for (e, bytes) in judged.into_iter().zip(data) {
        let path = e
            .path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect::<Vec<_>>()
            .join("/");
        if path.is_empty() {
            continue;
        }
        let dir = e.kind == EntryKind::Dir;
        if let Some(was_dir) = seen.insert(path.clone(), dir) {
            if dir && was_dir {
                continue;
            }
            return Err(refused(format!("{path}: twice in the archive")));
        }
        out.push(match e.kind {
            EntryKind::Dir => SourceEntry::Dir(path),
            EntryKind::File { executable } => SourceEntry::File {
                path,
                bytes,
                exec: executable,
            },
            EntryKind::Link { target } => SourceEntry::Link { path, target },
            EntryKind::Special => return Err(refused(ArchiveError::Special(path))),
        });
    }
    Ok(out)
}

/// The most links one resolution follows (the kernel's `ELOOP` limit).
const MAX_LINK_HOPS: usize = 40;

/// What a path of the addon is, for resolving its links.
#[derive(Clone, Copy)]
enum Kind<'a> {
    Dir,
    File,
    Link(&'a str),
}

/// Why a link's resolution is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
enum LinkError {
    /// It reaches above the addon's top (or is absolute), at some step of its resolution.
    #[error("a link out of the addon ({0})")]
    Out(String),
    /// It leads to no entry of the addon.
    #[error("a link to nothing in the addon ({0})")]
    Dangling(String),
    /// It goes through a file as if it were a folder.
    #[error("a link through a file ({0})")]
    ThroughFile(String),
    /// More than [`MAX_LINK_HOPS`] links to follow (a loop).
    #[error("a loop of links ({0})")]
    Loop(String),
}

/// Resolves the link at `path` (relative to the top) to `target` as the kernel would, against
/// the addon's other entries: every link met on the way followed, `..` taken after it. Refused
/// when any step leaves the top, so links judged together cannot climb out one `..` at a time
/// (`q -> .`, `p -> q/..`: `p` is the top's parent). Returns the entry it leads to.
fn resolve_link<'a>(
    path: &'a str,
    target: &'a str,
    kinds: &HashMap<&str, Kind<'a>>,
) -> Result<String, LinkError> {
    let shown = || target.to_string();
    let mut at: Vec<&str> = path.split('/').collect();
    at.pop();
    let mut todo: VecDeque<&str> = VecDeque::new();
    if target.is_empty() || target.starts_with('/') {
        return Err(LinkError::Out(shown()));
    }
    for part in target.split('/').rev() {
        todo.push_front(part);
    }
    let mut hops = 0usize;
    while let Some(part) = todo.pop_front() {
        match part {
            "" | "." => {}
            ".." => {
                if at.pop().is_none() {
                    return Err(LinkError::Out(shown()));
                }
            }
            name => {
                let mut candidate = at.join("/");
                if !candidate.is_empty() {
                    candidate.push('/');
                }
                candidate.push_str(name);
                match kinds.get(candidate.as_str()) {
                    None => return Err(LinkError::Dangling(shown())),
                    Some(Kind::Dir) => at.push(name),
                    Some(Kind::File) => {
                        if todo.iter().any(|p| !p.is_empty()) {
                            return Err(LinkError::ThroughFile(shown()));
                        }
                        at.push(name);
                    }
                    Some(Kind::Link(t)) => {
                        hops += 1;
                        if hops > MAX_LINK_HOPS {
                            return Err(LinkError::Loop(shown()));
                        }
                        if t.is_empty() || t.starts_with('/') {
                            return Err(LinkError::Out(shown()));
                        }
                        for p in t.split('/').rev() {
                            todo.push_front(p);
                        }
                    }
                }
            }
        }
    }
    Ok(at.join("/"))
}

/// Nothing of the addon is below a link (it would be written through it), and every link,
/// resolved against all the others (`resolve_link`), leads to an entry inside its top.
fn links_inside(entries: &[SourceEntry]) -> ApiResult<()> {
    let mut kinds: HashMap<&str, Kind<'_>> = entries
        .iter()
        .map(|e| match e {
            SourceEntry::Dir(p) => (p.as_str(), Kind::Dir),
            SourceEntry::File { path, .. } => (path.as_str(), Kind::File),
            SourceEntry::Link { path, target } => (path.as_str(), Kind::Link(target.as_str())),
        })
        .collect();
    // An archive may name a file without its folders: they are made when it is written.
    for e in entries {
        let mut p = e.path();
        while let Some((parent, _)) = p.rsplit_once('/') {
            kinds.entry(parent).or_insert(Kind::Dir);
            p = parent;
        }
    }
    for e in entries {
        let mut p = e.path();
        while let Some((parent, _)) = p.rsplit_once('/') {
            if matches!(kinds.get(parent), Some(Kind::Link(_))) {
                return Err(refused(format!("{}: below the link {parent}", e.path())));
            }
            p = parent;
        }
    }
    for e in entries {
        if let SourceEntry::Link { path, target } = e {
            resolve_link(path, target, &kinds).map_err(|why| refused(format!("{path}: {why}")))?;
        }
    }
    Ok(())
}

/// A source read whole: its entries below the addon's top, their digest, the addon's name.
struct Read {
    entries: Vec<SourceEntry>,
    digest: String,
    name: String,
}

/// A folder's entries, nothing followed.
fn read_folder(root: &Path) -> ApiResult<Vec<SourceEntry>> {
    let mut w = Walk {
        out: Vec::new(),
        bytes: 0,
    };
    walk(root, "", &mut w)?;
    Ok(w.out)
}

/// Reads a source whole: a folder from the disk, an archive over https (the skills importer's
/// fetch: https only, ≤ 32 MiB, the extra CAs).
async fn read_source(app: &AppState, source: &str) -> ApiResult<Read> {
    match origin(&app.config, source)? {
        Origin::Folder(root) => blocking(move || finish(read_folder(&root)?)).await,
        Origin::Archive(url) => {
            let body = super::skills::import::fetch(app, &url, refused).await?;
            blocking(move || finish(untar(&body)?)).await
        }
    }
}

/// The addon below a source's entries: its top, its digest, its name.
fn finish(entries: Vec<SourceEntry>) -> ApiResult<Read> {
    let entries = addon_top(entries).map_err(refused)?;
    links_inside(&entries)?;
    let digest = digest(&entries);
    let text = entries
        .iter()
        .find_map(|e| match e {
            SourceEntry::File { path, bytes, .. } if path == "addon.toml" => Some(bytes),
            _ => None,
        })
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    let name = text
        .parse::<DocumentMut>()
        .ok()
        .and_then(|d| d.get("name").and_then(Item::as_str).map(str::to_string))
        .ok_or_else(|| refused("addon.toml: no name"))?;
    if !valid_name(&name) {
        return Err(refused(format!("addon.toml: name {name:?} is not a name")));
    }
    Ok(Read {
        entries,
        digest,
        name,
    })
}

fn write_tree(dir: &Path, entries: &[SourceEntry]) -> ApiResult<()> {
    use super::skills::{make_dir, write_file};
    make_dir(dir)?;
    for e in entries {
        match e {
            SourceEntry::Dir(p) => make_dir(&dir.join(p))?,
            SourceEntry::File { path, bytes, exec } => write_file(&dir.join(path), bytes, *exec)?,
            SourceEntry::Link { path, target } => {
                let p = dir.join(path);
                if let Some(parent) = p.parent() {
                    make_dir(parent)?;
                }
                std::os::unix::fs::symlink(target, &p).map_err(ApiError::internal)?;
            }
        }
    }
    Ok(())
}

/// Stages a read source at `<state>/addon-staging/<digest>/<name>/` and validates it (G.1).
fn stage(config: &DaemonConfig, r: &Read) -> ApiResult<LoadedAddon> {
    let top = config.state_dir.join("addon-staging").join(&r.digest);
    if top.exists() {
        std::fs::remove_dir_all(&top).map_err(ApiError::internal)?;
    }
    let dir = top.join(&r.name);
    write_tree(&dir, &r.entries)?;
    let a = read_addon(&dir, &r.name, false);
    if let Err(e) = &a.manifest {
        return Err(ApiError::unprocessable("addon invalid", e.clone()));
    }
    Ok(a)
}

/// An installed addon's lock entry (`[addons.<name>]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEntry {
    /// The source it was installed from.
    pub source: String,
    /// The digest of what was installed.
    pub digest: String,
    /// When (RFC 3339).
    pub installed_at: String,
}

fn lock_path(config: &DaemonConfig) -> PathBuf {
    config.config_dir.join("addons.lock.toml")
}

fn read_lock_doc(config: &DaemonConfig) -> ApiResult<DocumentMut> {
    match std::fs::read_to_string(lock_path(config)) {
        Ok(t) => t
            .parse::<DocumentMut>()
            .map_err(|e| ApiError::internal(format!("{}: {e}", lock_path(config).display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DocumentMut::new()),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// The installed addons, by name, as the lock file records them.
pub fn read_lock(config: &DaemonConfig) -> BTreeMap<String, LockEntry> {
    let Ok(doc) = read_lock_doc(config) else {
        return BTreeMap::new();
    };
    let Some(t) = doc.get("addons").and_then(Item::as_table) else {
        return BTreeMap::new();
    };
    t.iter()
        .filter_map(|(k, v)| {
            let s = |f: &str| v.get(f).and_then(Item::as_str).map(str::to_string);
            Some((
                k.to_string(),
                LockEntry {
                    source: s("source")?,
                    digest: s("digest")?,
                    installed_at: s("installedAt").unwrap_or_default(),
                },
            ))
        })
        .collect()
}

fn write_lock(config: &DaemonConfig, name: &str, entry: Option<&LockEntry>) -> ApiResult<()> {
    let mut doc = read_lock_doc(config)?;
    if doc.get("addons").and_then(Item::as_table).is_none() {
        let mut t = Table::new();
        t.set_implicit(true);
        doc["addons"] = Item::Table(t);
    }
    let addons = doc["addons"]
        .as_table_mut()
        .ok_or_else(|| ApiError::internal("addons"))?;
    match entry {
        Some(e) => {
            let mut t = Table::new();
            t.insert("source", toml_edit::value(e.source.as_str()));
            t.insert("digest", toml_edit::value(e.digest.as_str()));
            t.insert("installedAt", toml_edit::value(e.installed_at.as_str()));
            addons.insert(name, Item::Table(t));
        }
        None => {
            addons.remove(name);
        }
    }
    std::fs::create_dir_all(&config.config_dir).map_err(ApiError::internal)?;
    let tmp = lock_path(config).with_extension("toml.tmp");
    std::fs::write(&tmp, doc.to_string()).map_err(ApiError::internal)?;
    std::fs::rename(&tmp, lock_path(config)).map_err(ApiError::internal)
}

fn slots<'a>(
    it: impl Iterator<Item = (&'a String, bool, &'a Option<String>)>,
) -> Vec<AddonSlotInfo> {
    it.map(|(name, required, description)| AddonSlotInfo {
        name: name.clone(),
        required,
        description: description.clone(),
    })
    .collect()
}

/// What has the name now: a built-in addon, an installed one, the user's own.
fn replaces(config: &DaemonConfig, name: &str) -> Option<AddonReplaces> {
    let set = AddonSet::read(config);
    let a = set.addons.get(name)?;
    Some(if a.builtin {
        AddonReplaces::Builtin
    } else if read_lock(config).contains_key(name) {
        AddonReplaces::Installed
    } else {
        AddonReplaces::Own
    })
}

fn preview_of(
    config: &DaemonConfig,
    source: &str,
    r: &Read,
    a: &LoadedAddon,
) -> ApiResult<AddonPreview> {
    let m = a
        .manifest
        .as_ref()
        .map_err(|e| ApiError::unprocessable("addon invalid", e.clone()))?;
    let mut env: Vec<String> = m.env.keys().cloned().collect();
    env.extend(m.settings.values().map(|s| s.env.clone()));
    env.extend(m.secret_slots.values().map(|s| s.env.clone()));
    env.sort();
    Ok(AddonPreview {
        source: source.to_string(),
        digest: r.digest.clone(),
        name: r.name.clone(),
        description: m.description.clone(),
        image: m.image.clone(),
        commands: m.commands.clone(),
        env,
        settings: slots(
            m.settings
                .iter()
                .map(|(n, s)| (n, s.required, &s.description)),
        ),
        secret_slots: slots(
            m.secret_slots
                .iter()
                .map(|(n, s)| (n, s.required, &s.description)),
        ),
        egress: m.egress.iter().map(ToString::to_string).collect(),
        mcp: m.mcp.as_ref().map(|x| x.command.clone()),
        skills: a.skills.clone(),
        replaces: replaces(config, &r.name),
    })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(ApiError::internal)?
}

/// The rules behind POST /v1/addons/preview: the source read, staged and validated; what
/// installing it would bring.
pub async fn preview(app: &AppState, req: AddonPreviewRequest) -> ApiResult<AddonPreview> {
    let r = read_source(app, &req.source).await?;
    let config = app.config.clone();
    blocking(move || {
        clean_staging(&config, SystemTime::now());
        let a = stage(&config, &r)?;
        preview_of(&config, &req.source, &r, &a)
    })
    .await
}

/// The digest Handler's catalog has now for `name`, when it ships it.
fn catalog_digest(config: &DaemonConfig, name: &str) -> Option<String> {
    if !valid_name(name) {
        return None;
    }
    read_folder(&config.catalog_dir.join(name))
        .and_then(finish)
        .ok()
        .map(|r| r.digest)
}

/// How long a preview's staging folder is kept when no install takes it.
pub const STAGING_TTL: Duration = Duration::from_secs(3600);

/// The staging folders to remove at `now`: those last written more than an hour before.
pub fn stale_staging(folders: &[(String, SystemTime)], now: SystemTime) -> Vec<String> {
    folders
        .iter()
        .filter(|(_, at)| now.duration_since(*at).is_ok_and(|age| age > STAGING_TTL))
        .map(|(n, _)| n.clone())
        .collect()
}

/// Removes the stale staging folders of `<state>/addon-staging/` (never an error: logged).
fn clean_staging(config: &DaemonConfig, now: SystemTime) {
    let top = config.state_dir.join("addon-staging");
    let Ok(rd) = std::fs::read_dir(&top) else {
        return;
    };
    let folders: Vec<(String, SystemTime)> = rd
        .flatten()
        .filter_map(|e| {
            let at = e.metadata().and_then(|m| m.modified()).ok()?;
            Some((e.file_name().to_str()?.to_string(), at))
        })
        .collect();
    for n in stale_staging(&folders, now) {
        if let Err(e) = std::fs::remove_dir_all(top.join(&n)) {
            tracing::warn!(staging = %n, error = %e, "a stale addon staging folder stays");
        }
    }
}

/// Fills `source` and `updateAvailable` of the user's addons from the lock file (G.5).
pub fn annotate(config: &DaemonConfig, infos: &mut [AddonInfo]) {
    let lock = read_lock(config);
    for i in infos.iter_mut().filter(|i| !i.builtin) {
        if let Some(e) = lock.get(&i.name) {
            i.source = Some(e.source.clone());
            i.update_available = e
                .source
                .strip_prefix("catalog:")
                .and_then(|n| catalog_digest(config, n))
                .is_some_and(|d| d != e.digest);
        }
    }
}

/// The rules behind GET /v1/addon-catalog: the catalog Handler ships, installed or not.
pub async fn catalog(app: &AppState) -> Vec<AddonCatalogEntry> {
    let lock = read_lock(&app.config);
    let Ok(rd) = std::fs::read_dir(&app.config.catalog_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| valid_name(n))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let a = read_addon(&app.config.catalog_dir.join(&name), &name, true);
            AddonCatalogEntry {
                description: a.manifest.ok().and_then(|m| m.description),
                installed: lock.contains_key(&name),
                name,
            }
        })
        .collect()
}

/// Copies the staged addon into `$HANDLER_ADDONS_DIR/<name>/` through a hidden folder renamed
/// into place (an installed one before it goes: an update).
fn put_in_place(config: &DaemonConfig, r: &Read) -> ApiResult<PathBuf> {
    super::skills::make_dir(&config.addons_dir)?;
    let tmp = tempfile::Builder::new()
        .prefix(".install-")
        .tempdir_in(&config.addons_dir)
        .map_err(ApiError::internal)?;
    write_tree(&tmp.path().join(&r.name), &r.entries)?;
    let dir = config.addons_dir.join(&r.name);
    let old = tmp.path().join(".old");
    let had = std::fs::symlink_metadata(&dir).is_ok();
    if had {
        std::fs::rename(&dir, &old).map_err(ApiError::internal)?;
    }
    if let Err(e) = std::fs::rename(tmp.path().join(&r.name), &dir) {
        if had {
            let _ = std::fs::rename(&old, &dir);
        }
        return Err(ApiError::internal(e));
    }
    Ok(dir)
}

fn install_blocking(
    config: &DaemonConfig,
    req: &AddonInstallRequest,
    r: Read,
) -> ApiResult<String> {
    if r.digest != req.digest {
        return Err(ApiError::unprocessable(
            "digest differs",
            format!(
                "digest: {} now has other content than the preview's ({})",
                req.source, r.digest
            ),
        ));
    }
    if replaces(config, &r.name) == Some(AddonReplaces::Own) {
        return Err(ApiError::unprocessable(
            "addon is the user's own",
            format!(
                "name: {:?} is the user's own addon ({}); Handler does not replace it",
                r.name,
                config.addons_dir.join(&r.name).display()
            ),
        ));
    }
    stage(config, &r)?;
    put_in_place(config, &r)?;
    let entry = LockEntry {
        source: req.source.clone(),
        digest: r.digest.clone(),
        installed_at: crate::daemon::fsutil::now_rfc3339(),
    };
    write_lock(config, &r.name, Some(&entry))?;
    let _ = std::fs::remove_dir_all(config.state_dir.join("addon-staging").join(&r.digest));
    Ok(r.name)
}

/// The image's first build (G.4), unless another build runs; a refusal is logged, never an
/// install failure.
async fn first_build(app: &AppState, name: &str) -> Option<handler_contracts::control::Build> {
    let running = app
        .builds
        .list()
        .map(|v| v.iter().any(|b| b.state == BuildState::Running))
        .unwrap_or(true);
    if running {
        tracing::info!(addon = %name, "another build runs: the addon's first build not started");
        return None;
    }
    let req = BuildRequest {
        target: format!("addon:{name}"),
    };
    match super::images::start(app, req).await {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::warn!(addon = %name, error = ?e, "the addon's first build was not started");
            None
        }
    }
}

/// The rules behind POST /v1/addons/install: 422 unless the source still has the digest, or
/// when the user's own addon has the name; installed, recorded, its first build started.
pub async fn install(app: &AppState, req: AddonInstallRequest) -> ApiResult<AddonInstalled> {
    let r = read_source(app, &req.source).await?;
    let _w = app.write_lock.lock().await;
    let config = app.config.clone();
    let name = blocking(move || install_blocking(&config, &req, r)).await?;
    tracing::info!(addon = %name, "addon installed");
    let has_image = AddonSet::read(&app.config)
        .addons
        .get(&name)
        .and_then(|a| a.manifest.as_ref().ok())
        .is_some_and(|m| m.image.is_some());
    let build = if has_image {
        first_build(app, &name).await
    } else {
        None
    };
    let addon = super::addons::get_addon(app, name).await?;
    Ok(AddonInstalled { addon, build })
}

/// The rules behind DELETE /v1/addons/{name}: an installed addon only (409 for a built-in or
/// the user's own, or while a binding uses it); its folder and lock entry go.
pub async fn remove(app: &AppState, name: String) -> ApiResult<()> {
    let _w = app.write_lock.lock().await;
    let set = AddonSet::read(&app.config);
    let a = set
        .addons
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("addon {name:?}")))?;
    if a.builtin {
        return Err(ApiError::conflict(
            "addon is built-in",
            format!("addon {name:?} ships with Handler"),
        ));
    }
    if !read_lock(&app.config).contains_key(&name) {
        return Err(ApiError::conflict(
            "addon is the user's own",
            format!(
                "addon {name:?} was not installed by Handler ({})",
                a.dir.display()
            ),
        ));
    }
    let users: Vec<&str> = set
        .bindings
        .values()
        .filter(|b| b.binding.as_ref().is_some_and(|x| x.addon == name))
        .map(|b| b.name.as_str())
        .collect();
    if !users.is_empty() {
        return Err(ApiError::conflict(
            "addon in use",
            format!("addon {name:?} is used by binding(s) {}", users.join(", ")),
        ));
    }
    std::fs::remove_dir_all(&a.dir).map_err(ApiError::internal)?;
    write_lock(&app.config, &name, None)?;
    tracing::info!(addon = %name, "addon removed");
    if let Some(image) = a.manifest.as_ref().ok().and_then(|m| m.image.clone()) {
        remove_image(app, &name, &image).await;
    }
    Ok(())
}

/// Removes an uninstalled addon's `<image>:latest` through the runtime's image remove (A.7),
/// which refuses while a container uses it: then logged, the image kept.
async fn remove_image(app: &AppState, name: &str, image: &str) {
    let tagged = format!("{image}:latest");
    match super::images::verbs(app).remove(&tagged).await {
        Ok(()) => tracing::info!(addon = %name, image = %tagged, "the addon's image removed"),
        Err(e) => {
            tracing::warn!(addon = %name, image = %tagged, error = %e, "the addon's image is kept");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str, bytes: &[u8], exec: bool) -> SourceEntry {
        SourceEntry::File {
            path: path.into(),
            bytes: bytes.to_vec(),
            exec,
        }
    }

    #[test]
    fn the_digest_names_paths_bits_bytes_and_link_targets() {
        let base = vec![f("addon.toml", b"a", false), f("bin/x", b"b", true)];
        let d = digest(&base);
        assert_eq!(d.len(), 64);
        let mut reordered = base.clone();
        reordered.reverse();
        reordered.push(SourceEntry::Dir("bin".into()));
        assert_eq!(digest(&reordered), d, "order and folders do not change it");
        for other in [
            vec![f("addon.toml", b"a", false), f("bin/x", b"b", false)],
            vec![f("addon.toml", b"a", false), f("bin/y", b"b", true)],
            vec![f("addon.toml", b"a", false), f("bin/x", b"c", true)],
        ] {
            assert_ne!(digest(&other), d, "{other:?}");
        }
        let link = |t: &str| {
            let mut v = base.clone();
            v.push(SourceEntry::Link {
                path: "l".into(),
                target: t.into(),
            });
            digest(&v)
        };
        assert_ne!(link("bin/x"), link("addon.toml"));
    }

    #[test]
    fn stagings_older_than_an_hour_are_removed() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100_000);
        let at = |secs: u64| now - Duration::from_secs(secs);
        let folders = vec![
            ("fresh".to_string(), at(10)),
            ("hour".to_string(), at(3600)),
            ("old".to_string(), at(3601)),
            ("future".to_string(), now + Duration::from_secs(5)),
        ];
        assert_eq!(stale_staging(&folders, now), ["old"]);
    }

    #[test]
    fn a_link_out_of_the_top_or_a_path_below_a_link_is_refused() {
        let top = vec![
            SourceEntry::Dir("r".into()),
            f("r/addon.toml", b"name = \"x\"", false),
            SourceEntry::Link {
                path: "r/up".into(),
                target: "../r/addon.toml".into(),
            },
        ];
        let e = finish(top).err().unwrap();
        assert!(e.to_string().contains("up: a link out of the addon"), "{e}");
        let below = vec![
            f("addon.toml", b"name = \"x\"", false),
            SourceEntry::Link {
                path: "l".into(),
                target: "skills".into(),
            },
            f("l/x", b"", false),
        ];
        let e = finish(below).err().unwrap();
        assert!(e.to_string().contains("l/x: below the link l"), "{e}");
    }

    fn link(path: &str, target: &str) -> SourceEntry {
        SourceEntry::Link {
            path: path.into(),
            target: target.into(),
        }
    }

    /// F9 (issue 27): links judged together, each resolved through the others.
    #[test]
    fn links_are_resolved_through_each_other_never_one_at_a_time() {
        let with = |extra: Vec<SourceEntry>| {
            let mut v = vec![
                f("addon.toml", b"name = \"x\"", false),
                SourceEntry::Dir("bin".into()),
                f("bin/run", b"#!/bin/sh\n", true),
            ];
            v.extend(extra);
            v
        };
        // Each passes lexically; `p` resolves to the top's parent, `r` too.
        let climb = with(vec![link("q", "."), link("p", "q/.."), link("r", "p/..")]);
        let e = finish(climb).err().unwrap().to_string();
        assert!(e.contains("p: a link out of the addon (q/..)"), "{e}");
        let deep = with(vec![link("bin/here", "."), link("bin/up", "here/../..")]);
        let e = finish(deep).err().unwrap().to_string();
        assert!(e.contains("bin/up: a link out of the addon"), "{e}");
        let looped = with(vec![link("a", "b"), link("b", "a")]);
        let e = finish(looped).err().unwrap().to_string();
        assert!(e.contains("a loop of links"), "{e}");
        let dangling = with(vec![link("gone", "bin/nothing")]);
        let e = finish(dangling).err().unwrap().to_string();
        assert!(e.contains("gone: a link to nothing in the addon"), "{e}");
        let through = with(vec![link("t", "addon.toml/../bin/run")]);
        let e = finish(through).err().unwrap().to_string();
        assert!(e.contains("t: a link through a file"), "{e}");
        // Links that stay inside, through other links too, are kept.
        let fine = with(vec![
            f("lib/deep/x", b"", false),
            link("implied", "lib/deep/x"),
            link("latest", "bin/run"),
            link("b", "bin"),
            link("again", "b/../b/run"),
            link("top", "."),
            link("bin/self", "../bin/run"),
        ]);
        let r = finish(fine).unwrap();
        assert_eq!(r.name, "x");
    }

    #[test]
    fn links_must_stay_inside() {
        assert!(link_stays_inside("bin/x", "../lib/x"));
        assert!(link_stays_inside("x", "./y"));
        assert!(!link_stays_inside("bin/x", "../../etc/passwd"));
        assert!(!link_stays_inside("x", "/etc/passwd"));
        assert!(!link_stays_inside("x", ".."));
    }

    #[test]
    fn the_top_is_the_only_folder_when_addon_toml_is_not_at_the_top() {
        let v = vec![
            SourceEntry::Dir("repo-main".into()),
            f("repo-main/addon.toml", b"a", false),
        ];
        assert_eq!(addon_top(v).unwrap(), vec![f("addon.toml", b"a", false)]);
        let two = vec![SourceEntry::Dir("a".into()), SourceEntry::Dir("b".into())];
        assert!(addon_top(two).is_err());
    }
}
