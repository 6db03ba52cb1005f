//! Pure: the toolbox's base when its `FROM` cannot be pulled (B.6, decision 0073) — which image
//! a Containerfile starts FROM (its first `FROM`, `${ARG}`s resolved from the build arguments
//! and the `ARG` defaults before it), and, given whether that image is in the local store and
//! whether pulling it worked, what the build does: build as it is, build from the local copy,
//! make a local Debian base by debootstrap of a pinned suite (the way `.ci/build-images.sh`
//! does) and build FROM it, or fail saying why. Each plan carries the line the build's log says.

use std::collections::BTreeMap;

/// The local base's repository (`.ci/build-images.sh`'s), tagged with the Debian suite.
pub const LOCAL_BASE: &str = "localhost/handler-debian-base";
/// The Debian suite a local base is made of when the `FROM` names none Handler knows.
pub const PINNED_SUITE: &str = "trixie";
/// The Debian suites a local base may be made of.
const SUITES: &[&str] = &["bookworm", "trixie"];

/// What pulling the `FROM` gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pull {
    /// Not tried: `scratch`, or a `localhost/` image (no registry serves it).
    NotTried,
    /// Pulled.
    Pulled,
    /// The pull failed: the runtime's reason.
    Failed(String),
}

/// What the build does about its base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Build as it is (the base is there, pulled or local), logging `log` when some.
    Build {
        /// A line for the build's log.
        log: Option<String>,
    },
    /// Make `image` by debootstrap of Debian `suite`, then build with `BASE_IMAGE=image`.
    Debootstrap {
        /// The suite.
        suite: String,
        /// The local base's name (`localhost/handler-debian-base:<suite>`).
        image: String,
        /// The build argument naming it.
        build_arg: String,
        /// The line for the build's log.
        log: String,
    },
    /// No base can be had: the build fails with this.
    Fail(String),
}

/// The image the Containerfile `text` starts FROM, `${NAME}`/`$NAME` resolved from `args`
/// (the build's `--build-arg`s) over the `ARG NAME=default` lines before the first `FROM`; none
/// when it has no `FROM` or names an argument nobody gives.
pub fn from_image(text: &str, args: &BTreeMap<String, String>) -> Option<String> {
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match words.next().map(str::to_ascii_uppercase).as_deref() {
            Some("ARG") => {
                let decl = words.next()?;
                let (name, default) = decl.split_once('=').unwrap_or((decl, ""));
                let value = args.get(name).cloned().unwrap_or_else(|| default.into());
                vars.insert(name.to_string(), value.trim_matches('"').to_string());
            }
            Some("FROM") => {
                let image = words.find(|w| !w.starts_with("--"))?;
                return substitute(image, &vars).filter(|i| !i.is_empty());
            }
            _ => {}
        }
    }
    None
}

/// Whether the Containerfile `text` declares `ARG name` (with or without a default) before its
/// first `FROM`: a global argument its stages can take.
pub fn declares_arg(text: &str, name: &str) -> bool {
    for line in text.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match words.next().map(str::to_ascii_uppercase).as_deref() {
            Some("ARG") => {
                let decl = words.next().unwrap_or_default();
                if decl.split_once('=').map_or(decl, |(n, _)| n) == name {
                    return true;
                }
            }
            Some("FROM") => return false,
            _ => {}
        }
    }
    false
}

/// `${NAME}` and `$NAME` in `word` replaced from `vars`; none when one is unknown or empty.
fn substitute(word: &str, vars: &BTreeMap<String, String>) -> Option<String> {
    let mut out = String::new();
    let mut rest = word;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, tail) = match after.strip_prefix('{') {
            Some(b) => b.split_once('}')?,
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        out.push_str(vars.get(name).filter(|v| !v.is_empty())?);
        rest = tail;
    }
    out.push_str(rest);
    Some(out)
}

