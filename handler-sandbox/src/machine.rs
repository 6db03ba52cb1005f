//! Machines' plans (issue 29, decision 0142), shared by both engines: `machine create` is the
//! launch plan of its MachineSpec (the same hardening, A.1–A.9) as a container that is created,
//! kept and labelled `handler.machine=<id>` instead of with a launcher; `machine exec` is
//! `engine exec` with the ExecSpec's variables by name (or, in a machine running its exec server,
//! no engine call at all: `exec_server`, decision 0171); `machine stats` reads the engine's
//! one-shot stats into the seed's Stats. Pure.

pub mod adopt;
pub mod devcontainer;
pub mod exec_server;
pub mod parts;
pub mod session;

use std::collections::BTreeMap;

use handler_contracts::machine::{
    BlockStats, CpuStats, ExecSpec, MachineStats, MemoryStats, NetStats, container_name,
};

use crate::egress::topology::{MACHINE_PROXY_CONFIG, Topology};
use crate::error::SpecError;
use crate::facts::HostFacts;
use crate::plan::{Engine, Kind, LaunchPlan, Stage, engine, plan_on};
use crate::validate::ValidSpec;

/// The id of the machine a MachineSpec's name makes (`handler-m-<id>`), or the field refused.
pub fn machine_id(name: &str) -> Result<&str, SpecError> {
    name.strip_prefix("handler-m-")
        .filter(|id| handler_contracts::machine::valid_id(id))
        .ok_or_else(|| {
            SpecError::invalid(
                "name",
                format!("{name:?} is not a machine's name (handler-m-<id>, the id a lowercase DNS label of at most 40 characters)"),
            )
        })
}

/// `machine create`'s plan: `create` (kept, no stdin) with the launch's hardening, labelled
/// as machine `id`; a filtered machine's proxy is kept with it (`run --detach`, its
/// configuration staged as a file, decision 0153). Refused: a tty (65: a machine's processes
/// come by exec), injections (64: what one process holds in a machine the others can read —
/// A1: refuse what cannot be enforced).
pub fn plan_create(
    engine: Engine<'_>,
    spec: &ValidSpec<'_>,
    facts: &HostFacts,
) -> Result<LaunchPlan, SpecError> {
    let s = spec.spec();
    let id = machine_id(&s.name)?;
    if s.tty {
        return Err(SpecError::invalid(
            "tty",
            "a machine has no terminal of its own: each exec brings one",
        ));
    }
    if !s.injections.is_empty() {
        return Err(SpecError::unenforceable(
            "injections",
            "a machine holds no secrets: its processes see each other's phantoms, so one machine-wide proxy would swap one agent's phantom for another's secret (decision 0153)",
        ));
    }
    if s.argv.is_empty() {
        return Err(SpecError::invalid(
            "argv",
            "a machine's first process (e.g. sleep infinity) is required",
        ));
    }
    let mut plan = plan_on(Kind::Machine(id), engine, spec, facts)?;
    plan.tty = false;
    if let (Some(p), Some(topo)) = (
        plan.proxy.as_mut(),
        Topology::of_machine(s, &facts.instance_dir),
    ) {
        // Kept with the machine, started again by the engine: its configuration (no secret in
        // it) is a file of its settings folder, not its stdin.
        p.args = topo.machine_proxy_run_args(engine, id);
        p.stage.push(Stage::File {
            path: format!("{}/{MACHINE_PROXY_CONFIG}", topo.settings_dir),
            content: serde_json::to_string(&p.config).expect("a proxy configuration serializes"),
            mode: 0o644,
        });
    }
    Ok(plan)
}

/// `machine exec`'s plan: the engine's arguments and the values given by name.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecPlan {
    /// The engine's arguments, from `exec` to the process's argv.
    pub args: Vec<String>,
    /// Values in the engine's own environment, passed by name (`--env NAME`).
    pub engine_env: BTreeMap<String, String>,
    /// Variables the engine reads itself (PATH, HOME…): written to a 0600 file given with
    /// `--env-file` (its content; the caller names its path in `args` at [`ENV_FILE_SLOT`]).
    pub env_file: Option<String>,
}

impl std::fmt::Debug for ExecPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecPlan")
            .field("args", &self.args)
            .field("engine_env", &self.engine_env.keys().collect::<Vec<_>>())
            .field("env_file", &self.env_file.as_ref().map(|_| "<values>"))
            .finish()
    }
}

/// The word `args` holds where the env file's path goes.
pub const ENV_FILE_SLOT: &str = "<env-file>";

