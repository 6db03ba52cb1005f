//! Which images a machine may be made of (issue 29, the second seed's "Allowed images"): a
//! daemon setting lists patterns that match whole name components, never string prefixes —
//! `*` one component, `**` any number of them, a pattern without a tag every tag — and
//! `node:22`, `library/node:22`, `docker.io/library/node:22` and
//! `index.docker.io/library/node:22` are one image. An image starting with `-` is always
//! refused (the engine would read it as an option). Pure.

/// An image reference split into what patterns compare: its registry, its path components and
/// its tag (`latest` when it names none; `None` for a digest reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageName {
    /// The registry (`docker.io` for Docker Hub, whichever way it was spelled).
    pub registry: String,
    /// The repository's components (`library`, `node`).
    pub path: Vec<String>,
    /// The tag, `latest` by default; None when the reference is by digest.
    pub tag: Option<String>,
}

/// An image name or pattern that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Starts with `-`: an engine would read it as an option.
    #[error("{0:?} starts with '-': an image name never does (the engine would read an option)")]
    Dash(String),
    /// Empty, or with an empty component.
    #[error("{0:?} is not an image name (an empty name or component)")]
    Empty(String),
    /// A character no image name has.
    #[error("{0:?} is not an image name: {1:?} is not allowed")]
    Char(String, char),
    /// A star inside a component (`node:22-*`): patterns match whole components.
    #[error("{0:?}: a star stands for a whole component (`*`, `**`), never part of one")]
    PartialStar(String),
    /// The image is not among the allowed ones.
    #[error("image {0:?} is not allowed here (the daemon's machine image patterns: {1})")]
    NotAllowed(String, String),
}

fn is_registry(first: &str) -> bool {
    first.contains('.') || first.contains(':') || first == "localhost"
}

/// Splits `name[:tag][@digest]` into its parts, Docker Hub's spellings made one.
fn split(text: &str, star: bool) -> Result<ImageName, ImageError> {
    if text.starts_with('-') {
        return Err(ImageError::Dash(text.into()));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-/:@".contains(c) || (star && c == '*');
    if let Some(c) = text.chars().find(|c| !allowed(*c)) {
        return Err(ImageError::Char(text.into(), c));
    }
    let (rest, digest) = match text.split_once('@') {
        Some((r, d)) => (r, Some(d)),
        None => (text, None),
    };
    // The tag is after the last ':' that follows the last '/' (a registry's port is before).
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[slash..].rfind(':') {
        Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
        None => (rest, None),
    };
    let mut parts: Vec<&str> = name.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) || tag.is_some_and(str::is_empty) {
        return Err(ImageError::Empty(text.into()));
    }
    let registry = if parts.len() > 1 && (is_registry(parts[0]) || (star && parts[0] == "*")) {
        parts.remove(0).to_string()
    } else {
        "docker.io".to_string()
    };
    let registry = match registry.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        _ => registry,
    };
    if registry == "docker.io" && parts.len() == 1 && parts[0] != "*" && parts[0] != "**" {
        parts.insert(0, "library");
    }
    let tag = match (tag, digest) {
        (Some(t), _) => Some(t.to_string()),
        (None, Some(_)) => None,
        (None, None) => Some("latest".to_string()),
    };
    Ok(ImageName {
        registry,
        path: parts.into_iter().map(String::from).collect(),
        tag,
    })
}

impl ImageName {
    /// Reads an image reference (no stars).
    pub fn parse(text: &str) -> Result<Self, ImageError> {
        split(text, false)
    }
}

/// One allowed-image pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePattern {
    text: String,
    /// `*` alone: any image.
    any: bool,
    /// registry, then the path's components (`*`, `**` or a name).
    components: Vec<String>,
    /// A tag to match (None: every tag).
    tag: Option<String>,
}

