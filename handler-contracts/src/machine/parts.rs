//! Parts (issue 30 item 2, decision 0164): a harness's CLI, or Node, at one version as an image
//! of its own, mounted read-only into a machine at [`PART_ROOT`]`/<id>` with its `bin` first on
//! the machine's PATH. What the API shows of them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a part lands in a machine: `<PART_ROOT>/<id>`, never the person's to choose.
pub const PART_ROOT: &str = "/opt/handler/parts";

/// The label naming the parts a machine was made with, `<id>@<version>,…` (the seed's
/// `ahpd.parts`).
pub const PARTS_LABEL: &str = "handler.parts";

/// The repository of part `id`'s images: `localhost/handler-part-<id>`, tagged
/// `<version>-<recipe hash>`.
pub fn image_repository(id: &str) -> String {
    format!("localhost/handler-part-{id}")
}

/// Where part `id` lands in a machine.
pub fn target(id: &str) -> String {
    format!("{PART_ROOT}/{id}")
}

/// A part a machine carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MountedPart {
    /// Its id: a harness's name, or `node`.
    pub id: String,
    /// The version its checked source installed.
    pub version: String,
    /// Its image, `<repository>:<version>-<recipe hash>`.
    pub image: String,
}

/// A part asked for and left out, with the reason (its build's, or its requirement's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartLeftOut {
    /// Its id.
    pub id: String,
    /// Why, in one sentence.
    pub reason: String,
}

/// `GET /v1/parts`: a part Handler can build, and the image it has of it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartInfo {
    /// Its id.
    pub id: String,
    /// What it is built from: `toolbox` (Node) or the harness's name.
    pub source: String,
    /// The parts it runs on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// The commands it puts on the PATH.
    pub bin: Vec<String>,
    /// The part built from its source's current image, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub built: Option<MountedPart>,
}

/// `POST /v1/parts/build`: the parts to build now (each with what it requires).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PartsBuildRequest {
    /// The parts' ids.
    #[schemars(length(min = 1))]
    pub ids: Vec<String>,
}

/// What `POST /v1/parts/build` did: each part ready (built now or already there) or left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartsOutcome {
    /// The parts ready, requirements first.
    pub ready: Vec<ReadyPart>,
    /// The parts that could not be built.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<PartLeftOut>,
}

/// A part ready for machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadyPart {
    /// The part.
    #[serde(flatten)]
    pub part: MountedPart,
    /// Built by this request (false: it was there already).
    pub built: bool,
}
