//! The sandbox executable's image verbs (A.7), as the daemon runs them: `image build` (its
//! output given line by line, stopped with SIGTERM when cancelled), `image build-proxy`, `image
//! read`, `image inspect`, `image tag`, `image remove`; and `check` (A.8). The executable is the daemon's only way
//! to the container engine; this module imports nothing of the daemon (like `launcher`).

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;
use tokio::sync::Notify;

use handler_sandbox::verbs::{self, ImageVerb, Verb};

/// An image verb that failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The sandbox executable cannot be started.
    #[error("cannot run the sandbox executable {program}: {source}")]
    Spawn {
        /// The executable.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// The verb exited with an error (exit 1, A.7): its reason.
    #[error("image {verb}: {reason}")]
    Failed {
        /// The verb.
        verb: String,
        /// What it said on stderr (bounded), or its exit status.
        reason: String,
    },
    /// The build was cancelled (the verb got SIGTERM).
    #[error("cancelled")]
    Cancelled,
}

/// What to build with `image build`.
#[derive(Debug, Clone, Default)]
pub struct BuildArgs {
    /// The build context folder.
    pub context: String,
    /// The Containerfile, when not `<context>/Containerfile`.
    pub file: Option<String>,
    /// `NAME=VALUE` build arguments.
    pub build_args: Vec<String>,
    /// Without podman's cache (and pulling the base again).
    pub no_cache: bool,
    /// A PEM bundle of extra CAs, given to the build as the secret `handler-ca-bundle`.
    pub ca_bundle: Option<String>,
}

/// What `image base` is given.
pub use handler_sandbox::verbs::Base as BaseArgs;

/// The sandbox executable's image verbs.
#[derive(Debug, Clone)]
pub struct ImageVerbs {
    /// The program and its first arguments (`["handler-sandbox-podman"]`).
    pub command: Vec<String>,
}

const STDERR_KEPT: usize = 2000;

impl ImageVerbs {
    fn command(&self, verb: &Verb) -> Command {
        let mut c = Command::new(&self.command[0]);
        c.args(&self.command[1..]).args(verb.to_args());
        c.stdin(Stdio::null()).kill_on_drop(true);
        c
    }

    fn spawn_error(&self, source: std::io::Error) -> ImageError {
        ImageError::Spawn {
            program: self.command[0].clone(),
            source,
        }
    }

