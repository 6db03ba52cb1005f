//! The daemon's configuration: where its files are, its port, the origins it accepts, the
//! sandbox executable it launches. Read from the environment (D, discovery).

use std::path::{Path, PathBuf};

use handler_contracts::{APP_DIR_NAME, DEFAULT_PORT, acp::DEFAULT_MAX_MESSAGE_BYTES};

/// A setting that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{var}: {message}")]
    /// A variable's value is invalid.
    Invalid {
        /// The variable.
        var: &'static str,
        /// Why.
        message: String,
    },
    /// No home folder is known.
    #[error("no home folder: set HOME")]
    NoHome,
}

/// Everything the daemon needs to know about its place on this machine.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// `127.0.0.1:<port>`; 0 picks a free port (tests).
    pub port: u16,
    /// The unix socket the Control API is also served on, for this user only (decision 0135):
    /// `$HANDLER_SOCKET`, else `$XDG_RUNTIME_DIR/handler/handlerd.sock`, else
    /// `<config>/run/handlerd.sock` ([`crate::socket::path`]); `None` (the in-process tests'
    /// [`DaemonConfig::with_home`]): none.
    pub socket: Option<PathBuf>,
    /// The home folder (`~` in paths).
    pub home: PathBuf,
    /// `$HANDLER_CONFIG_DIR`, default `~/.config/handler-ai`: the token, folders.toml, contexts.toml.
    pub config_dir: PathBuf,
    /// `$HANDLER_DATA_DIR`, default `~/.local/share/handler-ai`: secrets, credentials, agent state.
    pub data_dir: PathBuf,
    /// `$HANDLER_STATE_DIR`, default `~/.local/state/handler-ai`: agents.json, projects.json.
    pub state_dir: PathBuf,
    /// The accounts' documents (`<name>.toml`).
    pub accounts_dir: PathBuf,
    /// The providers' documents (`<name>.toml`).
    pub providers_dir: PathBuf,
    /// Where harness descriptors are read from besides the platform's (`<dir>/<name>/harness.toml`,
    /// `$HANDLER_HARNESSES_DIR`, a path list).
    pub harnesses_dirs: Vec<PathBuf>,
    /// Provider templates (D.12), platform data.
    pub templates_dir: PathBuf,
    /// The knowledge root when `$HANDLER_KNOWLEDGE_DIR` is set.
    pub knowledge_dir: Option<PathBuf>,
    /// `$HANDLER_SKILLS_DIR`, default `<config>/skills`.
    pub skills_dir: PathBuf,
    /// `$HANDLER_CACHE_DIR`, default `~/.cache/handler-ai`.
    pub cache_dir: PathBuf,
    /// `$HANDLER_TOOLBOX_DIR`, default `<config>/toolbox`: the user's toolbox (B.6), whose
    /// toolbox.toml declares the caches (the platform's default when it has none).
    pub toolbox_dir: PathBuf,
    /// `$HANDLER_TOOLBOX_IMAGE`, default `localhost/handler-ai-toolbox`: the toolbox image's
    /// repository (B.6), what harness images are built FROM (`:latest`).
    pub toolbox_image: String,
    /// `$HANDLER_ADDONS_DIR`, default `<config>/addons`: the user's addons (G.1).
    pub addons_dir: PathBuf,
    /// The built-in addons (platform data, handler-harness/data/addons).
    pub builtin_addons_dir: PathBuf,
    /// The addon catalog (platform data, handler-harness/data/catalog): installable, not loaded (G.5).
    pub catalog_dir: PathBuf,
    /// `$HANDLER_BINDINGS_DIR`, default `<config>/bindings` (G.2).
    pub bindings_dir: PathBuf,
    /// Origins a browser may open the ACP socket from (C.1).
    pub allowed_origins: Vec<String>,
    /// Largest ACP message (C.1).
    pub max_message_bytes: usize,
    /// The sandbox executable and its leading arguments (`handler-sandbox-podman`, or
    /// `handler-sandbox-docker` with `HANDLER_RUNTIME=docker`).
    pub sandbox_command: Vec<String>,
    /// How long a `{ command }` secret reference may run (`HANDLER_SECRET_COMMAND_TIMEOUT`,
    /// seconds; default 10).
    pub secret_command_timeout: std::time::Duration,
    /// A running, unattached, idle session is stopped after this (`HANDLER_SESSION_IDLE_TIMEOUT`,
    /// seconds; default 1800, F.6.3).
    pub session_idle_timeout: std::time::Duration,
    /// The most clients attached to one session (`HANDLER_SESSION_MAX_ATTACH`, default 8, F.7).
    pub session_max_attach: usize,
    /// `$HANDLER_MACHINE_IMAGES`: the images a machine may be made of, comma-separated patterns
    /// (`node:*`, `ghcr.io/acme/**`, issue 29); none: any image.
    pub machine_images: handler_contracts::machine::images::AllowedImages,
    /// The most machines this daemon keeps, disposable ones counted (`HANDLER_MACHINE_MAX`,
    /// default 32, decision 0148): a create past it is a 409.
    pub machine_max: usize,
    /// `$HANDLER_DEVCONTAINER_FOLDERS`: the folders a dev container may be made of (decision
    /// 0161), colon-separated absolute paths compared resolved; `off` makes none; unset: any
    /// folder (one person's host).
    pub devcontainer_folders: DevcontainerFolders,
    /// How long a session's agent outlives its daemon waiting for the next one
    /// (`HANDLER_KEEP_TIMEOUT`, seconds; default 600; 0: agents do not outlive it, issue 28).
    pub keep_timeout: std::time::Duration,
    /// How long a mini app's backend runs without a request before it is stopped
    /// (`HANDLER_APP_IDLE_TIMEOUT`, seconds; default 600; H.5).
    pub app_idle_timeout: std::time::Duration,
    /// How long an image's facts and the runtime's check are answered from memory without
    /// being read again behind the answer (`HANDLER_IMAGE_FACTS_TTL`, seconds; default 5; 0:
    /// read again after every answer; decisions 0145, 0149).
    pub image_facts_ttl: std::time::Duration,
    /// The messages an attachment's queue holds before the client is closed 4003 as too slow
    /// (F.7: 10 000; smaller only in tests).
    pub session_queue: usize,
    /// `$HANDLER_BUILD_CA_BUNDLE`: a PEM bundle of extra CA certificates given to image builds
    /// (the build secret `handler-ca-bundle`, decision 0072); none by default.
    pub build_ca_bundle: Option<PathBuf>,
    /// `$HANDLER_DEBIAN_MIRROR`: the Debian mirror a local base is made from when the toolbox's
    /// `FROM` cannot be pulled (decision 0074); default `http://deb.debian.org/debian`.
    pub debian_mirror: String,
    /// Where the platform data embedded in this build is written at start (templates, built-in
    /// addons): `<data>/platform/<digest>`, made by `server::build`.
    pub platform_dir: PathBuf,
    /// Why `sandbox_command` is the one it is (`GET /v1/runtime` says it): the setting that chose it.
    pub runtime_chosen_by: String,
    /// `$HANDLER_TERMINAL`, else `$TERMINAL`: the terminal emulator the web UI's Log in opens
    /// (D.9); none: the first of `services::login_window::TERMINALS` installed.
    pub terminal: Option<String>,
    /// `$HANDLER_CLI`: the `handler` a login window runs; none: the one beside handlerd.
    pub handler_cli: Option<PathBuf>,
    /// `$HANDLER_SKILL_CREATOR_URL` and `$HANDLER_SKILL_CREATOR_DIGEST`: where the built-in
    /// skill-creator's upstream skill is fetched from at set-up and the digest it must have,
    /// over its `upstream.toml` (a mirror, an air-gapped copy; decision 0123).
    pub skill_creator_source: UpstreamOverride,
}

