//! The sandbox executables' command line (contract A), shared by `handler-sandbox-podman` and
//! `handler-sandbox-docker` (issue 19): the verbs are `handler_sandbox::verbs` (the daemon
//! writes the same type); this only parses argv and runs each verb with the binary's engine.

use clap::{CommandFactory, FromArgMatches};
use handler_core::runtime::egress::pool;
use handler_core::runtime::sandbox::engine::{self, Kind};
use handler_core::runtime::sandbox::{
    attach, cache, check, egress_verbs, git_bundle, image, image_base, keep, launch, machine,
    machine_up, sweep, watchdog,
};
use handler_sandbox::verbs::{CacheVerb, ImageVerb, MachineVerb, PoolVerb, SandboxCli, Verb};

/// Runs the verb on the command line with `kind`'s engine and exits with its code.
pub(crate) fn main(kind: Kind, about: &'static str) -> ! {
    engine::select(kind);
    let matches = SandboxCli::command()
        .name(kind.executable())
        .about(about)
        .get_matches();
    let cli = SandboxCli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    std::process::exit(run(kind, cli.verb));
}

/// One verb; its exit code.
fn run(kind: Kind, verb: Verb) -> i32 {
    match verb {
        Verb::Launch => launch::run(),
        Verb::Attach { name } => attach::run(&name),
        Verb::SetEgress { name, mode } => egress_verbs::set_egress(&name, &mode),
        Verb::SetAllow { name, entries } => egress_verbs::set_allow(&name, &entries),
        Verb::Sweep => sweep::run(),
        Verb::Check => check::run(),
        Verb::GitFollow(f) => git_bundle::follow(&f),
        Verb::GitCopy(c) => git_bundle::copy(&c),
        Verb::GitBundle(b) => git_bundle::run(&b),
        Verb::Image(v) => run_image(kind, v),
        Verb::Cache(CacheVerb::Size { paths }) => cache::size(&paths),
        Verb::Cache(CacheVerb::Clear { paths }) => cache::clear(&paths),
        Verb::Watchdog(w) => watchdog::run(w.pid, w.start, w.boot, w.dir),
        Verb::Keep(k) => keep::run(&k),
        Verb::Machine(m) => run_machine(m),
        Verb::ProxyPool(PoolVerb::Fill { after_ms }) => pool::fill_verb(after_ms),
        Verb::ProxyPool(PoolVerb::Drain) => pool::drain_verb(),
    }
}

/// `machine …`; its exit code.
fn run_machine(verb: MachineVerb) -> i32 {
    match verb {
        MachineVerb::Create => machine::create(),
        MachineVerb::Up => machine_up::up(),
        MachineVerb::Adopt => machine_up::adopt(),
        MachineVerb::Start { id } => machine::state("start", &id),
        MachineVerb::Stop { id } => machine::state("stop", &id),
        MachineVerb::Restart { id } => machine::state("restart", &id),
        MachineVerb::Ls => machine::ls(),
        MachineVerb::Status { id } => machine::status(&id),
        MachineVerb::Stats { id } => machine::stats(&id),
        MachineVerb::Rm { id } => machine::rm(&id),
        MachineVerb::Exec { id } => machine::exec(&id),
    }
}

/// `image …`; its exit code.
fn run_image(kind: Kind, verb: ImageVerb) -> i32 {
    match verb {
        ImageVerb::Build(b) => image::build(&b),
        ImageVerb::BuildProxy => match handler_core::runtime::egress::launch::build_proxy(
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
        },
        ImageVerb::Read { image: i, path } => image::read(&i, &path),
        ImageVerb::Inspect { image: i } => image::inspect(&i),
        ImageVerb::Remove { image: i } => image::remove(&i),
        ImageVerb::Tag { source, target } => image::tag(&source, &target),
        ImageVerb::List { reference } => image::list(reference.as_deref()),
        ImageVerb::Pull { image: i } => image_base::pull(&i),
        ImageVerb::Base(b) => image_base::base(&b),
    }
}
