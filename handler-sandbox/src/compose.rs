//! compose: a harness's launch (B.3) and an agent's settings (D.1, D.5, D.8, E3, E4, G4) merged
//! into the SandboxSpec a runtime launches (A.1). Pure: no I/O. (Phantoms, E3, are
//! `egress::phantom`'s; skills and MCP servers reach the spec through render, B.3.)

use std::collections::{BTreeMap, BTreeSet};

use handler_contracts::HarnessLaunch;
use handler_contracts::allow::AllowEntry;
use handler_contracts::api_version::SandboxApiVersion;
use handler_contracts::control::NetworkMode;
use handler_contracts::sandbox::{
    Confinement, Display, DisplayMode, Enforcement, ImageMount, Injection, Mount, MountKind,
    NetworkPolicy, SandboxSpec, SandboxUser, UserMode,
};

/// What one addon binding adds to a sandbox (G4), resolved by the control plane.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddonPart {
    /// The addon's name (its image is mounted at `/opt/addons/<name>`).
    pub addon: String,
    /// The binding that selected it (named in errors).
    pub binding: String,
    /// The addon's image repository (no tag), when it has one: `<image>:latest` is mounted and
    /// its bin/ appended to PATH.
    pub image: Option<String>,
    /// Its static env, its settings and its secrets (phantoms, or values when they cannot be
    /// injected, E3), env var → value.
    pub env: BTreeMap<String, String>,
}

/// What compose takes besides the launch: the agent's settings for this one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComposeInput {
    /// Unique per instance, e.g. `handler-<agent>-<conn>`.
    pub name: String,
    /// The agent's folder (canonical): the workdir, mounted at the same path (A2).
    pub scope: String,
    /// The sandbox's network mode (D.1).
    pub network: NetworkMode,
    /// Filtered only.
    pub enforcement: Enforcement,
    /// The agent's own allow-list entries (D.1).
    pub allow: Vec<AllowEntry>,
    /// What its account or provider and addons require (E4).
    pub required: Vec<AllowEntry>,
    /// How strictly the sandbox is confined (A.5).
    pub confinement: Confinement,
    /// The agent's state slots (E6), host folder or file → sandbox path.
    pub state: Vec<Mount>,
    /// Cache folders (D.8): sandbox path ("~" = the harness home) → host folder.
    pub caches: BTreeMap<String, String>,
    /// Knowledge folders (D.5): host folder, each mounted read-only at `/knowledge/<its name>`.
    pub knowledge: Vec<String>,
    /// Secrets its proxy gives (E3); dropped without network (the process holds phantoms).
    pub injections: Vec<Injection>,
    /// A host Wayland socket (A.6).
    pub display: Option<String>,
    /// Labels the control plane puts on the instance's containers.
    pub labels: BTreeMap<String, String>,
    /// The agent's addons, one per selected binding (G4); their egress is in `required`.
    pub addons: Vec<AddonPart>,
}

/// Where an addon's image is mounted (G.1).
pub fn addon_mount_path(addon: &str) -> String {
    format!("/opt/addons/{addon}")
}

/// A launch and settings that cannot make a spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ComposeError {
    #[error("scope {0:?} is not an absolute path")]
    /// The scope is not an absolute path.
    ScopeNotAbsolute(String),
    #[error("knowledge folder {0:?} is not an absolute path")]
    /// A knowledge folder is not an absolute path.
    KnowledgeNotAbsolute(String),
    #[error("knowledge folders {0:?} and {1:?} would both be /knowledge/{2}")]
    /// Two knowledge folders have the same name, so the same target: the two folders and the name.
    KnowledgeClash(String, String, String),
    #[error("two mounts at {0}")]
    /// Two different mounts would share this target.
    MountClash(String),
    #[error("injection {0}: no host to give it to")]
    /// An injection names no host to give its value to.
    InjectionWithoutHost(String),
    #[error("binding {binding}: {name} is also set by {other}")]
    /// Two bindings, or a binding and the harness, set the same env variable.
    EnvClash {
        /// The binding that sets it a second time.
        binding: String,
        /// The env variable's name.
        name: String,
        /// Who set it first (`the harness` or `binding <name>`).
        other: String,
    },
    #[error("bindings {0:?} and {1:?} both use addon {2}")]
    /// Two bindings select the same addon: the two bindings and the addon.
    AddonTwice(String, String, String),
}