/// A built-in agent's upstream skill fetched from elsewhere than its `upstream.toml` says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamOverride {
    /// The `https://` URL to fetch instead.
    pub url: Option<String>,
    /// The digest (`sha256:…`) to expect instead.
    pub digest: Option<String>,
}

/// `HANDLER_SESSION_IDLE_TIMEOUT` (seconds, at least 1), `HANDLER_SESSION_MAX_ATTACH` and
/// `HANDLER_MACHINE_MAX` (at least 1), `HANDLER_MACHINE_IMAGES`.
fn session_settings(c: &mut DaemonConfig) -> Result<(), ConfigError> {
    if let Ok(t) = std::env::var("HANDLER_SESSION_IDLE_TIMEOUT") {
        c.session_idle_timeout = t
            .parse::<u64>()
            .ok()
            .filter(|n| *n >= 1)
            .map(std::time::Duration::from_secs)
            .ok_or_else(|| ConfigError::Invalid {
                var: "HANDLER_SESSION_IDLE_TIMEOUT",
                message: format!("{t:?} is not a number of seconds of at least 1"),
            })?;
    }
    if let Some(n) = count("HANDLER_SESSION_MAX_ATTACH")? {
        c.session_max_attach = n;
    }
    if let Some(n) = count("HANDLER_MACHINE_MAX")? {
        c.machine_max = n;
    }
    if let Ok(list) = std::env::var("HANDLER_MACHINE_IMAGES") {
        let patterns: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        c.machine_images = handler_contracts::machine::images::AllowedImages::parse(&patterns)
            .map_err(|e| ConfigError::Invalid {
                var: "HANDLER_MACHINE_IMAGES",
                message: e.to_string(),
            })?;
    }
    if let Ok(list) = std::env::var("HANDLER_DEVCONTAINER_FOLDERS") {
        c.devcontainer_folders =
            DevcontainerFolders::parse(&list).map_err(|message| ConfigError::Invalid {
                var: "HANDLER_DEVCONTAINER_FOLDERS",
                message,
            })?;
    }
    if let Some(t) = seconds("HANDLER_IMAGE_FACTS_TTL", 3600)? {
        c.image_facts_ttl = t;
    }
    if let Some(t) = seconds("HANDLER_KEEP_TIMEOUT", 86_400)? {
        c.keep_timeout = t;
    }
    if let Some(t) = seconds("HANDLER_APP_IDLE_TIMEOUT", 86_400)? {
        c.app_idle_timeout = t.max(std::time::Duration::from_secs(1));
    }
    Ok(())
}

