//! A session in a machine (issue 29 item 4, decision 0147), pure: [`for_agents`] composes the
//! MachineSpec of a machine made for some agents from each agent's own launch plan (what its
//! sandbox would mount, stage and allow), and [`plan_session`] turns a session's launch plan
//! into the [`ExecSpec`] that runs its agent inside the machine — or names what the machine
//! cannot give it without widening what the plan allows (A1: refuse what cannot be enforced).

use std::collections::BTreeMap;

use handler_contracts::allow::AllowEntry;
use handler_contracts::machine::{DevcontainerUp, ExecSpec, container_name};
use handler_contracts::sandbox::{Enforcement, NetworkPolicy, Resources, SandboxSpec};

/// The label listing the agents a machine was made for (the seed's `ahpd.agents`).
pub const AGENTS_LABEL: &str = "handler.agents";

/// Why an agent's plan and a machine do not fit; each names what differs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    /// The machine was not made for this agent.
    #[error("machine {machine:?} is not made for agent {agent:?} (it is for: {for_})")]
    NotFor {
        /// The machine's id.
        machine: String,
        /// The agent.
        agent: String,
        /// Its agents, comma-separated.
        for_: String,
    },
    /// The agent's model access puts secrets behind phantoms, and the machine has no proxy to
    /// swap them (it is not filtered).
    #[error(
        "agent {agent:?}: its model access needs its secrets injected by an egress proxy ({names}), and only a filtered machine has one (decision 0166): make the machine filtered, or run this agent outside a machine"
    )]
    Injections {
        /// The agent.
        agent: String,
        /// The secrets' names.
        names: String,
    },
    /// The agent's keys would share a machine with another agent, whose processes can read
    /// them: a machine holds one agent's keys only when it is made for that agent alone
    /// (decision 0166).
    #[error(
        "agent {agent:?}: its secrets ({names}) would be readable by the other agents of machine {machine:?} ({others}): a machine holds keys only when it is made for one agent — make one for {agent:?} alone"
    )]
    SharedKeys {
        /// The agent.
        agent: String,
        /// Its secrets' names.
        names: String,
        /// The machine's id.
        machine: String,
        /// The other agents, comma-separated.
        others: String,
    },
    /// The machine's network is wider than the agent's.
    #[error(
        "network: the machine's network ({machine}) is wider than agent {agent:?}'s ({agent_net})"
    )]
    Network {
        /// The agent.
        agent: String,
        /// The machine's mode.
        machine: &'static str,
        /// The agent's mode.
        agent_net: &'static str,
    },
    /// The machine's filter allows a destination the agent's own sandbox would not.
    #[error(
        "network: the machine allows {entry}, which agent {agent:?}'s own sandbox does not: make the machine with an allow-list its agents all have"
    )]
    Allow {
        /// The agent.
        agent: String,
        /// The machine's entry.
        entry: String,
    },
    /// The machine's filter only reports what the agent's would refuse.
    #[error(
        "network: the machine's filter is log-only and agent {agent:?}'s enforces: set the machine's egress to enforce"
    )]
    Enforcement {
        /// The agent.
        agent: String,
    },
    /// The agent's plan mounts something the machine does not have as the plan says.
    #[error(
        "mounts: agent {agent:?} needs {host} at {target}{ro} and the machine {has}: make the machine again for its agents"
    )]
    Mount {
        /// The agent.
        agent: String,
        /// The host path.
        host: String,
        /// The path inside.
        target: String,
        /// " (read-only)" or "".
        ro: &'static str,
        /// What the machine has there.
        has: String,
    },
    /// A staged file differs.
    #[error(
        "files: agent {agent:?} needs its own {target} and the machine's differs: make the machine again for its agents"
    )]
    File {
        /// The agent.
        agent: String,
        /// The file's path inside.
        target: String,
    },
    /// Some other property of the sandbox differs.
    #[error("{field}: agent {agent:?}'s sandbox and the machine's differ ({why})")]
    Differs {
        /// The agent.
        agent: String,
        /// The field of the SandboxSpec.
        field: &'static str,
        /// How.
        why: String,
    },
    /// Nothing to make it for.
    #[error("agents: a machine made for agents needs at least one")]
    NoAgents,
}