impl ImagePattern {
    /// Reads a pattern; a star inside a component is refused.
    pub fn parse(text: &str) -> Result<Self, ImageError> {
        if text == "*" || text == "**" {
            return Ok(ImagePattern {
                text: text.into(),
                any: true,
                components: Vec::new(),
                tag: None,
            });
        }
        let n = split(text, true)?;
        let partial = |c: &str| c.contains('*') && c != "*" && c != "**";
        if std::iter::once(n.registry.as_str())
            .chain(n.path.iter().map(String::as_str))
            .any(partial)
            || n.tag
                .as_deref()
                .is_some_and(|t| t.contains('*') && t != "*")
            || n.registry == "**"
        {
            return Err(ImageError::PartialStar(text.into()));
        }
        // Written without a tag: every tag (split gave it `latest`).
        let written_tag = text
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':'));
        let tag = n.tag.filter(|t| written_tag && t != "*");
        let mut components = vec![n.registry];
        components.extend(n.path);
        Ok(ImagePattern {
            text: text.into(),
            any: false,
            components,
            tag,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `image` is one this pattern allows.
    pub fn allows(&self, image: &ImageName) -> bool {
        if self.any {
            return true;
        }
        if let Some(t) = &self.tag
            && image.tag.as_ref() != Some(t)
        {
            return false;
        }
        let mut name = vec![image.registry.as_str()];
        name.extend(image.path.iter().map(String::as_str));
        let pat: Vec<&str> = self.components.iter().map(String::as_str).collect();
        matches(&pat, &name)
    }
}

/// Whole components: `*` one, `**` one or more.
fn matches(pat: &[&str], name: &[&str]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some(&"**"), _) => (1..=name.len()).any(|k| matches(&pat[1..], &name[k..])),
        (Some(p), Some(n)) => (*p == "*" || p == n) && matches(&pat[1..], &name[1..]),
        _ => false,
    }
}

/// The daemon's allowed images: none listed means any image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedImages(Vec<ImagePattern>);

impl AllowedImages {
    /// The patterns (each read, the first refused one named).
    pub fn parse(patterns: &[String]) -> Result<Self, ImageError> {
        patterns
            .iter()
            .map(|p| ImagePattern::parse(p))
            .collect::<Result<_, _>>()
            .map(AllowedImages)
    }

    /// `image` read and allowed (always, with no patterns; never, when it starts with `-`).
    pub fn check(&self, image: &str) -> Result<ImageName, ImageError> {
        let name = ImageName::parse(image)?;
        if self.0.is_empty() || self.0.iter().any(|p| p.allows(&name)) {
            return Ok(name);
        }
        let list: Vec<&str> = self.0.iter().map(ImagePattern::as_str).collect();
        Err(ImageError::NotAllowed(image.into(), list.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The second seed's table, with the spellings it names as one image.
    const TABLE: &[(&str, &[&str], &[&str])] = &[
        (
            "node:22",
            &[
                "node:22",
                "library/node:22",
                "docker.io/library/node:22",
                "index.docker.io/library/node:22",
            ],
            &["node:20", "node", "node:22-slim", "nodejs/node:22"],
        ),
        (
            "node:*",
            &["node:22", "node", "docker.io/library/node:18-alpine"],
            &["nodejs/node", "node-evil/x", "ghcr.io/node:1"],
        ),
        (
            "ghcr.io/acme/*:*",
            &["ghcr.io/acme/x", "ghcr.io/acme/tool:1.2"],
            &[
                "ghcr.io/acme-evil/x",
                "ghcr.io/acme/x/y",
                "docker.io/acme/x",
            ],
        ),
        (
            "ghcr.io/acme/**",
            &["ghcr.io/acme/x", "ghcr.io/acme/x/y/z:3"],
            &["ghcr.io/acme", "ghcr.io/acme-evil/x", "quay.io/acme/x"],
        ),
        (
            "*/acme/**",
            &["ghcr.io/acme/x", "quay.io/acme/a/b:1", "docker.io/acme/y"],
            &["ghcr.io/acmex/x", "acme"],
        ),
        (
            "*",
            &["node", "ghcr.io/acme/x:1", "localhost:5000/a/b@sha256:00"],
            &["-x"],
        ),
    ];

    #[test]
    fn the_seeds_table() {
        let mut out = String::new();
        for (pattern, allows, refuses) in TABLE {
            let list = AllowedImages::parse(&[(*pattern).to_string()]).unwrap();
            for i in *allows {
                assert!(list.check(i).is_ok(), "{pattern} should allow {i}");
            }
            for i in *refuses {
                assert!(list.check(i).is_err(), "{pattern} should refuse {i}");
            }
            out.push_str(&format!(
                "{pattern:18} allows {}\n{:18} refuses {}\n",
                allows.join(", "),
                "",
                refuses.join(", ")
            ));
        }
        insta::assert_snapshot!(out);
    }

    #[test]
    fn a_star_inside_a_component_and_a_dash_are_refused() {
        for p in ["node:22-*", "ghcr.io/ac*/x", "-x"] {
            assert!(ImagePattern::parse(p).is_err(), "{p}");
        }
        assert_eq!(
            AllowedImages::default().check("-x"),
            Err(ImageError::Dash("-x".into()))
        );
        assert!(AllowedImages::default().check("anything/at:all").is_ok());
        let e = AllowedImages::parse(&["node:*".into()])
            .unwrap()
            .check("python:3")
            .unwrap_err();
        assert!(e.to_string().contains("node:*"), "{e}");
    }
}