/// The plan of `exec` in machine `id` (already checked with [`ExecSpec::check`]).
pub fn plan_exec(engine: Engine<'_>, id: &str, exec: &ExecSpec) -> ExecPlan {
    let mut args: Vec<String> = vec!["exec".into(), "--interactive".into()];
    if exec.tty {
        args.push("--tty".into());
    }
    if let Some(c) = &exec.cwd {
        args.extend(["--workdir".into(), c.clone()]);
    }
    if let Some(u) = &exec.user {
        args.extend(["--user".into(), u.clone()]);
    }
    let mut engine_env = BTreeMap::new();
    let mut file = String::new();
    for (k, v) in &exec.env {
        if engine::engine_reads(engine, k) || v.contains('\n') {
            file.push_str(&format!("{k}={}\n", v.replace('\n', " ")));
        } else {
            args.extend(["--env".into(), k.clone()]);
            engine_env.insert(k.clone(), v.clone());
        }
    }
    let env_file = (!file.is_empty()).then_some(file);
    if env_file.is_some() {
        args.extend(["--env-file".into(), ENV_FILE_SLOT.into()]);
    }
    args.push(container_name(id));
    args.extend(exec.argv.iter().cloned());
    ExecPlan {
        args,
        engine_env,
        env_file,
    }
}

/// The Go template both engines' `stats --no-stream --format` fill for [`parse_stats`].
pub const STATS_FORMAT: &str = "{{.CPUPerc}}|{{.MemUsage}}|{{.NetIO}}|{{.BlockIO}}|{{.PIDs}}";

/// A size as the engines print it (`1.5MiB`, `2.1MB`, `0B`, `12kB`), in bytes.
fn bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let i = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (n, unit) = t.split_at(i);
    let n: f64 = n.parse().ok()?;
    let m: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a size the engine printed: positive, far below 2^64"
    )]
    Some((n * m).round() as u64)
}

fn pair(text: &str) -> Option<(u64, u64)> {
    let (a, b) = text.split_once('/')?;
    Some((bytes(a)?, bytes(b)?))
}

/// One line of `stats` in [`STATS_FORMAT`] as the seed's Stats (`cores`: the machine's CPU
/// limit, when it has one). None: not a line of that form.
pub fn parse_stats(line: &str, cores: Option<f64>) -> Option<MachineStats> {
    let f: Vec<&str> = line.trim().split('|').collect();
    let [cpu, mem, net, block, pids] = f.as_slice() else {
        return None;
    };
    let percent: f64 = cpu.trim().trim_end_matches('%').trim().parse().ok()?;
    let (used, limit) = pair(mem)?;
    let (rx, tx) = pair(net)?;
    let (read, write) = pair(block)?;
    #[expect(
        clippy::cast_precision_loss,
        reason = "a ratio in percent: the precision of f64 is plenty"
    )]
    let mem_percent = if limit == 0 {
        0.0
    } else {
        used as f64 / limit as f64 * 100.0
    };
    Some(MachineStats {
        running: true,
        cpu: Some(CpuStats { percent, cores }),
        memory: Some(MemoryStats {
            used,
            limit,
            percent: (mem_percent * 100.0).round() / 100.0,
        }),
        pids: pids.trim().parse().ok(),
        network: Some(NetStats { rx, tx }),
        block: Some(BlockStats { read, write }),
    })
}

/// One process of a machine as `/proc` shows it: its CPU time (clock ticks), resident pages
/// and block I/O bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcSample {
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    /// Resident set, in pages.
    pub rss_pages: u64,
    /// Bytes read from storage.
    pub read: u64,
    /// Bytes written to storage.
    pub write: u64,
}

/// `/proc/<pid>/stat`'s CPU time and resident pages.
pub fn parse_proc_stat(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // From the state (field 3): utime is field 14, stime 15, rss 24.
    let n = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    Some((n(14)? + n(15)?, n(24)?))
}

