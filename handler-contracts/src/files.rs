//! F.8, a session's folder, as pure rules: the paths a client may name, git's ignore rules (fed
//! the contents of `.gitignore` files and `.git/info/exclude`, never reading them), the
//! `baseline.json` document, the changes since the baseline, the answers of the files endpoints
//! and what `reveal` asks the desktop.
//!
//! The I/O side (opening every path one name at a time with `O_NOFOLLOW`) is handler-core's
//! `daemon::services::session_files`; the git reader is the `handler-git-read` child.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gix_ignore::glob::pattern::Case;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Beyond this many files, a baseline records only the commit HEAD is at (F.8, `notFollowed`).
pub const MAX_BASELINE_FILES: usize = 50_000;
/// `.gitignore` files (and `.git/info/exclude`) are read up to this many bytes (F.8).
pub const MAX_IGNORE_FILE_BYTES: usize = 1_000_000;
/// A file's content (now or its earlier version) is answered up to this many bytes; the rest is
/// cut and the answer says `truncated` (decision 0068).
pub const MAX_READ_BYTES: usize = 4 * 1024 * 1024;
/// The name of the baseline document in a session's folder (F.2, F.8).
pub const BASELINE_FILE: &str = "baseline.json";

/// Why a path is not shown (F.8: 400 "path not shown"). The first five are found by reading the
/// path; the others by opening it one name at a time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathRefusal {
    /// `/etc/passwd`: paths are relative to the folder.
    #[error("path not shown: {0:?} is absolute (paths are relative to the folder, /-separated)")]
    Absolute(String),
    /// `a/../b`, `./a`.
    #[error("path not shown: {0:?} has a . or .. name")]
    Dot(String),
    /// `.git` or anything in it: handlerd never reads a repository's `.git`.
    #[error("path not shown: {0:?} names .git")]
    DotGit(String),
    /// `a//b`, `a/`.
    #[error("path not shown: {0:?} has an empty name (a // or a trailing /)")]
    EmptyName(String),
    /// A NUL byte.
    #[error("path not shown: {0:?} holds a NUL byte")]
    Nul(String),
    /// A link where a folder was expected (`notes -> ~/.ssh`).
    #[error("path not shown: {0:?} goes through a link")]
    LinkOnTheWay(String),
    /// The path is a link.
    #[error("path not shown: {0:?} is a link")]
    Link(String),
    /// A folder, a FIFO, a socket, a device where a file is read.
    #[error("path not shown: {0:?} is not a regular file")]
    NotRegular(String),
}

/// A path a client may name: relative to the folder, `/`-separated, no `.`, `..` or `.git`
/// name; `""` is the folder itself. Built only by [`RelPath::parse`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(String);

impl RelPath {
    /// Checks `path` (F.8's 400 reasons).
    pub fn parse(path: &str) -> Result<RelPath, PathRefusal> {
        let own = || path.to_string();
        if path.contains('\0') {
            return Err(PathRefusal::Nul(own()));
        }
        if path.starts_with('/') {
            return Err(PathRefusal::Absolute(own()));
        }
        if path.is_empty() {
            return Ok(RelPath(String::new()));
        }
        for name in path.split('/') {
            match name {
                "" => return Err(PathRefusal::EmptyName(own())),
                "." | ".." => return Err(PathRefusal::Dot(own())),
                ".git" => return Err(PathRefusal::DotGit(own())),
                _ => {}
            }
        }
        Ok(RelPath(own()))
    }
    /// The path as given (`""` for the folder).
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// Its names, in order (none for the folder).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|n| !n.is_empty())
    }
    /// Whether it is the folder itself.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

/// The path of `name` in the folder at `dir` (`""` for the root).
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Git's ignore rules for one folder, fed the contents of its `.gitignore` files as a walk
/// finds them (deeper files added later win, as in git) above `.git/info/exclude`'s patterns.
/// Matching is gitoxide's (`gix-ignore`): git's wildmatch, negation, `dir/` patterns, anchoring.
#[derive(Debug, Clone, Default)]
pub struct IgnoreRules {
    search: gix_ignore::Search,
}

