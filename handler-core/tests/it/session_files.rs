//! F.8 on real folders (temp dirs, no mocks): links and paths that leave the folder refused, a
//! FIFO never blocks a listing or a read, ignored files and `.git` stay out of the baseline and
//! the changes, beyond the limit only HEAD is recorded, a restart keeps the baseline, and reveal
//! answers 409 when no desktop answers. The git reader's half is in handler-bins'
//! `it::session_files_git` (it needs the `handler-git-read` binary).

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use handler_contracts::files::{ChangeKind, EntryKind, MAX_BASELINE_FILES};
use handler_core::daemon::problem::ApiError;
use handler_core::daemon::services::session_files::{
    FilesError, GitReader, changes, list_all, read_file, record_baseline, reveal,
};

/// Nothing here is a repository: a reader that does not exist is never asked.
fn no_git() -> GitReader {
    GitReader::at("/nonexistent/handler-git-read")
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A session's folder and its own folder (where baseline.json goes).
fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
    (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap())
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(5), f)
        .await
        .expect("it blocked")
}

fn status(e: FilesError) -> (u16, String) {
    let msg = e.to_string();
    (ApiError::from(e).status.as_u16(), msg)
}

#[tokio::test]
async fn links_and_paths_that_leave_the_folder_are_refused() {
    let (folder, _session) = dirs();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), ".ssh/id_ed25519", "PRIVATE KEY");
    let root = folder.path();
    write(root, "src/main.rs", "fn main() {}\n");
    symlink(outside.path().join(".ssh/id_ed25519"), root.join("notes")).unwrap();
    symlink(outside.path().join(".ssh"), root.join("keys")).unwrap();
    symlink(root.join("src"), root.join("src-link")).unwrap();

    for (path, code, says) in [
        ("notes", 400, "is a link"),
        ("keys/id_ed25519", 400, "goes through a link"),
        ("src-link/main.rs", 400, "goes through a link"),
        ("../../etc/passwd", 400, ". or .."),
        ("src/../notes", 400, ". or .."),
        ("/etc/passwd", 400, "absolute"),
        (".git/config", 400, ".git"),
        ("src", 400, "not a regular file"),
        ("", 400, "not a regular file"),
        ("missing.txt", 404, "does not exist"),
        ("src/main.rs/x", 404, "does not exist"),
    ] {
        let e = read_file(root, path, None).await.unwrap_err();
        let (got, msg) = status(e);
        assert_eq!(got, code, "{path}: {msg}");
        assert!(msg.contains(says), "{path}: {msg}");
        assert!(!msg.contains("PRIVATE"), "{msg}");
    }
    let ok = read_file(root, "src/main.rs", None).await.unwrap();
    assert_eq!(ok.content.unwrap().text.as_deref(), Some("fn main() {}\n"));

    // Listed as links (their own size and time), never followed.
    let all = list_all(root, None, MAX_BASELINE_FILES).await.unwrap();
    let kinds: Vec<(&str, EntryKind)> = all
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.stamp.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("keys", EntryKind::Link),
            ("notes", EntryKind::Link),
            ("src", EntryKind::Dir),
            ("src-link", EntryKind::Link),
            ("src/main.rs", EntryKind::File),
        ]
    );

    // reveal checks the path like a read: no link on the way.
    let (got, msg) = status(reveal(root, "keys/id_ed25519").await.unwrap_err());
    assert_eq!(
        (got, msg.contains("goes through a link")),
        (400, true),
        "{msg}"
    );
    let (got, _) = status(reveal(root, "../x").await.unwrap_err());
    assert_eq!(got, 400);
    let (got, _) = status(reveal(root, "nothing/here").await.unwrap_err());
    assert_eq!(got, 404);
}