/// What a machine made for agents takes from its request rather than from their plans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineBase {
    /// Its id.
    pub id: String,
    /// Its image; None: the first agent's harness image.
    pub image: Option<String>,
    /// Its first process.
    pub argv: Vec<String>,
    /// Where its commands start.
    pub workdir: String,
    /// Its own folder (host path), mounted at `workdir`.
    pub work: String,
    /// Its network.
    pub network: NetworkPolicy,
    /// Its limits.
    pub resources: Option<Resources>,
    /// Labels of its own (who made it).
    pub labels: BTreeMap<String, String>,
}

fn rank(n: &NetworkPolicy) -> (u8, &'static str) {
    match n {
        NetworkPolicy::None => (0, "none"),
        NetworkPolicy::Filtered { .. } => (1, "filtered"),
        NetworkPolicy::Open => (2, "open"),
    }
}

/// Whether machine network `machine` is no wider than the plan's: none < filtered < open, and
/// a filtered machine's every entry covered by one of a filtered plan's, enforcing if it does.
fn check_network(agent: &str, machine: &NetworkPolicy, plan: &NetworkPolicy) -> Result<(), Unfit> {
    let (m, mn) = rank(machine);
    let (p, pn) = rank(plan);
    if m > p {
        return Err(Unfit::Network {
            agent: agent.into(),
            machine: mn,
            agent_net: pn,
        });
    }
    if let (
        NetworkPolicy::Filtered {
            allow: m_allow,
            enforcement: m_enf,
        },
        NetworkPolicy::Filtered {
            allow: p_allow,
            enforcement: p_enf,
        },
    ) = (machine, plan)
    {
        if let Some(e) = m_allow
            .iter()
            .find(|e| !p_allow.iter().any(|p| p.target().covers(&e.target())))
        {
            return Err(Unfit::Allow {
                agent: agent.into(),
                entry: e.to_string(),
            });
        }
        if *m_enf == Enforcement::LogOnly && *p_enf == Enforcement::Enforce {
            return Err(Unfit::Enforcement {
                agent: agent.into(),
            });
        }
    }
    Ok(())
}

/// The filter a machine made for `plans` has when its request names none: each entry of a
/// filtered plan that every filtered plan covers (an open plan allows all; each entry once),
/// log-only only when every filtered plan is — so it allows no agent more than its own
/// sandbox would.
pub fn common_filter(plans: &[(&str, &SandboxSpec)]) -> NetworkPolicy {
    let filters: Vec<(&Vec<AllowEntry>, Enforcement)> = plans
        .iter()
        .filter_map(|(_, p)| match &p.network {
            NetworkPolicy::Filtered { allow, enforcement } => Some((allow, *enforcement)),
            _ => None,
        })
        .collect();
    let enforcement =
        if !filters.is_empty() && filters.iter().all(|(_, e)| *e == Enforcement::LogOnly) {
            Enforcement::LogOnly
        } else {
            Enforcement::Enforce
        };
    let filters: Vec<&Vec<AllowEntry>> = filters.into_iter().map(|(f, _)| f).collect();
    let mut allow: Vec<AllowEntry> = Vec::new();
    for e in filters.iter().flat_map(|f| f.iter()) {
        let everyone = filters
            .iter()
            .all(|f| f.iter().any(|p| p.target().covers(&e.target())));
        if everyone && !allow.contains(e) {
            allow.push(e.clone());
        }
    }
    NetworkPolicy::Filtered { allow, enforcement }
}

