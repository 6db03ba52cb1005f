//! Pass-through fidelity: real agents' traffic (fixtures/policy/corpus, fixtures/harness) goes
//! through a pipeline with nothing to change byte for byte, both ways, in the order recorded.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a test that reads fixtures: the I/O is outside the pure library"
)]

use std::path::{Path, PathBuf};

use handler_contracts::sandbox::NetworkPolicy;
use handler_policy::{Action, ClientId, Direction, Event, Pipeline, PolicyConfig};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A transcript's lines: (from the agent?, the exact bytes).
type Lines = Vec<(bool, Vec<u8>)>;

/// (name, lines) of every transcript found.
fn transcripts() -> Vec<(String, Lines)> {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["fixtures/policy/corpus"] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "jsonl") {
                files.push(p);
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(root().join("fixtures/harness")) {
        for e in rd {
            let p = e.unwrap().path().join("transcript.jsonl");
            if p.exists() {
                files.push(p);
            }
        }
    }
    files.sort();
    files.iter().map(|p| (display(p), load(p))).collect()
}

fn display(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

fn load(p: &Path) -> Lines {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let from_agent = v["dir"] == "agent";
            (from_agent, v["line"].as_str().unwrap().as_bytes().to_vec())
        })
        .collect()
}

fn permissive(secrets: Vec<(String, String)>) -> Pipeline {
    let mut cfg = PolicyConfig::new("/", NetworkPolicy::Open);
    cfg.secrets = secrets;
    Pipeline::new(cfg).unwrap()
}

fn check(name: &str, lines: &[(bool, Vec<u8>)], mut p: Pipeline) -> usize {
    let client = ClientId(1);
    let mut n = 0;
    for (i, (from_agent, bytes)) in lines.iter().enumerate() {
        let dir = if *from_agent {
            Direction::FromAgent
        } else {
            Direction::FromClient(client)
        };
        let actions = p.handle(dir, bytes);
        let forwarded: Vec<&Vec<u8>> = actions
            .iter()
            .filter_map(|a| match a {
                Action::ToAgent(b) if !from_agent => Some(b),
                Action::ToClient(c, b) if *from_agent && *c == client => Some(b),
                Action::Broadcast {
                    except: None,
                    message,
                } if *from_agent => Some(message),
                // What the daemon adds besides forwarding: the other clients are told a
                // permission was answered (F.7), and the log.
                Action::Broadcast {
                    except: Some(c),
                    message,
                } if !from_agent && *c == client => {
                    assert!(message.starts_with(
                        br#"{"jsonrpc":"2.0","method":"_handler/permission_resolved""#
                    ));
                    None
                }
                Action::Log(
                    Event::AgentInitialized { .. }
                    | Event::SessionOpened { .. }
                    | Event::PermissionAnswered { .. },
                ) => None,
                other => panic!("{name}:{}: unexpected action {other:?}", i + 1),
            })
            .collect();
        assert_eq!(
            forwarded.len(),
            1,
            "{name}:{}: {} forwards",
            i + 1,
            forwarded.len()
        );
        assert!(
            forwarded[0] == bytes,
            "{name}:{}: changed\n in: {}\nout: {}",
            i + 1,
            String::from_utf8_lossy(bytes),
            String::from_utf8_lossy(forwarded[0])
        );
        n += 1;
    }
    n
}

#[test]
fn real_agent_traffic_passes_byte_identical() {
    let all = transcripts();
    assert!(
        all.len() >= 2,
        "expected real-agent transcripts, found {}",
        all.len()
    );
    let mut total = 0;
    let mut agents = 0;
    for (name, lines) in &all {
        total += check(name, lines, permissive(Vec::new()));
        agents += 1;
    }
    assert!(total >= 100, "only {total} messages in the corpus");
    eprintln!("{total} messages from {agents} transcripts passed unchanged");
}

/// Secrets configured but absent from the traffic: still nothing changes (the redaction's
/// fast path never rewrites a message without a secret).
#[test]
fn absent_secrets_change_nothing() {
    let secrets = vec![
        (
            "ANTHROPIC_API_KEY".to_string(),
            "sk-ant-api03-not-in-the-corpus".to_string(),
        ),
        (
            "GITHUB_TOKEN".to_string(),
            "ghp_notinthecorpus0123456789".to_string(),
        ),
    ];
    for (name, lines) in transcripts() {
        check(&name, &lines, permissive(secrets.clone()));
    }
}

/// A secret that does appear in real traffic is replaced, and only in the messages holding it.
#[test]
fn a_present_secret_is_redacted_only_where_it_appears() {
    let (name, lines) = transcripts().into_iter().next().unwrap();
    // The session id, as if it were a secret: it appears in most agent messages.
    let sid = lines
        .iter()
        .filter(|(a, _)| *a)
        .find_map(|(_, b)| {
            let v: serde_json::Value = serde_json::from_slice(b).ok()?;
            v["result"]["sessionId"].as_str().map(str::to_owned)
        })
        .expect("a session/new result");
    let mut p = permissive(vec![("S".into(), sid.clone())]);
    let mut changed = 0;
    for (from_agent, bytes) in &lines {
        let dir = if *from_agent {
            Direction::FromAgent
        } else {
            Direction::FromClient(ClientId(1))
        };
        for a in p.handle(dir, bytes) {
            let out = match a {
                Action::ToClient(_, b)
                | Action::Broadcast {
                    except: None,
                    message: b,
                } => b,
                _ => continue,
            };
            let holds = String::from_utf8_lossy(bytes).contains(&sid);
            assert!(
                !String::from_utf8_lossy(&out).contains(&sid),
                "{name}: secret forwarded"
            );
            if holds {
                changed += 1;
                assert!(String::from_utf8_lossy(&out).contains("[secret S]"));
                serde_json::from_slice::<serde_json::Value>(&out).expect("still JSON");
            } else {
                assert_eq!(&out, bytes, "{name}: a message without the secret changed");
            }
        }
    }
    assert!(
        changed > 5,
        "{name}: only {changed} messages held the session id"
    );
}
