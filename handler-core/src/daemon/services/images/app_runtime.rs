//! The mini apps' runtime image (H.3, B.6; decision 0158), the build target `app-runtime`: no
//! registry can be reached for `denoland/deno`, so Handler makes it — Deno's Linux binary from
//! the npm registry's `@deno/linux-x64-glibc` at a pinned version, its tarball checked against
//! the pinned sha512 before anything is unpacked, with the host's glibc libraries it links to, in
//! an image `FROM scratch`. Built untagged without cache, checked (a strict sandbox without
//! network must run `deno eval` and print what it computed), then switched to `:latest`.

use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use sha2::Digest as _;
use tokio::sync::Notify;

use super::job::{Outcome, built, cancelled, log_line, remove, stage, switch};
use super::{ca, verbs};
use crate::daemon::fsutil;
use crate::daemon::launch::image_verbs::BuildArgs;
use crate::daemon::state::AppState;

/// The target's name.
pub const TARGET: &str = "app-runtime";
/// The image (its repository; `:latest` is the one in use).
pub const IMAGE: &str = "localhost/handler-app-runtime";
/// Deno's version.
pub const DENO_VERSION: &str = "2.9.6";
/// The npm registry's integrity of `@deno/linux-x64-glibc@DENO_VERSION`'s tarball.
pub const DENO_INTEGRITY: &str = "sha512-3md4TKLCuzsLDmfOoC5KN7NAZaxSVkMgm64vg6foD00JBADCpYS2/5QqXfzgnP5ZQz3iLP9vBQJtEgc116OAoQ==";
/// Where the registry is (`HANDLER_NPM_REGISTRY` may name a mirror).
const REGISTRY: &str = "https://registry.npmjs.org";
/// The tarball's bound.
const TARBALL_MAX: usize = 128 << 20;
/// The libraries Deno's binary links to (`ldd deno`), besides the loader.
const LIBS: &[&str] = &[
    "libdl.so.2",
    "libgcc_s.so.1",
    "librt.so.1",
    "libpthread.so.0",
    "libm.so.6",
    "libc.so.6",
];
/// The dynamic loader.
const LOADER: &str = "/lib64/ld-linux-x86-64.so.2";
/// Where the host's libraries are.
const LIB_DIRS: &[&str] = &["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"];

/// The image's recipe.
const CONTAINERFILE: &str = "FROM scratch\n\
COPY lib/ /lib/x86_64-linux-gnu/\n\
COPY ld-linux-x86-64.so.2 /lib64/ld-linux-x86-64.so.2\n\
COPY deno /usr/local/bin/deno\n\
COPY version /usr/share/handler/version\n\
ENV PATH=/usr/local/bin\n";

/// Whether `bytes` are what `integrity` (`sha512-<base64>`) names.
pub fn integrity_ok(bytes: &[u8], integrity: &str) -> bool {
    let Some(want) = integrity.strip_prefix("sha512-") else {
        return false;
    };
    let got = base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(bytes));
    handler_contracts::remote::same_secret(want, &got)
}

/// `package/deno` out of the npm tarball.
pub fn deno_from_tarball(tgz: &[u8]) -> Result<Vec<u8>, String> {
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
    for e in ar.entries().map_err(|e| format!("the tarball: {e}"))? {
        let mut e = e.map_err(|e| format!("the tarball: {e}"))?;
        let path = e.path().map_err(|e| e.to_string())?.into_owned();
        if path == Path::new("package/deno") && e.header().entry_type().is_file() {
            let mut out = Vec::new();
            e.by_ref()
                .take(TARBALL_MAX as u64 * 4)
                .read_to_end(&mut out)
                .map_err(|e| e.to_string())?;
            return Ok(out);
        }
    }
    Err("the tarball has no package/deno".into())
}