fn expand(home: &str, target: &str) -> String {
    if target == "~" {
        home.to_string()
    } else if let Some(rest) = target.strip_prefix("~/") {
        format!("{}/{rest}", home.trim_end_matches('/'))
    } else {
        target.to_string()
    }
}

/// Merges a launch and an agent's settings into a SandboxSpec (A.1): mounts (A2, D.5, D.8,
/// E6), network (D.1, E4), injections (E3), addons (G4), files and writable paths (B.3).
pub fn compose(launch: &HarnessLaunch, input: &ComposeInput) -> Result<SandboxSpec, ComposeError> {
    if !input.scope.starts_with('/') {
        return Err(ComposeError::ScopeNotAbsolute(input.scope.clone()));
    }
    let home = launch.home.clone();
    let mounts = compose_mounts(launch, input, &home)?;
    let network = compose_network(launch, input);
    let injections = compose_injections(input)?;
    let addons = compose_addons(launch, input, &mounts.targets)?;
    let files = launch
        .files
        .iter()
        .map(|f| handler_contracts::sandbox::GeneratedFile {
            target: expand(&home, &f.target),
            ..f.clone()
        })
        .collect();
    let writable_paths = launch
        .writable_paths
        .iter()
        .map(|w| expand(&home, w))
        .collect();
    Ok(SandboxSpec {
        api_version: SandboxApiVersion,
        name: input.name.clone(),
        confinement: input.confinement,
        image: launch.image.clone(),
        argv: launch.argv.clone(),
        env: addons.env,
        workdir: input.scope.clone(),
        user: SandboxUser {
            mode: UserMode::HostUser,
            home,
        },
        mounts: mounts.list,
        image_mounts: addons.image_mounts,
        path_prepend: Vec::new(),
        path_append: addons.path_append,
        files,
        writable_paths,
        network,
        resources: None,
        display: input.display.as_ref().map(|s| Display {
            mode: DisplayMode::Wayland,
            socket: s.clone(),
        }),
        labels: input.labels.clone(),
        tty: false,
        injections,
        git_writable: false,
        oci_runtime: None,
    })
}

/// The mounts so far and their targets.
#[derive(Default)]
struct Mounts {
    list: Vec<Mount>,
    targets: BTreeSet<String>,
}

impl Mounts {
    /// Adds `m`; the same source at the same target twice is one mount, anything else at a
    /// target already taken clashes.
    fn add(&mut self, m: Mount) -> Result<(), ComposeError> {
        if !self.targets.insert(m.target.clone()) {
            if self
                .list
                .iter()
                .any(|x| x.target == m.target && x.source == m.source)
            {
                return Ok(());
            }
            return Err(ComposeError::MountClash(m.target));
        }
        self.list.push(m);
        Ok(())
    }

    fn has_target(&self, target: &str) -> bool {
        self.list.iter().any(|x| x.target == target)
    }
}

