//! `image pull IMAGE` and `image base --suite S --tag IMAGE [--mirror M] [--ca-bundle P]` (A.7,
//! B.6, decisions 0073–0074): the toolbox's base when its `FROM` cannot be pulled. `base` makes a
//! Debian root filesystem with `debootstrap --variant=minbase` run as the user-namespace root of
//! rootless podman (`podman unshare`, with `container=lxc` so that debootstrap neither tests
//! `mknod` nor makes device nodes, which a user namespace refuses: it bind-mounts them), adds
//! the extra CAs, and `podman import`s it with `ENV PATH` and `CMD`, as `.ci/build-images.sh`
//! does as root. Its progress goes to stderr, the image id to stdout; exit 0 or 1.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use handler_sandbox::verbs::Base;

use super::image::{Stopped, run_stoppable, tempdir};
use super::{engine, log, podman};

pub use handler_sandbox::verbs::DEFAULT_MIRROR;

fn fail(msg: impl std::fmt::Display) -> i32 {
    log(&msg.to_string());
    1
}

/// `image pull IMAGE`: the engine's pull; its id on stdout, the engine's reason on stderr.
pub fn pull(image: &str) -> i32 {
    if image.is_empty() || image.starts_with('-') {
        return fail(format!("image pull: {image:?} is not an image reference"));
    }
    match podman::run(&["pull", "--quiet", image]) {
        Ok(id) => {
            println!("{}", id.trim().trim_start_matches("sha256:"));
            0
        }
        Err(e) => fail(format!("image pull: {e}")),
    }
}

/// Why `image base` refuses its request or its CA bundle.
#[derive(Debug, thiserror::Error)]
enum BaseError {
    #[error("image base: --suite {0:?} is not a Debian suite name")]
    Suite(String),
    #[error("image base: --mirror {0:?} is not an http(s) URL")]
    Mirror(String),
    #[error("image base: --tag {0:?} is not an image name")]
    Tag(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("--ca-bundle {0}: no PEM certificate in it")]
    NoCertificate(String),
}

fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> BaseError {
    let what = what.to_string();
    move |source| BaseError::Io { what, source }
}

/// The request's fields checked: the suite a word, the mirror http(s), the tag a reference.
fn validate(req: &Base) -> Result<(), BaseError> {
    if req.suite.is_empty() || !req.suite.chars().all(|c| c.is_ascii_lowercase()) {
        return Err(BaseError::Suite(req.suite.clone()));
    }
    if !(req.mirror.starts_with("http://") || req.mirror.starts_with("https://")) {
        return Err(BaseError::Mirror(req.mirror.clone()));
    }
    if req.tag.is_empty() || req.tag.starts_with('-') || req.tag.contains(char::is_whitespace) {
        return Err(BaseError::Tag(req.tag.clone()));
    }
    Ok(())
}

/// `debootstrap` on PATH, else in `/usr/sbin` or `/sbin` (not on a user's PATH on Debian).
fn debootstrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join("debootstrap"))
        .find(|p| p.is_file())
}

/// `image base`: makes `req.tag`; prints its id.
pub fn base(req: &Base) -> i32 {
    if let Err(e) = validate(req) {
        return fail(e);
    }
    if engine::current() != engine::Kind::Podman {
        return fail(
            "image base: needs rootless podman (debootstrap runs in `podman unshare`); \
             with this engine, make the base as root (.ci/build-images.sh)",
        );
    }
    let Some(tool) = debootstrap() else {
        return fail("image base: debootstrap is not installed (apt-get install debootstrap)");
    };
    let tmp = match tempdir() {
        Ok(t) => PathBuf::from(t),
        Err(e) => return fail(format!("image base: {e}")),
    };
    let code = match make(req, &tool, &tmp) {
        Ok(id) => {
            println!("{id}");
            0
        }
        Err(Made::Failed(e)) => fail(format!("image base: {e}")),
        Err(Made::Stopped(n)) => {
            log("image base: stopped by a signal");
            128 + n
        }
    };
    // Files of other uids of the namespace (apt's) are removable only inside it.
    let _ = unshare(&["rm", "-rf"], &[&tmp]);
    let _ = fs::remove_dir_all(&tmp);
    code
}

enum Made {
    Failed(String),
    Stopped(i32),
}

/// `podman unshare PROGRAM ARGS… PATHS…`, its output on our stderr.
fn unshare(program: &[&str], paths: &[&Path]) -> Result<(), Made> {
    let mut c = podman::command(["unshare"]);
    c.args(program)
        .args(paths)
        .stdout(Stdio::from(super::image::stderr_fd()))
        .stderr(Stdio::inherit());
    match run_stoppable(c) {
        Stopped::Ended(Ok(st)) if st.success() => Ok(()),
        Stopped::Ended(Ok(st)) => Err(Made::Failed(format!(
            "{} exited {}",
            program.join(" "),
            st.code().unwrap_or(-1)
        ))),
        Stopped::Ended(Err(e)) => Err(Made::Failed(format!("podman unshare: {e}"))),
        Stopped::BySignal(n) => Err(Made::Stopped(n)),
    }
}

