//! Checks the workspace's shape (docs/ARCHITECTURE.md): pure crates depend only on allowed
//! crates and their library code does no I/O (no file system, processes, sockets, clock or
//! ambient randomness).

use std::path::{Path, PathBuf};

const PURE_CRATES: [&str; 4] = [
    "handler-contracts",
    "handler-harness",
    "handler-sandbox",
    "handler-policy",
];

/// Crates a pure crate may depend on (normal dependencies).
const ALLOWED_DEPS: [&str; 13] = [
    "handler-contracts",
    "serde",
    "serde_json",
    "serde_path_to_error",
    "toml",
    "thiserror",
    "schemars",
    "semver",
    "base64",
    "memchr",
    "sha2",
    "hex",
    "bytes",
];

/// Text that means I/O in library code.
const FORBIDDEN: [&str; 14] = [
    "std::fs",
    "std::process",
    "std::net::TcpStream",
    "std::net::TcpListener",
    "std::net::UdpSocket",
    "std::os::unix::net",
    "std::env::var",
    "std::io::stdin",
    "std::io::stdout",
    "SystemTime::now",
    "Instant::now",
    "thread_rng",
    "tokio",
    "OsRng",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn rust_files(dir: &Path, skip_bins: bool, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            // Binaries are thin I/O shells around the library, not the library.
            if skip_bins && p.file_name().is_some_and(|n| n == "bin") {
                continue;
            }
            rust_files(&p, skip_bins, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn pure_crates_depend_only_on_pure_crates() {
    for krate in PURE_CRATES {
        let manifest = workspace().join(krate).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let doc: toml::Table = toml::from_str(&text).unwrap();
        let deps = doc
            .get("dependencies")
            .and_then(|d| d.as_table())
            .cloned()
            .unwrap_or_default();
        for name in deps.keys() {
            assert!(
                ALLOWED_DEPS.contains(&name.as_str()),
                "{krate} is pure (docs/ARCHITECTURE.md) but depends on {name}: move the I/O to handler-core"
            );
        }
    }
}

#[test]
fn pure_library_code_does_no_io() {
    for krate in PURE_CRATES {
        let mut files = Vec::new();
        rust_files(&workspace().join(krate).join("src"), true, &mut files);
        assert!(!files.is_empty(), "{krate} has no source");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for bad in FORBIDDEN {
                    assert!(
                        !code.contains(bad),
                        "{}:{}: `{bad}` in a pure crate (no I/O, no clock, no ambient randomness)",
                        f.display(),
                        n + 1
                    );
                }
            }
        }
    }
}

#[test]
fn every_module_says_what_it_is_for() {
    let mut files = Vec::new();
    for krate in [
        "handler-contracts",
        "handler-harness",
        "handler-sandbox",
        "handler-policy",
        "handler-core",
        "bins",
    ] {
        rust_files(&workspace().join(krate).join("src"), false, &mut files);
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        assert!(
            first.starts_with("//!"),
            "{} does not start with a `//!` line",
            f.display()
        );
    }
}

/// What each half of handler-core may not name (docs/ARCHITECTURE.md, "handler-core"): the
/// runtime and the daemon meet only as processes (fd 3, CLI verbs), the client only over HTTP.
const HALVES: [(&str, &[&str]); 3] = [
    ("runtime", &["crate::daemon", "crate::client", "axum"]),
    ("daemon", &["crate::runtime", "crate::client"]),
    ("client", &["crate::daemon", "crate::runtime", "axum"]),
];

#[test]
fn the_halves_of_handler_core_never_import_each_other() {
    let src = workspace().join("handler-core/src");
    for (half, banned) in HALVES {
        let mut files = Vec::new();
        rust_files(&src.join(half), false, &mut files);
        assert!(!files.is_empty(), "handler-core/src/{half} has no source");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for bad in banned {
                    assert!(
                        !code.contains(bad),
                        "{}:{}: the {half} half of handler-core names `{bad}` (docs/ARCHITECTURE.md: the halves meet only as processes)",
                        f.display(),
                        n + 1
                    );
                }
            }
        }
    }
}
