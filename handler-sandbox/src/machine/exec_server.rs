//! A machine's exec server (decision 0171): the first process of a machine made with it is the
//! network filter image's static binary as `exec-server`, which starts the machine's own argv
//! and runs each `machine exec` that fits ([`fits`]) without the engine — the runtime binds a
//! socket in the machine's `exec-ctl` folder (host-owned, read-only inside), the server sees it
//! appear, connects, and is given the exec's argv, cwd and variables with the caller's stdio as
//! descriptors. What this module holds is pure: where things are, the plan's additions, the
//! messages.

use std::collections::BTreeMap;

use handler_contracts::machine::ExecSpec;
use serde::{Deserialize, Serialize};

use crate::egress::topology::{PROXY_BINARY, PROXY_IMAGE, SANDBOX_FILTER_DIR};
use crate::plan::{Engine, ImageVolume, Stage, engine::image_mount};

/// The folder in a machine's staged folder where the runtime binds an exec's socket.
pub const EXEC_CTL: &str = "exec-ctl";

/// Where that folder is in the machine (read-only).
pub const EXEC_DIR: &str = "/run/handler/exec";

/// The file the server holds a shared lock on while it runs: the host's sign that it is there.
pub const ALIVE: &str = "alive";

/// The label of a network filter image whose binary has the exec server.
pub const EXEC_SERVER_LABEL: &str = "handler.exec-server";

/// The protocol's version, in every request.
pub const VERSION: u32 = 1;

/// The largest request the runtime sends (one datagram); a larger exec goes by the engine.
pub const MAX_REQUEST: usize = 64 * 1024;

/// The name of an exec's socket in [`EXEC_CTL`], made of 16 random hex digits.
pub fn socket_name(nonce: u64) -> String {
    format!("x-{nonce:016x}.sock")
}

/// Whether `name` (a new entry of the folder) is an exec's socket.
pub fn is_socket_name(name: &str) -> bool {
    name.strip_prefix("x-")
        .and_then(|n| n.strip_suffix(".sock"))
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether `exec` can go by the server: pipes (a terminal needs the engine's) and the machine's
/// own user (the server cannot become another). Anything else goes by `engine exec`.
pub fn fits(exec: &ExecSpec) -> bool {
    !exec.tty && exec.user.is_none()
}

/// What a machine made with the server adds to its plan: the options (the filter image mounted
/// when the network did not mount it already, the `exec-ctl` folder read-only), the folder and
/// its `alive` file to stage, the words before the argv, and Docker's volume to fill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPlan {
    /// Options before the image.
    pub args: Vec<String>,
    /// The folder and its file.
    pub stage: Vec<Stage>,
    /// The server's words, before the network's prefix and the machine's argv.
    pub argv_prefix: Vec<String>,
    /// The filter image's volume (Docker without `type=image`).
    pub volume: Option<ImageVolume>,
}

/// The plan's additions for a machine whose staged folder is `inst`, the filter image `image_id`
/// (its id: Docker's volume is filled from it), `filter_mounted` when the network mounts it.
pub fn plan_server(
    engine: Engine<'_>,
    inst: &str,
    image_id: &str,
    filter_mounted: bool,
) -> ServerPlan {
    let mut args = Vec::new();
    let mut volume = None;
    if !filter_mounted {
        let source = match engine {
            Engine::Podman => PROXY_IMAGE,
            Engine::Docker(_) => image_id,
        };
        let (mount, v) = image_mount(engine, PROXY_IMAGE, source, SANDBOX_FILTER_DIR);
        args.extend(["--mount".to_string(), mount]);
        volume = v;
    }
    let ctl = format!("{inst}/{EXEC_CTL}");
    args.extend([
        "--mount".to_string(),
        format!("type=bind,source={ctl},destination={EXEC_DIR},ro=true"),
    ]);
    ServerPlan {
        args,
        stage: vec![
            // Searchable by the machine's user whoever it maps to; writable by the host user
            // only (and read-only inside): nothing in the machine can plant a name there.
            Stage::Dir {
                path: ctl.clone(),
                mode: 0o755,
            },
            Stage::File {
                path: format!("{ctl}/{ALIVE}"),
                content: String::new(),
                mode: 0o644,
            },
        ],
        argv_prefix: vec![
            format!("{SANDBOX_FILTER_DIR}/{PROXY_BINARY}"),
            "exec-server".into(),
            "--dir".into(),
            EXEC_DIR.into(),
            "--".into(),
        ],
        volume,
    }
}

/// An exec the runtime asks of the server: what `engine exec` would be given.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// [`VERSION`].
    pub v: u32,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Where it starts (the machine's workdir when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Its variables, over the machine's own.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl std::fmt::Debug for ExecRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecRequest")
            .field("argv", &self.argv)
            .field("cwd", &self.cwd)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ExecRequest {
    /// The request of `exec` (which [`fits`]).
    pub fn of(exec: &ExecSpec) -> ExecRequest {
        ExecRequest {
            v: VERSION,
            argv: exec.argv.clone(),
            cwd: exec.cwd.clone(),
            env: exec.env.clone(),
        }
    }
}

/// What the server says, one datagram each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ServerMessage {
    /// The process runs.
    Started {
        /// Its pid in the machine.
        pid: u32,
    },
    /// It could not start (`code` as the engine's: 127 not found, 126 not runnable).
    Failed {
        /// The exec's exit code.
        code: i32,
        /// Why.
        error: String,
    },
    /// It ended: its code, or 128 + the signal that ended it.
    Exited {
        /// The exec's exit code.
        code: i32,
    },
}

/// What the runtime says after the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ClientMessage {
    /// Pass this signal on to the process (the runtime's own SIGTERM…).
    Signal {
        /// Its number.
        number: i32,
    },
}

