//! F.8's git half on real repositories (made with the git CLI, in the test only): the earlier
//! version of a file after the agent commits, `.git/info/exclude` honoured, a repository whose
//! configuration names programs (fsmonitor, a diff driver, filters, hooks) runs none of them
//! through the reader, and a repository that would hang or blow up the reader costs only the
//! child: an answer within the timeout, without an earlier version.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use handler_contracts::files::ChangeKind;
use handler_core::daemon::services::session_files::{
    GIT_READ_TIMEOUT, GitReader, changes, read_file, record_baseline,
};

fn reader() -> GitReader {
    GitReader::at(env!("CARGO_BIN_EXE_handler-git-read"))
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=Agent",
            "-c",
            "user.email=agent@example.invalid",
        ])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .output()
        .expect("git is installed for this test");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A repository with a.txt ("one") and gone.txt committed.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    write(dir.path(), "a.txt", "one\n");
    write(dir.path(), "gone.txt", "bye\n");
    git(dir.path(), &["add", "."]);
    git(dir.path(), &["commit", "-qm", "start"]);
    dir
}

fn text(c: &Option<handler_contracts::files::FileContent>) -> Option<&str> {
    c.as_ref().and_then(|c| c.text.as_deref())
}

#[tokio::test]
async fn the_earlier_version_is_the_start_commits_even_after_the_agent_commits() {
    let folder = repo();
    let session = tempfile::tempdir().unwrap();
    let root = folder.path();
    let start = git(root, &["rev-parse", "HEAD"]);
    write(root, ".git/info/exclude", "secret.env\n");
    write(root, "secret.env", "K=V\n");
    write(root, "a.txt", "one, edited before the start\n");

    let base = record_baseline(root, session.path(), &reader(), "t0".into(), 1000)
        .await
        .unwrap();
    assert_eq!(base.git_head.as_deref(), Some(start.as_str()));
    assert_eq!(base.git_exclude.as_deref(), Some("secret.env\n"));
    assert!(
        !base.files.contains_key("secret.env"),
        "info/exclude applies"
    );
    assert!(base.files.keys().all(|p| !p.starts_with(".git/")));

    // The agent edits, commits, adds, deletes, commits again.
    std::thread::sleep(Duration::from_millis(20));
    write(root, "a.txt", "two\n");
    write(root, "b.txt", "new\n");
    write(root, "secret2.env", "x\n");
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "agent"]);
    write(root, "secret.env", "K=changed\n");

    let s = Some((session.path(), &reader()));
    let a = read_file(root, "a.txt", s).await.unwrap();
    assert_eq!(text(&a.content), Some("two\n"));
    assert_eq!(
        text(&a.earlier),
        Some("one\n"),
        "the start commit's, not the agent's"
    );
    assert_eq!(a.change, Some(ChangeKind::Modified));
    let b = read_file(root, "b.txt", s).await.unwrap();
    assert_eq!((b.change, b.earlier), (Some(ChangeKind::Added), None));
    let gone = read_file(root, "gone.txt", s).await.unwrap();
    assert_eq!(gone.change, Some(ChangeKind::Deleted));
    assert!(gone.content.is_none());
    assert_eq!(text(&gone.earlier), Some("bye\n"));

    let c = changes(root, session.path(), 1000).await.unwrap();
    let got: Vec<(&str, ChangeKind)> = c
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.change))
        .collect();
    assert_eq!(
        got,
        [
            ("a.txt", ChangeKind::Modified),
            ("b.txt", ChangeKind::Added),
            ("gone.txt", ChangeKind::Deleted),
            ("secret2.env", ChangeKind::Added),
        ],
        "secret.env is excluded; .git never listed"
    );
}

#[tokio::test]
async fn beyond_the_limit_only_head_is_recorded() {
    let folder = repo();
    let session = tempfile::tempdir().unwrap();
    for i in 0..8 {
        write(folder.path(), &format!("f{i}"), "x");
    }
    let base = record_baseline(folder.path(), session.path(), &reader(), "t".into(), 5)
        .await
        .unwrap();
    assert!(base.not_followed && base.files.is_empty());
    assert_eq!(
        base.git_head,
        Some(git(folder.path(), &["rev-parse", "HEAD"]))
    );
}

