//! How fast handlerd's listings answer (issue 34 item 5, decision 0149), through its API as the
//! test user on real rootless Podman: a benchmark only, run by `bench/listings.sh`.

use std::time::{Duration, Instant};

use crate::temp_daemon::{IMAGE, Layout};

/// p50 and p99 of `v`.
fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Benchmark (`bench/listings.sh`): p50/p99 of `GET /v1/harnesses`, `/v1/runtime` and
/// `/v1/network-filter` as answered now (from memory, read again behind the answer past the
/// default TTL) against the same routes `?fresh=true` (asked of the engine, what every call cost
/// before) and `GET /v1/agents` (a listing that never asks the engine), with 1 client and with 8
/// together, `HANDLER_BENCH_ROUNDS` (default 40) rounds each after a warm-up. Prints `BENCH`.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: bench/listings.sh"]
async fn bench_listings_from_memory_against_the_engine() {
    let Some(u) = test_support::user::podman_user(IMAGE, "the listings benchmark") else {
        return;
    };
    let l = Layout::new(&format!("hdl-{}-bench", std::process::id()), false);
    l.fake_harness("");
    let d = l.spawn(u, &[]).await;
    let rounds: usize = std::env::var("HANDLER_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let routes = [
        "/v1/agents",
        "/v1/harnesses",
        "/v1/harnesses?fresh=true",
        "/v1/runtime",
        "/v1/runtime?fresh=true",
        "/v1/network-filter",
        "/v1/network-filter?fresh=true",
    ];
    let d = &d;
    let one = |path: &'static str| async move {
        let t = Instant::now();
        let (st, v) = d.call(reqwest::Method::GET, path, None).await;
        assert_eq!(st, 200, "{path}: {v}: {}", d.log());
        t.elapsed()
    };
    for path in routes {
        one(path).await;
    }
    for clients in [1usize, 8] {
        let mut p50 = std::collections::HashMap::new();
        for path in routes {
            let mut took = Vec::new();
            for _ in 0..rounds {
                took.extend(futures_util::future::join_all((0..clients).map(|_| one(path))).await);
            }
            let (a, b) = percentiles(took);
            println!(
                "BENCH clients={clients} rounds={rounds} {path} p50={:.1}ms p99={:.1}ms",
                a.as_secs_f64() * 1e3,
                b.as_secs_f64() * 1e3
            );
            p50.insert(path, a);
        }
        let ratio = |a: &str, b: &str| p50[a].as_secs_f64() / p50[b].as_secs_f64();
        println!(
            "BENCH clients={clients} p50 ratios: harnesses÷fresh={:.3}x runtime÷fresh={:.3}x network-filter÷fresh={:.3}x harnesses÷agents={:.2}x",
            ratio("/v1/harnesses", "/v1/harnesses?fresh=true"),
            ratio("/v1/runtime", "/v1/runtime?fresh=true"),
            ratio("/v1/network-filter", "/v1/network-filter?fresh=true"),
            ratio("/v1/harnesses", "/v1/agents"),
        );
    }
}
