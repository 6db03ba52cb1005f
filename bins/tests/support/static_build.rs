//! Shared by the container tests: static builds of the workspace's binaries for `FROM scratch`
//! and busybox containers (glibc with `+crt-static`, given with `--target` so build scripts and
//! proc macros stay dynamic), each built once per test run into its own folder of this build's
//! target directory. `$HANDLER_EGRESS_PROXY_BIN` / `$HANDLER_EGRESS_PROBE_BIN` skip a build.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// This build's target directory ($CARGO_TARGET_DIR, else the one holding the test binary).
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let exe = std::env::current_exe().unwrap();
            exe.ancestors().nth(3).unwrap().to_path_buf()
        })
}

fn is_static(p: &Path) -> bool {
    let out = Command::new("file").arg(p).output();
    match out {
        Ok(o) => !String::from_utf8_lossy(&o.stdout).contains("dynamically linked"),
        Err(_) => true,
    }
}

/// The static egress proxy: `$HANDLER_EGRESS_PROXY_BIN`, else built once by
/// fixtures/egress/build-static-proxy.sh into `<target>/static-proxy`.
pub fn static_proxy() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(b) = std::env::var("HANDLER_EGRESS_PROXY_BIN") {
            return PathBuf::from(b);
        }
        let ws = workspace();
        let out = Command::new("sh")
            .arg(ws.join("fixtures/egress/build-static-proxy.sh"))
            .arg(&ws)
            .env("CARGO_TARGET_DIR", target_dir().join("static-proxy"))
            .stderr(Stdio::inherit())
            .output()
            .expect("sh runs");
        assert!(out.status.success(), "building the static proxy failed");
        let bin = PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .expect("build-static-proxy.sh prints the binary")
                .trim(),
        );
        assert!(is_static(&bin), "{} is not static", bin.display());
        bin
    })
    .clone()
}

/// `bin` of the workspace package at `manifest` (relative to the workspace), built static in
/// release into `<target>/<dir>`.
pub fn static_bin(manifest: &str, bin: &str, dir: &str) -> PathBuf {
    let target = target_dir().join(dir);
    let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--release",
            "--target",
            "x86_64-unknown-linux-gnu",
            "--bin",
            bin,
        ])
        .arg("--manifest-path")
        .arg(workspace().join(manifest))
        .arg("--target-dir")
        .arg(&target)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .expect("cargo runs");
    assert!(st.success(), "building {bin} static failed");
    let p = target.join("x86_64-unknown-linux-gnu/release").join(bin);
    assert!(is_static(&p), "{} is not static", p.display());
    p
}

/// The egress probe (fixtures/egress-probe), static: `$HANDLER_EGRESS_PROBE_BIN`, else built once.
pub fn static_probe() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var("HANDLER_EGRESS_PROBE_BIN") {
        Ok(b) => PathBuf::from(b),
        Err(_) => static_bin(
            "fixtures/egress-probe/Cargo.toml",
            "egress-probe",
            "egress-probe-static",
        ),
    })
    .clone()
}