/// `$var` as a number of seconds from 0 to `max`, if set; else the error naming it.
fn seconds(var: &'static str, max: u64) -> Result<Option<std::time::Duration>, ConfigError> {
    let Ok(t) = std::env::var(var) else {
        return Ok(None);
    };
    t.parse::<u64>()
        .ok()
        .filter(|n| *n <= max)
        .map(|n| Some(std::time::Duration::from_secs(n)))
        .ok_or_else(|| ConfigError::Invalid {
            var,
            message: format!("{t:?} is not a number of seconds from 0 to {max}"),
        })
}

/// `var` as a count of at least 1 (None: not set).
fn count(var: &'static str) -> Result<Option<usize>, ConfigError> {
    let Ok(n) = std::env::var(var) else {
        return Ok(None);
    };
    n.parse::<usize>()
        .ok()
        .filter(|n| *n >= 1)
        .map(Some)
        .ok_or_else(|| ConfigError::Invalid {
            var,
            message: format!("{n:?} is not a number of at least 1"),
        })
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

include!(concat!(env!("OUT_DIR"), "/platform_data.rs"));

/// Where this build's platform data is written at start (decision 0118): `<data>/platform/<digest>`.
fn platform_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("platform").join(PLATFORM_DIGEST)
}

/// A folder of the platform data (a path from the repository's top, as embedded by build.rs).
fn platform_data(platform_dir: &Path, rel: &str) -> PathBuf {
    platform_dir.join(rel)
}

/// The built-in addons' folder of the platform data.
const BUILTIN_ADDONS: &str = "handler-harness/data/addons";
/// The addon catalog's folder of the platform data (G.5).
const CATALOG: &str = "handler-harness/data/catalog";
/// The provider templates' folder of the platform data.
const TEMPLATES: &str = "handler-core/data/templates/providers";

