//! The warm proxy pool (issue 34 item 1, decision 0175) as a pure plan: a member is a proxy
//! container started ahead of any launch, with the folders an instance's proxy has (settings,
//! CA bundle, socket) and one more, its claim folder, where it waits — unconfigured, listening on
//! nothing a sandbox can reach — for one launcher to connect, give it its configuration and keep
//! the connection for the instance's life (its ready line and events come back on it; the
//! connection's end ends it). The runtime claims a member by renaming its folder into the
//! instance folder, so two launchers never share one, and the sandbox's mounts of those folders
//! are the ones the member's container already has.

use super::topology::{CA_SUBDIR, PROXY_IMAGE, SETTINGS_SUBDIR, SOCKET_SUBDIR, Topology};
use super::{ProxyMode, config::ProxyConfig};
use crate::plan::engine::Engine;

/// The label every member carries (its value: the engine's name), what `drain` removes.
pub const POOL_LABEL: &str = "handler.proxy-pool";
/// The prefix of a member's container name; the rest is its id.
pub const POOL_CONTAINER_PREFIX: &str = "handler-proxy-pool-";
/// A member's claim folder's name in its folder (0700, mounted into the member only).
pub const CLAIM_SUBDIR: &str = "claim";
/// Where the member sees its claim folder.
pub const PROXY_CLAIM_DIR: &str = "/run/handler-egress-claim";
/// The claim socket's file name: its presence says the member waits for a launcher.
pub const CLAIM_SOCKET: &str = "claim.sock";
/// Where a claimed member's folder goes inside the instance folder (its claim folder with it).
pub const CLAIMED_SUBDIR: &str = "egress-claimed";
/// How long a member waits unclaimed before it ends (its container then goes, `--rm`).
pub const DEFAULT_IDLE_SECS: u64 = 600;

/// The folder of engine `engine_name`'s pool under the runtime folder (a name no sandbox can
/// have: sandbox names start with a letter or digit).
pub fn pool_folder_name(engine_name: &str) -> String {
    format!(".proxy-pool-{engine_name}")
}

/// Whether `id` is a member id this plan makes (lowercase hex, 16 characters): the runtime
/// claims nothing else it finds in the pool folder.
pub fn is_member_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One member, planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberPlan {
    /// Its container's name.
    pub container: String,
    /// The folders to create (in order) before it starts: its own, then settings, CA, socket
    /// (0755, as an instance's) and its claim folder (0700).
    pub dirs: Vec<(String, u32)>,
    /// The engine's `run` arguments, from `run` to the proxy's own.
    pub args: Vec<String>,
    /// The claim socket on the host.
    pub claim_socket: String,
}

/// Member `id` of the pool in folder `pool_dir` on `engine` (`engine_name`: its label's value),
/// waiting `idle_secs` for a launcher. Detached and removed when it ends; no log kept (its
/// events go to its launcher over the claim connection); always strict, like every proxy.
pub fn plan_member(
    engine: Engine<'_>,
    engine_name: &str,
    pool_dir: &str,
    id: &str,
    idle_secs: u64,
) -> MemberPlan {
    let dir = format!("{}/{id}", pool_dir.trim_end_matches('/'));
    let topo = Topology {
        direct_route: false,
        proxy_container: format!("{POOL_CONTAINER_PREFIX}{id}"),
        settings_dir: format!("{dir}/{SETTINGS_SUBDIR}"),
        ca_dir: format!("{dir}/{CA_SUBDIR}"),
        socket_dir: format!("{dir}/{SOCKET_SUBDIR}"),
        mode: ProxyMode::Filter,
        injections: false,
        control_dir: None,
    };
    let claim_dir = format!("{dir}/{CLAIM_SUBDIR}");
    let mut args: Vec<String> = ["run", "--detach", "--rm", "--name", &topo.proxy_container]
        .iter()
        .map(std::string::ToString::to_string)
        .collect();
    args.push("--log-driver=none".into());
    args.extend([
        "--mount".into(),
        format!("type=bind,source={claim_dir},destination={PROXY_CLAIM_DIR}"),
    ]);
    topo.proxy_common_args(
        engine,
        &[(POOL_LABEL.to_string(), engine_name.to_string())],
        &mut args,
    );
    args.extend([
        "--claim".into(),
        format!("{PROXY_CLAIM_DIR}/{CLAIM_SOCKET}"),
        "--idle".into(),
        idle_secs.to_string(),
    ]);
    MemberPlan {
        container: topo.proxy_container.clone(),
        dirs: vec![
            (dir.clone(), 0o700),
            (topo.settings_dir.clone(), 0o755),
            (topo.ca_dir.clone(), 0o755),
            (topo.socket_dir.clone(), 0o755),
            (claim_dir.clone(), 0o700),
        ],
        args,
        claim_socket: format!("{claim_dir}/{CLAIM_SOCKET}"),
    }
}

/// The configuration a claimed member is given: the instance's own (its paths inside the
/// container are the same), as one line (serde_json writes no raw newline).
pub fn claim_line(config: &ProxyConfig) -> Result<String, serde_json::Error> {
    let mut s = serde_json::to_string(config)?;
    s.push('\n');
    Ok(s)
}

/// Whether a pool may stand in for the proxy of a launch whose plan runs `image`: only the
/// network filter image the pool's members run.
pub fn pool_serves(image: &str) -> bool {
    image == PROXY_IMAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_a_strict_detached_proxy_waiting_on_its_claim_socket() {
        let m = plan_member(
            Engine::Podman,
            "podman",
            "/run/user/1000/handler-sandbox/.proxy-pool-podman/",
            "0123456789abcdef",
            600,
        );
        insta::assert_debug_snapshot!(m);
        assert!(m.args.contains(&"--cap-drop".to_string()));
        assert!(m.args.contains(&"--read-only".to_string()));
        // Nothing of a launcher: sweep never takes a member for a dead launcher's.
        assert!(!m.args.iter().any(|a| a.contains("handler.launcher")));
    }

    #[test]
    fn only_member_ids_are_claimed() {
        assert!(is_member_id("0123456789abcdef"));
        for bad in ["", "0123456789ABCDEF", "../x", "0123456789abcdef0", ".lock"] {
            assert!(!is_member_id(bad), "{bad}");
        }
        assert_eq!(pool_folder_name("docker"), ".proxy-pool-docker");
    }
}