/// How a build starts FROM the local base `image`: by the build argument `build_arg` when the
/// Containerfile's first `FROM` takes it (`FROM ${BASE_IMAGE}`), else none and `text` with that
/// `FROM`'s image replaced (a literal `FROM debian:trixie`), its flags and `AS` kept.
pub fn use_base(text: &str, image: &str, build_arg: &str) -> (Option<String>, Option<String>) {
    let (name, value) = build_arg.split_once('=').unwrap_or((build_arg, ""));
    let with = BTreeMap::from([(name.to_string(), value.to_string())]);
    let without = BTreeMap::from([(name.to_string(), String::new())]);
    if from_image(text, &with).as_deref() == Some(image)
        && from_image(text, &without).as_deref() != Some(image)
    {
        return (Some(build_arg.to_string()), None);
    }
    let mut out = String::with_capacity(text.len() + image.len());
    let mut done = false;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        if !done
            && t.len() > 4
            && t[..4].eq_ignore_ascii_case("FROM")
            && t[4..].starts_with(char::is_whitespace)
        {
            let words: Vec<&str> = t.split_whitespace().collect();
            let at = words
                .iter()
                .skip(1)
                .position(|w| !w.starts_with("--"))
                .map(|i| i + 1);
            if let Some(at) = at {
                let mut w: Vec<&str> = words.clone();
                w[at] = image;
                out.push_str(&w.join(" "));
                out.push('\n');
                done = true;
                continue;
            }
        }
        out.push_str(line);
    }
    (None, Some(out))
}

/// Whether pulling `image` can be tried: not `scratch`, not a `localhost/` image.
pub fn pullable(image: &str) -> bool {
    image != "scratch" && !image.starts_with("localhost/")
}

/// The Debian suite `image` is, when it is a Debian image a local base can replace:
/// `debian:<suite>` (any registry, `-slim` too) or the local base itself.
pub fn debian_suite(image: &str) -> Option<String> {
    let last = image.rsplit('/').next()?;
    let (repo, tag) = last.split_once(':').unwrap_or((last, "latest"));
    if repo != "debian" && repo != "handler-debian-base" {
        return None;
    }
    let suite = tag.strip_suffix("-slim").unwrap_or(tag);
    SUITES
        .iter()
        .find(|s| **s == suite)
        .map(ToString::to_string)
        .or_else(|| (suite == "latest" || suite == "stable").then(|| PINNED_SUITE.into()))
}