/// Whether machine `id` (network `network`, made for `agents`) can hold `agent`'s keys
/// (decision 0166): only through a filtered machine's proxy, and only when no other agent's
/// processes share the machine (they could read the phantoms and use them through the proxy).
fn check_injections(
    (id, network, agents): (&str, &NetworkPolicy, &[&str]),
    agent: &str,
    plan: &SandboxSpec,
) -> Result<(), Unfit> {
    if plan.injections.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = plan.injections.iter().map(|i| i.name.as_str()).collect();
    if !matches!(network, NetworkPolicy::Filtered { .. }) {
        return Err(Unfit::Injections {
            agent: agent.into(),
            names: names.join(", "),
        });
    }
    let others: Vec<&str> = agents.iter().copied().filter(|a| *a != agent).collect();
    if !others.is_empty() {
        return Err(Unfit::SharedKeys {
            agent: agent.into(),
            names: names.join(", "),
            machine: id.into(),
            others: others.join(", "),
        });
    }
    Ok(())
}

fn differs(agent: &str, field: &'static str, why: String) -> Unfit {
    Unfit::Differs {
        agent: agent.into(),
        field,
        why,
    }
}

/// The MachineSpec of machine `base` made for `plans` (each agent's id and its launch plan, as
/// its session's would be in this machine): the first plan's user and confinement, every
/// plan's mounts, staged files, image mounts, PATH additions and writable paths (each target
/// once: two agents wanting different things at one path are refused), the machine's own
/// folder at its workdir, labelled with its agents — and none of a launch's labels, so no
/// sweep takes it for a dead launch's (decision 0142). Refused: a plan with injections unless
/// the machine is filtered and for that agent alone (decision 0166), one
/// whose network is narrower than the machine's, plans that differ in confinement or user,
/// a display.
pub fn for_agents(
    base: &MachineBase,
    plans: &[(&str, &SandboxSpec)],
) -> Result<SandboxSpec, Unfit> {
    let (first_agent, first) = plans.first().ok_or(Unfit::NoAgents)?;
    let mut spec = (*first).clone();
    spec.name = container_name(&base.id);
    if let Some(i) = &base.image {
        spec.image.clone_from(i);
    }
    spec.argv.clone_from(&base.argv);
    spec.env = BTreeMap::new();
    spec.workdir.clone_from(&base.workdir);
    spec.network = base.network.clone();
    spec.resources.clone_from(&base.resources);
    spec.tty = false;
    spec.injections = Vec::new();
    spec.mounts = vec![handler_contracts::sandbox::Mount {
        source: base.work.clone(),
        target: base.workdir.clone(),
        read_only: false,
        kind: handler_contracts::sandbox::MountKind::State,
    }];
    spec.files = Vec::new();
    spec.image_mounts = Vec::new();
    spec.path_append = Vec::new();
    spec.path_prepend = Vec::new();
    spec.writable_paths = Vec::new();
    spec.git_writable = false;
    let mut labels = base.labels.clone();
    labels.insert(
        AGENTS_LABEL.into(),
        plans.iter().map(|(a, _)| *a).collect::<Vec<_>>().join(","),
    );
    spec.labels = labels;
    let agents: Vec<&str> = plans.iter().map(|(a, _)| *a).collect();
    for (agent, plan) in plans {
        check_injections((&base.id, &base.network, &agents), agent, plan)?;
        check_plan(base, (first_agent, first), agent, plan)?;
        add_plan(&mut spec, agent, plan)?;
    }
    Ok(spec)
}

/// What makes `agent`'s plan unfit for a machine whatever else it holds: a network narrower
/// than the machine's, a display, a confinement or user other than the first plan's.
fn check_plan(
    base: &MachineBase,
    (first_agent, first): (&str, &SandboxSpec),
    agent: &str,
    plan: &SandboxSpec,
) -> Result<(), Unfit> {
    check_network(agent, &base.network, &plan.network)?;
    if plan.display.is_some() {
        return Err(differs(
            agent,
            "display",
            "a machine cannot show one agent's windows on the screen yet".into(),
        ));
    }
    if plan.confinement != first.confinement {
        return Err(differs(
            agent,
            "confinement",
            format!("{first_agent:?}'s is another"),
        ));
    }
    if plan.user != first.user {
        return Err(differs(
            agent,
            "user",
            format!("{first_agent:?}'s is another"),
        ));
    }
    Ok(())
}