impl DaemonConfig {
    /// Every default rooted in `home`, port 7430.
    pub fn with_home(home: &Path) -> Self {
        let config_dir = home.join(".config").join(APP_DIR_NAME);
        let port = DEFAULT_PORT;
        let data_dir = home.join(".local/share").join(APP_DIR_NAME);
        let platform = platform_dir(&data_dir);
        DaemonConfig {
            port,
            socket: None,
            home: home.to_path_buf(),
            accounts_dir: config_dir.join("accounts"),
            providers_dir: config_dir.join("providers"),
            skills_dir: config_dir.join("skills"),
            toolbox_dir: config_dir.join("toolbox"),
            toolbox_image: "localhost/handler-ai-toolbox".to_string(),
            addons_dir: config_dir.join("addons"),
            builtin_addons_dir: platform_data(&platform, BUILTIN_ADDONS),
            catalog_dir: platform_data(&platform, CATALOG),
            bindings_dir: config_dir.join("bindings"),
            config_dir,
            data_dir,
            state_dir: home.join(".local/state").join(APP_DIR_NAME),
            harnesses_dirs: Vec::new(),
            templates_dir: platform_data(&platform, TEMPLATES),
            knowledge_dir: None,
            cache_dir: home.join(".cache").join(APP_DIR_NAME),
            allowed_origins: default_origins(port),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            sandbox_command: vec!["handler-sandbox-podman".to_string()],
            secret_command_timeout: super::secretref::DEFAULT_COMMAND_TIMEOUT,
            session_idle_timeout: std::time::Duration::from_secs(1800),
            session_max_attach: 8,
            keep_timeout: std::time::Duration::from_secs(600),
            app_idle_timeout: std::time::Duration::from_secs(600),
            image_facts_ttl: std::time::Duration::from_secs(5),
            machine_images: handler_contracts::machine::images::AllowedImages::default(),
            machine_max: 32,
            devcontainer_folders: DevcontainerFolders::Any,
            session_queue: 10_000,
            build_ca_bundle: None,
            debian_mirror: "http://deb.debian.org/debian".to_string(),
            runtime_chosen_by: "the daemon's configuration".to_string(),
            terminal: None,
            handler_cli: None,
            platform_dir: platform,
            skill_creator_source: UpstreamOverride::default(),
        }
    }

