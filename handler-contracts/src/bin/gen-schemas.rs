//! Writes `schemas/*.schema.json` from the contract types; `--check` only compares and exits 1
//! on drift, printing the difference.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a binary that writes schemas/: the I/O is outside the pure library"
)]

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = std::env::args().any(|a| a == "--check");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../schemas");
    let mut drift = false;
    let expected: Vec<_> = handler_contracts::schema::all_schemas()
        .into_iter()
        .map(|(name, s)| {
            (
                format!("{name}.schema.json"),
                handler_contracts::schema::schema_file_text(&s),
            )
        })
        .collect();
    for (file, text) in &expected {
        let path = dir.join(file);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current != *text {
            drift = true;
            if check {
                eprintln!("schemas/{file} is out of date");
            } else if let Err(e) = std::fs::write(&path, text) {
                eprintln!("cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".schema.json") && !expected.iter().any(|(f, _)| *f == name) {
            drift = true;
            if check {
                eprintln!("schemas/{name} belongs to no type");
            } else {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    if check && drift {
        eprintln!("run: cargo run -p handler-contracts --bin gen-schemas");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