async fn fetch(app: &AppState, id: &str) -> Result<Vec<u8>, String> {
    let registry = std::env::var("HANDLER_NPM_REGISTRY").unwrap_or_else(|_| REGISTRY.into());
    let url = format!(
        "{}/@deno/linux-x64-glibc/-/linux-x64-glibc-{DENO_VERSION}.tgz",
        registry.trim_end_matches('/')
    );
    log_line(app, id, &format!("fetching {url}"));
    let client =
        crate::daemon::services::skills::import::https_client(app, Duration::from_secs(600))
            .map_err(|e| e.detail.unwrap_or(e.title))?;
    let res = client.get(&url).send().await.map_err(|e| {
        let mut why = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            why = format!("{why}: {c}");
            cause = c.source();
        }
        format!("{url}: {why}")
    })?;
    if !res.status().is_success() {
        return Err(format!("{url}: {}", res.status()));
    }
    let bytes = res.bytes().await.map_err(|e| format!("{url}: {e}"))?;
    if bytes.len() > TARBALL_MAX {
        return Err(format!("{url}: larger than {} MiB", TARBALL_MAX >> 20));
    }
    if !integrity_ok(&bytes, DENO_INTEGRITY) {
        return Err(format!(
            "{url}: not the tarball Handler pinned (its sha512 differs from {DENO_INTEGRITY})"
        ));
    }
    log_line(
        app,
        id,
        &format!(
            "deno {DENO_VERSION}: {} bytes, sha512 as pinned",
            bytes.len()
        ),
    );
    Ok(bytes.to_vec())
}

/// The build context: Deno, the host's libraries it links to, the loader, the version file.
fn context(dir: &Path, deno: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let lib = dir.join("lib");
    fsutil::create_dir_private(&lib).map_err(|e| err(&lib, e))?;
    for name in LIBS {
        let from = LIB_DIRS
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.exists())
            .ok_or_else(|| {
                format!(
                    "{name}: not found in {} (a glibc x86-64 host is needed)",
                    LIB_DIRS.join(", ")
                )
            })?;
        std::fs::copy(&from, lib.join(name)).map_err(|e| err(&from, e))?;
    }
    std::fs::copy(LOADER, dir.join("ld-linux-x86-64.so.2"))
        .map_err(|e| err(Path::new(LOADER), e))?;
    let bin = dir.join("deno");
    std::fs::write(&bin, deno).map_err(|e| err(&bin, e))?;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| err(&bin, e))?;
    std::fs::write(dir.join("version"), format!("deno {DENO_VERSION}\n"))
        .map_err(|e| err(dir, e))?;
    std::fs::write(dir.join("Containerfile"), CONTAINERFILE).map_err(|e| err(dir, e))?;
    // The engine (another user's, in tests) reads the context.
    for p in [dir.to_path_buf(), lib] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| err(&p, e))?;
    }
    Ok(())
}

