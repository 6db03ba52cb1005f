//! Parts (issue 30 item 2, decision 0164), pure: which parts there are (Node, and each harness
//! whose descriptor has a `[part]`), the order a request's parts build in (requirements
//! first), the Containerfile that copies one out of its checked source image into an image
//! of its own (FROM scratch, its tree at the root, so the image mounts at
//! `/opt/handler/parts/<id>`), and its tag: the version its source installed plus a short hash
//! of that Containerfile.

use std::collections::{BTreeMap, BTreeSet};

use handler_contracts::HarnessDescriptor;
use handler_contracts::machine::parts::{image_repository, target};
use sha2::{Digest, Sha256};

/// Node's part id: what every npm part runs on.
pub const NODE: &str = "node";

/// The folder of the build stage the part's tree is gathered in.
const STAGE: &str = "/handler-part";

/// What a part is copied out of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The toolbox's `:latest` (Node).
    Toolbox,
    /// A harness's checked `:latest`.
    Harness(String),
}

impl Source {
    /// How the API names it: `toolbox` or the harness's name.
    pub fn name(&self) -> &str {
        match self {
            Source::Toolbox => "toolbox",
            Source::Harness(h) => h,
        }
    }
}

/// One part Handler can build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its id: `node`, or the harness's name.
    pub id: String,
    /// Where it is copied from.
    pub source: Source,
    /// The parts it runs on.
    pub requires: Vec<String>,
    /// The commands it puts on the PATH.
    pub bin: Vec<String>,
    /// npm packages copied from the source's global root.
    pub packages: Vec<String>,
}

/// Why parts cannot be had as asked; each names the part and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartError {
    /// No part has this id.
    #[error("part {id:?}: no such part (there are: {known})")]
    Unknown {
        /// The id asked for.
        id: String,
        /// The ids there are, comma-separated.
        known: String,
    },
    /// A descriptor's `[part]` names something a part cannot hold.
    #[error("harness {harness:?}: part.{field}: {value:?} {why}")]
    Invalid {
        /// The harness.
        harness: String,
        /// `bin`, `packages` or `requires`.
        field: &'static str,
        /// The value.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Parts require each other in a circle.
    #[error("part {id:?}: its requirements come back to it")]
    Cycle {
        /// A part on the circle.
        id: String,
    },
}

/// A command's name in a part's `bin/`: letters, digits, `.`, `_`, `+`, `-`; not `.` or `..`.
fn is_command(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'+' | b'-'))
}

/// An npm package's name: `name` or `@scope/name`, lowercase, digits, `.`, `_`, `~`, `-`.
fn is_package(s: &str) -> bool {
    let word = |w: &str| {
        !w.is_empty()
            && !w.starts_with('.')
            && w.bytes().all(|c| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || matches!(c, b'.' | b'_' | b'~' | b'-')
            })
    };
    match s.strip_prefix('@') {
        Some(rest) => rest
            .split_once('/')
            .is_some_and(|(scope, name)| word(scope) && word(name)),
        None => s.len() <= 214 && word(s),
    }
}

/// Every part Handler can build: Node from the toolbox, and each descriptor's `[part]`
/// (its names checked; a requirement must be a part there is).
pub fn catalog<'a>(
    descriptors: impl IntoIterator<Item = &'a HarnessDescriptor>,
) -> Result<BTreeMap<String, Part>, PartError> {
    let mut out = BTreeMap::new();
    out.insert(
        NODE.to_string(),
        Part {
            id: NODE.into(),
            source: Source::Toolbox,
            requires: Vec::new(),
            bin: vec!["node".into()],
            packages: Vec::new(),
        },
    );
    for d in descriptors {
        let Some(r) = &d.part else { continue };
        let bad = |field, value: &str, why| PartError::Invalid {
            harness: d.name.clone(),
            field,
            value: value.to_string(),
            why,
        };
        if d.name == NODE {
            return Err(bad("bin", &d.name, "is Node's own part's id"));
        }
        if r.bin.is_empty() {
            return Err(bad(
                "bin",
                "",
                "is empty: a part puts at least one command on the PATH",
            ));
        }
        if let Some(b) = r.bin.iter().find(|b| !is_command(b)) {
            return Err(bad("bin", b, "is not a command's name"));
        }
        if let Some(p) = r.packages.iter().find(|p| !is_package(p)) {
            return Err(bad("packages", p, "is not an npm package's name"));
        }
        out.insert(
            d.name.clone(),
            Part {
                id: d.name.clone(),
                source: Source::Harness(d.name.clone()),
                requires: r.requires.clone(),
                bin: r.bin.clone(),
                packages: r.packages.clone(),
            },
        );
    }
    for p in out.values() {
        if let Some(r) = p
            .requires
            .iter()
            .find(|r| !out.contains_key(*r) || *r == &p.id)
        {
            return Err(PartError::Invalid {
                harness: p.id.clone(),
                field: "requires",
                value: r.clone(),
                why: "is not another part",
            });
        }
    }
    Ok(out)
}

