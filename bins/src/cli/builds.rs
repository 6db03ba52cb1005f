//! `handler build …` (image builds: start, list, follow their log, cancel) and
//! `handler image-updates` (the schedule that rebuilds images).

use std::time::Duration;

use clap::Subcommand;
use serde_json::{Value, json};

use super::out::{Ctx, print_fields, print_table, seg, text};
use handler_core::client::api::Api;

/// `handler build …`.
#[derive(Subcommand, Debug)]
pub enum BuildCommand {
    /// List the builds, the running first.
    #[command(visible_alias = "ls")]
    List,
    /// Show one build: its stage and step.
    Show {
        /// The build's id.
        id: String,
    },
    /// Build an image: a harness's (its name), `toolbox` or `network-filter`.
    Start {
        /// What to build.
        target: String,
        /// Wait until it ends, its log on stderr; exit 1 when it fails.
        #[arg(long)]
        wait: bool,
    },
    /// Print a build's log.
    Log {
        /// The build's id.
        id: String,
        /// Keep printing until the build ends.
        #[arg(long, short)]
        follow: bool,
    },
    /// Cancel a running build.
    Cancel {
        /// The build's id.
        id: String,
    },
}

/// `handler image-updates …`.
#[derive(Subcommand, Debug)]
pub enum ImageUpdatesCommand {
    /// Show the schedule, the last and next run, what failed.
    Show,
    /// Set the schedule: off, daily or weekly.
    Set {
        /// off, daily or weekly.
        #[arg(value_parser = ["off", "daily", "weekly"])]
        schedule: String,
    },
    /// Run them now: the network filter, then every harness image already built.
    Run,
}

/// Runs `handler build …`; returns the exit code.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per `handler build` verb, each a few lines of request and print"
)]
pub(crate) async fn run(cmd: BuildCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        BuildCommand::List => {
            let v = ctx.api.get("/v1/builds").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["id", "target", "state", "stage", "step", "started", "error"],
                    |b| {
                        vec![
                            text(b, "id"),
                            text(b, "target"),
                            text(b, "state"),
                            text(b, "stage"),
                            step(b),
                            text(b, "startedAt"),
                            text(b, "error"),
                        ]
                    },
                    "no builds",
                );
            });
        }
        BuildCommand::Show { id } => {
            let v = ctx.api.get(&format!("/v1/builds/{}", seg(&id))).await?;
            ctx.show(&v, |b| {
                print_fields(
                    b,
                    &[
                        "id",
                        "target",
                        "state",
                        "stage",
                        "step",
                        "steps",
                        "versions",
                        "error",
                        "startedAt",
                        "endedAt",
                    ],
                );
            });
        }
        BuildCommand::Start { target, wait } => {
            let v = ctx
                .api
                .post("/v1/builds", &json!({"target": target}))
                .await?;
            let id = text(&v, "id");
            if !wait {
                ctx.done(
                    &v,
                    &format!(
                        "build {id} of {target} started (follow it: handler build log -f {id})"
                    ),
                );
                return Ok(0);
            }
            follow_log(&ctx.api, &id, &mut std::io::stderr()).await?;
            let end = ctx.api.get(&format!("/v1/builds/{}", seg(&id))).await?;
            ctx.done(
                &end,
                &format!("build {id} of {target}: {}", text(&end, "state")),
            );
            return Ok(if end["state"] == "succeeded" { 0 } else { 1 });
        }
        BuildCommand::Log { id, follow } => {
            if follow {
                follow_log(&ctx.api, &id, &mut std::io::stdout()).await?;
            } else {
                let v = ctx.api.get(&format!("/v1/builds/{}/log", seg(&id))).await?;
                ctx.show(&v, |l| print!("{}", text(l, "text")));
            }
        }
        BuildCommand::Cancel { id } => {
            let v = ctx
                .api
                .post(&format!("/v1/builds/{}/cancel", seg(&id)), &json!({}))
                .await?;
            ctx.done(&v, &format!("build {id}: {}", text(&v, "state")));
        }
    }
    Ok(0)
}

/// Copies a build's log to `out` until it is complete.
pub(crate) async fn follow_log(
    api: &Api,
    id: &str,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<()> {
    let mut offset = 0u64;
    loop {
        let v = api
            .get(&format!("/v1/builds/{}/log?offset={offset}", seg(id)))
            .await?;
        write!(out, "{}", text(&v, "text"))?;
        out.flush()?;
        offset = v["nextOffset"].as_u64().unwrap_or(offset);
        if v["complete"].as_bool() == Some(true) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn step(b: &Value) -> String {
    match (b["step"].as_u64(), b["steps"].as_u64()) {
        (Some(s), Some(n)) => format!("{s}/{n}"),
        _ => String::new(),
    }
}

/// Runs `handler image-updates …`; returns the exit code.
pub(crate) async fn run_image_updates(cmd: ImageUpdatesCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    let v = match cmd {
        ImageUpdatesCommand::Show => ctx.api.get("/v1/image-updates").await?,
        ImageUpdatesCommand::Set { schedule } => {
            ctx.api
                .put("/v1/image-updates", &json!({"schedule": schedule}))
                .await?
        }
        ImageUpdatesCommand::Run => ctx.api.post("/v1/image-updates/run", &json!({})).await?,
    };
    ctx.show(&v, |u| {
        print_fields(
            u,
            &["schedule", "running", "lastRun", "nextRun", "lastFailed"],
        );
    });
    Ok(0)
}
