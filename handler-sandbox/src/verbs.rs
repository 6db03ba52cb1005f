//! The sandbox executable's verbs (contract A) as one type for both sides (issue 28): the
//! runtime executables parse their command line into [`Verb`], the daemon builds a [`Verb`] and
//! writes it with [`Verb::to_args`]; a round-trip test keeps the two spellings one.
//!
//! Values are written as `--option=value` and positionals after `--`, so a value that starts
//! with `-` (a hostile path or image name) is never read as an option.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The command line of `handler-sandbox-podman` and `handler-sandbox-docker`.
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(version)]
pub struct SandboxCli {
    /// The verb.
    #[command(subcommand)]
    pub verb: Verb,
}

/// A verb of the sandbox executable.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Verb {
    /// Launch the SandboxSpec read on fd 3; exits with the process's code (64/65/66 before start).
    Launch,
    /// Run a tty sandbox's process on this terminal.
    Attach {
        /// The sandbox.
        name: String,
    },
    /// Switch a filtered sandbox between enforce and log-only.
    SetEgress {
        /// The sandbox.
        name: String,
        /// `enforce` or `log-only` (anything else: exit 65).
        mode: String,
    },
    /// Replace a filtered sandbox's allow-list.
    SetAllow {
        /// The sandbox.
        name: String,
        /// The allow-list's entries (each checked: exit 65).
        entries: Vec<String>,
    },
    /// Remove what dead launchers left behind.
    Sweep,
    /// Say whether this host can run sandboxes (RuntimeCheck JSON).
    Check,
    /// Build and manage images.
    #[command(subcommand)]
    Image(ImageVerb),
    /// Measure and empty cache folders.
    #[command(subcommand)]
    Cache(CacheVerb),
    /// The git guard's bring-back: a bundle of every branch of a session's git directory on
    /// stdout, written by a helper container of IMAGE (exit 3: nothing new, 4: no git in IMAGE).
    GitBundle(Bundle),
    /// The git guard's follow: move BRANCH of a session's git directory from FROM to TO (a host
    /// commit) and read its index, in helper containers of IMAGE (exit 4: no git in IMAGE).
    GitFollow(Follow),
    /// `sessionTree = "copy"` (decision 0103): reset a checkout (TREE, its `.git` inside) hard
    /// to RESET, fast-forward it to FOLLOW, or commit its uncommitted work, in a helper container
    /// of IMAGE (exit 4: no git).
    GitCopy(Copy),
    /// A launcher's watchdog (started by `launch`): removes what it made if it dies.
    #[command(hide = true)]
    Watchdog(Watchdog),
    /// Keep a launch's stdio for whichever daemon connects (issue 28 item 6): runs `launch`
    /// with the SandboxSpec on fd 3 (with --machine, `machine exec ID` with the ExecSpec on
    /// fd 3) and serves its stdin, stdout and stderr on SOCKET, so the sandbox outlives its
    /// daemon; stops it when no daemon connected for TIMEOUT seconds.
    Keep(Keep),
    /// Machines (issue 29): sandboxes that outlive every process, created from a MachineSpec
    /// on fd 3, reached by `exec` with an ExecSpec on fd 3.
    #[command(subcommand)]
    Machine(MachineVerb),
    /// The warm proxy pool (decision 0175): egress proxies started ahead, one claimed by each
    /// filtered launch.
    #[command(subcommand)]
    ProxyPool(PoolVerb),
}

/// `proxy-pool …`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum PoolVerb {
    /// Start members until the pool holds `HANDLER_PROXY_POOL` (default 1; 0: no pool); prints
    /// how many it started. A launch runs it in the background after each filtered start.
    Fill {
        /// Wait this many milliseconds first (a launch's own start goes first).
        #[arg(long, default_value_t = 0)]
        after_ms: u64,
    },
    /// Remove every member (`image build-proxy` does it after switching the image).
    Drain,
}

