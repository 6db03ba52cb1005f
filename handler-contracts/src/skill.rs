//! A skill's SKILL.md (D.17): its YAML frontmatter names the skill (its folder's name) and
//! describes it. Only those two fields are Handler's; the others are the harness's.

/// A skill's SKILL.md frontmatter, the two fields Handler reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontmatter {
    /// The skill's name (its folder's name, checked by the caller).
    pub name: String,
    /// What it is for: 1 to 1024 characters.
    pub description: String,
}

/// A SKILL.md that is not a skill's. Never quotes the file's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrontmatterError {
    /// The first line is not `---`.
    #[error("SKILL.md does not start with a frontmatter (a line ---)")]
    NotStarted,
    /// No `---` line ends the frontmatter.
    #[error("SKILL.md's frontmatter has no closing line ---")]
    NotClosed,
    /// No `name:` field.
    #[error("SKILL.md's frontmatter has no name")]
    NoName,
    /// No `description:` field.
    #[error("SKILL.md's frontmatter has no description")]
    NoDescription,
    /// A description empty or over 1024 characters.
    #[error("description: 1 to 1024 characters")]
    DescriptionLength,
}

/// The value of a top-level `key:` of the frontmatter's lines: plain, quoted, or a `>`/`|` block
/// of the indented lines that follow.
fn field(body: &[&str], key: &str) -> Option<String> {
    for (i, l) in body.iter().enumerate() {
        if l.starts_with(' ') {
            continue;
        }
        let Some(rest) = l.strip_prefix(key).and_then(|r| r.strip_prefix(':')) else {
            continue;
        };
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
        let quoted = v.len() >= 2
            && ((v.starts_with('"') && v.ends_with('"'))
                || (v.starts_with('\'') && v.ends_with('\'')));
        return Some(if quoted { &v[1..v.len() - 1] } else { v }.to_string());
    }
    None
}

/// Reads the frontmatter of a SKILL.md: a `---` line, `key: value` lines (plain, quoted, or a
/// `>`/`|` block of indented lines), a `---` line. Only `name` and `description` are read.
pub fn frontmatter(text: &str) -> Result<Frontmatter, FrontmatterError> {
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(FrontmatterError::NotStarted);
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
        return Err(FrontmatterError::NotClosed);
    }
    let name = field(&body, "name").ok_or(FrontmatterError::NoName)?;
    let description = field(&body, "description").ok_or(FrontmatterError::NoDescription)?;
    if description.is_empty() || description.chars().count() > 1024 {
        return Err(FrontmatterError::DescriptionLength);
    }
    Ok(Frontmatter { name, description })
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
        let fm = frontmatter("---\nname: 'x'\ndescription: |\n  a\n  b\n---\n").unwrap();
        assert_eq!((fm.name.as_str(), fm.description.as_str()), ("x", "a\nb"));
    }

    #[test]
    fn refuses_what_is_not_a_skill() {
        use FrontmatterError::*;
        for (text, e) in [
            ("# no frontmatter\n", NotStarted),
            ("---\nname: x\n", NotClosed),
            ("---\ndescription: d\n---\n", NoName),
            ("---\nname: x\n---\n", NoDescription),
            ("---\nname: x\ndescription:\n---\n", DescriptionLength),
        ] {
            assert_eq!(frontmatter(text).unwrap_err(), e, "{text:?}");
        }
        let long = format!("---\nname: x\ndescription: {}\n---\n", "d".repeat(1025));
        assert_eq!(frontmatter(&long).unwrap_err(), DescriptionLength);
        // An indented `name:` belongs to another field's block.
        assert_eq!(
            frontmatter("---\nother: |\n  name: x\ndescription: d\n---\n").unwrap_err(),
            NoName
        );
    }
}