#[tokio::test]
async fn a_fifo_in_the_folder_blocks_neither_a_listing_nor_a_read() {
    let (folder, session) = dirs();
    let root = folder.path();
    write(root, "a.txt", "a\n");
    nix::unistd::mkfifo(&root.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    nix::unistd::mkfifo(&root.join("sub/.gitignore"), nix::sys::stat::Mode::S_IRWXU).unwrap();

    let base = within(record_baseline(
        root,
        session.path(),
        &no_git(),
        "t0".into(),
        100,
    ))
    .await
    .unwrap();
    assert_eq!(base.files.keys().collect::<Vec<_>>(), ["a.txt"]);
    let all = within(list_all(root, None, 100)).await.unwrap();
    assert!(all.entries.iter().all(|e| e.path != "pipe"));
    let e = within(read_file(root, "pipe", Some((session.path(), &no_git()))))
        .await
        .unwrap_err();
    let (got, msg) = status(e);
    assert_eq!(got, 400, "{msg}");
    assert!(msg.contains("not a regular file"), "{msg}");
    let c = within(changes(root, session.path(), 100)).await.unwrap();
    assert!(c.changes.is_empty(), "{c:?}");
}

#[tokio::test]
async fn ignored_files_and_git_stay_out_of_the_baseline_and_the_changes() {
    let (folder, session) = dirs();
    let root = folder.path();
    write(root, ".gitignore", "target/\n*.log\n!keep.log\n");
    write(root, "src/.gitignore", "generated.rs\n");
    write(root, "src/lib.rs", "pub fn a() {}\n");
    write(root, "src/generated.rs", "// generated\n");
    write(root, "target/debug/app", "ELF");
    write(root, "run.log", "log\n");
    write(root, "keep.log", "keep\n");
    write(root, "vendor/dep/.git/config", "[core]\n");
    write(root, "vendor/dep/lib.rs", "\n");

    let base = record_baseline(root, session.path(), &no_git(), "t0".into(), 1000)
        .await
        .unwrap();
    let files: Vec<&str> = base.files.keys().map(String::as_str).collect();
    assert_eq!(
        files,
        [
            ".gitignore",
            "keep.log",
            "src/.gitignore",
            "src/lib.rs",
            "vendor/dep/lib.rs"
        ]
    );
    assert!(base.git_head.is_none(), "no .git folder: not a repository");
    let on_disk = std::fs::read_to_string(session.path().join("baseline.json")).unwrap();
    assert!(on_disk.contains("\"recordedAt\": \"t0\""), "{on_disk}");

    // The agent works: edits, adds, deletes, builds (ignored), adds a now-ignored folder.
    std::thread::sleep(Duration::from_millis(20));
    write(root, "src/lib.rs", "pub fn a() {}\npub fn b() {}\n");
    write(root, "src/new.rs", "\n");
    std::fs::remove_file(root.join("keep.log")).unwrap();
    write(root, "target/release/app", "ELF");
    write(root, "debug.log", "x\n");
    write(root, "src/generated.rs", "// again\n");
    write(root, ".gitignore", "target/\n*.log\n!keep.log\nvendor/\n");

    let c = changes(root, session.path(), 1000).await.unwrap();
    let got: Vec<(&str, ChangeKind)> = c
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.change))
        .collect();
    assert_eq!(
        got,
        [
            (".gitignore", ChangeKind::Modified),
            ("keep.log", ChangeKind::Deleted),
            ("src/lib.rs", ChangeKind::Modified),
            ("src/new.rs", ChangeKind::Added),
        ],
        "vendor/ is ignored now: not shown as deleted"
    );

    // A deleted file is still shown (404 only for what never was); an ignored one can be read.
    let gone = read_file(root, "keep.log", Some((session.path(), &no_git())))
        .await
        .unwrap();
    assert_eq!(gone.change, Some(ChangeKind::Deleted));
    assert!(gone.content.is_none() && gone.earlier.is_none());
    let lib = read_file(root, "src/lib.rs", Some((session.path(), &no_git())))
        .await
        .unwrap();
    assert_eq!(lib.change, Some(ChangeKind::Modified));
    assert!(
        lib.earlier.is_none(),
        "without git no earlier version is kept"
    );
    assert!(read_file(root, "run.log", None).await.is_ok());
}

#[tokio::test]
async fn a_restart_keeps_the_baseline() {
    let (folder, session) = dirs();
    let root = folder.path();
    write(root, "a.txt", "1\n");
    let first = record_baseline(root, session.path(), &no_git(), "t0".into(), 10)
        .await
        .unwrap();
    write(root, "b.txt", "2\n");
    let again = record_baseline(root, session.path(), &no_git(), "t1".into(), 10)
        .await
        .unwrap();
    assert_eq!(first, again);
    let c = changes(root, session.path(), 10).await.unwrap();
    assert_eq!(c.changes.len(), 1);
    assert_eq!(c.changes[0].path, "b.txt");
}