/// `machine …`: ID is the machine's id (its container is `handler-m-ID`); only containers
/// labelled as that machine are ever touched.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum MachineVerb {
    /// Create (and start) a machine from the MachineSpec on fd 3; prints its container id.
    Create,
    /// Make (and start) a dev container machine from the DevcontainerSpec on fd 3 with the Dev
    /// Container CLI (decision 0161); prints what it found (a DevcontainerUp, JSON).
    Up,
    /// Adopt the container someone made by hand with `devcontainer up` for the folder the
    /// DevcontainerSpec on fd 3 names, as that machine (decision 0161); prints a
    /// DevcontainerUp. Exit 3: there is none.
    Adopt,
    /// Start a stopped machine.
    Start {
        /// The machine.
        id: String,
    },
    /// Stop a machine (its processes get SIGTERM, then SIGKILL after 10 s).
    Stop {
        /// The machine.
        id: String,
    },
    /// Restart a machine (starts a stopped one).
    Restart {
        /// The machine.
        id: String,
    },
    /// The engine's records of every container labelled as a machine (a JSON array): what a
    /// daemon that lost its own records adopts back (decision 0155).
    Ls,
    /// The runtime's record of a machine (JSON).
    Status {
        /// The machine.
        id: String,
    },
    /// CPU, memory, processes, network and disk right now (JSON, the seed's Stats).
    Stats {
        /// The machine.
        id: String,
    },
    /// Remove a machine and everything in it.
    Rm {
        /// The machine.
        id: String,
    },
    /// Run the ExecSpec on fd 3 in a running machine: stdio is the process's, its exit code
    /// the verb's, SIGTERM ends it.
    Exec {
        /// The machine.
        id: String,
    },
}

/// `keep`: the socket, how long the launch waits for a daemon, its bounds.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Keep {
    /// The unix socket to serve (created 0600; its folder must be the user's, 0700).
    #[arg(long)]
    pub socket: PathBuf,
    /// Seconds without a connected daemon after which the sandbox is stopped.
    #[arg(long)]
    pub timeout: u64,
    /// The longest line of the agent's output (longer: the output ends, as for the daemon).
    #[arg(long)]
    pub max_line: usize,
    /// How many bytes of the agent's output are kept while no daemon has read them (beyond,
    /// the agent waits: nothing is dropped).
    #[arg(long)]
    pub buffer: usize,
    /// Keep an exec in machine ID (`machine exec ID`, the ExecSpec on fd 3) instead of a
    /// launch: a session's agent in a machine outlives its daemon too.
    #[arg(long, value_name = "ID")]
    pub machine: Option<String>,
}

/// `image …`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ImageVerb {
    /// Build from a Containerfile; prints the image id.
    Build(Build),
    /// Build the network filter image (the egress proxy, A.3; D.4 target network-filter).
    BuildProxy,
    /// Print a file of an image.
    Read {
        /// The image.
        image: String,
        /// The file's absolute path in it.
        path: String,
    },
    /// Print the engine's record of an image.
    Inspect {
        /// The image.
        image: String,
    },
    /// Remove an image; refused while a container uses it.
    Remove {
        /// The image.
        image: String,
    },
    /// Give an image another name.
    Tag {
        /// The image.
        source: String,
        /// The new name.
        target: String,
    },
    /// List images (of a reference).
    List {
        /// Only images of this reference.
        reference: Option<String>,
    },
    /// Pull an image from its registry; prints its id.
    Pull {
        /// The image.
        image: String,
    },
    /// Make a Debian base image by debootstrap (podman unshare); prints its id.
    Base(Base),
}

/// `cache …` (A.9).
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum CacheVerb {
    /// One `{"path", "bytes"}` line per folder.
    Size {
        /// The folders.
        paths: Vec<String>,
    },
    /// Empty each folder; refused while a sandbox mounts it.
    Clear {
        /// The folders.
        paths: Vec<String>,
    },
}

/// `image build`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct Build {
    /// The build context folder.
    pub context: String,
    /// The Containerfile, when not `<context>/Containerfile`.
    #[arg(long)]
    pub file: Option<String>,
    /// Names for the image.
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    /// NAME=VALUE or NAME (value from the environment); given to the engine by name.
    #[arg(long = "build-arg")]
    pub build_args: Vec<String>,
    /// Keep no intermediate image.
    #[arg(long)]
    pub no_intermediate: bool,
    /// Without the engine's cache (and pulling the base again).
    #[arg(long)]
    pub no_cache: bool,
    /// A PEM bundle of extra CAs, given as the build secret `handler-ca-bundle`.
    #[arg(long)]
    pub ca_bundle: Option<String>,
}

