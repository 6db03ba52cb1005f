//! `handler machine …` (issue 29): machines — sandboxes that outlive every session — over
//! `/v1/machines`: make one from an image, list them with their state, show one, its stats,
//! start, stop, restart, remove; `ls --watch` follows the change channel.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use clap::Subcommand;
use handler_contracts::machine::events::SUBPROTOCOL_MACHINES;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::out::{Ctx, print_table, seg, text};

/// `handler profile …` (decision 0156).
#[derive(Subcommand, Debug)]
pub enum ProfileCommand {
    /// The daemon's machine profiles (profiles.toml in its configuration folder).
    #[command(visible_alias = "list")]
    Ls,
    /// One profile's settings.
    Show {
        /// The profile.
        name: String,
    },
}

/// Runs `handler profile …`; returns the exit code.
pub(crate) async fn run_profile(cmd: ProfileCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        ProfileCommand::Ls => {
            let v = ctx.api.get("/v1/profiles").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["profile", "title", "image", "cpus", "memory", "network", "made"],
                    |p| {
                        let f = |k: &str| p["profile"][k].as_str().unwrap_or("-").to_string();
                        vec![
                            text(p, "name"),
                            f("title"),
                            f("image"),
                            f("cpus"),
                            f("memory"),
                            f("network"),
                            if p["profile"]["disposable"] == true {
                                "per session".into()
                            } else {
                                "ahead".into()
                            },
                        ]
                    },
                    "no profile: add [profiles.NAME] to profiles.toml in handlerd's configuration folder",
                );
            });
        }
        ProfileCommand::Show { name } => {
            let v = ctx.api.get(&format!("/v1/profiles/{}", seg(&name))).await?;
            ctx.show(&v, |v| {
                println!("profile {}", text(v, "name"));
                if let Some(o) = v["profile"].as_object() {
                    for (k, val) in o {
                        let shown = val.as_str().map_or_else(|| val.to_string(), String::from);
                        println!("  {k:<16} {shown}");
                    }
                }
            });
        }
    }
    Ok(0)
}

/// `handler part …` (decision 0164).
#[derive(Subcommand, Debug)]
pub enum PartCommand {
    /// The parts Handler can build, and the version built from each one's source now.
    #[command(visible_alias = "list")]
    Ls,
    /// Build parts ahead of the machines that carry them (each with what it requires);
    /// one already built for its source's version is not built again.
    Build {
        /// The parts (`handler part ls`).
        #[arg(
            required_unless_present = "all",
            conflicts_with = "all",
            value_name = "ID"
        )]
        ids: Vec<String>,
        /// Every part there is (each one whose source is not built is left out, named).
        #[arg(long)]
        all: bool,
    },
}

/// `handler part ls`'s table.
fn human_parts(v: &Value) {
    print_table(
        v,
        &["part", "from", "requires", "commands", "built"],
        |p| {
            let list = |k: &str| {
                let l: Vec<&str> = p[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if l.is_empty() {
                    "-".into()
                } else {
                    l.join(",")
                }
            };
            vec![
                text(p, "id"),
                text(p, "source"),
                list("requires"),
                list("bin"),
                p["built"]["version"]
                    .as_str()
                    .unwrap_or("not built")
                    .to_string(),
            ]
        },
        "no part",
    );
}

/// Runs `handler part …`; returns the exit code: 1 when a part was left out.
pub(crate) async fn run_part(cmd: PartCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        PartCommand::Ls => {
            let v = ctx.api.get("/v1/parts").await?;
            ctx.show(&v, human_parts);
            Ok(0)
        }
        PartCommand::Build { ids, all } => {
            let ids = if all {
                ctx.api
                    .get("/v1/parts")
                    .await?
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["id"].as_str().map(String::from))
                    .collect()
            } else {
                ids
            };
            let spin = (!ctx.json && std::io::stderr().is_terminal()).then(|| {
                let p = ProgressBar::new_spinner();
                p.set_style(
                    ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("template"),
                );
                p.enable_steady_tick(Duration::from_millis(120));
                p.set_message(format!(
                    "building parts {} (handler build ls shows each build)",
                    ids.join(", ")
                ));
                p
            });
            let v = ctx.api.post("/v1/parts/build", &json!({"ids": ids})).await;
            if let Some(p) = spin {
                p.finish_and_clear();
            }
            let v = v?;
            ctx.show(&v, |v| {
                for p in v["ready"].as_array().into_iter().flatten() {
                    let how = if p["built"] == true { "built" } else { "there" };
                    println!("✓ {} {} ({how})", text(p, "image"), text(p, "version"));
                }
                for p in v["leftOut"].as_array().into_iter().flatten() {
                    println!("✗ {}: {}", text(p, "id"), text(p, "reason"));
                }
            });
            Ok(i32::from(
                v["leftOut"].as_array().is_some_and(|l| !l.is_empty()),
            ))
        }
    }
}

