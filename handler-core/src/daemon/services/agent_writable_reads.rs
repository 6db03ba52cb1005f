//! The test over every reader of an agent-writable path (issue 27), generated from one list,
//! `agentfs::ALL_READERS`: for each reader and each hostile thing an agent can leave where it
//! reads — a link to a host file, a FIFO, a file past its bound — the read is refused, at once
//! (never blocking: each case runs on a thread given 10 s), and reads nothing of the host. A reader
//! added to the list without a case here fails the test.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::daemon::agentfs::ALL_READERS;
use crate::daemon::launch::gitguard;

/// What an agent leaves at the path a reader reads.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    /// A link to a file of the host's (`/etc/passwd`).
    Link,
    /// A FIFO, which a plain `open` would wait on for ever.
    Fifo,
    /// A regular file of 40 MiB, past every reader's bound.
    Oversize,
}

const ALL: [Hostile; 3] = [Hostile::Link, Hostile::Fifo, Hostile::Oversize];

fn plant(at: &Path, h: Hostile) {
    let _ = std::fs::remove_file(at);
    match h {
        Hostile::Link => std::os::unix::fs::symlink("/etc/passwd", at).unwrap(),
        Hostile::Fifo => nix::unistd::mkfifo(at, nix::sys::stat::Mode::S_IRWXU).unwrap(),
        Hostile::Oversize => {
            let f = std::fs::File::create(at).unwrap();
            f.set_len(40 << 20).unwrap();
        }
    }
}

/// A git directory by hand at `dir` on branch `main`, its ref only in `packed-refs`.
fn git_dir(dir: &Path) {
    for sub in ["refs/heads", "objects/info", "objects/pack"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        dir.join("packed-refs"),
        format!("{} refs/heads/main\n", "1".repeat(40)),
    )
    .unwrap();
}

/// The files a reader reads that the agent can write, set up in `root`, and the read itself:
/// `Ok` when it read something, `Err` (its message) when it refused.
type Case = (Vec<PathBuf>, Box<dyn Fn() -> Result<(), String> + Send>);