impl IgnoreRules {
    /// Rules with `.git/info/exclude`'s patterns (relative to the folder), if any.
    pub fn new(exclude: Option<&[u8]>) -> Self {
        let mut search = gix_ignore::Search::default();
        if let Some(bytes) = exclude {
            let bytes = &bytes[..bytes.len().min(MAX_IGNORE_FILE_BYTES)];
            search.add_patterns_buffer(
                bytes,
                "info/exclude",
                None,
                gix_ignore::search::Ignore::default(),
            );
        }
        IgnoreRules { search }
    }
    /// Adds the `.gitignore` of the folder `dir` (`""` for the root): its patterns apply to
    /// what is inside `dir`, and win over those added before.
    pub fn add_gitignore(&mut self, dir: &str, contents: &[u8]) {
        let contents = &contents[..contents.len().min(MAX_IGNORE_FILE_BYTES)];
        let source = PathBuf::from(join(dir, ".gitignore"));
        self.search.add_patterns_buffer(
            contents,
            source,
            Some(std::path::Path::new("")),
            gix_ignore::search::Ignore::default(),
        );
    }
    /// How many pattern lists are held: give it to [`IgnoreRules::truncate`] when a walk
    /// leaves the folder whose `.gitignore` was added after.
    pub fn mark(&self) -> usize {
        self.search.patterns.len()
    }
    /// Drops the lists added after `mark`.
    pub fn truncate(&mut self, mark: usize) {
        self.search.patterns.truncate(mark);
    }
    /// Whether git would ignore `path` itself (its folders are not looked at: a walk does not
    /// go into an ignored folder).
    pub fn is_ignored(&self, path: &str, is_dir: bool) -> bool {
        self.search
            .pattern_matching_relative_path(path.as_bytes().into(), Some(is_dir), Case::Sensitive)
            .is_some_and(|m| !m.pattern.is_negative())
    }
    /// Whether `path` or one of the folders it is in is ignored.
    pub fn is_ignored_within(&self, path: &str, is_dir: bool) -> bool {
        let mut end = 0;
        while let Some(i) = path[end..].find('/') {
            if self.is_ignored(&path[..end + i], true) {
                return true;
            }
            end += i + 1;
        }
        self.is_ignored(path, is_dir)
    }
}

/// What a listed entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A symbolic link (its own size and time; never followed).
    Link,
    /// A folder (listings only; a baseline records files and links).
    Dir,
}

/// One entry of a folder, as a walk saw it (`lstat`: a link is not followed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileStamp {
    /// File, link or folder.
    pub kind: EntryKind,
    /// Its size in bytes.
    pub size: u64,
    /// Its modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
}

/// What a walk of a folder found: every entry not in a `.git` folder and not ignored, by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Entries by path (`/`-separated, relative to the folder).
    pub entries: BTreeMap<String, FileStamp>,
    /// The walk stopped: more than its limit of files.
    pub not_followed: bool,
    /// The `.git` entries found below the folder's root (nested repositories, or a `.git` file
    /// naming a git directory anywhere), by path; never entered.
    pub nested_git: Vec<String>,
}

impl Listing {
    /// The files and links (what a baseline records), without the folders.
    pub fn files(&self) -> BTreeMap<String, FileStamp> {
        self.entries
            .iter()
            .filter(|(_, s)| s.kind != EntryKind::Dir)
            .map(|(p, s)| (p.clone(), s.clone()))
            .collect()
    }
}

