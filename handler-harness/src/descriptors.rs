//! The platform's harness descriptors (B.1), image recipes (B.6), the default toolbox and the
//! handler-sandbox-env script (B6) and the check's MCP probe: data under handler-harness/data/, embedded at build time.

use handler_contracts::harness::{HarnessDescriptor, ToolboxManifest};

/// Where render puts handler-sandbox-env in the sandbox (B6).
pub const SANDBOX_ENV_PATH: &str = "/opt/handler/bin/handler-sandbox-env";
/// The script itself (python3, platform data).
pub const SANDBOX_ENV_SCRIPT: &str = include_str!("../data/bin/handler-sandbox-env");

/// Where an image check puts its probe stdio MCP server in the sandbox (D.4, B6).
pub const MCP_PROBE_PATH: &str = "/opt/handler/bin/handler-mcp-probe";
/// The probe (POSIX sh, platform data): records the env it starts with into its argument's file.
pub const MCP_PROBE_SCRIPT: &str = include_str!("../data/bin/handler-mcp-probe");

/// The default toolbox recipe and manifest (B.6).
pub const TOOLBOX_CONTAINERFILE: &str = include_str!("../data/toolbox/Containerfile");
/// The default toolbox's manifest (`toolbox.toml`): what the toolbox image installs, by name and
/// version.
pub const TOOLBOX_MANIFEST: &str = include_str!("../data/toolbox/toolbox.toml");

struct Builtin {
    name: &'static str,
    descriptor: &'static str,
    containerfile: &'static str,
}

macro_rules! builtin {
    ($name:literal) => {
        Builtin {
            name: $name,
            descriptor: include_str!(concat!("../data/harnesses/", $name, "/harness.toml")),
            containerfile: include_str!(concat!("../data/harnesses/", $name, "/Containerfile")),
        }
    };
}

const BUILTINS: [Builtin; 5] = [
    builtin!("claude-code"),
    builtin!("codex"),
    builtin!("gemini"),
    builtin!("pi"),
    builtin!("vibe"),
];

/// The names of the platform's harnesses, sorted.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.name)
}

/// The descriptor's text (`harness.toml`) of a platform harness.
pub fn descriptor_text(name: &str) -> Option<&'static str> {
    BUILTINS
        .iter()
        .find(|b| b.name == name)
        .map(|b| b.descriptor)
}

/// A platform harness's descriptor, parsed. Platform data is tested to parse and validate, so a
/// failure here is a build defect: it is reported, not hidden.
pub fn builtin(name: &str) -> Option<Result<HarnessDescriptor, toml::de::Error>> {
    descriptor_text(name).map(toml::from_str)
}

/// A platform harness's image recipe.
pub fn containerfile(name: &str) -> Option<&'static str> {
    BUILTINS
        .iter()
        .find(|b| b.name == name)
        .map(|b| b.containerfile)
}

/// The default toolbox's manifest, parsed.
pub fn toolbox_manifest() -> Result<ToolboxManifest, toml::de::Error> {
    toml::from_str(TOOLBOX_MANIFEST)
}