/// `handler machine …`.
#[derive(Subcommand, Debug)]
pub enum MachineCommand {
    /// Make a machine from an image (the daemon's HANDLER_MACHINE_IMAGES allows it), or for
    /// agents whose sessions then run in it, and start it.
    Create {
        /// Its id: a lowercase DNS label.
        name: String,
        /// The image it runs (with --agent: default, the first agent's harness image; with
        /// --profile: default, the profile's).
        #[arg(long, required_unless_present_any = ["agent", "profile", "devcontainer"], conflicts_with = "devcontainer")]
        image: Option<String>,
        /// Instead of --image: a folder whose .devcontainer/devcontainer.json (or
        /// .devcontainer.json) the Dev Container CLI makes into the machine; each exec then runs
        /// as its remoteUser in the folder as mounted inside (with --agent: its sessions too,
        /// their scopes and state mounted as in their own sandboxes).
        #[arg(long, value_name = "DIR")]
        devcontainer: Option<std::path::PathBuf>,
        /// An agent it is made for (repeatable): its sandbox's mounts are planned into the
        /// machine; set the agent's machine to run its sessions there.
        #[arg(long = "agent")]
        agent: Vec<String>,
        /// A CPU limit, e.g. 2.
        #[arg(long)]
        cpus: Option<String>,
        /// A memory limit, e.g. 2g.
        #[arg(long)]
        memory: Option<String>,
        /// Where commands start (default /work, kept across restarts; with --folder, that folder).
        #[arg(long)]
        workdir: Option<String>,
        /// A folder of yours mounted at the same path inside (inside a work folder, as an
        /// agent's scope; its .git read-only).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["agent", "devcontainer"])]
        folder: Option<std::path::PathBuf>,
        /// Another folder of yours, SRC[:TARGET][:ro] as an engine's -v (inside a work
        /// folder; its .git read-only; repeatable).
        #[arg(long = "mount", short = 'v', value_name = "SRC[:TARGET][:ro]",
              value_parser = parse_mount, conflicts_with_all = ["agent", "devcontainer"])]
        mount: Vec<handler_contracts::machine::MachineMount>,
        /// none (default), open, or filtered: only to the --allow hosts, through the
        /// machine's own egress proxy (with --agent and no --allow: what its agents all allow).
        #[arg(long)]
        network: Option<String>,
        /// A host a filtered machine may reach, HOST:PORT or *.DOMAIN:PORT (repeatable).
        #[arg(long = "allow", value_name = "HOST:PORT")]
        allow: Vec<String>,
        /// A profile of the daemon's (`handler profile ls`): what these flags leave out.
        #[arg(long)]
        profile: Option<String>,
        /// A part it carries (repeatable; `handler part ls`): an agent's CLI or node, built
        /// once per version, mounted read-only with its commands first on the PATH.
        #[arg(long = "part", value_name = "ID")]
        part: Vec<String>,
    },
    /// List the machines with their state.
    #[command(visible_alias = "list")]
    Ls {
        /// Then follow the changes (the change channel) until interrupted: a line each (with
        /// --json, each message of the channel as one JSON line).
        #[arg(long)]
        watch: bool,
    },
    /// One machine: its image, state and record.
    Show {
        /// The machine.
        name: String,
    },
    /// CPU, memory, processes, network and disk right now.
    Stats {
        /// The machine.
        name: String,
    },
    /// Start a stopped machine.
    Start {
        /// The machine.
        name: String,
    },
    /// Stop a machine.
    Stop {
        /// The machine.
        name: String,
    },
    /// Restart a machine.
    Restart {
        /// The machine.
        name: String,
    },
    /// Remove a machine and everything in it.
    #[command(alias = "remove")]
    Rm {
        /// The machine.
        name: String,
        /// Stop the sessions running in it first (else refused while any runs).
        #[arg(long)]
        force: bool,
    },
    /// Run a command in a running machine: its stdin, stdout and stderr are this terminal's
    /// pipes, its exit code this command's.
    Exec {
        /// The machine.
        name: String,
        /// Where it starts (the machine's workdir by default).
        #[arg(long, short = 'w')]
        cwd: Option<String>,
        /// The user in the machine (a name or uid[:gid]).
        #[arg(long, short = 'u')]
        user: Option<String>,
        /// A variable of this environment passed on by name (its value never in an argument).
        #[arg(long = "env", short = 'e', value_name = "NAME")]
        env: Vec<String>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
}