/// `baseline.json` (F.8): the session's folder as it was when the session first started, before
/// its sandbox. Restarts keep it: changes are always since the session started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// When it was recorded (RFC 3339).
    pub recorded_at: String,
    /// The commit HEAD was at, when the folder is a git repository (`.git` a folder there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_head: Option<String>,
    /// The patterns of `.git/info/exclude` then, as the git reader child gave them (handlerd
    /// never reads `.git`): the ignore rules later listings use with the `.gitignore` files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_exclude: Option<String>,
    /// More than [`MAX_BASELINE_FILES`] files: only `gitHead` is recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_followed: bool,
    /// Each file's and link's size and modification time, by path.
    #[serde(default)]
    pub files: BTreeMap<String, FileStamp>,
    /// The `.git` entries below the root then (a nested one made later is warned about).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nested_git: Vec<String>,
}

impl Baseline {
    /// The baseline of a walk's `listing` at `recorded_at`, with git's HEAD and exclude
    /// patterns when the folder is a repository.
    pub fn new(
        listing: &Listing,
        recorded_at: String,
        git_head: Option<String>,
        git_exclude: Option<String>,
    ) -> Self {
        Baseline {
            recorded_at,
            git_head,
            git_exclude,
            not_followed: listing.not_followed,
            files: if listing.not_followed {
                BTreeMap::new()
            } else {
                listing.files()
            },
            nested_git: listing.nested_git.clone(),
        }
    }
}

/// How a file changed since the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// It was not there.
    Added,
    /// Its size, time or kind differ.
    Modified,
    /// It is gone.
    Deleted,
}

/// One changed file (GET …/changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileChange {
    /// Its path, relative to the folder.
    pub path: String,
    /// Added, modified or deleted.
    pub change: ChangeKind,
    /// What it is now (none when deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<FileStamp>,
}

/// The changes since the session started (GET /v1/sessions/{id}/changes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Changes {
    /// The baseline or the folder now has more than [`MAX_BASELINE_FILES`] files: no list.
    pub not_followed: bool,
    /// The commit HEAD was at when the session started, if a repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_head: Option<String>,
    /// The changed files, by path.
    pub changes: Vec<FileChange>,
    /// What to review before running git in the folder (issue 14, item 6): a nested `.git`
    /// that was not there when the session started, a `.gitmodules` added, changed or deleted.
    #[serde(default)]
    pub git_warnings: Vec<GitWarning>,
}

/// Why a path needs review before git runs in the folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GitWarningKind {
    /// A `.git` below the root the session started without: the person's git run from that
    /// folder uses a repository (its hooks, its config) the agent made.
    NestedGit,
    /// A `.gitmodules` that changed: git may fetch and check out what it names.
    Gitmodules,
}

/// One warning of the Files pane: review before running git here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitWarning {
    /// The path, relative to the folder.
    pub path: String,
    /// What it is.
    pub kind: GitWarningKind,
    /// The sentence shown.
    pub message: String,
}

