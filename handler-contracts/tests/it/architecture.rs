//! Checks the workspace's shape (docs/ARCHITECTURE.md): pure crates depend only on allowed
//! crates and their library code does no I/O (no file system, processes, sockets, clock or
//! ambient randomness).
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test that reads fixtures: the I/O is outside the pure library"
)]

use std::path::{Path, PathBuf};

const PURE_CRATES: [&str; 4] = [
    "handler-contracts",
    "handler-harness",
    "handler-sandbox",
    "handler-policy",
];

/// Crates a pure crate may depend on (normal dependencies).
const ALLOWED_DEPS: [&str; 21] = [
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
    // gitignore matching fed bytes (F.8); its file-reading constructors are refused by
    // handler-contracts/clippy.toml.
    "gix-ignore",
    // JSON Schema (D.18 interfaces), default features off: no retriever, so no file or
    // network I/O; a remote `$ref` is refused (decision 0113).
    "jsonschema",
    // devcontainer.json's JSON with comments (decision 0161): parses a string it is given.
    "jsonc-parser",
    // The sandbox executable's verbs as one type (handler-sandbox::verbs): it parses words it
    // is given (`try_parse_from`); reading the process's argv stays in the binaries.
    "clap",
    // Remote control's envelopes and pairing (D.7, docs/remote.md): RustCrypto, fed keys,
    // nonces and times by the caller (no OsRng).
    "x25519-dalek",
    "aes-gcm",
    "hkdf",
    "hmac",
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
/// The git reader child (`gitread`, F.8) is one too: the daemon only spawns it.
const HALVES: [(&str, &[&str]); 5] = [
    (
        "runtime",
        &["crate::daemon", "crate::client", "crate::gitread", "axum"],
    ),
    (
        "daemon",
        &["crate::runtime", "crate::client", "crate::gitread"],
    ),
    (
        "client",
        &["crate::daemon", "crate::runtime", "crate::gitread", "axum"],
    ),
    (
        "gateway",
        &[
            "crate::daemon",
            "crate::runtime",
            "crate::client",
            "crate::gitread",
        ],
    ),
    (
        "gitread",
        &[
            "crate::daemon",
            "crate::runtime",
            "crate::client",
            "axum",
            "tokio",
        ],
    ),
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

/// What each pure crate's `clippy.toml` must refuse, so that clippy (not only the text search
/// above) stops I/O in a pure crate (decision 0043).
const DISALLOWED_BY_CLIPPY: [&str; 16] = [
    "std::fs::read",
    "std::fs::read_to_string",
    "std::fs::write",
    "std::fs::File",
    "std::process::Command",
    "std::net::TcpStream",
    "std::net::TcpListener",
    "std::net::UdpSocket",
    "std::time::SystemTime::now",
    "std::time::Instant::now",
    "std::env::var",
    "std::env::var_os",
    "std::env::vars",
    "rand::thread_rng",
    "rand::rng",
    "rand::random",
];

#[test]
fn every_pure_crate_has_a_clippy_toml_refusing_io() {
    for krate in PURE_CRATES {
        let path = workspace().join(krate).join("clippy.toml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{krate}/clippy.toml (decision 0043): {e}"));
        let doc: toml::Table = toml::from_str(&text).unwrap();
        let mut paths = Vec::new();
        for key in ["disallowed-methods", "disallowed-types"] {
            for entry in doc
                .get(key)
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
            {
                let p = entry.get("path").and_then(|p| p.as_str()).unwrap_or("");
                let reason = entry.get("reason").and_then(|r| r.as_str()).unwrap_or("");
                assert!(!reason.is_empty(), "{krate}/clippy.toml: {p} has no reason");
                paths.push(p.to_string());
            }
        }
        for want in DISALLOWED_BY_CLIPPY {
            assert!(
                paths.iter().any(|p| p == want),
                "{krate}/clippy.toml does not refuse {want}"
            );
        }
    }
}

/// The pure step of a launch inside handler-core (docs/decisions/0052): `daemon/launch/resolve.rs`
/// (and its tests) does what the pure crates do — no I/O, no clock, no ambient randomness (the
/// phantoms' source is an argument) — and names nothing of handler-core, whose other modules
/// do I/O.
#[test]
fn the_launchs_resolve_is_pure() {
    let launch = workspace().join("handler-core/src/daemon/launch");
    let mut files = vec![launch.join("resolve.rs")];
    if launch.join("resolve").is_dir() {
        rust_files(&launch.join("resolve"), false, &mut files);
    }
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let own = f.file_name().is_some_and(|n| n == "resolve.rs");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let mut banned: Vec<&str> = FORBIDDEN.to_vec();
            banned.extend(["rand::", "std::env", "std::time"]);
            if own {
                banned.extend(["crate::", "super::"]);
            }
            for bad in banned {
                assert!(
                    !code.contains(bad),
                    "{}:{}: `{bad}` in the launch's pure resolve (gather does the I/O; decision 0052)",
                    f.display(),
                    n + 1
                );
            }
        }
    }
}

