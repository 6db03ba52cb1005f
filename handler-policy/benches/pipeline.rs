//! Per-message cost of the policy pipeline on real agents' traffic (fixtures/policy/corpus),
//! next to baselines measured in the same run: copying the frame (the least a relay does) and
//! parsing it fully with serde_json (what a typed relay would at least do).
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark that reads fixtures: the I/O is outside the pure library"
)]

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use handler_contracts::sandbox::NetworkPolicy;
use handler_policy::{ClientId, Direction, Pipeline, PolicyConfig};

fn corpus() -> Vec<(bool, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/policy/corpus");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for l in std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
        {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            out.push((
                v["dir"] == "agent",
                v["line"].as_str().unwrap().as_bytes().to_vec(),
            ));
        }
    }
    out
}

/// A pipeline as the daemon runs one: a scope, secrets to redact (absent from the traffic).
fn pipeline() -> Pipeline {
    let mut cfg = PolicyConfig::new("/", NetworkPolicy::Open);
    cfg.secrets = vec![
        (
            "ANTHROPIC_API_KEY".into(),
            "sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz".into(),
        ),
        (
            "GITHUB_TOKEN".into(),
            "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB".into(),
        ),
    ];
    Pipeline::new(cfg).unwrap()
}

fn run(p: &mut Pipeline, lines: &[(bool, Vec<u8>)]) -> usize {
    let mut n = 0;
    for (from_agent, bytes) in lines {
        let dir = if *from_agent {
            Direction::FromAgent
        } else {
            Direction::FromClient(ClientId(1))
        };
        n += p.handle(dir, bytes).len();
    }
    n
}

fn benches(c: &mut Criterion) {
    let corpus = corpus();
    // A forwarded session/update: the agent's message chunks, the bulk of a turn.
    let updates: Vec<&Vec<u8>> = corpus
        .iter()
        .filter(|(a, b)| *a && String::from_utf8_lossy(b).contains("\"agent_message_chunk\""))
        .map(|(_, b)| b)
        .collect();
    assert!(!updates.is_empty());

    let mut g = c.benchmark_group("session_update");
    g.throughput(Throughput::Elements(updates.len() as u64));
    g.bench_function("baseline_copy", |b| {
        b.iter(|| {
            updates
                .iter()
                .map(|u| black_box((*u).clone()).len())
                .sum::<usize>()
        });
    });
    g.bench_function("baseline_serde_value", |b| {
        b.iter(|| {
            updates
                .iter()
                .map(|u| {
                    black_box(serde_json::from_slice::<serde_json::Value>(u).unwrap()).is_object()
                        as usize
                })
                .sum::<usize>()
        });
    });
    let mut p = pipeline();
    g.bench_function("pipeline_forward", |b| {
        b.iter(|| {
            updates
                .iter()
                .map(|u| black_box(p.handle(Direction::FromAgent, u)).len())
                .sum::<usize>()
        });
    });
    g.finish();

    // The whole corpus, both ways, through a fresh pipeline each time (initialize, session/new,
    // set_mode, prompts, tool calls, permission requests and answers).
    let mut g = c.benchmark_group("corpus");
    g.throughput(Throughput::Elements(corpus.len() as u64));
    g.bench_function("baseline_serde_value", |b| {
        b.iter(|| {
            corpus
                .iter()
                .map(|(_, u)| {
                    black_box(serde_json::from_slice::<serde_json::Value>(u).unwrap()).is_object()
                        as usize
                })
                .sum::<usize>()
        });
    });
    g.bench_function("pipeline", |b| {
        b.iter_batched(
            pipeline,
            |mut p| run(&mut p, &corpus),
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

criterion_group!(policy, benches);
criterion_main!(policy);
