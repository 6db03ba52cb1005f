//! A mini app's backend sandbox (H.3, decision 0158): `app_sandbox_spec` — the seed's
//! `compose.app_sandbox_spec` — composes it from the app's deployed version and the host paths
//! handlerd chose. Strict confinement; the version's copy read-only at `/app`, its data
//! read-write at `/data` (`HANDLER_APP_DATA`), a folder of its own at `/run/app` for the HTTP
//! socket (`HANDLER_APP_SOCKET`); no network, or the filter with `needs.egress` — the same list
//! given to Deno's `--allow-net`, so both the proxy and the runtime refuse anything else.
//! Secrets are environment values of the spec (fd 3, never argv). Host files (`needs.files`,
//! H.9, decision 0160) at their own resolved paths, read-only unless `rw`, in Deno's permissions
//! too; the notification socket's folder (`needs.notify`) read-only. Neither reaches the tests.
//! Pure: no I/O.

use std::collections::BTreeMap;

use handler_contracts::SandboxSpec;
use handler_contracts::allow::AllowEntry;
use handler_contracts::api_version::SandboxApiVersion;
use handler_contracts::sandbox::{
    Confinement, Enforcement, Mount, MountKind, NetworkPolicy, Resources, SandboxUser, UserMode,
};

/// Where the deployed version is, in the sandbox.
pub const APP_DIR: &str = "/app";
/// Where its data is (`HANDLER_APP_DATA`).
pub const DATA_DIR: &str = "/data";
/// The socket's folder.
pub const RUN_DIR: &str = "/run/app";
/// The socket's name in it.
pub const SOCKET_NAME: &str = "http.sock";
/// Where Deno keeps what it compiles (a tmpfs, gone with the sandbox).
const DENO_DIR: &str = "/tmp/deno";
/// Where the notification socket's folder is (`needs.notify`, read-only).
pub const NOTIFY_DIR: &str = "/run/handler-notify";
/// The notification socket's name in it.
pub const NOTIFY_SOCKET: &str = "notify.sock";

/// A host file or folder given to the backend (`needs.files`, H.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppFile {
    /// The path as `app.toml` writes it (`~/…` or absolute): the key in `HANDLER_APP_FILES`.
    pub written: String,
    /// Its resolved host path, checked by the caller: the mount's source and target.
    pub path: String,
    /// Read-write (`mode = "rw"`) rather than read-only.
    pub read_write: bool,
}

/// What a backend's sandbox is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppSandboxInput {
    /// The sandbox's name (unique per start).
    pub name: String,
    /// The app's name.
    pub app: String,
    /// The version deployed.
    pub version: String,
    /// The runtime image.
    pub image: String,
    /// The version's copy on the host.
    pub version_dir: String,
    /// The app's data folder on the host.
    pub data_dir: String,
    /// The socket's folder on the host.
    pub run_dir: String,
    /// The server entry, relative to the version's folder.
    pub entry: String,
    /// `needs.egress`.
    pub egress: Vec<AllowEntry>,
    /// The secrets' values by name (H.2): the backend's environment.
    pub secrets: BTreeMap<String, String>,
    /// Memory and CPU limits.
    pub resources: Option<Resources>,
    /// `needs.files`, resolved (none for the tests).
    pub files: Vec<AppFile>,
    /// The host folder of the notification socket, when `needs.notify` (none for the tests).
    pub notify_dir: Option<String>,
    /// Run the app's tests (`deno test` on the server folder) rather than the server.
    pub test: bool,
}

impl AppSandboxInput {
    /// The files it is given: none to its tests (decision 0160).
    fn given_files(&self) -> &[AppFile] {
        if self.test { &[] } else { &self.files }
    }

    /// The notification socket's folder it is given: none to its tests.
    fn given_notify(&self) -> Option<&str> {
        self.notify_dir.as_deref().filter(|_| !self.test)
    }
}