/// debootstrap, the CAs, the tar, the import: the new image's id.
fn make(req: &Base, tool: &Path, tmp: &Path) -> Result<String, Made> {
    let root = tmp.join("rootfs");
    let tar = tmp.join("rootfs.tar");
    log(&format!(
        "image base: debootstrap --variant=minbase {} from {} (as podman unshare's root)",
        req.suite, req.mirror
    ));
    let tool = tool.display().to_string();
    let root_s = root.display().to_string();
    unshare(
        &[
            "env",
            "container=lxc",
            &tool,
            "--variant=minbase",
            &req.suite,
            &root_s,
            &req.mirror,
        ],
        &[],
    )?;
    if let Some(ca) = &req.ca_bundle {
        let n = add_cas(&root, ca).map_err(|e| Made::Failed(e.to_string()))?;
        log(&format!(
            "image base: the base trusts {n} certificate(s) of {ca}"
        ));
    }
    unshare(
        &[
            "sh",
            "-c",
            "rm -rf \"$1\"/var/cache/apt/archives/*.deb \"$1\"/var/lib/apt/lists/* \
             && tar -C \"$1\" -cf \"$2\" .",
            "sh",
        ],
        &[&root, &tar],
    )?;
    log(&format!("image base: importing {}", req.tag));
    let tar_s = tar.display().to_string();
    podman::run(&[
        "import",
        "--change",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--change",
        "CMD [\"/bin/bash\"]",
        &tar_s,
        &req.tag,
    ])
    .map(|id| id.trim().trim_start_matches("sha256:").to_string())
    .map_err(|e| Made::Failed(e.to_string()))
}

/// Each certificate of the PEM bundle `ca` as a file under the base's
/// `/usr/local/share/ca-certificates/handler-build/` (`update-ca-certificates` adds them when
/// the toolbox installs ca-certificates); how many.
fn add_cas(root: &Path, ca: &str) -> Result<usize, BaseError> {
    let text = fs::read_to_string(ca).map_err(io(format!("--ca-bundle {ca}")))?;
    let dir = root.join("usr/local/share/ca-certificates/handler-build");
    fs::create_dir_all(&dir).map_err(io(dir.display()))?;
    let mut n = 0;
    let mut cert = String::new();
    for line in text.lines() {
        if line.contains("-----BEGIN CERTIFICATE-----") {
            cert.clear();
        }
        cert.push_str(line);
        cert.push('\n');
        if line.contains("-----END CERTIFICATE-----") {
            n += 1;
            let p = dir.join(format!("host-{n:03}.crt"));
            fs::write(&p, &cert).map_err(io(p.display()))?;
            cert.clear();
        }
    }
    if n == 0 {
        return Err(BaseError::NoCertificate(ca.to_string()));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(suite: &str, mirror: &str, tag: &str) -> Base {
        Base {
            suite: suite.into(),
            tag: tag.into(),
            mirror: mirror.into(),
            ca_bundle: None,
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let ok = req(
            "trixie",
            DEFAULT_MIRROR,
            "localhost/handler-debian-base:trixie",
        );
        assert!(validate(&ok).is_ok());
        let e = validate(&req("trixie; rm", DEFAULT_MIRROR, "x")).unwrap_err();
        assert!(
            matches!(e, BaseError::Suite(_)) && e.to_string().contains("--suite"),
            "{e}"
        );
        let e = validate(&req("trixie", "ftp://m", "x")).unwrap_err();
        assert!(
            matches!(e, BaseError::Mirror(_)) && e.to_string().contains("--mirror"),
            "{e}"
        );
        let e = validate(&req("trixie", DEFAULT_MIRROR, "--rm")).unwrap_err();
        assert!(
            matches!(e, BaseError::Tag(_)) && e.to_string().contains("--tag"),
            "{e}"
        );
    }

    #[test]
    fn every_certificate_of_the_bundle_becomes_a_file() {
        let d = std::env::temp_dir().join(format!("hib-ca-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let pem = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----\n\
                   # comment\n-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n";
        fs::write(d.join("b.pem"), pem).unwrap();
        let root = d.join("root");
        assert_eq!(
            add_cas(&root, &d.join("b.pem").display().to_string()).unwrap(),
            2
        );
        let second = fs::read_to_string(
            root.join("usr/local/share/ca-certificates/handler-build/host-002.crt"),
        )
        .unwrap();
        assert_eq!(
            second,
            "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n"
        );
        fs::write(d.join("e.pem"), "nothing").unwrap();
        assert!(matches!(
            add_cas(&root, &d.join("e.pem").display().to_string()),
            Err(BaseError::NoCertificate(_))
        ));
        fs::remove_dir_all(&d).unwrap();
    }
}