/// The Debian mirror `image base` uses unless told.
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// `image base`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Base {
    /// The Debian suite (trixie, bookworm).
    #[arg(long)]
    pub suite: String,
    /// The image to make.
    #[arg(long)]
    pub tag: String,
    /// The Debian mirror.
    #[arg(long, default_value = DEFAULT_MIRROR)]
    pub mirror: String,
    /// A PEM bundle of CAs the base trusts beside Debian's.
    #[arg(long)]
    pub ca_bundle: Option<String>,
}

/// `git-bundle`: what to bundle.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Bundle {
    /// The image the helper runs (the sandbox's, which holds the git it committed with).
    #[arg(long)]
    pub image: String,
    /// The session's git directory on the host.
    #[arg(long)]
    pub git_dir: String,
    /// The host repository's `objects/`.
    #[arg(long)]
    pub objects: String,
    /// A commit the host has (left out).
    #[arg(long = "not")]
    pub known: Vec<String>,
}

/// `git-follow`: which branch to move.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Follow {
    /// The image the helper runs.
    #[arg(long)]
    pub image: String,
    /// The session's git directory on the host.
    #[arg(long)]
    pub git_dir: String,
    /// The host repository's `objects/`.
    #[arg(long)]
    pub objects: String,
    /// The branch to move.
    #[arg(long)]
    pub branch: String,
    /// The commit it is at.
    #[arg(long)]
    pub from: String,
    /// The host commit to move it to.
    #[arg(long)]
    pub to: String,
}

/// What `git-copy` does on a `sessionTree = "copy"` checkout (decision 0103).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyAction {
    /// `reset --hard` to this commit: the checkout's working tree written (tracked files only).
    Reset(String),
    /// Commit the working tree's uncommitted work under `refs/heads/handler-uncommitted`.
    Uncommitted,
    /// Follow: `merge --ff-only` the checkout's HEAD to this host commit (its objects reached
    /// through the alternates), tree and index with it; git refuses over a conflicting change.
    Follow(String),
}

/// `git-copy`: the checkout (working tree and `.git`) writable in a helper container.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Copy {
    /// The image the helper runs.
    #[arg(long)]
    pub image: String,
    /// The checkout on the host (its `.git` inside), writable in the helper.
    #[arg(long)]
    pub tree: String,
    /// The host repository's `objects/` (read-only).
    #[arg(long)]
    pub objects: String,
    /// The commit to reset the checkout to.
    #[arg(
        long,
        conflicts_with_all = ["uncommitted", "follow"],
        required_unless_present_any = ["uncommitted", "follow"]
    )]
    reset: Option<String>,
    /// The host commit to fast-forward the checkout to (follow).
    #[arg(long, conflicts_with = "uncommitted")]
    follow: Option<String>,
    /// Commit the working tree under `refs/heads/handler-uncommitted`.
    #[arg(long)]
    uncommitted: bool,
}

impl Copy {
    /// A `git-copy` doing `action`.
    #[must_use]
    pub fn new(image: String, tree: String, objects: String, action: CopyAction) -> Self {
        let (reset, follow, uncommitted) = match action {
            CopyAction::Reset(c) => (Some(c), None, false),
            CopyAction::Follow(c) => (None, Some(c), false),
            CopyAction::Uncommitted => (None, None, true),
        };
        Self {
            image,
            tree,
            objects,
            reset,
            follow,
            uncommitted,
        }
    }

    /// What it does (clap lets exactly one of the three through).
    #[must_use]
    pub fn action(&self) -> CopyAction {
        match (&self.reset, &self.follow) {
            (Some(c), _) => CopyAction::Reset(c.clone()),
            (None, Some(c)) => CopyAction::Follow(c.clone()),
            (None, None) => CopyAction::Uncommitted,
        }
    }
}

/// `watchdog`: the launcher it watches and the folder it cleans.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct Watchdog {
    /// The launcher's pid.
    #[arg(long)]
    pub pid: u32,
    /// Its start time (clock ticks since boot), so a reused pid is not it.
    #[arg(long)]
    pub start: u64,
    /// The boot it started in.
    #[arg(long)]
    pub boot: String,
    /// What it made.
    #[arg(long)]
    pub dir: PathBuf,
}