/// Runs the `app-runtime` build `id`.
pub(super) async fn run(app: &AppState, id: &str, cancel: &Arc<Notify>) -> Outcome {
    if std::env::consts::ARCH != "x86_64" {
        return Outcome::Failed(format!(
            "the mini app runtime is built for x86-64 Linux only (this host: {})",
            std::env::consts::ARCH
        ));
    }
    stage(app, id, &format!("fetch deno {DENO_VERSION}"));
    let tgz = match fetch(app, id).await {
        Ok(b) => b,
        Err(e) => return Outcome::Failed(e),
    };
    let work = app.builds.work_dir(id);
    let ctx = work.join("context");
    let prepared = tokio::task::spawn_blocking(move || {
        let deno = deno_from_tarball(&tgz)?;
        fsutil::create_dir_private(&ctx).map_err(|e| e.to_string())?;
        context(&ctx, &deno).map(|()| ctx)
    })
    .await;
    let ctx = match prepared {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Outcome::Failed(e),
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    if cancelled(cancel) {
        return Outcome::Cancelled;
    }
    stage(app, id, "build app-runtime");
    let args = BuildArgs {
        context: ctx.display().to_string(),
        file: None,
        build_args: Vec::new(),
        no_cache: true,
        ca_bundle: match ca::for_build(app, id) {
            Ok(c) => c,
            Err(e) => return Outcome::Failed(e.to_string()),
        },
    };
    let image = match built(app, id, &args, cancel).await {
        Ok(i) => i,
        Err(o) => return o,
    };
    stage(app, id, "check app-runtime");
    let outcome = match check(app, id, &image).await {
        Err(e) => Outcome::Failed(format!("check app-runtime: {e}")),
        Ok(()) if cancelled(cancel) => Outcome::Cancelled,
        Ok(()) => {
            stage(app, id, "switch");
            match switch(app, id, IMAGE, &image, &verbs(app)).await {
                Ok(()) => {
                    let _ = app.builds.update(id, |b| {
                        b.versions.insert("deno".into(), DENO_VERSION.into());
                    });
                    Outcome::Succeeded
                }
                Err(e) => Outcome::Failed(e),
            }
        }
    };
    if !matches!(outcome, Outcome::Succeeded) {
        remove(app, id, &image).await;
    }
    outcome
}

/// The check: a strict sandbox of `image` with no network runs `deno eval` of a sum; its output
/// must be the sum.
async fn check(app: &AppState, id: &str, image: &str) -> Result<(), String> {
    let mut spec = handler_sandbox::app::app_sandbox_spec(&handler_sandbox::app::AppSandboxInput {
        name: format!("handler-check-{}", id.replace('_', "-")),
        app: "check".into(),
        version: DENO_VERSION.into(),
        image: image.to_string(),
        version_dir: empty_dir(app, id, "app")?,
        data_dir: empty_dir(app, id, "data")?,
        run_dir: empty_dir(app, id, "run")?,
        entry: "server/main.ts".into(),
        egress: Vec::new(),
        secrets: Default::default(),
        resources: None,
        files: Vec::new(),
        notify_dir: None,
        test: false,
    });
    spec.argv = vec![
        "deno".into(),
        "eval".into(),
        "console.log('handler-app-runtime', 20 + 22)".into(),
    ];
    let say = |l: &str| log_line(app, id, &format!("check app-runtime: {l}"));
    let out = super::addon_job::probe(app, &spec, &say).await?;
    if out.trim() == "handler-app-runtime 42" {
        log_line(app, id, "check app-runtime: deno eval answered 42: passed");
        Ok(())
    } else {
        Err(format!(
            "deno eval printed {:?}, not \"handler-app-runtime 42\"",
            out.trim()
        ))
    }
}

fn empty_dir(app: &AppState, id: &str, name: &str) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let d = app.builds.work_dir(id).join("check").join(name);
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    for p in [d.parent().unwrap_or(&d), &d] {
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    }
    Ok(d.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_integrity_is_checked() {
        let good = b"deno";
        let sri = format!(
            "sha512-{}",
            base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(good))
        );
        assert!(integrity_ok(good, &sri));
        assert!(!integrity_ok(b"other", &sri));
        assert!(!integrity_ok(good, "sha1-abc"));
        assert!(DENO_INTEGRITY.starts_with("sha512-"));
    }

    #[test]
    fn deno_is_taken_from_the_tarball_only_as_package_deno() {
        let mut tgz = Vec::new();
        {
            let gz = flate2::write::GzEncoder::new(&mut tgz, flate2::Compression::fast());
            let mut b = tar::Builder::new(gz);
            for (path, body) in [
                ("package/README.md", &b"hi"[..]),
                ("package/deno", &b"\x7fELF"[..]),
            ] {
                let mut h = tar::Header::new_gnu();
                h.set_size(body.len() as u64);
                h.set_mode(0o755);
                h.set_cksum();
                b.append_data(&mut h, path, body).unwrap();
            }
            b.into_inner().unwrap().finish().unwrap();
        }
        assert_eq!(deno_from_tarball(&tgz).unwrap(), b"\x7fELF");
        assert!(deno_from_tarball(b"not gzip").is_err());
    }
}