/// The scope at its own path (A2), the launch's mounts, the state slots render did not bind
/// (E6), the caches (D.8) and the knowledge folders, read-only at `/knowledge/<name>` (D.5).
fn compose_mounts(
    launch: &HarnessLaunch,
    input: &ComposeInput,
    home: &str,
) -> Result<Mounts, ComposeError> {
    let mut mounts = Mounts::default();
    mounts.add(Mount {
        source: input.scope.clone(),
        target: input.scope.clone(),
        read_only: false,
        kind: MountKind::Scope,
    })?;
    for m in &launch.mounts {
        mounts.add(Mount {
            target: expand(home, &m.target),
            ..m.clone()
        })?;
    }
    for m in &input.state {
        let m = Mount {
            target: expand(home, &m.target),
            ..m.clone()
        };
        if mounts.has_target(&m.target) {
            continue; // render bound it already (E6)
        }
        mounts.add(m)?;
    }
    for (target, source) in &input.caches {
        let target = expand(home, target);
        if mounts.has_target(&target) {
            continue;
        }
        mounts.add(Mount {
            source: source.clone(),
            target,
            read_only: false,
            kind: MountKind::Cache,
        })?;
    }
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for k in &input.knowledge {
        if !k.starts_with('/') {
            return Err(ComposeError::KnowledgeNotAbsolute(k.clone()));
        }
        let name = k
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        if let Some(other) = names.insert(name.clone(), k.clone()) {
            return Err(ComposeError::KnowledgeClash(other, k.clone(), name));
        }
        mounts.add(Mount {
            source: k.clone(),
            target: format!("/knowledge/{name}"),
            read_only: true,
            kind: MountKind::Knowledge,
        })?;
    }
    Ok(mounts)
}

/// The network (D.1): filtered allows what the account or provider and addons require (E4),
/// what the harness names and the agent's own entries, each once.
fn compose_network(launch: &HarnessLaunch, input: &ComposeInput) -> NetworkPolicy {
    match input.network {
        NetworkMode::None => NetworkPolicy::None,
        NetworkMode::Open => NetworkPolicy::Open,
        NetworkMode::Filtered => {
            let allow: BTreeSet<AllowEntry> = input
                .required
                .iter()
                .chain(&launch.egress)
                .chain(&input.allow)
                .cloned()
                .collect();
            NetworkPolicy::Filtered {
                allow: allow.into_iter().collect(),
                enforcement: input.enforcement,
            }
        }
    }
}

/// The injections (E3): none without network (the process holds phantoms), each with a host.
fn compose_injections(input: &ComposeInput) -> Result<Vec<Injection>, ComposeError> {
    if input.network == NetworkMode::None {
        return Ok(Vec::new());
    }
    for i in &input.injections {
        if i.hosts.is_empty() {
            return Err(ComposeError::InjectionWithoutHost(i.name.clone()));
        }
    }
    Ok(input.injections.clone())
}

/// What the addons add to the launch's env, image mounts and PATH (G4).
struct AddonsPart {
    env: BTreeMap<String, String>,
    image_mounts: Vec<ImageMount>,
    path_append: Vec<String>,
}