/// The words of a command line, written one way.
#[derive(Default)]
struct Words {
    options: Vec<String>,
    positionals: Vec<String>,
}

impl Words {
    fn verb(mut self, v: &str) -> Self {
        self.options.push(v.into());
        self
    }
    fn opt(mut self, name: &str, value: &str) -> Self {
        self.options.push(format!("--{name}={value}"));
        self
    }
    fn opt_some(self, name: &str, value: Option<&String>) -> Self {
        match value {
            Some(v) => self.opt(name, v),
            None => self,
        }
    }
    fn opts(self, name: &str, values: &[String]) -> Self {
        values.iter().fold(self, |w, v| w.opt(name, v))
    }
    fn flag(mut self, name: &str, on: bool) -> Self {
        if on {
            self.options.push(format!("--{name}"));
        }
        self
    }
    fn pos(mut self, values: &[&String]) -> Self {
        self.positionals.extend(values.iter().map(|v| (*v).clone()));
        self
    }
    fn done(mut self) -> Vec<String> {
        if !self.positionals.is_empty() {
            self.options.push("--".into());
            self.options.append(&mut self.positionals);
        }
        self.options
    }
}

impl Verb {
    /// The command line's words after the executable, which [`SandboxCli`] parses back to this.
    #[must_use]
    pub fn to_args(&self) -> Vec<String> {
        let w = Words::default();
        match self {
            Self::Launch => w.verb("launch"),
            Self::Attach { name } => w.verb("attach").pos(&[name]),
            Self::SetEgress { name, mode } => w.verb("set-egress").pos(&[name, mode]),
            Self::SetAllow { name, entries } => w
                .verb("set-allow")
                .pos(&[name])
                .pos(&entries.iter().collect::<Vec<_>>()),
            Self::Sweep => w.verb("sweep"),
            Self::Check => w.verb("check"),
            Self::ProxyPool(PoolVerb::Fill { after_ms }) => w
                .verb("proxy-pool")
                .verb("fill")
                .opt("after-ms", &after_ms.to_string()),
            Self::ProxyPool(PoolVerb::Drain) => w.verb("proxy-pool").verb("drain"),
            Self::Image(i) => i.words(w.verb("image")),
            Self::Cache(CacheVerb::Size { paths }) => w
                .verb("cache")
                .verb("size")
                .pos(&paths.iter().collect::<Vec<_>>()),
            Self::Cache(CacheVerb::Clear { paths }) => w
                .verb("cache")
                .verb("clear")
                .pos(&paths.iter().collect::<Vec<_>>()),
            Self::GitBundle(b) => w
                .verb("git-bundle")
                .opt("image", &b.image)
                .opt("git-dir", &b.git_dir)
                .opt("objects", &b.objects)
                .opts("not", &b.known),
            Self::GitFollow(f) => w
                .verb("git-follow")
                .opt("image", &f.image)
                .opt("git-dir", &f.git_dir)
                .opt("objects", &f.objects)
                .opt("branch", &f.branch)
                .opt("from", &f.from)
                .opt("to", &f.to),
            Self::GitCopy(c) => w
                .verb("git-copy")
                .opt("image", &c.image)
                .opt("tree", &c.tree)
                .opt("objects", &c.objects)
                .opt_some("reset", c.reset.as_ref())
                .opt_some("follow", c.follow.as_ref())
                .flag("uncommitted", c.uncommitted),
            Self::Watchdog(d) => w
                .verb("watchdog")
                .opt("pid", &d.pid.to_string())
                .opt("start", &d.start.to_string())
                .opt("boot", &d.boot)
                .opt("dir", &d.dir.to_string_lossy()),
            Self::Machine(m) => m.words(w.verb("machine")),
            Self::Keep(k) => w
                .verb("keep")
                .opt("socket", &k.socket.to_string_lossy())
                .opt("timeout", &k.timeout.to_string())
                .opt("max-line", &k.max_line.to_string())
                .opt("buffer", &k.buffer.to_string())
                .opt_some("machine", k.machine.as_ref()),
        }
        .done()
    }
}