/// The parts `asked` needs, each once, every requirement before the part that needs it (the
/// order they build and mount in); an unknown id refused by name.
pub fn closure(
    catalog: &BTreeMap<String, Part>,
    asked: &[String],
) -> Result<Vec<String>, PartError> {
    fn visit(
        catalog: &BTreeMap<String, Part>,
        id: &str,
        on_path: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) -> Result<(), PartError> {
        if out.iter().any(|o| o == id) {
            return Ok(());
        }
        let p = catalog.get(id).ok_or_else(|| PartError::Unknown {
            id: id.to_string(),
            known: catalog.keys().cloned().collect::<Vec<_>>().join(", "),
        })?;
        if !on_path.insert(id.to_string()) {
            return Err(PartError::Cycle { id: id.to_string() });
        }
        for r in &p.requires {
            visit(catalog, r, on_path, out)?;
        }
        on_path.remove(id);
        out.push(id.to_string());
        Ok(())
    }
    let mut out = Vec::new();
    for id in asked {
        visit(catalog, id, &mut BTreeSet::new(), &mut out)?;
    }
    Ok(out)
}

/// The first of `part`'s requirements in `failed`, if any: then it is left out too.
pub fn blocked_by<'a>(part: &'a Part, failed: &BTreeSet<String>) -> Option<&'a str> {
    part.requires
        .iter()
        .find(|r| failed.contains(*r))
        .map(String::as_str)
}

/// Single-quoted for sh (names are checked: none holds a quote).
fn q(s: &str) -> String {
    format!("'{s}'")
}

/// The Containerfile that builds `part` from the build argument `SOURCE_IMAGE` (its source's
/// checked image, by id): the tree is gathered in a stage of that image and copied alone into
/// an image FROM scratch, with `version` (the source's `/usr/share/handler/version`, Node's
/// `node --version`) at its root.
pub fn containerfile(part: &Part) -> String {
    let mut s = format!(
        "# Part {id} (decision 0164), written by Handler: its tree at the image's root, mounted\n\
         # read-only at {target} in a machine. Built from its source's checked image.\n\
         ARG SOURCE_IMAGE\n\
         FROM ${{SOURCE_IMAGE}} AS src\n\
         USER 0\n",
        id = part.id,
        target = target(&part.id),
    );
    match part.source {
        Source::Toolbox => s.push_str(&node_run()),
        Source::Harness(_) => s.push_str(&harness_run(part)),
    }
    s.push_str(&format!(
        "FROM scratch\nCOPY --from=src {STAGE}/ /\nLABEL handler.part={}\n",
        part.id
    ));
    s
}

/// Node's stage: the toolbox's `node`, every library it loads and its loader, the binary's
/// loader and library path set to the part's own (patchelf), so it runs in any image — one
/// with another libc, or none. Run once at the part's path before it is kept.
fn node_run() -> String {
    let root = target(NODE);
    format!(
        "RUN set -eu; p={STAGE}; P={root}; rm -rf \"$p\"; mkdir -p \"$p/bin\" \"$p/lib\"; \\\n\
         \x20   n=\"$(command -v node)\" || {{ echo 'part node: the toolbox has no node on its PATH' >&2; exit 1; }}; \\\n\
         \x20   n=\"$(readlink -f \"$n\")\"; \\\n\
         \x20   command -v patchelf >/dev/null || {{ echo 'part node: the toolbox has no patchelf (the default toolbox installs it)' >&2; exit 1; }}; \\\n\
         \x20   i=\"$(patchelf --print-interpreter \"$n\")\"; \\\n\
         \x20   cp \"$n\" \"$p/bin/node\"; cp -L \"$i\" \"$p/lib/\"; \\\n\
         \x20   for l in $(\"$i\" --list \"$n\" | sed -n 's|.*=> \\(/[^ ]*\\) .*|\\1|p'); do cp -L \"$l\" \"$p/lib/\"; done; \\\n\
         \x20   patchelf --set-interpreter \"$P/lib/$(basename \"$i\")\" --force-rpath --set-rpath \"$P/lib\" \"$p/bin/node\"; \\\n\
         \x20   mkdir -p \"$(dirname \"$P\")\"; rm -rf \"$P\"; ln -s \"$p\" \"$P\"; \\\n\
         \x20   \"$P/bin/node\" --version > \"$p/version\"; rm \"$P\"; cat \"$p/version\"\n"
    )
}