/// The daemon's layers, top to bottom (docs/ARCHITECTURE.md, "the daemon"): a file may name
/// its own layer and the layers below it, never one above. A file's layer is its folder; the
/// files directly in `daemon/` are placed one by one below.
const DAEMON_LAYERS: [&str; 7] = [
    "server", "api", "services", "launch", "state", "store", "low",
];

/// The layer of a module of the daemon, from its path under `crate::daemon` (`["api",
/// "routes"]`). None for a name that is not a module of the daemon (a re-export of `mod.rs`:
/// code inside the daemon names the module, not the re-export).
fn daemon_layer(segments: &[&str]) -> Option<&'static str> {
    Some(match segments {
        ["server", ..] => "server",
        ["api", ..] => "api",
        ["services", ..] => "services",
        // The process driver imports nothing of the daemon: the state holds it.
        ["launch", "launcher", ..] => "low",
        ["launch" | "prepare" | "caches", ..] => "launch",
        ["state", ..] => "state",
        ["store", ..] => "store",
        [
            "config" | "problem" | "fsutil" | "agentfs" | "skills" | "secretref" | "memo",
            ..,
        ] => "low",
        _ => return None,
    })
}

fn rank(layer: &str) -> usize {
    DAEMON_LAYERS.iter().position(|l| *l == layer).unwrap()
}

/// The module paths (under `crate::daemon`) a text names: `crate::daemon::a::b` and each
/// member of `crate::daemon::{a::b, c}`.
fn daemon_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let ident = |s: &str| -> Vec<String> {
        let mut segs = Vec::new();
        let mut rest = s;
        loop {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            segs.push(rest[..end].to_string());
            match rest[end..].strip_prefix("::") {
                Some(r) if r.starts_with(|c: char| c.is_alphanumeric() || c == '_') => rest = r,
                _ => break,
            }
        }
        segs
    };
    for (i, _) in code.match_indices("crate::daemon::") {
        let after = &code[i + "crate::daemon::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        out.push(ident(group[start..j].trim()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(group[start..j].trim()));
                        start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(after));
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The layer of a file under `handler-core/src/daemon` (None for `mod.rs`, the module list).
fn daemon_file_layer(rel: &Path) -> Option<&'static str> {
    let parts: Vec<&str> = rel
        .iter()
        .map(|p| p.to_str().unwrap().trim_end_matches(".rs"))
        .collect();
    if parts == ["mod"] {
        return None;
    }
    let layer = daemon_layer(&parts);
    assert!(
        layer.is_some(),
        "handler-core/src/daemon/{}: a file outside the layers (add it to a layer's folder, or to daemon_layer in tests/architecture.rs)",
        rel.display()
    );
    layer
}