/// `/proc/<pid>/io`'s `read_bytes` and `write_bytes`.
pub fn parse_proc_io(io: &str) -> (u64, u64) {
    let get = |k: &str| {
        io.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (get("read_bytes:"), get("write_bytes:"))
}

/// `/proc/<pid>/net/dev`: bytes received and sent on every interface but `lo`.
pub fn parse_net_dev(text: &str) -> (u64, u64) {
    let mut rx = 0;
    let mut tx = 0;
    for l in text.lines().skip(2) {
        let Some((iface, rest)) = l.split_once(':') else {
            continue;
        };
        if iface.trim() == "lo" {
            continue;
        }
        let f: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        rx += f.first().copied().unwrap_or(0);
        tx += f.get(8).copied().unwrap_or(0);
    }
    (rx, tx)
}

/// What `/proc` gives of a machine between two samples `interval_ms` apart (an engine that
/// cannot answer stats: rootless without cgroups v2), as the seed's Stats: CPU from the ticks
/// each process used meanwhile (`tick_hz` a second), memory from the second sample's resident
/// pages against `limit` (the machine's, else the host's).
#[allow(
    clippy::too_many_arguments,
    reason = "the facts of one reading, each named"
)]
pub fn stats_from_proc(
    before: &BTreeMap<u32, ProcSample>,
    after: &BTreeMap<u32, ProcSample>,
    interval_ms: u64,
    (tick_hz, page_size): (u64, u64),
    limit: u64,
    net: (u64, u64),
    cores: Option<f64>,
) -> MachineStats {
    let used_ticks: u64 = after
        .iter()
        .map(|(pid, a)| {
            a.ticks
                .saturating_sub(before.get(pid).map_or(0, |b| b.ticks))
        })
        .sum();
    #[expect(
        clippy::cast_precision_loss,
        reason = "ticks and bytes of one reading: far below f64's exact range"
    )]
    let (percent, used, mem_percent) = {
        let secs = interval_ms.max(1) as f64 / 1000.0;
        let percent = used_ticks as f64 / tick_hz.max(1) as f64 / secs * 100.0;
        let used = after.values().map(|a| a.rss_pages).sum::<u64>() * page_size;
        let mem = if limit == 0 {
            0.0
        } else {
            used as f64 / limit as f64 * 100.0
        };
        (percent, used, mem)
    };
    MachineStats {
        running: true,
        cpu: Some(CpuStats {
            percent: (percent * 100.0).round() / 100.0,
            cores,
        }),
        memory: Some(MemoryStats {
            used,
            limit,
            percent: (mem_percent * 100.0).round() / 100.0,
        }),
        pids: Some(after.len() as u64),
        network: Some(NetStats {
            rx: net.0,
            tx: net.1,
        }),
        block: Some(BlockStats {
            read: after.values().map(|a| a.read).sum(),
            write: after.values().map(|a| a.write).sum(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_readings_make_the_seeds_stats() {
        let stat = "42 (sh -c x) R 1 42 42 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 1 0 99 2000000 300 18446744073709551615";
        assert_eq!(parse_proc_stat(stat), Some((200, 300)));
        assert_eq!(
            parse_proc_io("rchar: 9\nread_bytes: 4096\nwrite_bytes: 512\n"),
            (4096, 512)
        );
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets\n    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n  eth0: 266 3 0 0 0 0 0 0 84 1 0 0 0 0 0 0\n";
        assert_eq!(parse_net_dev(dev), (266, 84));
        let s = |ticks, rss| ProcSample {
            ticks,
            rss_pages: rss,
            read: 10,
            write: 1,
        };
        let before = BTreeMap::from([(1, s(10, 5)), (2, s(100, 50))]);
        let after = BTreeMap::from([(1, s(10, 5)), (2, s(150, 50)), (3, s(25, 20))]);
        let st = stats_from_proc(
            &before,
            &after,
            500,
            (100, 4096),
            1 << 30,
            (266, 84),
            Some(2.0),
        );
        // 75 ticks in 0.5 s at 100 Hz: 1.5 cores, 150 %.
        assert_eq!(st.cpu.as_ref().unwrap().percent, 150.0);
        assert_eq!(st.memory.as_ref().unwrap().used, 75 * 4096);
        assert_eq!(st.pids, Some(3));
        assert_eq!(st.block.as_ref().unwrap().read, 30);
    }

    #[test]
    fn an_exec_gives_its_values_by_name_and_what_the_engine_reads_in_a_file() {
        let mut e = ExecSpec {
            argv: vec!["fake-acp-agent".into(), "--acp".into()],
            cwd: Some("/work/app".into()),
            tty: false,
            ..ExecSpec::default()
        };
        e.env
            .insert("ANTHROPIC_API_KEY".into(), "phantom-value".into());
        e.env.insert("PATH".into(), "/opt/bin:/usr/bin".into());
        let p = plan_exec(Engine::Podman, "box", &e);
        insta::assert_debug_snapshot!(p);
        assert!(!p.args.iter().any(|a| a.contains("phantom-value")));
        assert_eq!(p.engine_env["ANTHROPIC_API_KEY"], "phantom-value");
        assert_eq!(p.env_file.as_deref(), Some("PATH=/opt/bin:/usr/bin\n"));
        // An agent's own home in a dev container (decision 0169): podman's own HOME is never
        // it (its storage's configuration is found under HOME, on the host).
        e.env.insert("HOME".into(), "/home/agent".into());
        let p = plan_exec(Engine::Podman, "box", &e);
        assert!(!p.engine_env.contains_key("HOME"));
        assert_eq!(
            p.env_file.as_deref(),
            Some("HOME=/home/agent\nPATH=/opt/bin:/usr/bin\n")
        );
    }

    #[test]
    fn the_engines_stats_read_as_the_seeds() {
        let s = parse_stats(
            "34.20%|421.9kB / 536.9MB|266B / 84B|4.1kB / 0B|7",
            Some(2.0),
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::json!({"running": true, "cpu": {"percent": 34.2, "cores": 2.0},
                "memory": {"used": 421_900, "limit": 536_900_000, "percent": 0.08},
                "pids": 7, "network": {"rx": 266, "tx": 84}, "block": {"read": 4100, "write": 0}})
        );
        let d = parse_stats("0.00%|1.5MiB / 3.8GiB|0B / 0B|0B / 0B|1", None).unwrap();
        assert_eq!(d.memory.unwrap().used, 1_572_864);
        assert!(parse_stats("--", None).is_none());
    }

    #[test]
    fn a_machines_name_is_its_id_behind_the_prefix() {
        assert_eq!(machine_id("handler-m-box").unwrap(), "box");
        assert!(machine_id("handler-a-s").is_err());
        assert!(machine_id("handler-m-Box").is_err());
    }
}