/// `agent`'s mounts, staged files, image mounts, PATH additions and writable paths added to
/// the machine's `spec`, each target once (another thing at one target: refused, named).
fn add_plan(spec: &mut SandboxSpec, agent: &str, plan: &SandboxSpec) -> Result<(), Unfit> {
    for m in &plan.mounts {
        match spec.mounts.iter().find(|x| x.target == m.target) {
            None => spec.mounts.push(m.clone()),
            Some(x) if x.source == m.source && x.read_only == m.read_only => {}
            Some(x) => return Err(mount_unfit(agent, m, Some(x))),
        }
    }
    for f in &plan.files {
        match spec.files.iter().find(|x| x.target == f.target) {
            None => spec.files.push(f.clone()),
            Some(x) if x == f => {}
            Some(_) => {
                return Err(Unfit::File {
                    agent: (*agent).into(),
                    target: f.target.clone(),
                });
            }
        }
    }
    for i in &plan.image_mounts {
        match spec.image_mounts.iter().find(|x| x.target == i.target) {
            None => spec.image_mounts.push(i.clone()),
            Some(x) if x == i => {}
            Some(x) => {
                return Err(differs(
                    agent,
                    "imageMounts",
                    format!("{} at {}, the machine has {}", i.image, i.target, x.image),
                ));
            }
        }
    }
    for p in &plan.path_append {
        if !spec.path_append.contains(p) {
            spec.path_append.push(p.clone());
        }
    }
    for w in &plan.writable_paths {
        if !spec.writable_paths.contains(w) {
            spec.writable_paths.push(w.clone());
        }
    }
    spec.git_writable |= plan.git_writable;
    Ok(())
}

fn mount_unfit(
    agent: &str,
    m: &handler_contracts::sandbox::Mount,
    has: Option<&handler_contracts::sandbox::Mount>,
) -> Unfit {
    Unfit::Mount {
        agent: agent.into(),
        host: m.source.clone(),
        target: m.target.clone(),
        ro: if m.read_only { " (read-only)" } else { "" },
        has: has.map_or_else(
            || "has nothing there".to_string(),
            |x| {
                format!(
                    "has {} there{}",
                    x.source,
                    if x.read_only { " (read-only)" } else { "" }
                )
            },
        ),
    }
}