/// G4: per binding, its image at `/opt/addons/<name>` with its bin/ on PATH, its env; an addon
/// twice, an env variable set twice or an image at a taken target is refused.
fn compose_addons(
    launch: &HarnessLaunch,
    input: &ComposeInput,
    targets: &BTreeSet<String>,
) -> Result<AddonsPart, ComposeError> {
    let mut env = launch.env.clone();
    let mut env_owner: BTreeMap<String, String> = env
        .keys()
        .map(|k| (k.clone(), "the harness".to_string()))
        .collect();
    let mut image_mounts = Vec::new();
    let mut path_append = Vec::new();
    let mut addons_seen: BTreeMap<&str, &str> = BTreeMap::new();
    for part in &input.addons {
        if let Some(other) = addons_seen.insert(&part.addon, &part.binding) {
            return Err(ComposeError::AddonTwice(
                other.to_string(),
                part.binding.clone(),
                part.addon.clone(),
            ));
        }
        if let Some(image) = &part.image {
            let target = addon_mount_path(&part.addon);
            if targets.contains(&target) {
                return Err(ComposeError::MountClash(target));
            }
            path_append.push(format!("{target}/bin"));
            image_mounts.push(ImageMount {
                image: format!("{image}:latest"),
                target,
            });
        }
        for (k, v) in &part.env {
            if let Some(other) = env_owner.insert(k.clone(), format!("binding {}", part.binding)) {
                return Err(ComposeError::EnvClash {
                    binding: part.binding.clone(),
                    name: k.clone(),
                    other,
                });
            }
            env.insert(k.clone(), v.clone());
        }
    }
    Ok(AddonsPart {
        env,
        image_mounts,
        path_append,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use handler_contracts::api_version::HarnessLaunchApiVersion;
    use handler_contracts::sandbox::GeneratedFile;

    fn e(s: &str) -> AllowEntry {
        AllowEntry::parse(s).unwrap()
    }

    fn launch() -> HarnessLaunch {
        HarnessLaunch {
            api_version: HarnessLaunchApiVersion,
            image: "localhost/handler-claude-code:latest".into(),
            argv: vec!["claude-agent-acp".into()],
            env: [(
                "ANTHROPIC_API_KEY".to_string(),
                "sk-ant-PHANTOM".to_string(),
            )]
            .into(),
            home: "/home/agent".into(),
            files: vec![GeneratedFile {
                target: "~/.claude/settings.json".into(),
                content: "{}".into(),
                mode: None,
                seed: true,
            }],
            mounts: vec![Mount {
                source: "/data/agent-state/a_1/claude-code@perso/history".into(),
                target: "~/.claude/projects".into(),
                read_only: false,
                kind: MountKind::State,
            }],
            writable_paths: vec!["~/.cache".into()],
            egress: vec![e("mcp.example.org:443")],
            session_defaults: None,
        }
    }

    fn input(network: NetworkMode) -> ComposeInput {
        ComposeInput {
            name: "handler-a_1-c1".into(),
            scope: "/home/me/code/app".into(),
            network,
            enforcement: Enforcement::Enforce,
            allow: vec![e("crates.io:443"), e("api.anthropic.com:443")],
            required: vec![e("api.anthropic.com:443")],
            confinement: Confinement::Strict,
            state: vec![
                Mount {
                    source: "/data/agent-state/a_1/claude-code@perso/history".into(),
                    target: "~/.claude/projects".into(),
                    read_only: false,
                    kind: MountKind::State,
                },
                Mount {
                    source: "/data/agent-state/a_1/claude-code@perso/todos".into(),
                    target: "~/.claude/todos".into(),
                    read_only: false,
                    kind: MountKind::State,
                },
            ],
            caches: [(
                "~/.cargo/registry".to_string(),
                "/cache/cargo-registry".to_string(),
            )]
            .into(),
            knowledge: vec!["/home/me/knowledge/rust".into()],
            injections: vec![Injection {
                name: "accounts/perso/token".into(),
                phantom: "sk-ant-oat01-abcdEFGH12345678abcdEFGH12".into(),
                value: "sk-ant-oat01-zyxwVUTS98765432zyxwVUTS98".into(),
                hosts: vec![e("api.anthropic.com:443")],
                body: false,
            }],
            display: None,
            labels: [("handler.agent".to_string(), "a_1".to_string())].into(),
            addons: Vec::new(),
        }
    }

    fn playwright() -> AddonPart {
        AddonPart {
            addon: "playwright".into(),
            binding: "browser".into(),
            image: Some("localhost/handler-addon-playwright".into()),
            env: [
                ("PLAYWRIGHT_HEADLESS".to_string(), "1".to_string()),
                (
                    "BROWSER_TOKEN".to_string(),
                    "tok-PHANTOM00000000".to_string(),
                ),
            ]
            .into(),
        }
    }

    #[test]
    fn filtered_spec() {
        let spec = compose(&launch(), &input(NetworkMode::Filtered)).unwrap();
        insta::assert_json_snapshot!(spec);
    }

    #[test]
    fn no_network_drops_injections_and_allow() {
        let spec = compose(&launch(), &input(NetworkMode::None)).unwrap();
        assert_eq!(spec.network, NetworkPolicy::None);
        assert!(spec.injections.is_empty());
        insta::assert_json_snapshot!(spec.network);
    }

    #[test]
    fn open_keeps_injections() {
        let spec = compose(&launch(), &input(NetworkMode::Open)).unwrap();
        assert_eq!(spec.network, NetworkPolicy::Open);
        assert_eq!(spec.injections.len(), 1);
    }

    #[test]
    fn knowledge_names_clash() {
        let mut i = input(NetworkMode::None);
        i.knowledge = vec!["/k/a/notes".into(), "/k/b/notes".into()];
        assert!(matches!(
            compose(&launch(), &i),
            Err(ComposeError::KnowledgeClash(..))
        ));
    }

    #[test]
    fn relative_scope_refused() {
        let mut i = input(NetworkMode::None);
        i.scope = "code/app".into();
        assert_eq!(
            compose(&launch(), &i),
            Err(ComposeError::ScopeNotAbsolute("code/app".into()))
        );
    }

    #[test]
    fn mount_clash_refused() {
        let mut i = input(NetworkMode::None);
        i.caches = [("/home/me/code/app".to_string(), "/elsewhere".to_string())].into();
        // a cache at the scope's target is skipped, not a second mount there
        let spec = compose(&launch(), &i).unwrap();
        assert_eq!(
            spec.mounts
                .iter()
                .filter(|m| m.target == "/home/me/code/app")
                .count(),
            1
        );
        let mut l = launch();
        l.mounts.push(Mount {
            source: "/other".into(),
            target: "/home/me/code/app".into(),
            read_only: true,
            kind: MountKind::Config,
        });
        assert!(matches!(
            compose(&l, &input(NetworkMode::None)),
            Err(ComposeError::MountClash(_))
        ));
    }

    #[test]
    fn addons_mount_their_image_extend_path_and_env() {
        let mut i = input(NetworkMode::Filtered);
        i.addons = vec![
            playwright(),
            AddonPart {
                addon: "notes".into(),
                binding: "team-notes".into(),
                image: None,
                env: [(
                    "NOTES_URL".to_string(),
                    "https://notes.example.org".to_string(),
                )]
                .into(),
            },
        ];
        let spec = compose(&launch(), &i).unwrap();
        assert_eq!(
            spec.image_mounts,
            vec![ImageMount {
                image: "localhost/handler-addon-playwright:latest".into(),
                target: "/opt/addons/playwright".into(),
            }]
        );
        assert_eq!(
            spec.path_append,
            vec!["/opt/addons/playwright/bin".to_string()]
        );
        assert_eq!(spec.env["BROWSER_TOKEN"], "tok-PHANTOM00000000");
        assert_eq!(spec.env["NOTES_URL"], "https://notes.example.org");
        assert_eq!(spec.env["ANTHROPIC_API_KEY"], "sk-ant-PHANTOM");
        insta::assert_json_snapshot!((&spec.env, &spec.image_mounts, &spec.path_append));
    }

    #[test]
    fn an_addon_env_var_the_harness_sets_is_refused() {
        let mut i = input(NetworkMode::Filtered);
        let mut p = playwright();
        p.env.insert("ANTHROPIC_API_KEY".into(), "x".into());
        i.addons = vec![p];
        assert_eq!(
            compose(&launch(), &i),
            Err(ComposeError::EnvClash {
                binding: "browser".into(),
                name: "ANTHROPIC_API_KEY".into(),
                other: "the harness".into(),
            })
        );
        // Two bindings setting one variable.
        let mut a = playwright();
        a.addon = "other".into();
        a.binding = "b2".into();
        a.image = None;
        i.addons = vec![playwright(), a];
        assert!(matches!(
            compose(&launch(), &i),
            Err(ComposeError::EnvClash { .. })
        ));
    }

    #[test]
    fn one_addon_twice_is_refused() {
        let mut i = input(NetworkMode::None);
        let mut b = playwright();
        b.binding = "browser2".into();
        b.env.clear();
        i.addons = vec![playwright(), b];
        assert_eq!(
            compose(&launch(), &i),
            Err(ComposeError::AddonTwice(
                "browser".into(),
                "browser2".into(),
                "playwright".into()
            ))
        );
    }
}