#[tokio::test]
async fn a_repository_whose_config_names_programs_runs_nothing() {
    let folder = repo();
    let session = tempfile::tempdir().unwrap();
    let root = folder.path();
    let tools = tempfile::tempdir().unwrap();
    let marker = tools.path().join("ran");
    let script = tools.path().join("prog.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$0 $*\" >> {}\ncat\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let prog = script.to_str().unwrap();
    for (k, v) in [
        ("core.fsmonitor", prog),
        ("core.pager", prog),
        ("core.sshCommand", prog),
        ("core.askPass", prog),
        ("diff.x.textconv", prog),
        ("diff.x.command", prog),
        ("filter.y.clean", prog),
        ("filter.y.smudge", prog),
        ("filter.y.process", prog),
        ("credential.helper", prog),
        (
            "include.path",
            tools.path().join("more.cfg").to_str().unwrap(),
        ),
    ] {
        git(root, &["config", k, v]);
    }
    std::fs::write(
        tools.path().join("more.cfg"),
        format!("[core]\n\tfsmonitor = {prog}\n"),
    )
    .unwrap();
    write(root, ".gitattributes", "* diff=x filter=y\n");
    for hook in [
        "post-checkout",
        "pre-commit",
        "post-index-change",
        "reference-transaction",
    ] {
        write(
            root,
            &format!(".git/hooks/{hook}"),
            &format!("#!/bin/sh\n{prog}\n"),
        );
        std::fs::set_permissions(
            root.join(".git/hooks").join(hook),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
    }
    // The control: git itself runs them (status: the fsmonitor and the clean filter).
    let _ = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["status", "--short"])
        .output();
    assert!(
        marker.exists(),
        "git runs what the config names: the test means something"
    );
    std::fs::remove_file(&marker).unwrap();

    let base = record_baseline(root, session.path(), &reader(), "t".into(), 1000)
        .await
        .unwrap();
    assert!(base.git_head.is_some());
    write(root, "a.txt", "changed\n");
    let a = read_file(root, "a.txt", Some((session.path(), &reader())))
        .await
        .unwrap();
    assert_eq!(
        text(&a.earlier),
        Some("one\n"),
        "read as stored: no filter, no textconv"
    );
    changes(root, session.path(), 1000).await.unwrap();
    assert!(
        !marker.exists(),
        "the reader ran {:?}",
        std::fs::read_to_string(&marker)
    );
}

/// The loose object of `rev:path` in `repo`.
fn object_file(repo: &Path, rev_path: &str) -> std::path::PathBuf {
    let id = git(repo, &["rev-parse", rev_path]);
    repo.join(".git/objects").join(&id[..2]).join(&id[2..])
}

/// Whether a `handler-git-read` whose arguments name `dir` still runs.
fn reader_running_on(dir: &Path) -> bool {
    let needle = dir.to_str().unwrap().as_bytes();
    std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline")).is_ok_and(|c| {
            c.windows(needle.len()).any(|w| w == needle)
                && c.windows(16).any(|w| w == b"handler-git-read")
        })
    })
}

#[tokio::test]
async fn a_repository_that_would_hang_the_reader_costs_only_the_child() {
    let folder = repo();
    let session = tempfile::tempdir().unwrap();
    let root = folder.path();
    record_baseline(root, session.path(), &reader(), "t".into(), 1000)
        .await
        .unwrap();
    // The agent makes the repository's config a FIFO: opening it blocks whoever reads it.
    let config = root.join(".git/config");
    std::fs::remove_file(&config).unwrap();
    let st = Command::new("mkfifo").arg(&config).status().unwrap();
    assert!(st.success());
    write(root, "a.txt", "now\n");

    let t0 = Instant::now();
    let a = read_file(root, "a.txt", Some((session.path(), &reader())))
        .await
        .unwrap();
    let took = t0.elapsed();
    assert!(
        took >= GIT_READ_TIMEOUT - Duration::from_millis(500),
        "{took:?}"
    );
    assert!(took < GIT_READ_TIMEOUT + Duration::from_secs(3), "{took:?}");
    assert_eq!(text(&a.content), Some("now\n"));
    assert!(
        a.earlier.is_none(),
        "no earlier version from a repository that hangs"
    );
    assert!(!reader_running_on(root), "the reader was stopped");
}

/// Bits written least significant first, as deflate packs them.
#[derive(Default)]
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    fn put(&mut self, value: u64, bits: u32) {
        self.acc |= value << self.n;
        self.n += bits;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }
    /// A Huffman code, written from its most significant bit.
    fn code(&mut self, code: u32, len: u32) {
        let rev = (0..len).fold(0u64, |r, i| r | u64::from((code >> i) & 1) << (len - 1 - i));
        self.put(rev, len);
    }
}