/// The agents machine `spec` was made for (its [`AGENTS_LABEL`]).
pub fn agents_of(spec: &SandboxSpec) -> Vec<String> {
    spec.labels
        .get(AGENTS_LABEL)
        .map(|l| {
            l.split(',')
                .filter(|a| !a.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// Where a process whose plan starts in `dir` (a path inside) starts in machine `spec`: there
/// when one of the machine's mounts (the longest that covers it, as the seed says) or its
/// workdir covers it, else the machine's workdir.
pub fn map_cwd(spec: &SandboxSpec, dir: &str) -> String {
    let under = |root: &str| {
        let root = root.trim_end_matches('/');
        dir == root || root.is_empty() || dir.starts_with(&format!("{root}/"))
    };
    let covered = spec
        .mounts
        .iter()
        .map(|m| m.target.as_str())
        .chain(std::iter::once(spec.workdir.as_str()))
        .filter(|t| under(t))
        .max_by_key(|t| t.len());
    match covered {
        Some(_) => dir.to_string(),
        None => spec.workdir.clone(),
    }
}

/// The exec that runs the session whose launch plan is `plan` (agent `agent`) in machine `id`
/// made as `machine`: the plan's argv, variables and keys (decision 0166), started in its
/// workdir mapped by [`map_cwd`]. Refused, naming what differs: an agent the machine was not
/// made for, a plan with injections in a machine not filtered or not for that agent alone, a
/// machine network wider than the plan's, a mount, staged file or image mount of the plan the
/// machine does not have as the plan says, another confinement or user, a display — a session never runs with more than its own sandbox would have had.
pub fn plan_session(
    id: &str,
    machine: &SandboxSpec,
    agent: &str,
    plan: &SandboxSpec,
) -> Result<ExecSpec, Unfit> {
    let agents = agents_of(machine);
    if !agents.iter().any(|a| a == agent) {
        return Err(Unfit::NotFor {
            machine: id.into(),
            agent: agent.into(),
            for_: if agents.is_empty() {
                "no agent".into()
            } else {
                agents.join(", ")
            },
        });
    }
    let names: Vec<&str> = agents.iter().map(String::as_str).collect();
    check_injections((id, &machine.network, &names), agent, plan)?;
    check_network(agent, &machine.network, &plan.network)?;
    if plan.display.is_some() {
        return Err(differs(
            agent,
            "display",
            "a machine cannot show one agent's windows on the screen yet".into(),
        ));
    }
    if plan.confinement != machine.confinement {
        return Err(differs(agent, "confinement", "made with another".into()));
    }
    if plan.user != machine.user {
        return Err(differs(agent, "user", "made with another".into()));
    }
    for m in &plan.mounts {
        let has = machine.mounts.iter().find(|x| x.target == m.target);
        if !has.is_some_and(|x| x.source == m.source && x.read_only == m.read_only) {
            return Err(mount_unfit(agent, m, has));
        }
    }
    for f in &plan.files {
        if !machine.files.iter().any(|x| x == f) {
            return Err(Unfit::File {
                agent: agent.into(),
                target: f.target.clone(),
            });
        }
    }
    for i in &plan.image_mounts {
        if !machine.image_mounts.contains(i) {
            return Err(differs(
                agent,
                "imageMounts",
                format!("the machine has no {} at {}", i.image, i.target),
            ));
        }
    }
    Ok(ExecSpec {
        argv: plan.argv.clone(),
        cwd: Some(map_cwd(machine, &plan.workdir)),
        env: plan.env.clone(),
        user: None,
        tty: false,
        // A session reaches its machine whatever its state: started when stopped.
        start_stopped: true,
        // Its own keys, on fd 3 only: the machine's proxy holds them while it runs (0166).
        injections: plan.injections.clone(),
    })
}

/// Session `exec` (of [`plan_session`]) in a dev container that `machine up` found as `up`
/// (decision 0169): as its user (`remoteUser`), with its variables (its login shell's, its
/// parts' PATH) under the agent's own, and the agent's own `home`, where its state slots and
/// staged files are — the repository's toolchain comes by PATH, the agent's settings by HOME.
pub fn in_dev_container(exec: ExecSpec, up: &DevcontainerUp, home: &str) -> ExecSpec {
    let mut exec = dev_container_defaults(exec, up);
    exec.env.insert("HOME".into(), home.into());
    exec
}

/// `exec` in a dev container that `machine up` found as `up` (decision 0161): its user, its
/// folder inside and its variables, under what the exec names itself.
pub fn dev_container_defaults(mut exec: ExecSpec, up: &DevcontainerUp) -> ExecSpec {
    exec.user.get_or_insert_with(|| up.remote_user.clone());
    exec.cwd
        .get_or_insert_with(|| up.remote_workspace_folder.clone());
    for (k, v) in &up.env {
        exec.env.entry(k.clone()).or_insert_with(|| v.clone());
    }
    exec
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(name: &str, scope: &str, state: &str) -> SandboxSpec {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "handler.sandbox/v1",
            "name": name,
            "image": "localhost/handler-fake:latest",
            "argv": ["fake-acp-agent"],
            "env": {"FAKE_HOME": "/home/agent/.fake"},
            "workdir": scope,
            "user": {"mode": "host-user", "home": "/home/agent"},
            "mounts": [
                {"source": scope, "target": scope, "readOnly": false, "kind": "scope"},
                {"source": state, "target": "/home/agent/.fake", "readOnly": false, "kind": "state"},
            ],
            "files": [{"target": "/home/agent/.fake/config.toml", "content": "x = 1\n"}],
            "writablePaths": ["/tmp"],
            "network": {"mode": "none"},
            "labels": {"handler.agent": "a_one", "handler.connection": "s_1"},
        }))
        .unwrap()
    }

    fn base() -> MachineBase {
        MachineBase {
            id: "box".into(),
            image: None,
            argv: vec!["sleep".into(), "infinity".into()],
            workdir: "/work".into(),
            work: "/d/machines/box/work".into(),
            network: NetworkPolicy::None,
            resources: None,
            labels: BTreeMap::from([("handler.machine.made-by".into(), "handlerd".into())]),
        }
    }

    #[test]
    fn a_machine_made_for_agents_has_their_mounts_and_none_of_a_launchs_labels() {
        let a = plan("handler-a-one-m", "/home/u/app", "/d/state/a_one");
        let b = plan("handler-a-two-m", "/home/u/app", "/d/state/a_two");
        let mut b = b;
        b.mounts[1].target = "/home/agent/.other".into();
        b.files.clear();
        let m = for_agents(&base(), &[("a_one", &a), ("a_two", &b)]).unwrap();
        insta::assert_json_snapshot!(m);
        assert!(!m.labels.contains_key("handler.agent"));
        assert_eq!(agents_of(&m), ["a_one", "a_two"]);
        // Each agent's session runs in its own workdir with its own variables.
        let e = plan_session("box", &m, "a_two", &b).unwrap();
        assert_eq!(e.cwd.as_deref(), Some("/home/u/app"));
        assert_eq!(e.argv, ["fake-acp-agent"]);
        assert_eq!(e.env["FAKE_HOME"], "/home/agent/.fake");
    }

    #[test]
    fn what_a_machine_cannot_give_a_session_is_named() {
        let a = plan("handler-a-one-m", "/home/u/app", "/d/state/a_one");
        let m = for_agents(&base(), &[("a_one", &a)]).unwrap();
        let shown = |r: Result<ExecSpec, Unfit>| r.unwrap_err().to_string();
        insta::assert_snapshot!(shown(plan_session("box", &m, "a_two", &a)), @r#"machine "box" is not made for agent "a_two" (it is for: a_one)"#);
        let mut other = a.clone();
        other.mounts[0].source = "/home/u/elsewhere".into();
        insta::assert_snapshot!(shown(plan_session("box", &m, "a_one", &other)), @r#"mounts: agent "a_one" needs /home/u/elsewhere at /home/u/app and the machine has /home/u/app there: make the machine again for its agents"#);
        let mut ro = a.clone();
        ro.mounts[0].read_only = true;
        assert!(shown(plan_session("box", &m, "a_one", &ro)).contains("(read-only)"));
        let mut file = a.clone();
        file.files[0].content = "x = 2\n".into();
        insta::assert_snapshot!(shown(plan_session("box", &m, "a_one", &file)), @r#"files: agent "a_one" needs its own /home/agent/.fake/config.toml and the machine's differs: make the machine again for its agents"#);
        let mut key: SandboxSpec = a.clone();
        key.injections = serde_json::from_value(serde_json::json!([{"name": "providers/p/apiKey",
            "phantom": "phantom-0000000000", "value": "secret-00000000000", "hosts": ["api.example.com:443"]}])).unwrap();
        let e = shown(plan_session("box", &m, "a_one", &key));
        assert!(
            e.contains("providers/p/apiKey") && !e.contains("secret-0"),
            "{e}"
        );
        assert!(for_agents(&base(), &[("a_one", &key)]).is_err());
        // A machine wider than the agent's sandbox is refused, a narrower one is not.
        let mut open = base();
        open.network = NetworkPolicy::Open;
        assert_eq!(
            for_agents(&open, &[("a_one", &a)]).unwrap_err().to_string(),
            r#"network: the machine's network (open) is wider than agent "a_one"'s (none)"#
        );
        let mut wide = a.clone();
        wide.network = NetworkPolicy::Open;
        assert!(plan_session("box", &m, "a_one", &wide).is_ok());
        // Two agents wanting different things at one path.
        let mut b = a.clone();
        b.mounts[1].source = "/d/state/a_two".into();
        assert!(
            for_agents(&base(), &[("a_one", &a), ("a_two", &b)])
                .unwrap_err()
                .to_string()
                .starts_with("mounts: agent \"a_two\"")
        );
        assert_eq!(for_agents(&base(), &[]).unwrap_err(), Unfit::NoAgents);
    }

    #[test]
    fn a_machine_holds_one_agents_keys_only_filtered_and_for_that_agent_alone() {
        let net = filtered(&["api.example.com:443"], Enforcement::Enforce);
        let mut a = plan("handler-a-one-m", "/home/u/app", "/d/state/a_one");
        a.network = net.clone();
        a.env
            .insert("P_API_KEY".into(), "phantom-0000000000".into());
        a.injections = serde_json::from_value(serde_json::json!([{"name": "providers/p/apiKey",
            "phantom": "phantom-0000000000", "value": "secret-00000000000", "hosts": ["api.example.com:443"]}])).unwrap();
        let mut one = base();
        one.network = net.clone();
        let m = for_agents(&one, &[("a_one", &a)]).unwrap();
        // The machine itself holds no secret; the session's exec carries its own, by fd 3.
        assert!(m.injections.is_empty());
        let e = plan_session("box", &m, "a_one", &a).unwrap();
        assert_eq!(e.injections, a.injections);
        assert_eq!(e.env["P_API_KEY"], "phantom-0000000000");
        assert!(!format!("{e:?}").contains("secret-0"));
        // Another agent in the same machine could read the phantom: refused, naming both.
        let mut b = plan("handler-a-two-m", "/home/u/app", "/d/state/a_two");
        b.network = net;
        b.mounts[1].target = "/home/agent/.other".into();
        b.files.clear();
        let shared = for_agents(&one, &[("a_one", &a), ("a_two", &b)]).unwrap_err();
        insta::assert_snapshot!(shared.to_string(), @r#"agent "a_one": its secrets (providers/p/apiKey) would be readable by the other agents of machine "box" (a_two): a machine holds keys only when it is made for one agent — make one for "a_one" alone"#);
        let mut keyless = a.clone();
        keyless.injections.clear();
        let both_made = for_agents(&one, &[("a_one", &keyless), ("a_two", &b)]).unwrap();
        assert!(matches!(
            plan_session("box", &both_made, "a_one", &a),
            Err(Unfit::SharedKeys { .. })
        ));
        // A keyless agent beside nobody's keys is as before.
        assert!(plan_session("box", &both_made, "a_two", &b).is_ok());
    }

    fn filtered(entries: &[&str], enforcement: Enforcement) -> NetworkPolicy {
        NetworkPolicy::Filtered {
            allow: entries
                .iter()
                .map(|e| AllowEntry::parse(e).unwrap())
                .collect(),
            enforcement,
        }
    }

    #[test]
    fn a_filtered_machine_allows_no_agent_more_than_its_own_sandbox() {
        let mut a = plan("handler-a-one-m", "/home/u/app", "/d/state/a_one");
        a.network = filtered(
            &["*.example.com:443", "models.local:8080"],
            Enforcement::Enforce,
        );
        let mut b = plan("handler-a-two-m", "/home/u/app", "/d/state/a_two");
        b.mounts[1].target = "/home/agent/.other".into();
        b.files.clear();
        b.network = filtered(&["api.example.com:443"], Enforcement::Enforce);
        // Left out of the request: what both allow, enforced.
        let common = common_filter(&[("a_one", &a), ("a_two", &b)]);
        assert_eq!(
            common,
            filtered(&["api.example.com:443"], Enforcement::Enforce)
        );
        let mut fb = base();
        fb.network = common;
        let m = for_agents(&fb, &[("a_one", &a), ("a_two", &b)]).unwrap();
        assert!(plan_session("box", &m, "a_one", &a).is_ok());
        assert!(plan_session("box", &m, "a_two", &b).is_ok());
        // An open agent fits a filtered machine; one with no network does not.
        let mut open = a.clone();
        open.network = NetworkPolicy::Open;
        assert!(plan_session("box", &m, "a_one", &open).is_ok());
        let mut none = a.clone();
        none.network = NetworkPolicy::None;
        assert_eq!(
            plan_session("box", &m, "a_one", &none)
                .unwrap_err()
                .to_string(),
            r#"network: the machine's network (filtered) is wider than agent "a_one"'s (none)"#
        );
        // A machine entry no entry of the agent's covers, and a log-only machine.
        fb.network = filtered(&["models.local:8080"], Enforcement::Enforce);
        assert_eq!(
            for_agents(&fb, &[("a_one", &a), ("a_two", &b)])
                .unwrap_err()
                .to_string(),
            r#"network: the machine allows models.local:8080, which agent "a_two"'s own sandbox does not: make the machine with an allow-list its agents all have"#
        );
        fb.network = filtered(&["api.example.com:443"], Enforcement::LogOnly);
        assert_eq!(
            for_agents(&fb, &[("a_one", &a)]).unwrap_err(),
            Unfit::Enforcement {
                agent: "a_one".into()
            }
        );
        // No filtered agent: a filtered machine of its own allows nothing.
        let plain = plan("handler-a-one-m", "/home/u/app", "/d/state/a_one");
        let mut wide = plain.clone();
        wide.network = NetworkPolicy::Open;
        assert_eq!(
            common_filter(&[("a_one", &wide)]),
            filtered(&[], Enforcement::Enforce)
        );
        // Log-only only when every filtered agent is.
        let mut learn = a.clone();
        learn.network = filtered(&["api.example.com:443"], Enforcement::LogOnly);
        assert_eq!(
            common_filter(&[("a_one", &learn), ("a_two", &wide)]),
            filtered(&["api.example.com:443"], Enforcement::LogOnly)
        );
        assert_eq!(
            common_filter(&[("a_one", &learn), ("a_two", &b)]),
            filtered(&["api.example.com:443"], Enforcement::Enforce)
        );
    }

    #[test]
    fn the_longest_mount_wins_and_an_uncovered_path_starts_in_the_workdir() {
        let a = plan("handler-a-one-m", "/home/u/app", "/d/state/a_one");
        let m = for_agents(&base(), &[("a_one", &a)]).unwrap();
        assert_eq!(map_cwd(&m, "/home/u/app/src"), "/home/u/app/src");
        assert_eq!(map_cwd(&m, "/work/x"), "/work/x");
        assert_eq!(map_cwd(&m, "/home/u/application"), "/work");
        assert_eq!(map_cwd(&m, "/etc"), "/work");
    }

    /// Decision 0169: a session in a dev container runs as its `remoteUser`, with its
    /// variables under the agent's own, in the agent's own home and workdir.
    #[test]
    fn a_session_in_a_dev_container_runs_as_its_user_with_its_variables_under_the_agents() {
        let a = plan("handler-a-one-m", "/home/u/app", "/d/state/a_one");
        let mut dev = base();
        dev.image = Some("devcontainer".into());
        dev.workdir = "/workspaces/app".into();
        dev.work = "/home/u/app".into();
        let m = for_agents(&dev, &[("a_one", &a)]).unwrap();
        let up = DevcontainerUp {
            container_id: "c1".into(),
            remote_user: "vscode".into(),
            remote_workspace_folder: "/workspaces/app".into(),
            env: BTreeMap::from([
                ("PATH".into(), "/opt/handler/parts/node/bin:/usr/bin".into()),
                ("FAKE_HOME".into(), "/root/.fake".into()),
                ("HOME".into(), "/home/vscode".into()),
                ("RE".into(), "remote".into()),
            ]),
        };
        let e = in_dev_container(
            plan_session("dev", &m, "a_one", &a).unwrap(),
            &up,
            "/home/agent",
        );
        assert_eq!(e.user.as_deref(), Some("vscode"));
        assert_eq!(e.cwd.as_deref(), Some("/home/u/app"));
        assert_eq!(
            e.env["FAKE_HOME"], "/home/agent/.fake",
            "the agent's own wins"
        );
        assert_eq!(e.env["HOME"], "/home/agent");
        assert_eq!(e.env["RE"], "remote");
        assert_eq!(e.env["PATH"], "/opt/handler/parts/node/bin:/usr/bin");
    }
}