/// Deno's command line: read the app and its data, write its data and socket folder, listen on
/// its socket and reach only `egress`, read the environment it is given.
pub fn deno_argv(i: &AppSandboxInput) -> Vec<String> {
    let mut argv = vec![
        "deno".to_string(),
        if i.test { "test" } else { "run" }.to_string(),
        "--no-prompt".to_string(),
    ];
    if i.test {
        // A server folder without tests passes.
        argv.push("--permit-no-files".to_string());
    }
    let mut read = vec![APP_DIR.to_string(), DATA_DIR.into(), RUN_DIR.into()];
    let mut write = vec![DATA_DIR.to_string(), RUN_DIR.into()];
    for f in i.given_files() {
        read.push(f.path.clone());
        if f.read_write {
            write.push(f.path.clone());
        }
    }
    if i.given_notify().is_some() {
        // Deno asks for both to connect to a unix socket; its mount is read-only.
        let socket = format!("{NOTIFY_DIR}/{NOTIFY_SOCKET}");
        read.push(socket.clone());
        write.push(socket);
    }
    argv.extend([
        format!("--allow-read={}", read.join(",")),
        format!("--allow-write={}", write.join(",")),
        "--allow-env".to_string(),
    ]);
    // Its own socket (Deno counts listening on it as net access), then `needs.egress`.
    let mut net = vec![format!("unix:{RUN_DIR}/{SOCKET_NAME}")];
    if i.given_notify().is_some() {
        // Deno 2 counts connecting to a unix socket as net access too.
        net.push(format!("unix:{NOTIFY_DIR}/{NOTIFY_SOCKET}"));
    }
    net.extend(i.egress.iter().map(ToString::to_string));
    argv.push(format!("--allow-net={}", net.join(",")));
    let entry = format!("{APP_DIR}/{}", i.entry);
    if i.test {
        let dir = entry.rsplit_once('/').map_or(entry.as_str(), |(d, _)| d);
        argv.push(dir.to_string());
    } else {
        argv.push(entry);
    }
    argv
}

/// The backend's environment: its places, its name and version, Deno's settings, then its
/// secrets, files and notification socket (none of the three for its tests).
fn app_env(i: &AppSandboxInput) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("HANDLER_APP_DATA".into(), DATA_DIR.to_string());
    env.insert(
        "HANDLER_APP_SOCKET".into(),
        format!("{RUN_DIR}/{SOCKET_NAME}"),
    );
    env.insert("HANDLER_APP_NAME".into(), i.app.clone());
    env.insert("HANDLER_APP_VERSION".into(), i.version.clone());
    env.insert("DENO_DIR".into(), DENO_DIR.into());
    env.insert("DENO_NO_UPDATE_CHECK".into(), "1".into());
    env.insert("NO_COLOR".into(), "1".into());
    if !i.test {
        // H.2: never given to its tests.
        env.extend(i.secrets.clone());
    }
    if !i.given_files().is_empty() {
        let map: serde_json::Map<String, serde_json::Value> = i
            .given_files()
            .iter()
            .map(|f| (f.written.clone(), f.path.clone().into()))
            .collect();
        env.insert(
            "HANDLER_APP_FILES".into(),
            serde_json::Value::Object(map).to_string(),
        );
    }
    if i.given_notify().is_some() {
        env.insert(
            "HANDLER_APP_NOTIFY".into(),
            format!("{NOTIFY_DIR}/{NOTIFY_SOCKET}"),
        );
    }
    env
}