fn human_stats(v: &Value) {
    if v["running"] != true {
        println!("not running");
        return;
    }
    let mib = |n: &Value| n.as_u64().map_or(0.0, |b| b as f64 / 1_048_576.0);
    println!(
        "cpu {:.1}%  memory {:.1} MiB of {:.0} MiB ({}%)  processes {}  network rx {} tx {}  disk read {} write {}",
        v["cpu"]["percent"].as_f64().unwrap_or(0.0),
        mib(&v["memory"]["used"]),
        mib(&v["memory"]["limit"]),
        v["memory"]["percent"],
        v["pids"],
        v["network"]["rx"],
        v["network"]["tx"],
        v["block"]["read"],
        v["block"]["write"],
    );
}

/// What a machine is made from: its image, or `devcontainer DIR`.
fn made_from(m: &Value) -> String {
    match m["devcontainer"]["folder"].as_str() {
        Some(f) => format!("devcontainer {f}"),
        None => m["request"]["image"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

fn human_list(v: &Value) {
    print_table(
        v,
        &["machine", "image", "state", "created"],
        |m| {
            vec![
                text(m, "id"),
                made_from(m),
                text(m, "state"),
                text(m, "createdAt"),
            ]
        },
        "no machines (make one: handler machine create NAME --image IMAGE)",
    );
}

/// What a person is told of one message of the change channel, given the states it was told
/// before (kept up to date here); None for the snapshot (shown as the table).
fn watch_line(ev: &Value, states: &mut BTreeMap<String, String>) -> Option<String> {
    let m = &ev["machine"];
    let (id, state) = (text(m, "id"), text(m, "state"));
    match ev["type"].as_str()? {
        "snapshot" => {
            states.clear();
            for m in ev["machines"].as_array().into_iter().flatten() {
                states.insert(text(m, "id"), text(m, "state"));
            }
            None
        }
        "added" => {
            states.insert(id.clone(), state.clone());
            Some(format!("+ {id}  {}  {state}", made_from(m)))
        }
        "changed" => {
            let was = states.insert(id.clone(), state.clone()).unwrap_or_default();
            Some(format!("~ {id}  {was} → {state}"))
        }
        "removed" => {
            let id = text(ev, "id");
            states.remove(&id);
            Some(format!("- {id}  removed"))
        }
        _ => None,
    }
}

/// `handler machine ls --watch`: the list, then a line per change, until the daemon closes
/// the channel (1) or Ctrl-C (0).
async fn watch(ctx: &Ctx) -> anyhow::Result<i32> {
    use futures_util::StreamExt as _;
    use tokio_tungstenite::tungstenite::Message;
    let mut ws = handler_core::client::connect_ws_as(
        ctx.api.discovery(),
        "/v1/machines/events",
        SUBPROTOCOL_MACHINES,
        None,
    )
    .await
    .map_err(|e| anyhow::anyhow!("cannot watch the machines: {e}"))?;
    let mut states = BTreeMap::new();
    loop {
        let msg = tokio::select! {
            m = ws.next() => m,
            _ = tokio::signal::ctrl_c() => return Ok(0),
        };
        let t = match msg {
            Some(Ok(Message::Text(t))) => t,
            Some(Ok(Message::Close(f))) => {
                let why = f.map(|f| f.reason.to_string()).unwrap_or_default();
                anyhow::bail!(
                    "handlerd closed the change channel {why}(run handler machine ls --watch again)"
                );
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => anyhow::bail!("the change channel failed: {e}"),
            None => anyhow::bail!(
                "the change channel ended (is handlerd running? handler daemon status)"
            ),
        };
        let Ok(ev) = serde_json::from_str::<Value>(&t) else {
            continue;
        };
        if ctx.json {
            println!("{ev}");
        } else if let Some(line) = watch_line(&ev, &mut states) {
            println!("{line}");
        } else if ev["type"] == "snapshot" {
            human_list(&ev["machines"]);
        }
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
    }
}

/// `POST /v1/machines/NAME/VERB`, said as `machine NAME DONE`.
async fn set_state(ctx: &Ctx, name: &str, verb: &str, done: &str) -> anyhow::Result<()> {
    let path = format!("/v1/machines/{}/{verb}", seg(name));
    let v = ctx.api.post(&path, &json!({})).await?;
    ctx.done(&v, &format!("machine {name} {done}"));
    Ok(())
}

/// `POST /v1/machines`, on a terminal with a spinner while the daemon makes it, which becomes
/// a progress bar while it pulls the image or builds a part (the builds it starts: their stage
/// and step, read from `/v1/builds` every half second).
async fn create(ctx: &Ctx, name: &str, body: &Value) -> anyhow::Result<()> {
    let spin = (!ctx.json && std::io::stderr().is_terminal()).then(|| {
        let p = ProgressBar::new_spinner();
        p.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("template"));
        p.enable_steady_tick(Duration::from_millis(120));
        p.set_message(format!("making machine {name}"));
        p
    });
    // The builds there are before: only the ones this request starts are shown.
    let before: Vec<String> = match &spin {
        Some(_) => build_ids(&ctx.api.get("/v1/builds").await.unwrap_or_default()),
        None => Vec::new(),
    };
    let post = ctx.api.post("/v1/machines", body);
    tokio::pin!(post);
    let v = loop {
        tokio::select! {
            v = &mut post => break v,
            () = tokio::time::sleep(Duration::from_millis(500)), if spin.is_some() => {
                if let (Some(p), Ok(b)) = (&spin, ctx.api.get("/v1/builds").await) {
                    show_build(p, name, &b, &before);
                }
            }
        }
    };
    if let Some(p) = spin {
        p.finish_and_clear();
    }
    let v = v?;
    ctx.done(&v, &format!("machine {name} made ({})", text(&v, "state")));
    if !ctx.json {
        for p in v["partsLeftOut"].as_array().into_iter().flatten() {
            eprintln!("part {} left out: {}", text(p, "id"), text(p, "reason"));
        }
    }
    Ok(())
}

fn build_ids(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["id"].as_str().map(String::from))
        .collect()
}

/// The bar for the build a machine's making waits on now (a pull or a part's build, started
/// after `before`), or the spinner's words when there is none.
fn show_build(p: &ProgressBar, name: &str, builds: &Value, before: &[String]) {
    let running = builds.as_array().into_iter().flatten().find(|b| {
        b["state"] == "running"
            && b["id"]
                .as_str()
                .is_some_and(|id| !before.iter().any(|x| x == id))
            && b["target"]
                .as_str()
                .is_some_and(|t| t.starts_with("pull:") || t.starts_with("part:"))
    });
    let Some(b) = running else {
        p.set_message(format!("making machine {name}"));
        return;
    };
    let what = format!("{}: {}", text(b, "target"), text(b, "stage"));
    match (b["step"].as_u64(), b["steps"].as_u64()) {
        (Some(step), Some(steps)) if steps > 0 => {
            p.set_style(
                ProgressStyle::with_template("{spinner} {msg} [{bar:24}] {pos}/{len} {elapsed}")
                    .expect("template"),
            );
            p.set_length(steps);
            p.set_position(step);
        }
        _ => p.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("template"),
        ),
    }
    p.set_message(what);
}

/// `--mount SRC[:TARGET][:ro]`.
fn parse_mount(s: &str) -> Result<handler_contracts::machine::MachineMount, String> {
    handler_contracts::machine::MachineMount::parse(s)
        .ok_or_else(|| format!("{s:?}: write SRC, SRC:TARGET or SRC:TARGET:ro"))
}

/// `handler machine create`'s name and request body (only the flags given).
fn create_body(cmd: MachineCommand) -> (String, Value) {
    let MachineCommand::Create {
        name,
        image,
        devcontainer,
        agent,
        cpus,
        memory,
        workdir,
        folder,
        mount,
        network,
        allow,
        profile,
        part,
    } = cmd
    else {
        unreachable!("create_body takes a create")
    };
    let mut body = json!({"name": name});
    if !mount.is_empty() {
        // The daemon resolves them: a relative source is the caller's, made absolute here.
        let mounts: Vec<_> = mount
            .into_iter()
            .map(|mut m| {
                let same = m.target == m.source;
                if let Ok(a) = std::path::absolute(std::path::Path::new(&m.source)) {
                    m.source = a.display().to_string();
                    if same {
                        m.target.clone_from(&m.source);
                    }
                }
                m
            })
            .collect();
        body["mounts"] = json!(mounts);
    }
    if !allow.is_empty() {
        body["allow"] = json!(allow);
    }
    if let Some(i) = image {
        body["image"] = json!(i);
    }
    if let Some(f) = folder {
        let f = std::path::absolute(&f).unwrap_or(f);
        body["folder"] = json!(f.display().to_string());
    }
    if let Some(d) = devcontainer {
        // The daemon resolves it: a relative folder is the caller's, made absolute here.
        let d = std::path::absolute(&d).unwrap_or(d);
        body["source"] = json!("devcontainer");
        body["devcontainer"] = json!(d.display().to_string());
    }
    if !agent.is_empty() {
        body["agents"] = json!(agent);
    }
    if !part.is_empty() {
        body["parts"] = json!(part);
    }
    for (k, v) in [
        ("cpus", cpus),
        ("memory", memory),
        ("workdir", workdir),
        ("network", network),
        ("profile", profile),
    ] {
        if let Some(v) = v {
            body[k] = json!(v);
        }
    }
    (name, body)
}

/// Runs `handler machine …`; returns the exit code.
pub(crate) async fn run(cmd: MachineCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    let one = |name: &str| format!("/v1/machines/{}", seg(name));
    match cmd {
        c @ MachineCommand::Create { .. } => {
            let (name, body) = create_body(c);
            create(&ctx, &name, &body).await?;
        }
        MachineCommand::Ls { watch: false } => {
            let v = ctx.api.get("/v1/machines").await?;
            ctx.show(&v, human_list);
        }
        MachineCommand::Ls { watch: true } => return watch(&ctx).await,
        MachineCommand::Show { name } => {
            let v = ctx.api.get(&one(&name)).await?;
            ctx.show(&v, |v| {
                println!("machine {}", text(v, "id"));
                println!("  from     {}", made_from(v));
                if let Some(d) = v["devcontainer"].as_object() {
                    let f = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("-").to_string();
                    println!("  user     {}", f("remoteUser"));
                    println!("  inside   {}", f("remoteWorkspaceFolder"));
                }
                for p in v["parts"].as_array().into_iter().flatten() {
                    println!("  part     {} {}", text(p, "id"), text(p, "version"));
                }
                for p in v["partsLeftOut"].as_array().into_iter().flatten() {
                    println!("  left out {}: {}", text(p, "id"), text(p, "reason"));
                }
                println!("  state    {}", text(v, "state"));
                println!("  created  {}", text(v, "createdAt"));
            });
        }
        MachineCommand::Stats { name } => {
            let v = ctx.api.get(&format!("{}/stats", one(&name))).await?;
            ctx.show(&v, human_stats);
        }
        MachineCommand::Start { name } => set_state(&ctx, &name, "start", "started").await?,
        MachineCommand::Stop { name } => set_state(&ctx, &name, "stop", "stopped").await?,
        MachineCommand::Restart { name } => {
            set_state(&ctx, &name, "restart", "restarted").await?;
        }
        MachineCommand::Rm { name, force } => {
            let path = if force {
                format!("{}?force=true", one(&name))
            } else {
                one(&name)
            };
            let v = ctx.api.delete(&path).await?;
            ctx.done(&v, &format!("machine {name} removed"));
        }
        MachineCommand::Exec {
            name,
            cwd,
            user,
            env,
            argv,
        } => {
            let spec = super::machine_exec::spec(argv, cwd, user, &env)?;
            return super::machine_exec::run(&ctx, &name, &spec).await;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_follows_the_pull_or_part_build_the_request_started() {
        let p = ProgressBar::hidden();
        let builds = json!([
            {"id": "b_new", "target": "part:node", "state": "running", "stage": "build part:node", "step": 2, "steps": 3},
            {"id": "b_old", "target": "pull:debian:12", "state": "running", "stage": "pull debian:12"},
            {"id": "b_tb", "target": "toolbox", "state": "running", "stage": "build toolbox"}
        ]);
        show_build(&p, "box", &builds, &["b_old".to_string()]);
        assert_eq!(p.message(), "part:node: build part:node");
        assert_eq!((p.position(), p.length()), (2, Some(3)));
        show_build(
            &p,
            "box",
            &builds,
            &["b_old".to_string(), "b_new".to_string()],
        );
        assert_eq!(
            p.message(),
            "making machine box",
            "a build it did not start is not its"
        );
        let pulling = json!([{"id": "b_p", "target": "pull:debian:12", "state": "running", "stage": "pull debian:12"}]);
        show_build(&p, "box", &pulling, &[]);
        assert_eq!(p.message(), "pull:debian:12: pull debian:12");
    }

    #[test]
    fn the_watch_lines_say_what_changed_from_what() {
        let mut st = BTreeMap::new();
        let snap = json!({"type": "snapshot", "machines": [{"id": "a", "state": "running"}]});
        assert_eq!(watch_line(&snap, &mut st), None);
        let ch = json!({"type": "changed", "machine": {"id": "a", "state": "stopped"}});
        assert_eq!(watch_line(&ch, &mut st).unwrap(), "~ a  running → stopped");
        let add = json!({"type": "added", "machine": {"id": "b", "state": "running",
            "request": {"image": "busybox"}}});
        assert_eq!(watch_line(&add, &mut st).unwrap(), "+ b  busybox  running");
        let rm = json!({"type": "removed", "id": "a"});
        assert_eq!(watch_line(&rm, &mut st).unwrap(), "- a  removed");
        assert_eq!(st.keys().collect::<Vec<_>>(), ["b"]);
    }
}