/// The daemon's code with comments removed, and `super::` read as `crate::daemon::` in the
/// files directly in `daemon/` (in a folder, `super::` is the folder: the same layer).
fn daemon_code(rel: &Path, text: &str) -> String {
    let top = rel.components().count() == 1;
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .map(|l| {
            if top {
                l.replace("super::", "crate::daemon::")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_daemons_layers_only_call_downward() {
    let root = workspace().join("handler-core/src/daemon");
    let mut files = Vec::new();
    rust_files(&root, false, &mut files);
    assert!(files.len() > 10, "handler-core/src/daemon has no source");
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&root).unwrap().to_path_buf();
        let Some(layer) = daemon_file_layer(&rel) else {
            continue;
        };
        let code = daemon_code(&rel, &std::fs::read_to_string(&f).unwrap());
        let file = format!("handler-core/src/daemon/{}", rel.display());
        if code.contains("super::super::") {
            bad.push(format!(
                "{file}: `super::super::` (name the module from `crate::daemon::`)"
            ));
        }
        for path in daemon_paths(&code) {
            let segs: Vec<&str> = path.iter().map(String::as_str).collect();
            let shown = path.join("::");
            match daemon_layer(&segs) {
                None => bad.push(format!(
                    "{file}: `crate::daemon::{shown}` is not a module of a layer (name the module, not a re-export of daemon/mod.rs)"
                )),
                Some(target) if rank(target) < rank(layer) => bad.push(format!(
                    "{file}: the {layer} layer names `crate::daemon::{shown}` of the {target} layer above it"
                )),
                Some(_) => {}
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the daemon's layers call only downward ({}; docs/ARCHITECTURE.md):\n{}",
        DAEMON_LAYERS.join(" > "),
        bad.join("\n")
    );
}

#[test]
fn the_daemon_layer_check_reads_paths_and_groups() {
    let code = "use crate::daemon::state::AppState;\nuse crate::daemon::{api::auth, store::{a, b}, problem};\nlet x = crate::daemon::launch::launcher::stop();";
    let got: Vec<String> = daemon_paths(code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        [
            "state::AppState",
            "api::auth",
            "store",
            "problem",
            "launch::launcher::stop"
        ]
    );
    assert_eq!(daemon_layer(&["launch", "launcher"]), Some("low"));
    assert_eq!(daemon_layer(&["launch", "gather"]), Some("launch"));
    assert_eq!(daemon_layer(&["AppState"]), None);
}

/// Issue 28: no function over 80 lines without a reason. Clippy's `too_many_lines` (warned
/// workspace-wide, threshold 80 in every clippy.toml, CI denies warnings) finds them; each one
/// kept says why with `reason = "…"`, never a bare allow. Test crates allow it at their root.
#[test]
fn no_long_function_without_a_reason() {
    let root = workspace();
    let ws: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    assert_eq!(
        ws["workspace"]["lints"]["clippy"]["too_many_lines"].as_str(),
        Some("warn"),
        "Cargo.toml: [workspace.lints.clippy] too_many_lines = \"warn\""
    );
    let mut tomls = vec![root.join("clippy.toml")];
    tomls.extend(PURE_CRATES.iter().map(|k| root.join(k).join("clippy.toml")));
    for t in tomls {
        let doc: toml::Table = toml::from_str(&std::fs::read_to_string(&t).unwrap()).unwrap();
        assert_eq!(
            doc.get("too-many-lines-threshold")
                .and_then(toml::Value::as_integer),
            Some(80),
            "{}: too-many-lines-threshold = 80",
            t.display()
        );
    }
    let mut files = Vec::new();
    for dir in [
        "bins",
        "fixtures",
        "handler-core",
        "handler-contracts",
        "handler-harness",
        "handler-policy",
        "handler-sandbox",
    ] {
        rust_files(&root.join(dir), false, &mut files);
    }
    for f in files {
        if f.components().any(|c| c.as_os_str() == "target") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for (i, _) in flat.match_indices("clippy::too_many_lines") {
            // An attribute's lint (after `allow(`/`expect(`), not a mention in text.
            if !flat[..i].trim_end().ends_with('(') {
                continue;
            }
            let end = flat[i..].find(']').map_or(flat.len(), |e| i + e);
            assert!(
                flat[i..end].contains("reason ="),
                "{}: a too_many_lines allowance without `reason = \"…\"`",
                f.display()
            );
        }
    }
}