/// The decision: the `FROM` image `from`, whether the local store has it, and the pull's outcome.
pub fn plan(from: &str, present: bool, pull: &Pull) -> Plan {
    match (pull, present) {
        (Pull::Pulled, _) => Plan::Build {
            log: Some(format!("pulled {from}")),
        },
        (Pull::NotTried, true) => Plan::Build { log: None },
        (Pull::Failed(why), true) => Plan::Build {
            log: Some(format!(
                "could not pull {from} ({why}): building from the local copy"
            )),
        },
        (_, false) if from == "scratch" => Plan::Build { log: None },
        (pull, false) => {
            let why = match pull {
                Pull::Failed(w) => format!("cannot be pulled ({w})"),
                _ => "is not in the local store and no registry serves it".into(),
            };
            match debian_suite(from) {
                Some(suite) => {
                    let image = format!("{LOCAL_BASE}:{suite}");
                    Plan::Debootstrap {
                        log: format!(
                            "FROM {from} {why}: building from a local base made by debootstrap of Debian {suite} ({image})"
                        ),
                        build_arg: format!("BASE_IMAGE={image}"),
                        suite,
                        image,
                    }
                }
                None => Plan::Fail(format!(
                    "FROM {from} {why}, and it is not a Debian image a local base can replace"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_global_arg_is_one_declared_before_the_first_from() {
        let text = "# x\nARG TOOLBOX_IMAGE\nARG APP_RUNTIME_IMAGE=localhost/r\nFROM ${TOOLBOX_IMAGE}\nARG LATE\n";
        assert!(declares_arg(text, "APP_RUNTIME_IMAGE"));
        assert!(declares_arg(text, "TOOLBOX_IMAGE"));
        assert!(
            !declares_arg(text, "LATE"),
            "a stage's own ARG is not global"
        );
        assert!(!declares_arg(text, "APP_RUNTIME"));
    }

    fn args(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_from_resolves_build_args_over_arg_defaults() {
        let tb = handler_harness::descriptors::TOOLBOX_CONTAINERFILE;
        assert_eq!(
            from_image(tb, &args(&[])).as_deref(),
            Some("localhost/handler-debian-base:trixie")
        );
        assert_eq!(
            from_image(
                tb,
                &args(&[("BASE_IMAGE", "docker.io/library/debian:bookworm")])
            )
            .as_deref(),
            Some("docker.io/library/debian:bookworm")
        );
        let text = "ARG REG=docker.io\nARG TAG\nfrom --platform=linux/amd64 $REG/debian:${TAG}-slim AS b\n";
        assert_eq!(
            from_image(text, &args(&[("TAG", "trixie")])).as_deref(),
            Some("docker.io/debian:trixie-slim")
        );
        assert_eq!(from_image(text, &args(&[])), None, "TAG given by nobody");
        assert_eq!(from_image("RUN true\n", &args(&[])), None);
    }

    #[test]
    fn debian_images_map_to_a_pinned_suite_and_others_do_not() {
        assert_eq!(debian_suite("debian:bookworm").as_deref(), Some("bookworm"));
        assert_eq!(
            debian_suite("docker.io/library/debian:trixie-slim").as_deref(),
            Some("trixie")
        );
        assert_eq!(debian_suite("debian").as_deref(), Some(PINNED_SUITE));
        assert_eq!(
            debian_suite("localhost/handler-debian-base:trixie").as_deref(),
            Some("trixie")
        );
        assert_eq!(debian_suite("debian:sid"), None, "not a suite Handler pins");
        assert_eq!(debian_suite("ubuntu:24.04"), None);
        assert!(!pullable("localhost/handler-debian-base:trixie"));
        assert!(!pullable("scratch"));
        assert!(pullable("docker.io/library/debian:trixie"));
    }

    #[test]
    fn a_missing_unpullable_debian_from_gets_a_local_base_and_says_so() {
        let failed = Pull::Failed("dial tcp: connection refused".into());
        assert_eq!(
            plan("docker.io/library/debian:trixie", false, &failed),
            Plan::Debootstrap {
                suite: "trixie".into(),
                image: "localhost/handler-debian-base:trixie".into(),
                build_arg: "BASE_IMAGE=localhost/handler-debian-base:trixie".into(),
                log: "FROM docker.io/library/debian:trixie cannot be pulled (dial tcp: connection refused): building from a local base made by debootstrap of Debian trixie (localhost/handler-debian-base:trixie)".into(),
            }
        );
        // The default toolbox on a fresh machine: its local base is not built yet.
        let Plan::Debootstrap { log, .. } = plan(
            "localhost/handler-debian-base:trixie",
            false,
            &Pull::NotTried,
        ) else {
            panic!("a local base is made")
        };
        assert!(log.contains("no registry serves it"), "{log}");
    }

    #[test]
    fn the_local_base_goes_in_by_argument_or_by_a_rewritten_from() {
        let base = "localhost/handler-debian-base:trixie";
        let arg = "BASE_IMAGE=localhost/handler-debian-base:trixie";
        let tb = handler_harness::descriptors::TOOLBOX_CONTAINERFILE;
        assert_eq!(use_base(tb, base, arg), (Some(arg.to_string()), None));
        let literal =
            "# mine\nFROM --platform=linux/amd64 docker.io/library/debian:trixie AS b\nRUN true\n";
        let (a, text) = use_base(literal, base, arg);
        assert_eq!(a, None);
        assert_eq!(
            text.as_deref(),
            Some(
                "# mine\nFROM --platform=linux/amd64 localhost/handler-debian-base:trixie AS b\nRUN true\n"
            )
        );
        let t = text.unwrap();
        assert_eq!(from_image(&t, &BTreeMap::new()).as_deref(), Some(base));
    }

    #[test]
    fn a_base_that_is_there_is_used_and_a_foreign_missing_one_fails() {
        let failed = Pull::Failed("no network".into());
        assert_eq!(
            plan("debian:trixie", true, &Pull::Pulled),
            Plan::Build {
                log: Some("pulled debian:trixie".into())
            }
        );
        assert_eq!(
            plan("localhost/x:1", true, &Pull::NotTried),
            Plan::Build { log: None }
        );
        let Plan::Build { log: Some(l) } = plan("debian:trixie", true, &failed) else {
            panic!("the local copy is used")
        };
        assert!(l.contains("building from the local copy"), "{l}");
        assert_eq!(
            plan("scratch", false, &Pull::NotTried),
            Plan::Build { log: None }
        );
        assert_eq!(
            plan("ubuntu:24.04", false, &failed),
            Plan::Fail(
                "FROM ubuntu:24.04 cannot be pulled (no network), and it is not a Debian image a local base can replace".into()
            )
        );
    }
}