    /// Runs a short image verb (2 minutes at most); its stdout.
    pub async fn run(&self, verb: ImageVerb) -> Result<Vec<u8>, ImageError> {
        let name = verb_name(&verb);
        let out = tokio::time::timeout(
            Duration::from_secs(120),
            self.command(&Verb::Image(verb)).output(),
        )
        .await
        .map_err(|_| ImageError::Failed {
            verb: name.clone(),
            reason: "timed out after 120 s".into(),
        })?
        .map_err(|e| self.spawn_error(e))?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            let text = String::from_utf8_lossy(&out.stderr);
            Err(ImageError::Failed {
                verb: name,
                reason: text.trim().chars().take(STDERR_KEPT).collect(),
            })
        }
    }

    /// `check` (A.8): the RuntimeCheck it prints (exit 1 too: an item failed).
    pub async fn check(&self) -> Result<Value, ImageError> {
        let mut c = self.command(&Verb::Check);
        let out = tokio::time::timeout(Duration::from_secs(60), c.output())
            .await
            .map_err(|_| ImageError::Failed {
                verb: "check".into(),
                reason: "timed out after 60 s".into(),
            })?
            .map_err(|e| self.spawn_error(e))?;
        serde_json::from_slice(&out.stdout).map_err(|e| ImageError::Failed {
            verb: "check".into(),
            reason: format!(
                "no RuntimeCheck on its output ({e}): {}",
                String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .chars()
                    .take(STDERR_KEPT)
                    .collect::<String>()
            ),
        })
    }

    /// Whether `image` exists: `Some(false)` when `image inspect` says no (exit 1, A.7), none
    /// when the executable cannot say (it does not run, or it has no image verbs).
    pub async fn exists(&self, image: &str) -> Option<bool> {
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            self.command(&Verb::Image(ImageVerb::Inspect {
                image: image.into(),
            }))
            .output(),
        )
        .await
        .ok()?
        .ok()?;
        match out.status.code() {
            Some(0) => Some(true),
            Some(1) => Some(false),
            _ => None,
        }
    }

    /// `image inspect IMAGE`: none when there is no such image.
    pub async fn inspect(&self, image: &str) -> Option<Value> {
        let out = self
            .run(ImageVerb::Inspect {
                image: image.into(),
            })
            .await
            .ok()?;
        serde_json::from_slice(&out).ok()
    }

    /// `image read IMAGE PATH` as text.
    pub async fn read(&self, image: &str, path: &str) -> Result<String, ImageError> {
        self.run(ImageVerb::Read {
            image: image.into(),
            path: path.into(),
        })
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// `image tag SOURCE TARGET`.
    pub async fn tag(&self, source: &str, target: &str) -> Result<(), ImageError> {
        self.run(ImageVerb::Tag {
            source: source.into(),
            target: target.into(),
        })
        .await
        .map(|_| ())
    }

    /// `image remove IMAGE` (refused while a container uses it).
    pub async fn remove(&self, image: &str) -> Result<(), ImageError> {
        self.run(ImageVerb::Remove {
            image: image.into(),
        })
        .await
        .map(|_| ())
    }

    /// `image build`: every line of its output to `line`; the new image's id. `cancel` stops it
    /// (SIGTERM: the verb stops podman and removes what it left).
    pub async fn build(
        &self,
        b: &BuildArgs,
        line: impl FnMut(String),
        cancel: Arc<Notify>,
    ) -> Result<String, ImageError> {
        let verb = ImageVerb::Build(verbs::Build {
            context: b.context.clone(),
            file: b.file.clone(),
            tags: Vec::new(),
            build_args: b.build_args.clone(),
            no_intermediate: true,
            no_cache: b.no_cache,
            ca_bundle: b.ca_bundle.clone(),
        });
        self.streamed(verb, line, cancel).await
    }

    /// `image pull IMAGE`, its output to `line`; the image's id.
    pub async fn pull(
        &self,
        image: &str,
        line: impl FnMut(String),
        cancel: Arc<Notify>,
    ) -> Result<String, ImageError> {
        self.streamed(
            ImageVerb::Pull {
                image: image.into(),
            },
            line,
            cancel,
        )
        .await
    }

    /// `image base --suite S --tag IMAGE --mirror M [--ca-bundle P]`: a Debian base made by
    /// debootstrap, its output to `line`; the image's id.
    pub async fn base(
        &self,
        b: &BaseArgs,
        line: impl FnMut(String),
        cancel: Arc<Notify>,
    ) -> Result<String, ImageError> {
        self.streamed(ImageVerb::Base(b.clone()), line, cancel)
            .await
    }

    /// `image build-proxy`: the network filter's image (A.3), its output to `line`.
    pub async fn build_proxy(
        &self,
        line: impl FnMut(String),
        cancel: Arc<Notify>,
    ) -> Result<String, ImageError> {
        self.streamed(ImageVerb::BuildProxy, line, cancel).await
    }

    async fn streamed(
        &self,
        verb: ImageVerb,
        mut line: impl FnMut(String),
        cancel: Arc<Notify>,
    ) -> Result<String, ImageError> {
        let name = verb_name(&verb);
        let mut c = self.command(&Verb::Image(verb));
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().map_err(|e| self.spawn_error(e))?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let out_task = tokio::spawn(async move {
            let mut s = String::new();
            if let Some(mut o) = stdout {
                use tokio::io::AsyncReadExt;
                let _ = (&mut o).take(4096).read_to_string(&mut s).await;
            }
            s
        });
        let mut tail: std::collections::VecDeque<String> = std::collections::VecDeque::new();
        let mut cancelled = false;
        if let Some(err) = stderr {
            let mut lines = tokio::io::BufReader::new(err).lines();
            loop {
                tokio::select! {
                    l = lines.next_line() => match l {
                        Ok(Some(l)) => {
                            let l: String = l.chars().take(8192).collect();
                            tail.push_back(l.clone());
                            if tail.len() > 5 { tail.pop_front(); }
                            line(l);
                        }
                        _ => break,
                    },
                    () = cancel.notified(), if !cancelled => {
                        cancelled = true;
                        terminate(&child);
                    }
                }
            }
        }
        let status = child.wait().await.map_err(|e| self.spawn_error(e))?;
        let out = out_task.await.unwrap_or_default();
        if cancelled {
            return Err(ImageError::Cancelled);
        }
        if status.success() {
            Ok(out.trim().to_string())
        } else {
            Err(ImageError::Failed {
                verb: name,
                reason: tail.into_iter().collect::<Vec<_>>().join("\n"),
            })
        }
    }
}

/// The image verb's word (`build`), as errors name it.
fn verb_name(verb: &ImageVerb) -> String {
    Verb::Image(verb.clone()).to_args().swap_remove(1)
}

/// SIGTERM to the verb: it stops its podman and cleans up.
fn terminate(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}