    /// Reads `$HANDLER_*` over the defaults.
    #[expect(
        clippy::too_many_lines,
        reason = "one step per environment variable of docs/daemon.md's table, in its order"
    )]
    pub fn from_env() -> Result<Self, ConfigError> {
        let home = env_path("HOME").ok_or(ConfigError::NoHome)?;
        let mut c = DaemonConfig::with_home(&home);
        if let Ok(p) = std::env::var("HANDLER_PORT") {
            c.port = p.parse().map_err(|_| ConfigError::Invalid {
                var: "HANDLER_PORT",
                message: format!("{p:?} is not a port number"),
            })?;
            c.allowed_origins = default_origins(c.port);
        }
        if let Some(d) = env_path("HANDLER_CONFIG_DIR") {
            c.accounts_dir = d.join("accounts");
            c.providers_dir = d.join("providers");
            c.skills_dir = d.join("skills");
            c.toolbox_dir = d.join("toolbox");
            c.addons_dir = d.join("addons");
            c.bindings_dir = d.join("bindings");
            c.config_dir = d;
        }
        c.socket = Some(crate::socket::path(
            &|k| std::env::var(k).ok(),
            &c.config_dir,
        ));
        if let Some(d) = env_path("HANDLER_DATA_DIR") {
            c.platform_dir = platform_dir(&d);
            c.builtin_addons_dir = platform_data(&c.platform_dir, BUILTIN_ADDONS);
            c.catalog_dir = platform_data(&c.platform_dir, CATALOG);
            c.templates_dir = platform_data(&c.platform_dir, TEMPLATES);
            c.data_dir = d;
        }
        if let Some(d) = env_path("HANDLER_STATE_DIR") {
            c.state_dir = d;
        }
        if let Some(d) = env_path("HANDLER_ACCOUNTS_DIR") {
            c.accounts_dir = d;
        }
        if let Some(d) = env_path("HANDLER_PROVIDERS_DIR") {
            c.providers_dir = d;
        }
        if let Some(d) = env_path("HANDLER_SKILLS_DIR") {
            c.skills_dir = d;
        }
        if let Some(d) = env_path("HANDLER_TOOLBOX_DIR") {
            c.toolbox_dir = d;
        }
        if let Ok(i) = std::env::var("HANDLER_TOOLBOX_IMAGE")
            && !i.trim().is_empty()
        {
            c.toolbox_image = i.trim().to_string();
        }
        c.build_ca_bundle = env_path("HANDLER_BUILD_CA_BUNDLE");
        let set = |v: &str| std::env::var(v).ok().filter(|x| !x.trim().is_empty());
        c.skill_creator_source = UpstreamOverride {
            url: set("HANDLER_SKILL_CREATOR_URL").map(|u| u.trim().to_string()),
            digest: set("HANDLER_SKILL_CREATOR_DIGEST").map(|d| d.trim().to_string()),
        };
        if let Ok(m) = std::env::var("HANDLER_DEBIAN_MIRROR")
            && !m.trim().is_empty()
        {
            c.debian_mirror = m.trim().to_string();
        }
        if let Some(d) = env_path("HANDLER_ADDONS_DIR") {
            c.addons_dir = d;
        }
        if let Some(d) = env_path("HANDLER_BINDINGS_DIR") {
            c.bindings_dir = d;
        }
        if let Some(d) = env_path("HANDLER_CACHE_DIR") {
            c.cache_dir = d;
        }
        if let Some(d) = env_path("HANDLER_TEMPLATES_DIR") {
            c.templates_dir = d;
        }
        c.knowledge_dir = env_path("HANDLER_KNOWLEDGE_DIR");
        if let Ok(list) = std::env::var("HANDLER_HARNESSES_DIR") {
            c.harnesses_dirs = std::env::split_paths(&list)
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
        }
        if let Ok(o) = std::env::var("HANDLER_ALLOWED_ORIGINS") {
            c.allowed_origins.extend(
                o.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            );
        }
        if let Ok(m) = std::env::var("HANDLER_MAX_MESSAGE_BYTES") {
            c.max_message_bytes =
                m.parse()
                    .ok()
                    .filter(|n| *n >= 1024)
                    .ok_or_else(|| ConfigError::Invalid {
                        var: "HANDLER_MAX_MESSAGE_BYTES",
                        message: format!("{m:?} is not a size in bytes of at least 1024"),
                    })?;
        }
        if let Ok(t) = std::env::var("HANDLER_SECRET_COMMAND_TIMEOUT") {
            c.secret_command_timeout = t
                .parse::<u64>()
                .ok()
                .filter(|n| (1..=600).contains(n))
                .map(std::time::Duration::from_secs)
                .ok_or_else(|| ConfigError::Invalid {
                    var: "HANDLER_SECRET_COMMAND_TIMEOUT",
                    message: format!("{t:?} is not a number of seconds from 1 to 600"),
                })?;
        }
        let runtime = std::env::var("HANDLER_RUNTIME").ok();
        let exe = runtime_executable(runtime.as_deref())?;
        c.sandbox_command = vec![exe.to_string()];
        c.runtime_chosen_by = match runtime.as_deref().map(str::trim) {
            Some(r) if !r.is_empty() => format!("HANDLER_RUNTIME={r}"),
            _ => "the default (HANDLER_RUNTIME unset: podman)".to_string(),
        };
        session_settings(&mut c)?;
        c.terminal = ["HANDLER_TERMINAL", "TERMINAL"]
            .iter()
            .filter_map(|v| std::env::var(v).ok())
            .find(|t| !t.trim().is_empty());
        c.handler_cli = env_path("HANDLER_CLI");
        if let Ok(s) = std::env::var("HANDLER_SANDBOX_COMMAND") {
            let argv: Vec<String> = s.split_whitespace().map(String::from).collect();
            if argv.is_empty() {
                return Err(ConfigError::Invalid {
                    var: "HANDLER_SANDBOX_COMMAND",
                    message: "empty".into(),
                });
            }
            c.sandbox_command = argv;
            c.runtime_chosen_by = "HANDLER_SANDBOX_COMMAND".to_string();
        } else if let Some(sibling) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join(exe)))
            .filter(|p| p.is_file())
        {
            c.sandbox_command = vec![sibling.to_string_lossy().into_owned()];
        }
        Ok(c)
    }

    /// Changes the port, and the default origins with it.
    pub fn set_port(&mut self, port: u16) {
        let old = default_origins(self.port);
        self.allowed_origins.retain(|o| !old.contains(o));
        self.allowed_origins.extend(default_origins(port));
        self.port = port;
    }

    /// The token file (D, discovery).
    pub fn token_path(&self) -> PathBuf {
        self.config_dir.join(handler_contracts::TOKEN_FILE_NAME)
    }
}