#[expect(
    clippy::too_many_lines,
    reason = "the one list of every agent-writable reader, one case each, as the generated test needs it"
)]
fn case(reader: &str, root: &Path) -> Case {
    match reader {
        "gitguard::gather" => {
            let scope = root.join("scope");
            git_dir(&scope.join(".git"));
            let seen = root.join("seen");
            let targets = vec![
                scope.join(".git/HEAD"),
                scope.join(".git/packed-refs"),
                scope.join(".git/commondir"),
            ];
            (
                targets,
                Box::new(move || {
                    gitguard::gather(&seen, &scope)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }),
            )
        }
        "gitguard::follow_facts" | "gitguard::check_own_git_dir" => {
            let dir = root.join("guard");
            git_dir(&dir.join("git"));
            let g = guarded(&dir);
            let follow = reader == "gitguard::follow_facts";
            let targets = if follow {
                vec![dir.join("git/HEAD"), dir.join("git/packed-refs")]
            } else {
                // The helper binds the folder: a link there, or a FIFO anywhere in it.
                vec![dir.join("git/packed-refs"), dir.join("git/objects/info/x")]
            };
            (
                targets,
                Box::new(move || {
                    if follow {
                        gitguard::follow_facts(&g, "s1")
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    } else {
                        g.check_own_git_dir().map_err(|e| e.to_string())
                    }
                }),
            )
        }
        "skills::import" => {
            let base = root.join("session");
            let work = base.join("work");
            std::fs::create_dir_all(work.join("scripts")).unwrap();
            std::fs::write(
                work.join("SKILL.md"),
                "---\nname: s\ndescription: d\n---\nbody\n",
            )
            .unwrap();
            std::fs::write(work.join("scripts/run.sh"), "echo\n").unwrap();
            let targets = vec![work.join("SKILL.md"), work.join("scripts/run.sh")];
            (
                targets,
                Box::new(move || {
                    let files = super::skills::import::from_folder(&base, Path::new("work"))
                        .map_err(|e| format!("{e:?}"))?;
                    // A link or special file is left out, as an archive's would be: never read.
                    let read = files.iter().any(|(p, b, _)| {
                        (p == "SKILL.md" || p == "scripts/run.sh")
                            && (b.starts_with(b"root:") || b.len() > 1 << 20)
                    });
                    if read { Ok(()) } else { Err("left out".into()) }
                }),
            )
        }
        "session_files" => {
            let dir = root.join("files");
            std::fs::create_dir_all(&dir).unwrap();
            let d2 = dir.clone();
            (
                vec![dir.join("notes.txt")],
                Box::new(move || {
                    let fd =
                        super::session_files::open::open_root(&d2).map_err(|e| e.to_string())?;
                    match super::session_files::open::read_regular_at(
                        &fd,
                        "notes.txt",
                        "notes.txt",
                        1 << 20,
                    ) {
                        Ok(Some((b, size))) if size > 1 << 20 && b.len() <= 1 << 20 => {
                            Err("bounded".into())
                        }
                        Ok(Some(_)) => Ok(()),
                        Ok(None) => Err("none".into()),
                        Err(e) => Err(e.to_string()),
                    }
                }),
            )
        }
        "seed::file_slot" => {
            let home = root.join("home");
            std::fs::create_dir_all(&home).unwrap();
            std::fs::write(home.join(".h.json"), r#"{"mcpServers": {}}"#).unwrap();
            let base = root.join("state");
            std::fs::create_dir_all(&base).unwrap();
            let slot: handler_contracts::harness::StateSlot = toml::from_str(
                "target = \"~/.h.json\"\nkind = \"file\"\nrequired = true\n[[seed]]\nsource = \"~/.h.json\"\nkeep = [\"mcpServers\"]\n",
            )
            .unwrap();
            (
                vec![base.join("settings")],
                Box::new(move || {
                    crate::daemon::launch::seed::copy_seed(
                        &home,
                        &base,
                        ("settings", &slot),
                        &slot.seed[0],
                    )
                    .map_err(|e| e.to_string())
                }),
            )
        }
        "apps::folder" => {
            let app = root.join("app");
            std::fs::create_dir_all(app.join("ui/dist/assets")).unwrap();
            std::fs::write(
                app.join("app.toml"),
                "apiVersion = \"handler.miniapp/v1\"\nname = \"probe\"\nversion = \"1.0.0\"\n",
            )
            .unwrap();
            std::fs::write(app.join("ui/dist/index.html"), "<p>hi</p>").unwrap();
            std::fs::write(app.join("ui/dist/assets/app.js"), "1").unwrap();
            let to = root.join("copy");
            let targets = vec![
                app.join("app.toml"),
                app.join("ui/dist/index.html"),
                app.join("ui/dist/assets/app.js"),
            ];
            (
                targets,
                Box::new(move || {
                    use super::apps::folder;
                    let dir = folder::open(&app).map_err(|e| format!("{e:?}"))?.unwrap();
                    let text = folder::manifest_text(&dir, &app).map_err(|e| format!("{e:?}"))?;
                    let m = folder::parse_manifest(&text).map_err(|e| format!("{e:?}"))?;
                    folder::install(&dir, &app, &m, &text, &to)
                        .map(|_| ())
                        .map_err(|e| format!("{e:?}"))
                }),
            )
        }
        "machines::devcontainer" => {
            let repo = root.join("repo");
            std::fs::create_dir_all(repo.join(".devcontainer")).unwrap();
            std::fs::write(
                repo.join(".devcontainer/devcontainer.json"),
                r#"{"build": {"dockerfile": "Dockerfile"}}"#,
            )
            .unwrap();
            std::fs::write(repo.join(".devcontainer/Dockerfile"), "FROM scratch\n").unwrap();
            let stage = root.join("stage");
            let targets = vec![
                repo.join(".devcontainer/devcontainer.json"),
                repo.join(".devcontainer/Dockerfile"),
            ];
            (
                targets,
                Box::new(move || {
                    let _ = std::fs::remove_dir_all(&stage);
                    super::machine_devcontainer::stage(&repo, &stage).map_err(|e| format!("{e:?}"))
                }),
            )
        }
        other => panic!("agentfs::ALL_READERS names {other:?}, which has no case here: add one"),
    }
}

fn guarded(dir: &Path) -> gitguard::Guarded {
    use handler_sandbox::guard::{Head, Layout, RepoFacts};
    gitguard::Guarded {
        facts: RepoFacts {
            root: "/nonexistent/repo".into(),
            layout: Layout::Main,
            git_dir: "/nonexistent/repo/.git".into(),
            common_dir: "/nonexistent/repo/.git".into(),
            head: Head::Branch {
                name: "main".into(),
                commit: None,
            },
            links: vec![],
            alternates: None,
            shallow: None,
            user_name: None,
            user_email: None,
        },
        dir: dir.to_path_buf(),
        copy: None,
    }
}

#[test]
fn every_reader_of_an_agent_writable_path_refuses_links_fifos_and_oversize_files_at_once() {
    let mut checked = 0;
    for reader in ALL_READERS {
        let probe = tempfile::tempdir().unwrap();
        let (targets, _) = case(reader, probe.path());
        for (t, target) in targets.iter().enumerate() {
            for h in ALL {
                // "A link in the walk of a folder" is what check_own_git_dir refuses only for
                // special files; links inside the git directory stay the sandbox's own.
                if *reader == "gitguard::check_own_git_dir" && !matches!(h, Hostile::Fifo) {
                    continue;
                }
                let tmp = tempfile::tempdir().unwrap();
                let (targets, read) = case(reader, tmp.path());
                let at = &targets[t];
                if let Some(p) = at.parent() {
                    std::fs::create_dir_all(p).unwrap();
                }
                plant(at, h);
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let _ = tx.send(read());
                });
                let answer = rx
                    .recv_timeout(Duration::from_secs(10))
                    .unwrap_or_else(|_| {
                        panic!("{reader}: {h:?} at {} blocked the reader", target.display())
                    });
                assert!(
                    answer.is_err(),
                    "{reader}: {h:?} at {} was read",
                    target.display()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "{checked}");
}