/// A loose object file: zlib of `header` then `zeros` zero bytes, in one fixed-Huffman deflate
/// block (literals, then <length 258, distance 1> pairs), made without a compressor.
fn loose_object_of_zeros(header: &[u8], zeros: u64) -> Vec<u8> {
    let mut bits = Bits::default();
    bits.put(0b011, 3); // BFINAL, fixed Huffman
    let literal = |bits: &mut Bits, b: u8| bits.code(0x30 + u32::from(b), 8);
    for &b in header {
        literal(&mut bits, b);
    }
    let mut left = zeros;
    if left > 0 {
        literal(&mut bits, 0);
        left -= 1;
    }
    // Length code 285 (258, 8 bits 11000101) then distance code 0 (1, 5 bits 00000), as the
    // 13 bits they are in the stream (a Huffman code goes most significant bit first).
    let pair = (0..8).fold(0u64, |r, i| r | u64::from((0xC5u32 >> i) & 1) << (7 - i));
    while left >= 258 {
        bits.put(pair, 13);
        left -= 258;
    }
    for _ in 0..left {
        literal(&mut bits, 0);
    }
    bits.code(0, 7); // end of block
    bits.put(0, 7);
    let (mut a, mut b) = (1u64, 0u64);
    for &x in header {
        a = (a + u64::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    b = (b + (zeros % 65521) * a) % 65521;
    let mut out = vec![0x78, 0x01];
    out.extend_from_slice(&bits.out);
    out.extend_from_slice(&(((b << 16) | a) as u32).to_be_bytes());
    out
}

fn replace(file: &Path, bytes: &[u8]) {
    std::fs::remove_file(file).unwrap();
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test]
async fn a_huge_or_garbage_object_costs_only_the_child() {
    let folder = repo();
    let session = tempfile::tempdir().unwrap();
    let root = folder.path();
    record_baseline(root, session.path(), &reader(), "t".into(), 1000)
        .await
        .unwrap();
    let s = Some((session.path(), &reader()));
    let a_obj = object_file(root, "HEAD:a.txt");

    // The control: a 10 MB blob made this way is read (the reader does not verify ids).
    replace(
        &a_obj,
        &loose_object_of_zeros(b"blob 10000000\0", 10_000_000),
    );
    let a = read_file(root, "a.txt", s).await.unwrap();
    let earlier = a.earlier.expect("a 10 MB blob is read");
    assert_eq!((earlier.size, earlier.truncated), (10_000_000, true));

    // 1.1 GB inflated: more than the reader's 1 GiB of address space. It dies, alone.
    replace(
        &a_obj,
        &loose_object_of_zeros(b"blob 1100000000\0", 1_100_000_000),
    );
    let t0 = Instant::now();
    let a = read_file(root, "a.txt", s).await.unwrap();
    assert!(a.earlier.is_none(), "the 1 GiB limit stopped the reader");
    assert_eq!(text(&a.content), Some("one\n"));
    assert!(t0.elapsed() < GIT_READ_TIMEOUT, "{:?}", t0.elapsed());

    // A header claiming 4 TB, and garbage where gone.txt's object was.
    replace(&a_obj, &loose_object_of_zeros(b"blob 4000000000000\0", 3));
    assert!(read_file(root, "a.txt", s).await.unwrap().earlier.is_none());
    replace(
        &object_file(root, "HEAD:gone.txt"),
        b"\x00\xffnot zlib at all",
    );
    let g = read_file(root, "gone.txt", s).await.unwrap();
    assert!(g.earlier.is_none(), "{g:?}");
    assert_eq!(g.content.map(|c| c.size), Some(4));
}

#[test]
fn the_reader_refuses_what_it_does_not_know() {
    let folder = repo();
    let bin = env!("CARGO_BIN_EXE_handler-git-read");
    let git_dir = folder.path().join(".git");
    let run = |args: &[&std::ffi::OsStr]| Command::new(bin).args(args).output().unwrap();
    let usage = run(&["push".as_ref(), git_dir.as_os_str()]);
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("usage: handler-git-read"));
    let bad = run(&[
        "show".as_ref(),
        git_dir.as_os_str(),
        "HEAD".as_ref(),
        "a.txt".as_ref(),
    ]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "a commit is a full id, never a revision to resolve"
    );
    let head = run(&["head".as_ref(), git_dir.as_os_str()]);
    let id = String::from_utf8(head.stdout).unwrap();
    let missing = run(&[
        "show".as_ref(),
        git_dir.as_os_str(),
        id.trim().as_ref(),
        "nope".as_ref(),
    ]);
    assert_eq!(missing.status.code(), Some(1), "nothing there");
    // A .git that is a link is not opened.
    let link = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&git_dir, link.path().join(".git")).unwrap();
    let linked = run(&["head".as_ref(), link.path().join(".git").as_os_str()]);
    assert_eq!(linked.status.code(), Some(2));
}
