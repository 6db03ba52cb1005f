//! Machines adopted by their labels (issue 29 item 5, decision 0155): a daemon whose record of a
//! machine is gone (its data folder restored from an older copy, a record removed by hand) finds
//! the machine again in the engine's list (`machine ls`) by the labels it was made with — its id,
//! the daemon's data folder, its network, its agents, a disposable machine's session — and keeps
//! a record of it again. Pure: the engine's `inspect` array in, the records to write out.

use std::collections::BTreeMap;

use handler_contracts::machine::{
    DISPOSABLE_DELAY_MS, DevcontainerUp, Disposable, MACHINE_LABEL, MachineRequest, valid_id,
};

use super::session::AGENTS_LABEL;

/// The label naming the daemon whose machine it is: a digest of its data folder, so that one
/// person's two daemons (or a test's many) never adopt each other's machines.
pub const DATA_LABEL: &str = "handler.machine.data";
/// The label naming a machine's network as its request gave it (`none`, `filtered`, `open`).
pub const NETWORK_LABEL: &str = "handler.machine.network";
/// A disposable machine's labels (decision 0148).
pub const DISPOSABLE_LABEL: &str = "handler.disposable";
/// The session a disposable machine was made for.
pub const SESSION_LABEL: &str = "handler.session";

/// A machine to adopt: its request as the labels tell it, its container, when it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    /// Its request (name, image, agents, network; the rest unknown, left out).
    pub request: MachineRequest,
    /// The engine's container id.
    pub container_id: String,
    /// When the engine made it (its `Created`).
    pub created_at: String,
    /// A disposable machine's session, with the default delay.
    pub disposable: Option<Disposable>,
    /// A dev container's folder and how its execs run, as its labels and the engine's record
    /// tell it ([`devcontainer_up`]).
    pub devcontainer: Option<(String, DevcontainerUp)>,
}

/// How the execs of dev container `c` (the engine's record of a machine Handler made from a
/// folder, labelled [`super::devcontainer::FOLDER_LABEL`]) run, read back from the engine when
/// its record is gone (decision 0155): its folder; the user and folder inside as a hand-made one
/// is adopted ([`super::devcontainer::adopted_user_and_folder`]); the variables of its
/// `devcontainer.metadata` label's `remoteEnv` over nothing (the login shell's, probed when it
/// was made, are not in the engine's record). None: not a dev container.
pub fn devcontainer_up(c: &serde_json::Value) -> Option<(String, DevcontainerUp)> {
    let labels = &c["Config"]["Labels"];
    let folder = labels[super::devcontainer::FOLDER_LABEL].as_str()?;
    let (remote_user, remote_workspace_folder) =
        super::devcontainer::adopted_user_and_folder(c, folder);
    Some((
        folder.to_string(),
        DevcontainerUp {
            container_id: c["Id"].as_str().unwrap_or_default().to_string(),
            remote_user,
            remote_workspace_folder,
            env: super::devcontainer::inspect_env(&[], c),
        },
    ))
}

