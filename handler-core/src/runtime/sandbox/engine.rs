//! Which container engine this runtime executable drives — rootless Podman
//! (`handler-sandbox-podman`) or Docker (`handler-sandbox-docker`, issue 19) — chosen once by
//! the binary's `main` ([`select`]), and the few CLI spellings where the two differ. Every verb
//! (launch, attach, sweep, check, image, cache) is shared and asks this module; the plan's
//! differences are `handler_sandbox::plan::engine`'s.

use std::sync::OnceLock;

/// A container engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Rootless Podman.
    Podman,
    /// Docker (rootless by default; rootful only when opted in, decision 0080).
    Docker,
}

static SELECTED: OnceLock<Kind> = OnceLock::new();

/// Chooses the engine for this process (the binary's first act); later calls keep the first.
pub fn select(kind: Kind) {
    let _ = SELECTED.set(kind);
}

/// The engine of this process (Podman unless [`select`]ed otherwise).
pub fn current() -> Kind {
    SELECTED.get().copied().unwrap_or(Kind::Podman)
}

/// The setting that opts in to a rootful Docker daemon (decision 0080).
pub const ALLOW_ROOTFUL_VAR: &str = "HANDLER_DOCKER_ALLOW_ROOTFUL";

/// The setting naming the OCI runtime Docker starts sandboxes under (`--runtime`, e.g. runsc).
pub const OCI_RUNTIME_VAR: &str = "HANDLER_DOCKER_OCI_RUNTIME";

impl Kind {
    /// The CLI's name (`podman`, `docker`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Podman => "podman",
            Kind::Docker => "docker",
        }
    }

    /// This runtime executable's name, for log lines.
    pub fn executable(self) -> &'static str {
        match self {
            Kind::Podman => "handler-sandbox-podman",
            Kind::Docker => "handler-sandbox-docker",
        }
    }

    /// The engine's executable: `$HANDLER_PODMAN` / `$HANDLER_DOCKER`, else its name on PATH.
    pub fn program(self) -> String {
        let var = match self {
            Kind::Podman => "HANDLER_PODMAN",
            Kind::Docker => "HANDLER_DOCKER",
        };
        std::env::var(var).unwrap_or_else(|_| self.name().to_string())
    }

    /// `rm` of containers at once, whether or not they exist (`grace`: seconds to stop).
    pub fn rm_args(self, grace: u32) -> Vec<String> {
        match self {
            Kind::Podman => vec![
                "rm".into(),
                "-f".into(),
                "--time".into(),
                grace.to_string(),
                "--ignore".into(),
            ],
            // docker rm -f kills at once; a missing container is an error, ignored by callers.
            Kind::Docker => vec!["rm".into(), "-f".into()],
        }
    }

    /// Arguments asking whether `image` exists (success = yes).
    pub fn image_exists_args(self, image: &str) -> Vec<String> {
        match self {
            Kind::Podman => vec!["image".into(), "exists".into(), image.into()],
            Kind::Docker => vec![
                "image".into(),
                "inspect".into(),
                "--format".into(),
                "{{.Id}}".into(),
                image.into(),
            ],
        }
    }

    /// The value that clears an image's entrypoint.
    pub fn no_entrypoint(self) -> &'static str {
        match self {
            Kind::Podman => "[]",
            Kind::Docker => "",
        }
    }

    /// The plan-side engine for this kind, given Docker's facts.
    pub fn plan_engine(
        self,
        docker: &handler_sandbox::plan::DockerFacts,
    ) -> handler_sandbox::plan::Engine<'_> {
        match self {
            Kind::Podman => handler_sandbox::plan::Engine::Podman,
            Kind::Docker => handler_sandbox::plan::Engine::Docker(docker),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spellings_that_differ() {
        assert_eq!(
            Kind::Podman.rm_args(0),
            ["rm", "-f", "--time", "0", "--ignore"]
        );
        assert_eq!(Kind::Docker.rm_args(3), ["rm", "-f"]);
        assert_eq!(
            Kind::Podman.image_exists_args("i"),
            ["image", "exists", "i"]
        );
        assert_eq!(
            Kind::Docker.image_exists_args("i")[..2],
            ["image", "inspect"]
        );
        assert_eq!(Kind::Docker.no_entrypoint(), "");
        assert_eq!(Kind::Docker.executable(), "handler-sandbox-docker");
    }
}
