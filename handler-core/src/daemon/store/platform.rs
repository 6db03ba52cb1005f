//! The platform data embedded in the binary (decision 0118: provider templates, built-in
//! addons, the harnesses' and the toolbox's files) written out once per build under
//! `<data>/platform/<digest>/`, with their executable bits, so an installed handlerd finds them
//! without a source tree. Written into a staging folder and renamed: a folder there is whole.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use crate::daemon::config::{DaemonConfig, PLATFORM_FILES};

/// The marker of a complete folder.
const COMPLETE: &str = ".complete";

fn make_dir(d: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(d)
}

/// Writes the platform data to `config.platform_dir` unless it is already there.
pub fn install(config: &DaemonConfig) -> std::io::Result<()> {
    let dir = &config.platform_dir;
    if dir.join(COMPLETE).is_file() {
        return Ok(());
    }
    let parent = dir
        .parent()
        .ok_or_else(|| std::io::Error::other("the platform folder has no parent"))?;
    make_dir(parent)?;
    let staging = tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(parent)?;
    for (rel, bytes, exec) in PLATFORM_FILES {
        let p = staging.path().join(rel);
        if let Some(d) = p.parent() {
            make_dir(d)?;
        }
        std::fs::write(&p, bytes)?;
        let mode = if *exec { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
    }
    std::fs::write(staging.path().join(COMPLETE), b"")?;
    std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o755))?;
    if dir.exists() {
        // An incomplete folder a crash left: replaced.
        std::fs::remove_dir_all(dir)?;
    }
    match std::fs::rename(staging.path(), dir) {
        Ok(()) => Ok(()),
        // Another handlerd wrote it meanwhile.
        Err(_) if dir.join(COMPLETE).is_file() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_and_executables_are_written_once() {
        let h = tempfile::tempdir().unwrap();
        let c = DaemonConfig::with_home(h.path());
        install(&c).unwrap();
        assert!(c.templates_dir.join("openrouter.toml").is_file(), "{c:?}");
        let env = c
            .platform_dir
            .join("handler-harness/data/bin/handler-sandbox-env");
        let mode = std::fs::metadata(&env).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "the executable bit is kept");
        std::fs::write(c.templates_dir.join("mine.toml"), "x").unwrap();
        install(&c).unwrap();
        assert!(
            c.templates_dir.join("mine.toml").is_file(),
            "a complete folder is kept"
        );
    }
}
