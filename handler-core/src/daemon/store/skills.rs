//! Skills at launch (D.17): a skill is a folder of the library (`$HANDLER_SKILLS_DIR`, default
//! `<config>/skills`) or of an addon (`<addon>/skills/<skill>`, G4) holding a SKILL.md whose
//! frontmatter (`handler_contracts::skill`) names it (its folder's name) and describes it.
//! Checked at each start: a skill missing or invalid fails the start (`skill '<name>': …`).

use std::path::{Path, PathBuf};

use handler_contracts::skill::{FrontmatterError, frontmatter};
use handler_contracts::validate::validate_skill_name;

/// A skill that cannot be used, named.
#[derive(Debug, thiserror::Error)]
#[error("skill '{name}': {problem}")]
pub(crate) struct SkillError {
    /// The skill's name as asked.
    pub(crate) name: String,
    /// What is wrong with it.
    pub(crate) problem: SkillProblem,
}

/// What is wrong with a skill.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SkillProblem {
    /// Its name is not a skill name (the validator's message).
    #[error("{0}")]
    Name(String),
    /// Asked of the library by a name that is not a skill name.
    #[error("not a skill name")]
    NotAName,
    /// No such folder.
    #[error("not in the library")]
    Missing,
    /// There, but not a folder.
    #[error("{0} is not a folder")]
    NotAFolder(String),
    /// Its SKILL.md cannot be read (the reason as the system gives it).
    #[error("SKILL.md: {0}")]
    Unreadable(std::io::Error),
    /// Its SKILL.md is not a skill's.
    #[error(transparent)]
    Frontmatter(#[from] FrontmatterError),
    /// Its SKILL.md names another skill.
    #[error("SKILL.md names it {0:?}, not its folder's name")]
    Misnamed(String),
    /// Its folder cannot be resolved.
    #[error(transparent)]
    Canonical(std::io::Error),
}

/// Checks the skill in `dir` (named `name`, its folder's name): its canonical path.
pub(crate) fn check_skill_dir(dir: &Path, name: &str) -> Result<PathBuf, SkillError> {
    let fail = |problem: SkillProblem| SkillError {
        name: name.to_string(),
        problem,
    };
    validate_skill_name(name).map_err(|e| fail(SkillProblem::Name(e.message)))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|_| fail(SkillProblem::Missing))?;
    if !meta.is_dir() {
        return Err(fail(SkillProblem::NotAFolder(dir.display().to_string())));
    }
    let text = std::fs::read_to_string(dir.join("SKILL.md"))
        .map_err(|e| fail(SkillProblem::Unreadable(e)))?;
    let fm = frontmatter(&text).map_err(|e| fail(e.into()))?;
    if fm.name != name {
        return Err(fail(SkillProblem::Misnamed(fm.name)));
    }
    std::fs::canonicalize(dir).map_err(|e| fail(SkillProblem::Canonical(e)))
}

/// A skill of the library by name.
pub(crate) fn library_skill(skills_dir: &Path, name: &str) -> Result<PathBuf, SkillError> {
    if validate_skill_name(name).is_err() {
        return Err(SkillError {
            name: name.to_string(),
            problem: SkillProblem::NotAName,
        });
    }
    check_skill_dir(&skills_dir.join(name), name)
}

/// The skills an addon brings: `<addon dir>/skills/<skill>/`, sorted by name.
pub(crate) fn addon_skill_names(addon_dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(addon_dir.join("skills")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// One file of a skill's folder: its path in it (`/`-separated), size and executable bit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LibFile {
    /// Relative to the skill's folder.
    pub(crate) path: String,
    /// In bytes.
    pub(crate) size: u64,
    /// Any executable bit set.
    pub(crate) executable: bool,
}

/// The library's skills: its folders (not links, not hidden, not `_`-prefixed staging), sorted.
pub(crate) fn library_names(skills_dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(skills_dir) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// Every regular file of a skill's folder, recursively, sorted by path: hidden ones (any
/// component starting with `.`) and links left out, as an agent's skill never has them.
pub(crate) fn skill_files(dir: &Path) -> std::io::Result<Vec<LibFile>> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let Some(name) = e.file_name().to_str().map(String::from) else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let meta = e.metadata()?;
            if meta.is_dir() {
                stack.push((e.path(), rel));
            } else if meta.is_file() {
                out.push(LibFile {
                    path: rel,
                    size: meta.len(),
                    executable: meta.permissions().mode() & 0o111 != 0,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skill_folder_must_name_itself() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("review");
        std::fs::create_dir(&s).unwrap();
        assert!(
            library_skill(d.path(), "review")
                .unwrap_err()
                .to_string()
                .contains("SKILL.md")
        );
        std::fs::write(
            s.join("SKILL.md"),
            "---\nname: other\ndescription: d\n---\n",
        )
        .unwrap();
        let e = library_skill(d.path(), "review").unwrap_err().to_string();
        assert!(
            e.starts_with("skill 'review': SKILL.md names it \"other\""),
            "{e}"
        );
        std::fs::write(s.join("SKILL.md"), "no frontmatter\n").unwrap();
        assert_eq!(
            library_skill(d.path(), "review").unwrap_err().to_string(),
            "skill 'review': SKILL.md does not start with a frontmatter (a line ---)"
        );
        std::fs::write(
            s.join("SKILL.md"),
            "---\nname: review\ndescription: d\n---\n",
        )
        .unwrap();
        assert_eq!(
            library_skill(d.path(), "review").unwrap(),
            std::fs::canonicalize(&s).unwrap()
        );
        assert_eq!(
            library_skill(d.path(), "gone").unwrap_err().to_string(),
            "skill 'gone': not in the library"
        );
    }
}