impl MachineVerb {
    fn words(&self, w: Words) -> Words {
        match self {
            Self::Create => w.verb("create"),
            Self::Up => w.verb("up"),
            Self::Adopt => w.verb("adopt"),
            Self::Ls => w.verb("ls"),
            Self::Start { id } => w.verb("start").pos(&[id]),
            Self::Stop { id } => w.verb("stop").pos(&[id]),
            Self::Restart { id } => w.verb("restart").pos(&[id]),
            Self::Status { id } => w.verb("status").pos(&[id]),
            Self::Stats { id } => w.verb("stats").pos(&[id]),
            Self::Rm { id } => w.verb("rm").pos(&[id]),
            Self::Exec { id } => w.verb("exec").pos(&[id]),
        }
    }
}

impl ImageVerb {
    fn words(&self, w: Words) -> Words {
        match self {
            Self::Build(b) => w
                .verb("build")
                .opt_some("file", b.file.as_ref())
                .opts("tag", &b.tags)
                .opts("build-arg", &b.build_args)
                .flag("no-intermediate", b.no_intermediate)
                .flag("no-cache", b.no_cache)
                .opt_some("ca-bundle", b.ca_bundle.as_ref())
                .pos(&[&b.context]),
            Self::BuildProxy => w.verb("build-proxy"),
            Self::Read { image, path } => w.verb("read").pos(&[image, path]),
            Self::Inspect { image } => w.verb("inspect").pos(&[image]),
            Self::Remove { image } => w.verb("remove").pos(&[image]),
            Self::Tag { source, target } => w.verb("tag").pos(&[source, target]),
            Self::List { reference } => w.verb("list").pos(&reference.iter().collect::<Vec<_>>()),
            Self::Pull { image } => w.verb("pull").pos(&[image]),
            Self::Base(b) => w
                .verb("base")
                .opt("suite", &b.suite)
                .opt("tag", &b.tag)
                .opt("mirror", &b.mirror)
                .opt_some("ca-bundle", b.ca_bundle.as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use proptest::prelude::*;

    fn back(v: &Verb) -> Verb {
        let argv = std::iter::once("handler-sandbox-podman".to_string()).chain(v.to_args());
        SandboxCli::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("{:?} does not parse back: {e}", v.to_args()))
            .verb
    }

    fn s(x: &str) -> String {
        x.into()
    }

    /// One of every verb, with values an attacker would choose.
    #[expect(
        clippy::too_many_lines,
        reason = "one literal per verb, in the parser's order"
    )]
    fn samples() -> Vec<Verb> {
        let dash = s("--image=/etc");
        vec![
            Verb::Launch,
            Verb::Attach { name: s("-n") },
            Verb::SetEgress {
                name: s("sb"),
                mode: s("log-only"),
            },
            Verb::SetAllow {
                name: s("sb"),
                entries: vec![s("*.example.com"), s("-x"), s("--")],
            },
            Verb::Sweep,
            Verb::Check,
            Verb::ProxyPool(PoolVerb::Fill { after_ms: 1500 }),
            Verb::ProxyPool(PoolVerb::Drain),
            Verb::Image(ImageVerb::Build(Build {
                context: dash.clone(),
                file: Some(s("-C f")),
                tags: vec![s("a"), s("b")],
                build_args: vec![s("A=--b"), s("C")],
                no_intermediate: true,
                no_cache: true,
                ca_bundle: Some(s("/ca.pem")),
            })),
            Verb::Image(ImageVerb::Build(Build {
                context: s("."),
                ..Build::default()
            })),
            Verb::Image(ImageVerb::BuildProxy),
            Verb::Image(ImageVerb::Read {
                image: dash.clone(),
                path: s("-/etc/passwd"),
            }),
            Verb::Image(ImageVerb::Inspect { image: s("i") }),
            Verb::Image(ImageVerb::Remove { image: s("i") }),
            Verb::Image(ImageVerb::Tag {
                source: s("a"),
                target: s("-b"),
            }),
            Verb::Image(ImageVerb::List { reference: None }),
            Verb::Image(ImageVerb::List {
                reference: Some(s("localhost/handler-*")),
            }),
            Verb::Image(ImageVerb::Pull { image: s("x:1") }),
            Verb::Image(ImageVerb::Base(Base {
                suite: s("trixie"),
                tag: s("t"),
                mirror: s(DEFAULT_MIRROR),
                ca_bundle: None,
            })),
            Verb::Cache(CacheVerb::Size {
                paths: vec![s("/a"), s("-b")],
            }),
            Verb::Cache(CacheVerb::Clear { paths: vec![] }),
            Verb::GitBundle(Bundle {
                image: s("i"),
                git_dir: s("/g d"),
                objects: s("/o"),
                known: vec![s("abc"), s("--not")],
            }),
            Verb::GitFollow(Follow {
                image: s("i"),
                git_dir: s("/g"),
                objects: s("/o"),
                branch: s("main"),
                from: s("a"),
                to: s("b"),
            }),
            Verb::GitCopy(Copy::new(
                s("i"),
                s("/t"),
                s("/o"),
                CopyAction::Reset(s("c")),
            )),
            Verb::GitCopy(Copy::new(
                s("i"),
                s("/t"),
                s("/o"),
                CopyAction::Follow(s("-c")),
            )),
            Verb::GitCopy(Copy::new(s("i"), s("/t"), s("/o"), CopyAction::Uncommitted)),
            Verb::Watchdog(Watchdog {
                pid: 7,
                start: 99,
                boot: s("b-1"),
                dir: PathBuf::from("/run/x"),
            }),
            Verb::Machine(MachineVerb::Create),
            Verb::Machine(MachineVerb::Up),
            Verb::Machine(MachineVerb::Adopt),
            Verb::Machine(MachineVerb::Ls),
            Verb::Machine(MachineVerb::Start { id: s("-box") }),
            Verb::Machine(MachineVerb::Stop { id: s("box") }),
            Verb::Machine(MachineVerb::Restart { id: s("box") }),
            Verb::Machine(MachineVerb::Status { id: s("box") }),
            Verb::Machine(MachineVerb::Stats { id: s("box") }),
            Verb::Machine(MachineVerb::Rm { id: s("--all") }),
            Verb::Machine(MachineVerb::Exec { id: s("box") }),
            Verb::Keep(Keep {
                socket: PathBuf::from("--socket=/tmp/x y.sock"),
                timeout: 600,
                max_line: 1 << 20,
                buffer: 16 << 20,
                machine: Some(s("--box")),
            }),
        ]
    }