/// The machines of `inspect` (the engine's records, as `machine ls` prints them) that daemon
/// `data` made (their [`DATA_LABEL`]) and `known` does not name: each as [`Adopted`]. A record
/// without a valid machine id, or another daemon's, is left alone.
pub fn adoptable(inspect: &serde_json::Value, data: &str, known: &[String]) -> Vec<Adopted> {
    let mut out: Vec<Adopted> = inspect
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let labels: BTreeMap<String, String> = c["Config"]["Labels"]
                .as_object()?
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect();
            let id = labels.get(MACHINE_LABEL)?.clone();
            if !valid_id(&id) || labels.get(DATA_LABEL).map(String::as_str) != Some(data) {
                return None;
            }
            if known.contains(&id) {
                return None;
            }
            let agents = labels
                .get(AGENTS_LABEL)
                .map(|a| {
                    a.split(',')
                        .filter(|x| !x.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let disposable = (labels.get(DISPOSABLE_LABEL).map(String::as_str) == Some("true"))
                .then(|| {
                    labels.get(SESSION_LABEL).map(|s| Disposable {
                        session: s.clone(),
                        delay_ms: DISPOSABLE_DELAY_MS,
                    })
                })
                .flatten();
            let devcontainer = devcontainer_up(c);
            Some(Adopted {
                request: MachineRequest {
                    name: id,
                    source: devcontainer.as_ref().map(|_| "devcontainer".to_string()),
                    devcontainer: devcontainer.as_ref().map(|(f, _)| f.clone()),
                    image: c["Config"]["Image"].as_str().map(String::from),
                    agents,
                    cpus: None,
                    memory: None,
                    workdir: c["Config"]["WorkingDir"]
                        .as_str()
                        .filter(|w| !w.is_empty())
                        .map(String::from),
                    folder: None,
                    mounts: Vec::new(),
                    network: labels.get(NETWORK_LABEL).cloned(),
                    allow: None,
                    profile: None,
                    parts: labels
                        .get(handler_contracts::machine::parts::PARTS_LABEL)
                        .map(|l| {
                            l.split(',')
                                .filter_map(|p| p.split('@').next())
                                .filter(|p| !p.is_empty())
                                .map(String::from)
                                .collect()
                        })
                        .unwrap_or_default(),
                },
                container_id: c["Id"].as_str().unwrap_or_default().to_string(),
                created_at: c["Created"].as_str().unwrap_or_default().to_string(),
                disposable,
                devcontainer,
            })
        })
        .collect();
    out.sort_by(|a, b| a.request.name.cmp(&b.request.name));
    out.dedup_by(|a, b| a.request.name == b.request.name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(id: &str, data: &str, extra: &[(&str, &str)]) -> serde_json::Value {
        let mut labels = json!({MACHINE_LABEL: id, DATA_LABEL: data, NETWORK_LABEL: "open"});
        for (k, v) in extra {
            labels[*k] = json!(v);
        }
        json!({"Id": format!("c-{id}"), "Created": "2026-12-05T20:00:00Z",
            "Config": {"Image": "localhost/img:latest", "WorkingDir": "/work", "Labels": labels}})
    }

    #[test]
    fn a_dev_container_is_adopted_with_its_user_folder_inside_and_variables() {
        let mut c = container(
            "dev",
            "d1",
            &[
                (super::super::devcontainer::FOLDER_LABEL, "/home/u/app"),
                (
                    "devcontainer.metadata",
                    r#"[{"remoteUser":"root"},{"remoteUser":"node","remoteEnv":{"FOO":"${containerEnv:BASE}/x","GONE":null}}]"#,
                ),
            ],
        );
        c["Config"]["Env"] = json!(["BASE=/opt", "GONE=1"]);
        c["Mounts"] = json!([{"Source": "/home/u/app", "Destination": "/workspaces/app"}]);
        let a = adoptable(&json!([c]), "d1", &[]);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].request.source.as_deref(), Some("devcontainer"));
        assert_eq!(a[0].request.devcontainer.as_deref(), Some("/home/u/app"));
        let (folder, up) = a[0].devcontainer.clone().unwrap();
        assert_eq!(folder, "/home/u/app");
        assert_eq!(up.container_id, "c-dev");
        assert_eq!(up.remote_user, "node");
        assert_eq!(up.remote_workspace_folder, "/workspaces/app");
        assert_eq!(
            up.env,
            BTreeMap::from([("FOO".to_string(), "/opt/x".to_string())])
        );
        // A machine made from an image is none.
        assert!(devcontainer_up(&container("img", "d1", &[])).is_none());
    }

    #[test]
    fn only_this_daemons_machines_it_has_no_record_of_are_adopted() {
        let inspect = json!([
            container("box", "d1", &[(AGENTS_LABEL, "a_one,a_two")]),
            container("known", "d1", &[]),
            container("theirs", "d2", &[]),
            container("Bad id", "d1", &[]),
            container(
                "d-0123456789abcdef",
                "d1",
                &[(DISPOSABLE_LABEL, "true"), (SESSION_LABEL, "s_1")]
            ),
            json!({"Id": "c-x", "Config": {"Labels": {"other": "x"}}}),
        ]);
        let got = adoptable(&inspect, "d1", &["known".to_string()]);
        assert_eq!(
            got.iter()
                .map(|a| a.request.name.as_str())
                .collect::<Vec<_>>(),
            ["box", "d-0123456789abcdef"]
        );
        assert_eq!(got[0].request.agents, ["a_one", "a_two"]);
        assert_eq!(got[0].request.network.as_deref(), Some("open"));
        assert_eq!(
            got[0].request.image.as_deref(),
            Some("localhost/img:latest")
        );
        assert_eq!(got[0].request.workdir.as_deref(), Some("/work"));
        assert_eq!(got[0].container_id, "c-box");
        assert_eq!(got[0].disposable, None);
        assert_eq!(
            got[1].disposable,
            Some(Disposable {
                session: "s_1".into(),
                delay_ms: DISPOSABLE_DELAY_MS
            })
        );
        assert!(adoptable(&json!([]), "d1", &[]).is_empty());
        assert!(adoptable(&json!({"not": "a list"}), "d1", &[]).is_empty());
    }
}