/// The sandbox executable of runtime setting `runtime` (`HANDLER_RUNTIME`: `podman`, the
/// default, or `docker`, issue 19); `HANDLER_SANDBOX_COMMAND` still overrides it.
pub fn runtime_executable(runtime: Option<&str>) -> Result<&'static str, ConfigError> {
    match runtime.map(str::trim) {
        None | Some("" | "podman") => Ok("handler-sandbox-podman"),
        Some("docker") => Ok("handler-sandbox-docker"),
        Some(other) => Err(ConfigError::Invalid {
            var: "HANDLER_RUNTIME",
            message: format!("{other:?} is not a runtime: podman or docker"),
        }),
    }
}

fn default_origins(port: u16) -> Vec<String> {
    vec![
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ]
}

#[cfg(test)]
mod tests {

    #[test]
    fn dev_container_folders_are_absolute_compared_resolved_or_off() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("repo");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        let resolved = std::fs::canonicalize(&real).unwrap();
        // An entry named through a link allows the folder it resolves to.
        let list =
            DevcontainerFolders::parse(&format!("{}:", d.path().join("link").display())).unwrap();
        assert!(list.allows(&resolved));
        assert!(!list.allows(&std::fs::canonicalize(d.path()).unwrap()));
        assert!(
            DevcontainerFolders::parse("rel/dir")
                .unwrap_err()
                .contains("rel/dir")
        );
        assert!(!DevcontainerFolders::parse("off").unwrap().allows(&resolved));
        assert!(DevcontainerFolders::Any.allows(&resolved));
    }

    use super::*;

    #[test]
    fn the_runtime_setting_names_the_sandbox_executable() {
        assert_eq!(runtime_executable(None).unwrap(), "handler-sandbox-podman");
        assert_eq!(
            runtime_executable(Some("podman")).unwrap(),
            "handler-sandbox-podman"
        );
        assert_eq!(
            runtime_executable(Some("docker")).unwrap(),
            "handler-sandbox-docker"
        );
        let e = runtime_executable(Some("lxc")).unwrap_err().to_string();
        assert!(e.contains("HANDLER_RUNTIME") && e.contains("lxc"), "{e}");
    }
}

/// The folders a dev container may be made of (decision 0161, the seed's `devcontainer.folders`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevcontainerFolders {
    /// Any folder (unset: one person's host).
    Any,
    /// None at all (`off`).
    Off,
    /// These absolute paths, compared resolved.
    Only(Vec<PathBuf>),
}

impl DevcontainerFolders {
    /// `off`, or colon-separated absolute paths (a relative one means something else wherever
    /// the daemon starts: refused, naming it).
    pub fn parse(list: &str) -> Result<Self, String> {
        if list.trim() == "off" {
            return Ok(Self::Off);
        }
        let mut out = Vec::new();
        for p in list.split(':').map(str::trim).filter(|p| !p.is_empty()) {
            if !p.starts_with('/') {
                return Err(format!("{p:?} is not an absolute path"));
            }
            out.push(PathBuf::from(p));
        }
        Ok(Self::Only(out))
    }

    /// Whether the resolved folder `folder` may be made into a dev container: each entry is
    /// resolved now (an entry that does not exist allows nothing).
    pub fn allows(&self, folder: &std::path::Path) -> bool {
        match self {
            Self::Any => true,
            Self::Off => false,
            Self::Only(list) => list
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .any(|p| p == folder),
        }
    }
}
