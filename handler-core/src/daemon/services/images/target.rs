//! Pure: what a build's target means (D.4, G.4): the network filter, the toolbox, a harness,
//! `addon:<name>` — an addon that is valid and has an image —, `part:<id>` (decision 0164), or
//! `pull:<image>` — an image the daemon's machines may run, pulled (decision 0165). Anything
//! else is refused (422) with the reason naming it.

use std::collections::{BTreeMap, BTreeSet};

use super::{NETWORK_FILTER, TOOLBOX};

/// The prefix of an addon's target.
pub const ADDON_PREFIX: &str = "addon:";

/// The prefix of a part's target.
pub const PART_PREFIX: &str = "part:";

/// The prefix of a pull's target.
pub const PULL_PREFIX: &str = "pull:";

/// What a build builds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Target {
    /// The network filter (the runtime's `image build-proxy`).
    NetworkFilter,
    /// The toolbox, then every harness and addon image already built.
    Toolbox,
    /// The mini apps' runtime (H.3, decision 0158).
    AppRuntime,
    /// A harness's image.
    Harness {
        /// The harness's name.
        name: String,
    },
    /// An addon's image (G.4).
    Addon {
        /// The addon's name.
        name: String,
        /// Its image repository (no tag).
        image: String,
    },
    /// A part's image, with the parts it requires (decision 0164).
    Part {
        /// The part's id.
        id: String,
    },
    /// An image machines may run, pulled (decision 0165).
    Pull {
        /// The image as given.
        image: String,
    },
}

/// An addon as a target sees it: its image (none: no tool), or why it is invalid.
pub type AddonImage = Result<Option<String>, String>;

/// What is known when a build is asked for: the harnesses and the addons, by name.
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// The harnesses' names.
    pub harnesses: BTreeSet<String>,
    /// The addons: their image, or why they are invalid.
    pub addons: BTreeMap<String, AddonImage>,
    /// The parts' ids.
    pub parts: BTreeSet<String>,
    /// The images machines may run (`HANDLER_MACHINE_IMAGES`): the ones a pull may fetch.
    pub machine_images: handler_contracts::machine::images::AllowedImages,
}

/// The target `text` (trimmed) means, or why it is refused.
pub fn decide(text: &str, known: &Known) -> Result<Target, String> {
    let t = text.trim();
    if t == NETWORK_FILTER {
        return Ok(Target::NetworkFilter);
    }
    if t == TOOLBOX {
        return Ok(Target::Toolbox);
    }
    if t == super::app_runtime::TARGET {
        return Ok(Target::AppRuntime);
    }
    if let Some(name) = t.strip_prefix(ADDON_PREFIX) {
        return match known.addons.get(name) {
            None => Err(format!("target {t:?}: no such addon {name:?}")),
            Some(Err(e)) => Err(format!("target {t:?}: addon {name:?} is invalid: {e}")),
            Some(Ok(None)) => Err(format!(
                "target {t:?}: addon {name:?} has no image (nothing to build)"
            )),
            Some(Ok(Some(image))) => Ok(Target::Addon {
                name: name.to_string(),
                image: image.clone(),
            }),
        };
    }
    if let Some(image) = t.strip_prefix(PULL_PREFIX) {
        return known
            .machine_images
            .check(image)
            .map(|_| Target::Pull {
                image: image.to_string(),
            })
            .map_err(|e| format!("target {t:?}: image: {e}"));
    }
    if let Some(id) = t.strip_prefix(PART_PREFIX) {
        return if known.parts.contains(id) {
            Ok(Target::Part { id: id.to_string() })
        } else {
            Err(format!(
                "target {t:?}: no such part {id:?} (there are: {})",
                known.parts.iter().cloned().collect::<Vec<_>>().join(", ")
            ))
        };
    }
    if known.harnesses.contains(t) {
        return Ok(Target::Harness {
            name: t.to_string(),
        });
    }
    Err(format!(
        "target {t:?}: no such harness (or toolbox, network-filter, app-runtime, addon:<name>, part:<id>, pull:<image>)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Known {
        let mut k = Known::default();
        k.harnesses.insert("codex".into());
        k.addons
            .insert("gh".into(), Ok(Some("localhost/handler-addon-gh".into())));
        k.addons.insert("notes".into(), Ok(None));
        k.addons
            .insert("broken".into(), Err("addons/broken/addon.toml: bad".into()));
        k.parts.extend(["node".to_string(), "codex".to_string()]);
        k.machine_images =
            handler_contracts::machine::images::AllowedImages::parse(&["debian:*".to_string()])
                .unwrap();
        k
    }

    #[test]
    fn every_kind_of_target_is_decided() {
        let k = known();
        let all: Vec<(&str, Result<Target, String>)> = [
            "network-filter",
            "toolbox",
            "app-runtime",
            " codex ",
            "addon:gh",
            "addon:nope",
            "addon:notes",
            "addon:broken",
            "addon:",
            "part:codex",
            "part:goose",
            "pull:debian:bookworm-slim",
            "pull:node:22",
            "pull:-x",
            "nope",
        ]
        .into_iter()
        .map(|t| (t, decide(t, &k)))
        .collect();
        insta::assert_debug_snapshot!(all);
    }
}