/// The exit code of a program that could not start, as engines give it.
pub fn start_failure_code(not_found: bool) -> i32 {
    if not_found { 127 } else { 126 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::DockerFacts;

    #[test]
    fn an_execs_socket_name_is_recognised_and_nothing_else_is() {
        let n = socket_name(0xdead_beef);
        assert_eq!(n, "x-00000000deadbeef.sock");
        assert!(is_socket_name(&n));
        for bad in [
            "alive",
            "x-.sock",
            "x-00000000deadbeeg.sock",
            "x-00000000deadbeef.sock.tmp",
            "../x-00000000deadbeef.sock",
        ] {
            assert!(!is_socket_name(bad), "{bad}");
        }
    }

    #[test]
    fn only_a_pipe_exec_as_the_machines_user_goes_by_the_server() {
        let e = ExecSpec {
            argv: vec!["sh".into()],
            ..Default::default()
        };
        assert!(fits(&e));
        assert!(!fits(&ExecSpec {
            tty: true,
            ..e.clone()
        }));
        assert!(!fits(&ExecSpec {
            user: Some("root".into()),
            ..e
        }));
    }

    #[test]
    fn the_server_mounts_the_filter_image_once_and_its_folder_read_only() {
        let p = plan_server(Engine::Podman, "/d/m/handler-m-box", "sha256:1", false);
        insta::assert_debug_snapshot!(p);
        let filtered = plan_server(Engine::Podman, "/d/m/handler-m-box", "sha256:1", true);
        assert_eq!(filtered.args.len(), 2, "{:?}", filtered.args);
        assert!(filtered.args[1].ends_with(",ro=true"));
        let d = DockerFacts::default();
        let docker = plan_server(Engine::Docker(&d), "/d/m/handler-m-box", "sha256:1", false);
        assert_eq!(
            docker.volume.as_ref().map(|v| v.image_id.as_str()),
            Some("sha256:1")
        );
    }

    #[test]
    fn a_requests_debug_shows_no_value() {
        let r = ExecRequest::of(&ExecSpec {
            argv: vec!["agent".into()],
            env: BTreeMap::from([("TOKEN".into(), "phantom-value".into())]),
            ..Default::default()
        });
        let d = format!("{r:?}");
        assert!(d.contains("TOKEN") && !d.contains("phantom-value"), "{d}");
        let line = serde_json::to_string(&ServerMessage::Exited { code: 3 }).unwrap();
        assert_eq!(line, r#"{"kind":"exited","code":3}"#);
    }
}