/// Issue 14, item 6: the changes answer warns about a nested `.git` made during the session
/// (a folder or a gitfile; never entered) and a changed `.gitmodules`, not one there before.
#[tokio::test]
async fn a_nested_git_and_a_gitmodules_change_are_warned_about() {
    let (folder, session) = dirs();
    let root = folder.path();
    write(root, "old/.git/HEAD", "ref: refs/heads/main\n");
    write(root, ".gitmodules", "");
    record_baseline(root, session.path(), &no_git(), "t0".into(), 100)
        .await
        .unwrap();
    let c = changes(root, session.path(), 100).await.unwrap();
    assert!(c.git_warnings.is_empty(), "{:?}", c.git_warnings);
    write(root, "vendor/lib/.git/hooks/post-checkout", "#!/bin/sh\n");
    write(root, "sub/.git", "gitdir: /tmp/elsewhere\n");
    write(root, ".gitmodules", "[submodule \"x\"]\n\turl = ../x\n");
    let c = changes(root, session.path(), 100).await.unwrap();
    let got: Vec<(&str, &str)> = c
        .git_warnings
        .iter()
        .map(|w| (w.path.as_str(), w.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                ".gitmodules",
                ".gitmodules: .gitmodules changed; review before running git here"
            ),
            (
                "sub/.git",
                "sub/.git: a nested .git the session made; review before running git here"
            ),
            (
                "vendor/lib/.git",
                "vendor/lib/.git: a nested .git the session made; review before running git here"
            ),
        ]
    );
    // Never entered: nothing under a nested .git is a change.
    assert!(
        c.changes.iter().all(|x| !x.path.contains(".git/")),
        "{:?}",
        c.changes
    );
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["gitWarnings"][1]["kind"], "nested_git");
}

#[tokio::test]
async fn beyond_the_limit_only_head_is_recorded() {
    let (folder, session) = dirs();
    let root = folder.path();
    for i in 0..12 {
        write(root, &format!("d{}/f{i}", i % 3), "x");
    }
    let base = record_baseline(root, session.path(), &no_git(), "t0".into(), 10)
        .await
        .unwrap();
    assert!(base.not_followed && base.files.is_empty(), "{base:?}");
    let c = changes(root, session.path(), 10).await.unwrap();
    assert!(c.not_followed && c.changes.is_empty());
    let all = list_all(root, None, 10).await.unwrap();
    assert!(all.not_followed);
    assert!(
        all.entries
            .iter()
            .filter(|e| e.stamp.kind == EntryKind::File)
            .count()
            <= 10
    );
}

#[tokio::test]
async fn changes_before_a_start_is_409() {
    let (folder, session) = dirs();
    let (got, msg) = status(
        changes(folder.path(), session.path(), 10)
            .await
            .unwrap_err(),
    );
    assert_eq!(got, 409, "{msg}");
}

#[tokio::test]
async fn reveal_without_a_desktop_is_409() {
    if ["DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        eprintln!("a desktop session is here: reveal would show it; skipped");
        return;
    }
    let (folder, _session) = dirs();
    write(
        folder.path(),
        "a,b c.desktop",
        "[Desktop Entry]\nExec=touch /tmp/never\n",
    );
    // No session bus and no display here: neither FileManager1 nor xdg-open can answer.
    let e = reveal(folder.path(), "a,b c.desktop").await.unwrap_err();
    let (got, msg) = status(e);
    assert_eq!(got, 409, "{msg}");
    assert!(msg.starts_with("cannot show it: "), "{msg}");
    let (got, _) = status(reveal(folder.path(), "").await.unwrap_err());
    assert_eq!(got, 409);
}

#[tokio::test]
async fn the_real_limit_is_fifty_thousand_files() {
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path();
    for d in 0..50 {
        let dir = root.join(format!("d{d:02}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..1000 {
            std::fs::File::create(dir.join(format!("f{f:03}"))).unwrap();
        }
    }
    let (session, more) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let at_limit = record_baseline(
        root,
        session.path(),
        &no_git(),
        "t".into(),
        MAX_BASELINE_FILES,
    )
    .await
    .unwrap();
    assert!(!at_limit.not_followed);
    assert_eq!(at_limit.files.len(), MAX_BASELINE_FILES);
    std::fs::File::create(root.join("one-more")).unwrap();
    let beyond = record_baseline(root, more.path(), &no_git(), "t".into(), MAX_BASELINE_FILES)
        .await
        .unwrap();
    assert!(beyond.not_followed && beyond.files.is_empty());
}
