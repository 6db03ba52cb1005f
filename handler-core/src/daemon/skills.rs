//! Skills at launch (D.17): a skill is a folder of the library (`$HANDLER_SKILLS_DIR`, default
//! `<config>/skills`) or of an addon (`<addon>/skills/<skill>`, G4) holding a SKILL.md whose
//! YAML frontmatter names it (its folder's name) and describes it. Checked at each start: a
//! skill missing or invalid fails the start (`skill '<name>': …`).

use std::path::{Path, PathBuf};

use handler_contracts::validate::validate_skill_name;

/// A skill's SKILL.md frontmatter, the two fields Handler reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontmatter {
    pub name: String,
    pub description: String,
}

/// Reads the frontmatter of a SKILL.md: a `---` line, `key: value` lines (plain, quoted, or a
/// `>`/`|` block of indented lines), a `---` line. Only `name` and `description` are read; other
/// fields are the harness's.
pub fn frontmatter(text: &str) -> Result<Frontmatter, String> {
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("SKILL.md does not start with a frontmatter (a line ---)".into());
    }
    let mut body: Vec<&str> = Vec::new();
    let mut closed = false;
    for l in lines {
        if l.trim_end() == "---" {
            closed = true;
            break;
        }
        body.push(l);
    }
    if !closed {
        return Err("SKILL.md's frontmatter has no closing line ---".into());
    }
    let field = |key: &str| -> Option<String> {
        let mut i = 0;
        while i < body.len() {
            let l = body[i];
            if !l.starts_with(' ')
                && let Some(rest) = l.strip_prefix(key).and_then(|r| r.strip_prefix(':'))
            {
                let v = rest.trim();
                if v.starts_with('>') || v.starts_with('|') {
                    let folded = v.starts_with('>');
                    let parts: Vec<&str> = body[i + 1..]
                        .iter()
                        .take_while(|x| x.starts_with(' ') || x.starts_with('\t') || x.is_empty())
                        .map(|x| x.trim())
                        .collect();
                    return Some(
                        parts
                            .join(if folded { " " } else { "\n" })
                            .trim()
                            .to_string(),
                    );
                }
                let unquoted = if v.len() >= 2
                    && ((v.starts_with('"') && v.ends_with('"'))
                        || (v.starts_with('\'') && v.ends_with('\'')))
                {
                    &v[1..v.len() - 1]
                } else {
                    v
                };
                return Some(unquoted.to_string());
            }
            i += 1;
        }
        None
    };
    let name = field("name").ok_or("SKILL.md's frontmatter has no name")?;
    let description = field("description").ok_or("SKILL.md's frontmatter has no description")?;
    if description.is_empty() || description.chars().count() > 1024 {
        return Err("description: 1 to 1024 characters".into());
    }
    Ok(Frontmatter { name, description })
}

/// Checks the skill in `dir` (named `name`, its folder's name): its canonical path.
pub fn check_skill_dir(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let fail = |why: String| format!("skill '{name}': {why}");
    validate_skill_name(name).map_err(|e| fail(e.message))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|_| fail("not in the library".into()))?;
    if !meta.is_dir() {
        return Err(fail(format!("{} is not a folder", dir.display())));
    }
    let text = std::fs::read_to_string(dir.join("SKILL.md"))
        .map_err(|e| fail(format!("SKILL.md: {e}")))?;
    let fm = frontmatter(&text).map_err(fail)?;
    if fm.name != name {
        return Err(fail(format!(
            "SKILL.md names it {:?}, not its folder's name",
            fm.name
        )));
    }
    std::fs::canonicalize(dir)
        .map(|p| p.to_path_buf())
        .map_err(|e| fail(e.to_string()))
}

/// A skill of the library by name.
pub fn library_skill(skills_dir: &Path, name: &str) -> Result<PathBuf, String> {
    if validate_skill_name(name).is_err() {
        return Err(format!("skill '{name}': not a skill name"));
    }
    check_skill_dir(&skills_dir.join(name), name)
}

/// The skills an addon brings: `<addon dir>/skills/<skill>/`, sorted by name.
pub fn addon_skill_names(addon_dir: &Path) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_plain_quoted_and_block_fields() {
        let fm = frontmatter(
            "---\nname: pdf-tools\ndescription: \"Reads PDFs\"\nlicense: MIT\n---\n# PDF\n",
        )
        .unwrap();
        assert_eq!(fm.name, "pdf-tools");
        assert_eq!(fm.description, "Reads PDFs");
        let fm =
            frontmatter("---\nname: x\ndescription: >\n  Line one\n  line two\nother: 1\n---\n")
                .unwrap();
        assert_eq!(fm.description, "Line one line two");
    }

    #[test]
    fn refuses_what_is_not_a_skill() {
        assert!(frontmatter("# no frontmatter\n").is_err());
        assert!(frontmatter("---\nname: x\n").is_err());
        assert!(frontmatter("---\ndescription: d\n---\n").is_err());
        assert!(frontmatter("---\nname: x\ndescription:\n---\n").is_err());
    }

    #[test]
    fn a_skill_folder_must_name_itself() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("review");
        std::fs::create_dir(&s).unwrap();
        assert!(
            library_skill(d.path(), "review")
                .unwrap_err()
                .contains("SKILL.md")
        );
        std::fs::write(
            s.join("SKILL.md"),
            "---\nname: other\ndescription: d\n---\n",
        )
        .unwrap();
        let e = library_skill(d.path(), "review").unwrap_err();
        assert!(
            e.starts_with("skill 'review': SKILL.md names it \"other\""),
            "{e}"
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
            library_skill(d.path(), "gone").unwrap_err(),
            "skill 'gone': not in the library"
        );
    }
}