/// The backend's SandboxSpec (H.3).
pub fn app_sandbox_spec(i: &AppSandboxInput) -> SandboxSpec {
    let mount = |source: &str, target: &str, read_only: bool| Mount {
        source: source.to_string(),
        target: target.to_string(),
        read_only,
        kind: MountKind::App,
    };
    let mut labels = BTreeMap::new();
    labels.insert("handler.app".into(), i.app.clone());
    SandboxSpec {
        api_version: SandboxApiVersion,
        name: i.name.clone(),
        confinement: Confinement::Strict,
        image: i.image.clone(),
        argv: deno_argv(i),
        env: app_env(i),
        workdir: DATA_DIR.into(),
        user: SandboxUser {
            mode: UserMode::HostUser,
            home: "/tmp".into(),
        },
        mounts: [
            mount(&i.version_dir, APP_DIR, true),
            mount(&i.data_dir, DATA_DIR, false),
            mount(&i.run_dir, RUN_DIR, false),
        ]
        .into_iter()
        .chain(
            i.given_files()
                .iter()
                .map(|f| mount(&f.path, &f.path, !f.read_write)),
        )
        .chain(i.given_notify().map(|n| mount(n, NOTIFY_DIR, true)))
        .collect(),
        image_mounts: Vec::new(),
        path_prepend: Vec::new(),
        path_append: Vec::new(),
        files: Vec::new(),
        writable_paths: vec!["/tmp".into()],
        network: if i.egress.is_empty() {
            NetworkPolicy::None
        } else {
            NetworkPolicy::Filtered {
                allow: i.egress.clone(),
                enforcement: Enforcement::Enforce,
            }
        },
        resources: i.resources.clone(),
        display: None,
        labels,
        tty: false,
        injections: Vec::new(),
        git_writable: false,
        oci_runtime: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> AppSandboxInput {
        AppSandboxInput {
            name: "handler-app-counter-1a2b".into(),
            app: "counter".into(),
            version: "1.2.0".into(),
            image: "localhost/handler-app-runtime:latest".into(),
            version_dir: "/home/me/.local/share/handler-ai/apps/counter/versions/1.2.0".into(),
            data_dir: "/home/me/.local/share/handler-ai/apps/counter/data".into(),
            run_dir: "/home/me/.local/state/handler-ai/apps/counter".into(),
            entry: "server/main.ts".into(),
            egress: vec![AllowEntry::parse("api.example.com:443").unwrap()],
            secrets: BTreeMap::from([("API_KEY".to_string(), "sk-value".to_string())]),
            resources: Some(Resources {
                memory: Some("512m".into()),
                cpus: None,
            }),
            files: Vec::new(),
            notify_dir: None,
            test: false,
        }
    }

    fn with_files_and_notify() -> AppSandboxInput {
        AppSandboxInput {
            files: vec![
                AppFile {
                    written: "~/code/runs.csv".into(),
                    path: "/home/me/code/runs.csv".into(),
                    read_write: false,
                },
                AppFile {
                    written: "/home/me/code/out".into(),
                    path: "/home/me/code/out".into(),
                    read_write: true,
                },
            ],
            notify_dir: Some("/home/me/.local/state/handler-ai/apps/counter/notify".into()),
            ..input()
        }
    }

    #[test]
    fn files_are_mounted_at_their_own_paths_and_in_denos_permissions_with_the_notify_socket() {
        let spec = app_sandbox_spec(&with_files_and_notify());
        crate::validate_spec(&spec).expect("a valid spec");
        let m: Vec<(&str, &str, bool)> = spec
            .mounts
            .iter()
            .skip(3)
            .map(|m| (m.source.as_str(), m.target.as_str(), m.read_only))
            .collect();
        assert_eq!(
            m,
            [
                ("/home/me/code/runs.csv", "/home/me/code/runs.csv", true),
                ("/home/me/code/out", "/home/me/code/out", false),
                (
                    "/home/me/.local/state/handler-ai/apps/counter/notify",
                    NOTIFY_DIR,
                    true
                ),
            ]
        );
        assert!(spec.argv.contains(
            &"--allow-read=/app,/data,/run/app,/home/me/code/runs.csv,/home/me/code/out,/run/handler-notify/notify.sock"
                .to_string()
        ));
        assert!(
            spec.argv.contains(
                &"--allow-write=/data,/run/app,/home/me/code/out,/run/handler-notify/notify.sock"
                    .to_string()
            )
        );
        assert_eq!(
            spec.env["HANDLER_APP_FILES"],
            r#"{"~/code/runs.csv":"/home/me/code/runs.csv","/home/me/code/out":"/home/me/code/out"}"#
        );
        assert_eq!(
            spec.env["HANDLER_APP_NOTIFY"],
            "/run/handler-notify/notify.sock"
        );
        assert!(!spec.git_writable, "a rw folder's .git stays read-only");
    }

    #[test]
    fn its_tests_get_neither_files_nor_the_notify_socket() {
        let spec = app_sandbox_spec(&AppSandboxInput {
            test: true,
            ..with_files_and_notify()
        });
        assert_eq!(spec.mounts.len(), 3);
        assert!(!spec.env.contains_key("HANDLER_APP_FILES"));
        assert!(!spec.env.contains_key("HANDLER_APP_NOTIFY"));
        assert!(
            spec.argv
                .contains(&"--allow-read=/app,/data,/run/app".to_string())
        );
    }

    #[test]
    fn a_backend_is_strict_with_its_three_folders_and_its_egress_twice() {
        let spec = app_sandbox_spec(&input());
        crate::validate_spec(&spec).expect("a valid spec");
        insta::assert_json_snapshot!(spec);
    }

    #[test]
    fn its_tests_get_no_secret_and_run_the_server_folder() {
        let spec = app_sandbox_spec(&AppSandboxInput {
            test: true,
            egress: Vec::new(),
            ..input()
        });
        assert!(!spec.env.contains_key("API_KEY"));
        assert_eq!(spec.network, NetworkPolicy::None);
        assert_eq!(
            spec.argv,
            [
                "deno",
                "test",
                "--no-prompt",
                "--permit-no-files",
                "--allow-read=/app,/data,/run/app",
                "--allow-write=/data,/run/app",
                "--allow-env",
                "--allow-net=unix:/run/app/http.sock",
                "/app/server"
            ]
        );
    }
}