/// The warnings of a changes answer: each nested `.git` in `now` not in the baseline, each
/// changed `.gitmodules` (by file name, at any depth), by path.
pub fn git_warnings(baseline: &Baseline, now: &Listing, changes: &[FileChange]) -> Vec<GitWarning> {
    let mut out: Vec<GitWarning> = now
        .nested_git
        .iter()
        .filter(|p| !baseline.nested_git.contains(p))
        .map(|p| GitWarning {
            path: p.clone(),
            kind: GitWarningKind::NestedGit,
            message: format!("{p}: a nested .git the session made; review before running git here"),
        })
        .collect();
    out.extend(
        changes
            .iter()
            .filter(|c| c.path.rsplit('/').next() == Some(".gitmodules"))
            .map(|c| GitWarning {
                path: c.path.clone(),
                kind: GitWarningKind::Gitmodules,
                message: format!(
                    "{}: .gitmodules {}; review before running git here",
                    c.path,
                    match c.change {
                        ChangeKind::Added => "added",
                        ChangeKind::Modified => "changed",
                        ChangeKind::Deleted => "deleted",
                    }
                ),
            }),
    );
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The changes from `baseline` to `now` (both files and links by path), by path. A path whose
/// kind, size or modification time differ is modified.
pub fn diff(
    baseline: &BTreeMap<String, FileStamp>,
    now: &BTreeMap<String, FileStamp>,
) -> Vec<FileChange> {
    let mut out = Vec::new();
    for (path, was) in baseline {
        match now.get(path) {
            None => out.push(FileChange {
                path: path.clone(),
                change: ChangeKind::Deleted,
                now: None,
            }),
            Some(is) if is != was => out.push(FileChange {
                path: path.clone(),
                change: ChangeKind::Modified,
                now: Some(is.clone()),
            }),
            Some(_) => {}
        }
    }
    for (path, is) in now {
        if !baseline.contains_key(path) {
            out.push(FileChange {
                path: path.clone(),
                change: ChangeKind::Added,
                now: Some(is.clone()),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// The changes answer of a baseline and a listing of the folder now. Baseline files the rules
/// now ignore (a folder added to `.gitignore` during the session) are not shown as deleted.
pub fn changes(baseline: &Baseline, now: &Listing, rules: &IgnoreRules) -> Changes {
    if baseline.not_followed || now.not_followed {
        return Changes {
            not_followed: true,
            git_head: baseline.git_head.clone(),
            changes: Vec::new(),
            git_warnings: git_warnings(baseline, now, &[]),
        };
    }
    let was: BTreeMap<String, FileStamp> = baseline
        .files
        .iter()
        .filter(|(p, _)| now.entries.contains_key(*p) || !rules.is_ignored_within(p, false))
        .map(|(p, s)| (p.clone(), s.clone()))
        .collect();
    let changes = diff(&was, &now.files());
    Changes {
        not_followed: false,
        git_head: baseline.git_head.clone(),
        git_warnings: git_warnings(baseline, now, &changes),
        changes,
    }
}

/// One entry of All files (GET /v1/sessions/{id}/files).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListedEntry {
    /// Its path, relative to the folder.
    pub path: String,
    /// File, link or folder, its size and time.
    #[serde(flatten)]
    pub stamp: FileStamp,
}

/// All files of the folder (or of a browsable mount): not `.git`, not what git ignores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FolderListing {
    /// More than [`MAX_BASELINE_FILES`] files: the list stops there.
    pub not_followed: bool,
    /// Its entries, by path.
    pub entries: Vec<ListedEntry>,
}

impl From<Listing> for FolderListing {
    fn from(l: Listing) -> Self {
        FolderListing {
            not_followed: l.not_followed,
            entries: l
                .entries
                .into_iter()
                .map(|(path, stamp)| ListedEntry { path, stamp })
                .collect(),
        }
    }
}

/// A file's content as answered: its text when UTF-8, else only its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileContent {
    /// Its size in bytes (whole, even when truncated).
    pub size: u64,
    /// Its text (the first [`MAX_READ_BYTES`]), none when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Not UTF-8: no text.
    pub binary: bool,
    /// Longer than [`MAX_READ_BYTES`]: `text` holds the beginning.
    pub truncated: bool,
}

impl FileContent {
    /// The content of a file of `size` bytes of which `bytes` were read (at most
    /// [`MAX_READ_BYTES`] are kept). A cut in the middle of a UTF-8 character is not binary.
    pub fn new(bytes: &[u8], size: u64) -> Self {
        let kept = &bytes[..bytes.len().min(MAX_READ_BYTES)];
        let truncated = size > kept.len() as u64;
        let text = match std::str::from_utf8(kept) {
            Ok(t) => Some(t.to_string()),
            Err(e) if truncated && e.error_len().is_none() => {
                Some(String::from_utf8_lossy(&kept[..e.valid_up_to()]).into_owned())
            }
            Err(_) => None,
        };
        FileContent {
            size,
            binary: text.is_none(),
            text,
            truncated,
        }
    }
}

/// A file of the folder (GET /v1/sessions/{id}/file?path=): what it is now and, when the
/// folder was a repository at the session's start, its version in that commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileView {
    /// Its path, relative to the folder.
    pub path: String,
    /// How it changed since the session started (none: unchanged, or no baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<ChangeKind>,
    /// Its content now (none when deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<FileContent>,
    /// Its content in the commit HEAD was at when the session started (none without git, or
    /// when the git reader gave nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earlier: Option<FileContent>,
}

/// POST /v1/sessions/{id}/reveal (F.8).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevealRequest {
    /// Relative to the session's folder or the mount (`""` or none: the folder itself).
    #[serde(default)]
    pub path: Option<String>,
    /// The target of a browsable mount, to show it instead of the session's folder.
    #[serde(default)]
    pub mount: Option<String>,
}

/// What reveal asks the desktop's file manager (freedesktop `org.freedesktop.FileManager1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reveal {
    /// `ShowItems`: a file (or a link) selected in its folder.
    Items(String),
    /// `ShowFolders`: a folder opened.
    Folders(String),
}

