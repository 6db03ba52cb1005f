//! The sandbox executables' command line (contract A), shared by `handler-sandbox-podman` and
//! `handler-sandbox-docker` (issue 19): launch (SandboxSpec on fd 3), attach, set-egress,
//! set-allow, sweep, check, image and cache; each binary only names its engine.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use handler_core::runtime::sandbox::engine::{self, Kind};
use handler_core::runtime::sandbox::{
    attach, cache, check, egress_verbs, git_bundle, image, image_base, launch, sweep, watchdog,
};

#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand)]
enum Verb {
    /// Launch the SandboxSpec read on fd 3; exits with the process's code (64/65/66 before start).
    Launch,
    /// Run a tty sandbox's process on this terminal.
    Attach { name: String },
    /// Switch a filtered sandbox between enforce and log-only.
    SetEgress { name: String, mode: String },
    /// Replace a filtered sandbox's allow-list.
    SetAllow { name: String, entries: Vec<String> },
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
    GitBundle {
        #[arg(long)]
        image: String,
        #[arg(long)]
        git_dir: String,
        #[arg(long)]
        objects: String,
        /// A commit the host has (left out).
        #[arg(long = "not")]
        known: Vec<String>,
    },
    /// The git guard's follow: move BRANCH of a session's git directory from FROM to TO (a host
    /// commit) and read its index, in helper containers of IMAGE (exit 4: no git in IMAGE).
    GitFollow {
        #[arg(long)]
        image: String,
        #[arg(long)]
        git_dir: String,
        #[arg(long)]
        objects: String,
        #[arg(long)]
        branch: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
    },
    /// `sessionTree = "copy"` (decision 0103): reset a checkout (TREE, its `.git` inside) hard
    /// to RESET, fast-forward it to FOLLOW, or commit its uncommitted work, in a helper container
    /// of IMAGE (exit 4: no git).
    GitCopy {
        #[arg(long)]
        image: String,
        #[arg(long)]
        tree: String,
        #[arg(long)]
        objects: String,
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
    },
    /// A launcher's watchdog (started by `launch`): removes what it made if it dies.
    #[command(hide = true)]
    Watchdog {
        #[arg(long)]
        pid: u32,
        #[arg(long)]
        start: u64,
        #[arg(long)]
        boot: String,
        #[arg(long)]
        dir: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum ImageVerb {
    /// Build from a Containerfile; prints the image id.
    Build {
        context: String,
        #[arg(long)]
        file: Option<String>,
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// NAME=VALUE or NAME (value from the environment); given to podman by name.
        #[arg(long = "build-arg")]
        build_args: Vec<String>,
        /// Keep no intermediate image.
        #[arg(long)]
        no_intermediate: bool,
        #[arg(long)]
        no_cache: bool,
        /// A PEM bundle of extra CAs, given as the build secret `handler-ca-bundle`.
        #[arg(long)]
        ca_bundle: Option<String>,
    },
    /// Build the network filter image (the egress proxy, A.3; D.4 target network-filter).
    BuildProxy,
    /// Print a file of an image.
    Read {
        image: String,
        path: String,
    },
    Inspect {
        image: String,
    },
    /// Remove an image; refused while a container uses it.
    Remove {
        image: String,
    },
    Tag {
        source: String,
        target: String,
    },
    List {
        reference: Option<String>,
    },
    /// Pull an image from its registry; prints its id.
    Pull {
        image: String,
    },
    /// Make a Debian base image by debootstrap (podman unshare); prints its id.
    Base {
        /// The Debian suite (trixie, bookworm).
        #[arg(long)]
        suite: String,
        /// The image to make.
        #[arg(long)]
        tag: String,
        /// The Debian mirror.
        #[arg(long, default_value = handler_core::runtime::sandbox::image_base::DEFAULT_MIRROR)]
        mirror: String,
        /// A PEM bundle of CAs the base trusts beside Debian's.
        #[arg(long)]
        ca_bundle: Option<String>,
    },
}

#[derive(Subcommand)]
enum CacheVerb {
    Size { paths: Vec<String> },
    Clear { paths: Vec<String> },
}

/// Runs the verb on the command line with `kind`'s engine and exits with its code.
pub(crate) fn main(kind: Kind, about: &'static str) -> ! {
    engine::select(kind);
    let matches = Cli::command()
        .name(kind.executable())
        .about(about)
        .get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let code = match cli.verb {
        Verb::Launch => launch::run(),
        Verb::Attach { name } => attach::run(&name),
        Verb::SetEgress { name, mode } => egress_verbs::set_egress(&name, &mode),
        Verb::SetAllow { name, entries } => egress_verbs::set_allow(&name, &entries),
        Verb::Sweep => sweep::run(),
        Verb::Check => check::run(),
        Verb::GitFollow {
            image,
            git_dir,
            objects,
            branch,
            from,
            to,
        } => git_bundle::follow(&git_bundle::FollowRequest {
            image,
            git_dir,
            objects,
            branch,
            from,
            to,
        }),
        Verb::GitCopy {
            image,
            tree,
            objects,
            reset,
            follow,
            uncommitted: _,
        } => git_bundle::copy(&git_bundle::CopyRequest {
            image,
            tree,
            objects,
            action: match (reset, follow) {
                (Some(c), _) => git_bundle::CopyAction::Reset(c),
                (None, Some(c)) => git_bundle::CopyAction::Follow(c),
                (None, None) => git_bundle::CopyAction::Uncommitted,
            },
        }),
        Verb::GitBundle {
            image,
            git_dir,
            objects,
            known,
        } => git_bundle::run(&git_bundle::BundleRequest {
            image,
            git_dir,
            objects,
            known,
        }),
        Verb::Image(v) => match v {
            ImageVerb::Build {
                context,
                file,
                tags,
                build_args,
                no_intermediate,
                no_cache,
                ca_bundle,
            } => image::build(&image::BuildRequest {
                context,
                file,
                tags,
                build_args,
                no_intermediate,
                no_cache,
                ca_bundle,
            }),
            ImageVerb::BuildProxy => {
                match handler_core::runtime::egress::launch::build_proxy(
                    &handler_core::runtime::sandbox::podman::program(),
                ) {
                    Ok(img) => {
                        println!("{img}");
                        0
                    }
                    Err(e) => {
                        eprintln!("{}: image build-proxy: {e}", kind.executable());
                        1
                    }
                }
            }
            ImageVerb::Read { image: i, path } => image::read(&i, &path),
            ImageVerb::Inspect { image: i } => image::inspect(&i),
            ImageVerb::Remove { image: i } => image::remove(&i),
            ImageVerb::Tag { source, target } => image::tag(&source, &target),
            ImageVerb::List { reference } => image::list(reference.as_deref()),
            ImageVerb::Pull { image: i } => image_base::pull(&i),
            ImageVerb::Base {
                suite,
                tag,
                mirror,
                ca_bundle,
            } => image_base::base(&image_base::BaseRequest {
                suite,
                tag,
                mirror,
                ca_bundle,
            }),
        },
        Verb::Cache(CacheVerb::Size { paths }) => cache::size(&paths),
        Verb::Cache(CacheVerb::Clear { paths }) => cache::clear(&paths),
        Verb::Watchdog {
            pid,
            start,
            boot,
            dir,
        } => watchdog::run(pid, start, boot, dir),
    };
    std::process::exit(code);
}