/// A harness's stage: its packages copied whole from the global npm root, each command of
/// `bin` found on the PATH — a link into a copied package kept as a link, anything else
/// copied — and the harness image's version line.
fn harness_run(part: &Part) -> String {
    let id = &part.id;
    let mut s = format!("RUN set -eu; p={STAGE}; rm -rf \"$p\"; mkdir -p \"$p/bin\"; \\\n");
    if part.packages.is_empty() {
        s.push_str("    root=/nonexistent; \\\n");
    } else {
        let pkgs: Vec<String> = part.packages.iter().map(|p| q(p)).collect();
        s.push_str(&format!(
            "    root=\"$(npm root -g)\"; mkdir -p \"$p/lib/node_modules\"; \\\n\
             \x20   for pkg in {pkgs}; do \\\n\
             \x20     test -d \"$root/$pkg\" || {{ echo \"part {id}: package $pkg is not in $root\" >&2; exit 1; }}; \\\n\
             \x20     mkdir -p \"$p/lib/node_modules/$(dirname \"$pkg\")\"; cp -a \"$root/$pkg\" \"$p/lib/node_modules/$pkg\"; \\\n\
             \x20   done; \\\n",
            pkgs = pkgs.join(" ")
        ));
    }
    let bins: Vec<String> = part.bin.iter().map(|b| q(b)).collect();
    s.push_str(&format!(
        "    for b in {bins}; do \\\n\
         \x20     f=\"$(command -v \"$b\")\" || {{ echo \"part {id}: no command $b on the image's PATH\" >&2; exit 1; }}; \\\n\
         \x20     t=\"$(readlink -f \"$f\")\"; \\\n\
         \x20     case \"$t\" in \"$root\"/*) ln -s \"../lib/node_modules/${{t#\"$root\"/}}\" \"$p/bin/$b\" ;; *) cp \"$t\" \"$p/bin/$b\" ;; esac; \\\n\
         \x20   done; \\\n\
         \x20   {{ head -n 1 /usr/share/handler/version 2>/dev/null || echo unknown; }} > \"$p/version\"; cat \"$p/version\"\n",
        bins = bins.join(" ")
    ));
    s
}

/// The first 12 hex digits of the Containerfile's SHA-256: a change to how a part is written
/// is another image at the same version.
pub fn recipe_hash(containerfile: &str) -> String {
    let d = Sha256::digest(containerfile.as_bytes());
    d.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// The version a part's `/version` holds, as labels and the API show it: its first line,
/// trimmed, without control characters, `,` and `@` (the `handler.parts` label's separators),
/// at most 120 characters; none when that leaves nothing. The file comes out of an image
/// built from a CLI's package: it is not trusted to be short or plain.
pub fn version_line(text: &str) -> Option<String> {
    let line: String = text
        .lines()
        .next()?
        .chars()
        .filter(|c| !c.is_control())
        .map(|c| if matches!(c, ',' | '@') { ' ' } else { c })
        .take(120)
        .collect();
    let line = line.trim();
    (!line.is_empty()).then(|| line.to_string())
}

/// A version line as a tag's words: every word that starts with a digit (a leading `v`
/// dropped), joined by `-` — `Codex 0.5.1 (codex-acp 0.3.2)` is `0.5.1-0.3.2`,
/// `v20.19.2` is `20.19.2`; none: `unversioned`.
pub fn version_slug(line: &str) -> String {
    let words: Vec<String> = line
        .split(|c: char| c.is_whitespace() || matches!(c, '(' | ')' | ',' | ';'))
        .map(|w| {
            w.strip_prefix('v')
                .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()))
                .unwrap_or(w)
        })
        .filter(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .map(|w| {
            w.chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .collect()
        })
        .collect();
    let mut slug = words.join("-");
    slug.truncate(100);
    if slug.is_empty() {
        "unversioned".into()
    } else {
        slug
    }
}

/// Part `id`'s image at `version` (its source's line) built by the Containerfile of hash
/// `hash`: `localhost/handler-part-<id>:<version>-<hash>`.
pub fn tag(id: &str, version: &str, hash: &str) -> String {
    format!("{}:{}-{hash}", image_repository(id), version_slug(version))
}

#[cfg(test)]
mod tests;
