//! Fuzz target: the proxy's request heads, read as hyper reads them (httparse for the head,
//! `http::Uri` for the target, `HeaderValue::to_str` for Host), then judged by the same pure
//! functions in the same order as `handler-core/src/egress/proxy.rs` (`handle`, `connect`,
//! `decrypted_tunnel`, `forward`): `Authority::parse` of the target, `check_forward`
//! (anti-fronting), `check_sni` and `check_tunnel_request` for the request inside a CONNECT
//! tunnel (the bytes after the CONNECT head), and the injection rules on the URL and every header.
//!
//! Oracles: no panic; a parsed authority displays as text that parses back to itself; a request
//! passes an agreement check only when its Host names the judged authority; towards the
//! injection's host no phantom is left (raw, percent-encoded, or in `Authorization: Basic`);
//! towards any other host a phantom is always reported as a leak and nothing is swapped.
#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use handler_contracts::allow::AllowEntry;
use handler_contracts::sandbox::Injection;
use handler_sandbox::egress::authority::{self, Authority};
use handler_sandbox::egress::{Hits, InjectionSet};
use libfuzzer_sys::fuzz_target;
use memchr::memmem;

const PHANTOM: &str = "PHANTOM+tok/0123456789ab";
const PHANTOM_PCT: &str = "PHANTOM%2Btok%2F0123456789ab";
const VALUE: &str = "secretv+xyz/9876543210zz";
const HOST: &str = "api.x.com";

fn has(hay: &[u8], needle: &str) -> bool {
    memmem::find(hay, needle.as_bytes()).is_some()
}

struct Head<'a> {
    method: &'a str,
    uri: http::Uri,
    host: Option<String>,
    headers: Vec<(&'a str, &'a [u8])>,
    len: usize,
}

fn head(data: &[u8]) -> Option<Head<'_>> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(len) = req.parse(data).ok()? else {
        return None;
    };
    let method = req.method?;
    let uri: http::Uri = req.path?.parse().ok()?;
    let headers: Vec<(&str, &[u8])> = req.headers.iter().map(|h| (h.name, h.value)).collect();
    let host = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("host"))
        .and_then(|(_, v)| http::HeaderValue::from_bytes(v).ok())
        .and_then(|v| v.to_str().ok().map(str::to_string));
    Some(Head {
        method,
        uri,
        host,
        headers,
        len,
    })
}

fn round_trips(a: &Authority, default_port: Option<u16>) {
    let shown = a.to_string();
    assert_eq!(
        Authority::parse(&shown, default_port).as_ref(),
        Ok(a),
        "{a:?} → {shown:?}"
    );
    assert_eq!(Authority::parse(&shown, None).as_ref(), Ok(a));
}

/// `forward`: the URL and every header rewritten with the request rules of `target`.
fn rewrite(set: &InjectionSet, target: &Authority, h: &Head) {
    let injecting = set.injects_into(&target.host, target.port);
    let rules = set.request_rules(&target.host, target.port);
    let mut hits = Hits::default();
    let pq = h.uri.path_and_query().map_or("/", |p| p.as_str());
    let (out, hh) = rules.bytes(pq.as_bytes());
    assert_eq!(out.len(), pq.len());
    let sent = has(pq.as_bytes(), PHANTOM) || has(pq.as_bytes(), PHANTOM_PCT);
    if injecting {
        assert!(
            !has(&out, PHANTOM) && !has(&out, PHANTOM_PCT),
            "phantom left in the URL"
        );
        assert_eq!(hh.injected.contains("k"), sent);
    } else {
        assert_eq!(out, pq.as_bytes(), "swapped towards another host");
        assert_eq!(hh.is_leak(), sent, "a phantom in the URL not reported");
    }
    hits.merge(hh);
    for (name, value) in &h.headers {
        let (out, hh) = rules.header_value(name, value);
        let basic = (name.eq_ignore_ascii_case("authorization")
            || name.eq_ignore_ascii_case("proxy-authorization"))
            && value.len() > 6
            && value[..6].eq_ignore_ascii_case(b"basic ");
        let decoded = |v: &[u8]| {
            basic
                .then(|| B64.decode(v[6..].trim_ascii()).ok())
                .flatten()
        };
        let sent = has(value, PHANTOM)
            || has(value, PHANTOM_PCT)
            || decoded(value).is_some_and(|d| has(&d, PHANTOM) || has(&d, PHANTOM_PCT));
        if injecting {
            assert!(!has(&out, PHANTOM), "phantom left in {name}");
            if let Some(d) = decoded(&out) {
                assert!(
                    !has(&d, PHANTOM),
                    "phantom left in {name}'s Basic credentials"
                );
            }
        } else {
            assert_eq!(hh.is_leak(), sent, "a phantom in {name} not reported");
            if !basic {
                assert_eq!(&out[..], *value, "swapped towards another host");
            }
        }
        hits.merge(hh);
    }
    assert!(
        !injecting || !hits.is_leak(),
        "a leak towards the injection's host"
    );
}

fuzz_target!(|data: &[u8]| {
    let set = InjectionSet::new(vec![Injection {
        name: "k".into(),
        phantom: PHANTOM.into(),
        value: VALUE.into(),
        hosts: vec![AllowEntry::parse(&format!("{HOST}:443")).unwrap()],
        body: true,
    }])
    .unwrap();
    let Some(h) = head(data) else {
        return;
    };
    if h.method == "CONNECT" {
        // `connect`: the authority-form target, no default port.
        let Some(Ok(target)) = h
            .uri
            .authority()
            .map(|a| Authority::parse(a.as_str(), None))
        else {
            return;
        };
        round_trips(&target, None);
        // The TLS server name, here the Host header's host part (a client's SNI is free text).
        let sni = h.host.as_deref().map(|s| s.split(':').next().unwrap_or(s));
        if authority::check_sni(&target, sni).is_ok() {
            match sni {
                Some(s) => assert!(
                    s.trim_end_matches('.')
                        .eq_ignore_ascii_case(target.host.trim_end_matches('.'))
                ),
                None => assert!(target.is_ip()),
            }
        }
        // `decrypted_tunnel`: the request inside the tunnel is the head after this one.
        let Some(inner) = head(&data[h.len..]) else {
            return;
        };
        let ok = authority::check_tunnel_request(
            &target,
            inner.host.as_deref(),
            inner.uri.authority().map(|a| a.as_str()),
        );
        if let Err(m) = &ok {
            let _ = m.to_string();
            return;
        }
        let named = Authority::parse(inner.host.as_deref().unwrap(), Some(443));
        assert_eq!(
            named.as_ref(),
            Ok(&target),
            "a Host other than the tunnel's passed"
        );
        if let Some(a) = inner.uri.authority() {
            assert_eq!(
                Authority::parse(a.as_str(), Some(443)).as_ref(),
                Ok(&target)
            );
        }
        rewrite(&set, &target, &inner);
        return;
    }
    // `handle`: only absolute http:// requests are forwarded.
    let (Some("http"), Some(a)) = (h.uri.scheme_str(), h.uri.authority()) else {
        return;
    };
    let target = match Authority::parse(a.as_str(), Some(80)) {
        Ok(t) => t,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    round_trips(&target, Some(80));
    match authority::check_forward(&target, h.host.as_deref()) {
        Err(m) => {
            let _ = m.to_string();
        }
        Ok(()) => {
            let named = Authority::parse(h.host.as_deref().unwrap(), Some(80));
            assert_eq!(named.as_ref(), Ok(&target), "fronting passed");
            rewrite(&set, &target, &h);
        }
    }
});
