//! Importing a skill from an archive (D.17): the entries a zip (or a repository's archive) holds
//! are judged here before anything is written — at most [`MAX_FILES`] entries and [`MAX_BYTES`]
//! unpacked, no absolute path, no `..`, no link out of the archive, no device — and the skill is
//! the folder of the shallowest SKILL.md, its hidden files and its links (inside) left out. Also
//! where a GitHub repository's folder URL is fetched from.

/// The most bytes an archive may hold, packed or unpacked (32 MiB).
pub const MAX_BYTES: u64 = 32 * 1024 * 1024;
/// The most entries an archive may hold.
pub const MAX_FILES: usize = 2000;

/// What an archive's entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File {
        /// Whether a mode bit says it is executable.
        executable: bool,
    },
    /// A folder.
    Dir,
    /// A symbolic link, with its target.
    Link {
        /// What it points to, as stored.
        target: String,
    },
    /// A device, a FIFO or a socket.
    Special,
}

/// One entry of an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path as stored (`/`-separated).
    pub path: String,
    /// What it is.
    pub kind: EntryKind,
    /// Its unpacked size.
    pub size: u64,
}

/// An archive refused, naming the entry. Never quotes a file's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// More than [`MAX_FILES`] entries.
    #[error("the archive has {0} entries, more than 2000")]
    TooManyFiles(usize),
    /// More than [`MAX_BYTES`] unpacked.
    #[error("the archive unpacks to more than 32 MiB")]
    TooLarge,
    /// An absolute path.
    #[error("{0}: an absolute path")]
    AbsolutePath(String),
    /// A `..` component: it would land outside the skill.
    #[error("{0}: a path leaving the archive (..)")]
    Escapes(String),
    /// A link whose target is outside the archive.
    #[error("{path}: a link out of the archive (to {target})")]
    LinkOut {
        /// The link.
        path: String,
        /// Its target.
        target: String,
    },
    /// A device, FIFO or socket.
    #[error("{0}: a device or special file")]
    Special(String),
    /// No SKILL.md (in the folder asked for).
    #[error("no SKILL.md in the archive{0}")]
    NoSkill(String),
    /// Two SKILL.md as shallow as each other.
    #[error("{0} and {1}: two SKILL.md at the same depth; import one folder")]
    Ambiguous(String, String),
}

/// What to unpack: the skill's folder in the archive and its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The folder of the SKILL.md chosen (`""`: the archive's top).
    pub root: String,
    /// Each file to write: the entry's index, its path in the skill, its executable bit.
    pub files: Vec<(usize, String, bool)>,
}

fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// `target` of a link at `path`, resolved lexically: `None` when it leaves the archive.
fn resolves_inside(path: &str, target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    let mut depth: Vec<&str> = components(path).collect();
    depth.pop();
    for c in components(target) {
        if c == ".." {
            if depth.pop().is_none() {
                return false;
            }
        } else {
            depth.push(c);
        }
    }
    true
}

/// Judges every entry of an archive, whatever it holds (a skill's or an addon's, G.5): at most
/// [`MAX_FILES`] entries and [`MAX_BYTES`] declared, no absolute path, no `..`, no link out, no
/// device; the first refusal names its entry.
pub fn check(entries: &[Entry]) -> Result<(), ArchiveError> {
    check_entries(entries)
}

/// Checks every entry (the whole archive, not only the skill's folder).
fn check_entries(entries: &[Entry]) -> Result<(), ArchiveError> {
    if entries.len() > MAX_FILES {
        return Err(ArchiveError::TooManyFiles(entries.len()));
    }
    let total: u64 = entries.iter().map(|e| e.size).fold(0, u64::saturating_add);
    if total > MAX_BYTES {
        return Err(ArchiveError::TooLarge);
    }
    for e in entries {
        if e.path.starts_with('/') || e.path.starts_with('\\') || e.path.contains(":\\") {
            return Err(ArchiveError::AbsolutePath(e.path.clone()));
        }
        if e.path.contains('\\') || components(&e.path).any(|c| c == "..") {
            return Err(ArchiveError::Escapes(e.path.clone()));
        }
        match &e.kind {
            EntryKind::Link { target } if !resolves_inside(&e.path, target) => {
                return Err(ArchiveError::LinkOut {
                    path: e.path.clone(),
                    target: target.clone(),
                });
            }
            EntryKind::Special => return Err(ArchiveError::Special(e.path.clone())),
            _ => {}
        }
    }
    Ok(())
}

