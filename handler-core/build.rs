//! Embeds the platform data (decision 0118): every file of `handler-harness/data` and
//! `handler-core/data` (hidden ones left out), with its executable bit, into
//! `$OUT_DIR/platform_data.rs`, and their digest. handlerd writes them out at start under
//! `<data>/platform/<digest>/`, so an installed handlerd needs no source tree. It also reruns
//! when the web UI's built files change: `include_dir!` embeds `web/dist/` (decision 0106), and
//! stable Rust does not track the files a macro reads.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

const TREES: &[&str] = &["handler-harness/data", "handler-core/data"];

fn walk(root: &Path, rel: &str, out: &mut Vec<(String, PathBuf, bool)>) {
    let Ok(rd) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let child = format!("{rel}/{name}");
        let Ok(meta) = std::fs::metadata(e.path()) else {
            continue;
        };
        if meta.is_dir() {
            walk(root, &child, out);
        } else if meta.is_file() {
            out.push((child, e.path(), meta.permissions().mode() & 0o111 != 0));
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let repo = manifest.parent().unwrap().to_path_buf();
    let mut files = Vec::new();
    if std::env::var_os("CARGO_FEATURE_DAEMON").is_some() {
        for t in TREES {
            println!("cargo:rerun-if-changed={}", repo.join(t).display());
            walk(&repo, t, &mut files);
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=web/dist");
    let mut h = Sha256::new();
    let mut code = String::from(
        "/// The platform data's files: path (from the repository's top), bytes, executable.\n\
         pub(crate) static PLATFORM_FILES: &[(&str, &[u8], bool)] = &[\n",
    );
    for (rel, abs, exec) in &files {
        let bytes = std::fs::read(abs).unwrap();
        h.update(rel.as_bytes());
        h.update([0, u8::from(*exec)]);
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(&bytes);
        writeln!(
            code,
            "    ({rel:?}, include_bytes!({:?}), {exec}),",
            abs.display().to_string()
        )
        .unwrap();
    }
    let digest: String = h
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    writeln!(code, "];\n/// Their digest (16 hex digits): the folder they are written to.\npub(crate) const PLATFORM_DIGEST: &str = {digest:?};").unwrap();
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("platform_data.rs");
    std::fs::write(out, code).unwrap();
}