impl Reveal {
    /// The D-Bus method's name.
    pub fn method(&self) -> &'static str {
        match self {
            Reveal::Items(_) => "org.freedesktop.FileManager1.ShowItems",
            Reveal::Folders(_) => "org.freedesktop.FileManager1.ShowFolders",
        }
    }
    /// The `file://` URI shown.
    pub fn uri(&self) -> &str {
        match self {
            Reveal::Items(u) | Reveal::Folders(u) => u,
        }
    }
    /// `dbus-send`'s argv (program first): every argument is one element, never a shell string;
    /// the URI is percent-encoded, so it holds no `,` (`array:string:` splits there).
    pub fn dbus_send_argv(&self, reply_timeout_ms: u32) -> Vec<String> {
        vec![
            "dbus-send".into(),
            "--session".into(),
            "--print-reply".into(),
            format!("--reply-timeout={reply_timeout_ms}"),
            "--dest=org.freedesktop.FileManager1".into(),
            "/org/freedesktop/FileManager1".into(),
            self.method().into(),
            format!("array:string:{}", self.uri()),
            "string:".into(),
        ]
    }
}

/// The `file://` URI of an absolute path: every byte other than an unreserved character or `/`
/// percent-encoded (RFC 3986).
pub fn file_uri(absolute: &[u8]) -> String {
    let mut out = String::from("file://");
    for &b in absolute {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(kind: EntryKind, size: u64, mtime_ns: i64) -> FileStamp {
        FileStamp {
            kind,
            size,
            mtime_ns,
        }
    }

    #[test]
    fn paths_that_leave_the_folder_or_name_git_are_refused() {
        for (p, want) in [
            ("/etc/passwd", "is absolute"),
            ("..", "has a . or .. name"),
            ("a/../../b", "has a . or .. name"),
            ("./a", "has a . or .. name"),
            (".git", "names .git"),
            ("sub/.git/config", "names .git"),
            ("a//b", "empty name"),
            ("a/", "empty name"),
            ("a\0b", "NUL"),
        ] {
            let e = RelPath::parse(p).unwrap_err().to_string();
            assert!(e.starts_with("path not shown: "), "{p}: {e}");
            assert!(e.contains(want), "{p}: {e}");
        }
        for ok in [
            "",
            "a",
            "a/b.txt",
            ".gitignore",
            "..a",
            ".github/x",
            "a b/c",
        ] {
            let p = RelPath::parse(ok).unwrap();
            assert_eq!(p.as_str(), ok);
            assert_eq!(p.is_root(), ok.is_empty());
        }
        let abc = RelPath::parse("a/b/c").unwrap();
        let names: Vec<&str> = abc.names().collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(RelPath::parse("").unwrap().names().count(), 0);
    }

    #[test]
    fn ignore_rules_follow_git() {
        let mut r = IgnoreRules::new(Some(b"*.secret\n"));
        r.add_gitignore("", b"target/\n*.log\n!keep.log\n/only-root\n# comment\n");
        let m = r.mark();
        r.add_gitignore("sub", b"local.txt\n!x.secret\n");
        assert!(r.is_ignored("target", true));
        assert!(
            !r.is_ignored("target", false),
            "target/ matches folders only"
        );
        assert!(r.is_ignored("a.log", false));
        assert!(r.is_ignored("sub/b.log", false));
        assert!(!r.is_ignored("keep.log", false));
        assert!(r.is_ignored("only-root", false));
        assert!(
            !r.is_ignored("sub/only-root", false),
            "anchored to the root"
        );
        assert!(r.is_ignored("k.secret", false), "info/exclude");
        assert!(!r.is_ignored("sub/x.secret", false), "a deeper file wins");
        assert!(r.is_ignored("sub/local.txt", false));
        assert!(!r.is_ignored("local.txt", false), "sub's rules stay in sub");
        assert!(r.is_ignored_within("target/debug/app", false));
        assert!(!r.is_ignored_within("src/main.rs", false));
        r.truncate(m);
        assert!(!r.is_ignored("sub/local.txt", false));
        assert!(r.is_ignored("sub/x.secret", false));
    }

    #[test]
    fn ignore_files_are_read_up_to_a_megabyte() {
        let mut big = vec![b'#'; MAX_IGNORE_FILE_BYTES];
        big.extend_from_slice(b"\nafter\n");
        let mut r = IgnoreRules::new(None);
        r.add_gitignore("", &big);
        assert!(!r.is_ignored("after", false));
    }

    #[test]
    fn diff_names_added_modified_and_deleted() {
        let was = BTreeMap::from([
            ("same".to_string(), stamp(EntryKind::File, 1, 10)),
            ("grown".to_string(), stamp(EntryKind::File, 1, 10)),
            ("touched".to_string(), stamp(EntryKind::File, 1, 10)),
            ("relinked".to_string(), stamp(EntryKind::File, 4, 10)),
            ("gone".to_string(), stamp(EntryKind::File, 1, 10)),
        ]);
        let now = BTreeMap::from([
            ("same".to_string(), stamp(EntryKind::File, 1, 10)),
            ("grown".to_string(), stamp(EntryKind::File, 2, 10)),
            ("touched".to_string(), stamp(EntryKind::File, 1, 11)),
            ("relinked".to_string(), stamp(EntryKind::Link, 4, 10)),
            ("new".to_string(), stamp(EntryKind::File, 3, 12)),
        ]);
        insta::assert_json_snapshot!(diff(&was, &now));
    }

    #[test]
    fn changes_are_since_the_baseline_and_skip_what_is_now_ignored() {
        let listing = Listing {
            entries: BTreeMap::from([
                ("a.txt".to_string(), stamp(EntryKind::File, 1, 1)),
                ("build/out".to_string(), stamp(EntryKind::File, 1, 1)),
                ("src".to_string(), stamp(EntryKind::Dir, 0, 1)),
            ]),
            not_followed: false,
            ..Default::default()
        };
        let base = Baseline::new(
            &listing,
            "2026-12-01T12:00:00Z".into(),
            Some("ab".into()),
            None,
        );
        assert!(
            !base.files.contains_key("src"),
            "a baseline records files only"
        );
        insta::assert_json_snapshot!("baseline", base);
        let mut rules = IgnoreRules::new(None);
        rules.add_gitignore("", b"build/\n");
        let now = Listing {
            entries: BTreeMap::from([("b.txt".to_string(), stamp(EntryKind::File, 1, 2))]),
            not_followed: false,
            ..Default::default()
        };
        let c = changes(&base, &now, &rules);
        let got: Vec<(&str, ChangeKind)> = c
            .changes
            .iter()
            .map(|c| (c.path.as_str(), c.change))
            .collect();
        assert_eq!(
            got,
            [("a.txt", ChangeKind::Deleted), ("b.txt", ChangeKind::Added)]
        );
        assert_eq!(c.git_head.as_deref(), Some("ab"));
    }

    /// Issue 14, item 6: a nested `.git` the baseline had not, and a changed `.gitmodules`
    /// at any depth, are warned about; a nested `.git` there from the start is not.
    #[test]
    fn a_new_nested_git_and_a_changed_gitmodules_are_warned_about() {
        let was = Listing {
            entries: BTreeMap::from([
                (".gitmodules".to_string(), stamp(EntryKind::File, 1, 1)),
                (
                    "vendor/.gitmodules".to_string(),
                    stamp(EntryKind::File, 1, 1),
                ),
            ]),
            nested_git: vec!["old/.git".into()],
            ..Default::default()
        };
        let base = Baseline::new(&was, "t".into(), None, None);
        let now = Listing {
            entries: BTreeMap::from([
                (".gitmodules".to_string(), stamp(EntryKind::File, 2, 2)),
                ("a.gitmodules".to_string(), stamp(EntryKind::File, 1, 1)),
                ("sub/.gitmodules".to_string(), stamp(EntryKind::File, 1, 1)),
            ]),
            nested_git: vec!["old/.git".into(), "sub/deeper/.git".into()],
            ..Default::default()
        };
        let c = changes(&base, &now, &IgnoreRules::default());
        insta::assert_json_snapshot!(c.git_warnings, @r#"
        [
          {
            "path": ".gitmodules",
            "kind": "gitmodules",
            "message": ".gitmodules: .gitmodules changed; review before running git here"
          },
          {
            "path": "sub/.gitmodules",
            "kind": "gitmodules",
            "message": "sub/.gitmodules: .gitmodules added; review before running git here"
          },
          {
            "path": "sub/deeper/.git",
            "kind": "nested_git",
            "message": "sub/deeper/.git: a nested .git the session made; review before running git here"
          },
          {
            "path": "vendor/.gitmodules",
            "kind": "gitmodules",
            "message": "vendor/.gitmodules: .gitmodules deleted; review before running git here"
          }
        ]
        "#);
        assert!(serde_json::to_value(&base).unwrap()["nestedGit"][0] == "old/.git");
    }

    #[test]
    fn beyond_the_limit_only_head_is_recorded() {
        let listing = Listing {
            entries: BTreeMap::from([("a".to_string(), stamp(EntryKind::File, 1, 1))]),
            not_followed: true,
            ..Default::default()
        };
        let base = Baseline::new(&listing, "t".into(), Some("c0ffee".into()), None);
        assert!(base.files.is_empty() && base.not_followed);
        let json = serde_json::to_value(&base).unwrap();
        assert_eq!(json["notFollowed"], true);
        assert_eq!(json["gitHead"], "c0ffee");
        let c = changes(&base, &Listing::default(), &IgnoreRules::default());
        assert!(c.not_followed && c.changes.is_empty());
        let back: Baseline = serde_json::from_value(json).unwrap();
        assert_eq!(back, base);
    }

    #[test]
    fn content_is_text_when_utf8_and_cut_at_the_limit() {
        let c = FileContent::new(b"hello\n", 6);
        assert_eq!(c.text.as_deref(), Some("hello\n"));
        assert!(!c.binary && !c.truncated);
        let c = FileContent::new(&[0xff, 0xfe, 0], 3);
        assert!(c.binary && c.text.is_none());
        let mut long = vec![b'a'; MAX_READ_BYTES - 1];
        long.extend_from_slice("é".as_bytes());
        let c = FileContent::new(&long, long.len() as u64 + 10);
        assert!(c.truncated && !c.binary);
        assert_eq!(c.text.unwrap().len(), MAX_READ_BYTES - 1);
    }

    #[test]
    fn reveal_asks_dbus_with_one_argument_each_and_an_encoded_uri() {
        let uri = file_uri("/home/p/my dir/a,b'$(x).desktop".as_bytes());
        assert_eq!(uri, "file:///home/p/my%20dir/a%2Cb%27%24%28x%29.desktop");
        let r = Reveal::Items(uri);
        insta::assert_json_snapshot!(r.dbus_send_argv(5000));
        assert_eq!(
            Reveal::Folders("file:///x".into()).method(),
            "org.freedesktop.FileManager1.ShowFolders"
        );
        let req: RevealRequest = serde_json::from_str(r#"{"path":"a"}"#).unwrap();
        assert_eq!(req.path.as_deref(), Some("a"));
        assert!(serde_json::from_str::<RevealRequest>(r#"{"paht":"a"}"#).is_err());
    }

    #[test]
    fn session_mounts_put_the_browsable_first_and_find_only_those() {
        use crate::sandbox::{Mount, MountKind};
        let m = |t: &str, ro, kind| Mount {
            source: format!("/host{t}"),
            target: t.into(),
            read_only: ro,
            kind,
        };
        let listed = session_mounts(&[
            m("/home/u/code/app", false, MountKind::Scope),
            m("/knowledge/team", true, MountKind::Knowledge),
            m("/home/agent/.cargo", false, MountKind::Cache),
            m("/knowledge/rust", true, MountKind::Knowledge),
        ]);
        let targets: Vec<_> = listed
            .iter()
            .map(|m| (m.target.as_str(), m.browsable))
            .collect();
        assert_eq!(
            targets,
            [
                ("/knowledge/rust", true),
                ("/knowledge/team", true),
                ("/home/agent/.cargo", false),
                ("/home/u/code/app", false)
            ]
        );
        assert_eq!(
            browsable_mount(&listed, "/knowledge/team").map(|m| m.source.as_str()),
            Some("/host/knowledge/team")
        );
        assert!(
            browsable_mount(&listed, "/home/agent/.cargo").is_none(),
            "a cache"
        );
        assert!(
            browsable_mount(&listed, "/home/u/code/app").is_none(),
            "the scope"
        );
    }
}

/// The name of the document in a session's folder recording its sandbox's mounts at its last
/// start (F.8: the mounts recorded, and which are browsable).
pub const MOUNTS_FILE: &str = "mounts.json";

/// One mount of a session's sandbox, as the Files pane's Access tab shows it (F.8: what the
/// agent sees of the computer) and as `mount` names it (its target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionMount {
    /// Where the agent sees it (the sandbox path; a scope's is its host path).
    pub target: String,
    /// The host folder or file.
    pub source: String,
    /// Read-only to the agent; otherwise it "can change".
    pub read_only: bool,
    /// What it is for.
    pub kind: crate::sandbox::MountKind,
    /// Its files can be read through the files endpoints' `mount` (a knowledge folder).
    pub browsable: bool,
}

/// Whether a mount of this kind is browsable (F.8: knowledge folders; a cache, a state slot,
/// configuration or the scope itself are not — the scope is the session's folder).
pub fn browsable(kind: crate::sandbox::MountKind) -> bool {
    matches!(kind, crate::sandbox::MountKind::Knowledge)
}

/// A sandbox's mounts as the Access tab lists them: the browsable ones first, then the others,
/// each group by target.
pub fn session_mounts(mounts: &[crate::sandbox::Mount]) -> Vec<SessionMount> {
    let mut out: Vec<SessionMount> = mounts
        .iter()
        .map(|m| SessionMount {
            target: m.target.clone(),
            source: m.source.clone(),
            read_only: m.read_only,
            kind: m.kind,
            browsable: browsable(m.kind),
        })
        .collect();
    out.sort_by(|a, b| (!a.browsable, &a.target).cmp(&(!b.browsable, &b.target)));
    out
}

/// The browsable mount whose target is `target` (F.8: `mount` names one; 404 otherwise).
pub fn browsable_mount<'a>(mounts: &'a [SessionMount], target: &str) -> Option<&'a SessionMount> {
    mounts.iter().find(|m| m.browsable && m.target == target)
}