/// Judges an archive's entries and chooses the skill: the shallowest SKILL.md (inside `within`,
/// a folder of the archive, when given), its folder's regular files but hidden ones.
pub fn plan(entries: &[Entry], within: Option<&str>) -> Result<Plan, ArchiveError> {
    check_entries(entries)?;
    let norm = |p: &str| components(p).collect::<Vec<_>>().join("/");
    let within = within.map(norm).filter(|w| !w.is_empty());
    let inside = |p: &str| match &within {
        Some(w) => p == w || p.starts_with(&format!("{w}/")),
        None => true,
    };
    let mut best: Option<(usize, String)> = None;
    for e in entries {
        let p = norm(&e.path);
        if !matches!(e.kind, EntryKind::File { .. }) || !inside(&p) {
            continue;
        }
        let parts: Vec<&str> = p.split('/').collect();
        if parts.last() != Some(&"SKILL.md") || parts.iter().any(|c| c.starts_with('.')) {
            continue;
        }
        let depth = parts.len();
        match &best {
            Some((d, other)) if *d == depth => {
                return Err(ArchiveError::Ambiguous(other.clone(), p));
            }
            Some((d, _)) if *d < depth => {}
            _ => best = Some((depth, p)),
        }
    }
    let Some((_, skill_md)) = best else {
        let w = within.map(|w| format!(" under {w}")).unwrap_or_default();
        return Err(ArchiveError::NoSkill(w));
    };
    let root = skill_md
        .strip_suffix("SKILL.md")
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    let mut files = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let EntryKind::File { executable } = e.kind else {
            continue;
        };
        let p = norm(&e.path);
        let rel = if root.is_empty() {
            Some(p.as_str())
        } else {
            p.strip_prefix(&format!("{root}/"))
        };
        if let Some(rel) = rel.filter(|r| !r.split('/').any(|c| c.starts_with('.'))) {
            files.push((i, rel.to_string(), executable));
        }
    }
    Ok(Plan { root, files })
}

/// Where an `https://` URL's skill is fetched from: a GitHub repository or one of its folders
/// (`https://github.com/<owner>/<repo>[/tree/<ref>/<folder>]`) from its zip archive, with the
/// folder to look in (below the archive's top folder); any other URL as it is (an archive).
pub fn fetch_location(url: &str) -> (String, Option<String>) {
    let Some(rest) = url.strip_prefix("https://github.com/") else {
        return (url.to_string(), None);
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [owner, repo] => (
            format!(
                "https://codeload.github.com/{owner}/{}/zip/HEAD",
                repo.trim_end_matches(".git")
            ),
            None,
        ),
        [owner, repo, "tree", reference, folder @ ..] => (
            format!("https://codeload.github.com/{owner}/{repo}/zip/{reference}"),
            (!folder.is_empty()).then(|| folder.join("/")),
        ),
        _ => (url.to_string(), None),
    }
}