    /// The words of a verb's path (`image build`) as the parser names them.
    fn path_of(v: &Verb) -> String {
        let a = v.to_args();
        match a[0].as_str() {
            "image" | "cache" | "machine" | "proxy-pool" => format!("{} {}", a[0], a[1]),
            _ => a[0].clone(),
        }
    }

    #[test]
    fn every_verb_parses_back_to_itself() {
        for v in samples() {
            assert_eq!(back(&v), v, "{:?}", v.to_args());
        }
    }

    #[test]
    fn the_samples_cover_every_verb_of_the_parser() {
        let covered: std::collections::BTreeSet<String> = samples().iter().map(path_of).collect();
        let mut all = std::collections::BTreeSet::new();
        for c in SandboxCli::command().get_subcommands() {
            let subs: Vec<_> = c.get_subcommands().collect();
            if subs.is_empty() {
                all.insert(c.get_name().to_string());
            }
            for sub in subs {
                all.insert(format!("{} {}", c.get_name(), sub.get_name()));
            }
        }
        all.remove("help");
        all.retain(|p| !p.ends_with(" help"));
        assert_eq!(covered, all, "a verb without a round-trip sample");
    }

    #[test]
    fn values_that_look_like_options_stay_values() {
        let v = Verb::Image(ImageVerb::Read {
            image: s("--help"),
            path: s("-h"),
        });
        assert_eq!(
            v.to_args(),
            ["image", "read", "--", "--help", "-h"].map(String::from)
        );
        assert_eq!(back(&v), v);
    }

    proptest! {
        #[test]
        fn any_values_round_trip(
            name in "[^\\x00]{0,12}",
            entries in proptest::collection::vec("[^\\x00]{0,8}", 0..4),
            image in "[^\\x00]{0,12}",
            known in proptest::collection::vec("[^\\x00]{0,8}", 0..3),
        ) {
            let v = Verb::SetAllow { name: name.clone(), entries };
            prop_assert_eq!(back(&v), v);
            let b = Verb::GitBundle(Bundle {
                image: image.clone(), git_dir: name.clone(), objects: image, known,
            });
            prop_assert_eq!(back(&b), b);
        }
    }
}