/// A repository's archive holds one top folder (`<repo>-<ref>/`): `folder` below it.
pub fn under_top_folder(entries: &[Entry], folder: &str) -> Option<String> {
    let top = components(&entries.first()?.path).next()?.to_string();
    Some(format!("{top}/{folder}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> Entry {
        Entry {
            path: path.into(),
            kind: EntryKind::File { executable: false },
            size: 10,
        }
    }
    fn link(path: &str, target: &str) -> Entry {
        Entry {
            path: path.into(),
            kind: EntryKind::Link {
                target: target.into(),
            },
            size: 0,
        }
    }

    #[test]
    fn the_shallowest_skill_md_is_the_skill_hidden_files_and_links_left_out() {
        let mut run = file("repo-main/pdf/scripts/run.sh");
        run.kind = EntryKind::File { executable: true };
        let entries = vec![
            Entry {
                path: "repo-main/".into(),
                kind: EntryKind::Dir,
                size: 0,
            },
            file("repo-main/README.md"),
            file("repo-main/pdf/SKILL.md"),
            run,
            file("repo-main/pdf/.env"),
            file("repo-main/pdf/.git/config"),
            link("repo-main/pdf/latest", "scripts/run.sh"),
            file("repo-main/pdf/nested/SKILL.md"),
        ];
        let p = plan(&entries, None).unwrap();
        assert_eq!(p.root, "repo-main/pdf");
        let files: Vec<(&str, bool)> = p.files.iter().map(|(_, r, x)| (r.as_str(), *x)).collect();
        assert_eq!(
            files,
            vec![
                ("SKILL.md", false),
                ("scripts/run.sh", true),
                ("nested/SKILL.md", false)
            ]
        );
        let p = plan(&entries, Some("repo-main/pdf/nested")).unwrap();
        assert_eq!(p.root, "repo-main/pdf/nested");
        assert_eq!(p.files.len(), 1);
        assert_eq!(
            plan(&entries, Some("repo-main/other")).unwrap_err(),
            ArchiveError::NoSkill(" under repo-main/other".into())
        );
    }

    #[test]
    fn refusals_name_the_entry() {
        let ok = file("SKILL.md");
        let cases = [
            (
                link("x/out", "../../etc/passwd"),
                "x/out: a link out of the archive (to ../../etc/passwd)",
            ),
            (
                link("x/abs", "/etc/passwd"),
                "x/abs: a link out of the archive (to /etc/passwd)",
            ),
            (file("/etc/cron.d/x"), "/etc/cron.d/x: an absolute path"),
            (
                file("a/../../x"),
                "a/../../x: a path leaving the archive (..)",
            ),
            (
                Entry {
                    path: "dev/null".into(),
                    kind: EntryKind::Special,
                    size: 0,
                },
                "dev/null: a device or special file",
            ),
        ];
        for (bad, want) in cases {
            let e = plan(&[ok.clone(), bad], None).unwrap_err();
            assert_eq!(e.to_string(), want);
        }
        let many: Vec<Entry> = (0..=MAX_FILES).map(|i| file(&format!("f{i}"))).collect();
        assert_eq!(
            plan(&many, None).unwrap_err(),
            ArchiveError::TooManyFiles(2001)
        );
        let mut big = file("big.bin");
        big.size = MAX_BYTES + 1;
        assert_eq!(plan(&[ok, big], None).unwrap_err(), ArchiveError::TooLarge);
        assert!(matches!(
            plan(&[file("a/SKILL.md"), file("b/SKILL.md")], None).unwrap_err(),
            ArchiveError::Ambiguous(..)
        ));
        assert_eq!(
            plan(&[file("README.md")], None).unwrap_err().to_string(),
            "no SKILL.md in the archive"
        );
    }

    #[test]
    fn a_github_folder_is_fetched_from_its_repositorys_archive() {
        assert_eq!(
            fetch_location("https://github.com/anthropics/skills/tree/main/skills/pdf"),
            (
                "https://codeload.github.com/anthropics/skills/zip/main".to_string(),
                Some("skills/pdf".to_string())
            )
        );
        assert_eq!(
            fetch_location("https://github.com/o/r.git").0,
            "https://codeload.github.com/o/r/zip/HEAD"
        );
        assert_eq!(
            fetch_location("https://example.com/s.zip"),
            ("https://example.com/s.zip".to_string(), None)
        );
        assert_eq!(
            under_top_folder(&[file("r-main/x")], "skills/pdf").as_deref(),
            Some("r-main/skills/pdf")
        );
    }
}
