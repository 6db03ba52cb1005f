//! The skills library over HTTP (D.17): create (copyOf), read (content, files, digest, scan),
//! files one at a time, replace and rename (agents follow), delete (agents lose it), projects
//! giving a skill (400 `given by its project`), `usedBy`; imports from a zip and from an
//! https:// URL served over real TLS by a test CA, and the archive refusals (a link out, a
//! device, an absolute path, too many files).

use std::io::Write as _;
use std::sync::Arc;

use crate::daemon_support::{self, Options, TestDaemon, assert_problem};
use crate::egress_support::TestCa;
use serde_json::{Value, json};

fn skill_md(name: &str, description: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: {description}\n---\n# {name}\n\nSee https://docs.example.com/{name}.\n"
    )
}

/// A zip of `(path, bytes, mode)`; a mode with S_IFLNK makes a link whose target is the bytes.
fn zip_of(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (path, bytes, mode) in entries {
        let o = zip::write::SimpleFileOptions::default().unix_permissions(*mode & 0o777);
        if mode & 0o170_000 == 0o120_000 {
            w.add_symlink(*path, std::str::from_utf8(bytes).unwrap(), o)
                .unwrap();
        } else {
            w.start_file(*path, o).unwrap();
            w.write_all(bytes).unwrap();
        }
    }
    w.finish().unwrap().into_inner()
}

/// Sets the Unix mode of `name`'s central directory entry (what a crafted archive can say).
fn set_mode(zip: &mut [u8], name: &str, mode: u32) {
    let mut i = 0;
    while i + 46 <= zip.len() {
        if zip[i..i + 4] == *b"PK\x01\x02" {
            let n = u16::from_le_bytes([zip[i + 28], zip[i + 29]]) as usize;
            if zip.get(i + 46..i + 46 + n) == Some(name.as_bytes()) {
                zip[i + 5] = 3; // made by Unix
                zip[i + 38..i + 42].copy_from_slice(&(mode << 16).to_le_bytes());
                return;
            }
        }
        i += 1;
    }
    panic!("{name} not in the archive");
}

async fn post_zip(d: &TestDaemon, query: &str, body: Vec<u8>) -> (u16, Value) {
    let res = d
        .http
        .post(format!("{}/v1/skills/import-zip{query}", d.url))
        .bearer_auth(&d.token)
        .header("content-type", "application/zip")
        .body(body)
        .send()
        .await
        .unwrap();
    let s = res.status().as_u16();
    (s, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_is_written_read_renamed_and_deleted_and_its_agents_follow() {
    let d = TestDaemon::start().await;
    let (s, v) = d.get("/v1/skills").await;
    assert_eq!((s, v), (200, json!([])));
    let (s, v) = d
        .post(
            "/v1/skills",
            json!({"content": skill_md("pdf-tools", "Reads PDFs")}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["name"], "pdf-tools");
    assert_eq!(v["description"], "Reads PDFs");
    assert!(v["digest"].as_str().unwrap().starts_with("sha256:"), "{v}");
    assert_eq!(v["scan"]["hosts"][0]["text"], "docs.example.com", "{v}");
    let first_digest = v["digest"].clone();
    let (s, p) = d
        .post(
            "/v1/skills",
            json!({"content": skill_md("pdf-tools", "again")}),
        )
        .await;
    assert_problem(s, &p, 409, "skill exists");
    for (content, want) in [
        (
            "no frontmatter",
            "content: SKILL.md does not start with a frontmatter",
        ),
        (
            "---\nname: Bad_Name\ndescription: d\n---\n",
            "content: name:",
        ),
    ] {
        let (s, p) = d.post("/v1/skills", json!({"content": content})).await;
        assert_problem(s, &p, 400, "skill invalid");
        assert!(p["detail"].as_str().unwrap().starts_with(want), "{p}");
    }

    // Its files, one at a time.
    let f = "/v1/skills/pdf-tools/files";
    let (s, v) = d
        .put(
            &format!("{f}/scripts/run.sh"),
            json!({"text": "#!/bin/sh\necho hi\n", "executable": true}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["size"].as_u64(), v["executable"].as_bool()),
        (Some(18), Some(true))
    );
    let (s, v) = d
        .put(
            &format!("{f}/assets/logo.bin"),
            json!({"base64": "/wD+gA=="}),
        )
        .await;
    assert_eq!((s, v["executable"].as_bool()), (200, Some(false)), "{v}");
    let (s, v) = d.get(&format!("{f}/scripts/run.sh")).await;
    assert_eq!((s, v["text"].as_str()), (200, Some("#!/bin/sh\necho hi\n")));
    let (s, v) = d.get("/v1/skills/pdf-tools").await;
    assert_eq!(s, 200);
    let paths: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, vec!["assets/logo.bin", "scripts/run.sh"]);
    assert_eq!(v["scan"]["executables"], json!(["scripts/run.sh"]));
    assert_eq!(v["scan"]["binaries"], json!(["assets/logo.bin"]));
    assert_ne!(v["digest"], first_digest, "the digest follows its files");
    assert!(v["content"].as_str().unwrap().contains("name: pdf-tools"));

    let dir = d.state.config.skills_dir.join("pdf-tools");
    std::os::unix::fs::symlink("/etc", dir.join("etc")).unwrap();
    for (path, body, title) in [
        (".env", json!({"text": "x"}), "path invalid"),
        ("a/.git/config", json!({"text": "x"}), "path invalid"),
        ("SKILL.md", json!({"text": "x"}), "path invalid"),
        ("etc/passwd", json!({"text": "x"}), "path invalid"),
        (
            "x.txt",
            json!({"text": "x", "base64": "eA=="}),
            "file invalid",
        ),
        ("x.txt", json!({"base64": "not base64!"}), "file invalid"),
    ] {
        let (s, p) = d.put(&format!("{f}/{path}"), body).await;
        assert_problem(s, &p, 400, title);
    }
    let (s, v) = d.get("/v1/skills/pdf-tools").await;
    assert!(
        !v.to_string().contains("\"etc"),
        "a link is no file of a skill: {v}"
    );
    assert_eq!(s, 200);
    std::fs::remove_file(dir.join("etc")).unwrap();
    let (s, _) = d.delete(&format!("{f}/assets/logo.bin")).await;
    assert_eq!(s, 204);
    assert!(!dir.join("assets").exists(), "an emptied folder goes");
    let (s, _) = d.get(&format!("{f}/assets/logo.bin")).await;
    assert_eq!(s, 404);

    // An agent picks it; a rename follows, a delete loses it.
    d.fake_account("perso", "fk-SkillsApi0Token1111aaaa2222")
        .await;
    let a = d
        .fake_agent("perso", json!({"skills": ["pdf-tools"]}))
        .await;
    let id = a["id"].as_str().unwrap();
    let (_, v) = d.get("/v1/skills/pdf-tools").await;
    assert_eq!(v["usedBy"], json!([format!("ad-hoc/{id}")]));
    let (s, v) = d
        .put(
            "/v1/skills/pdf-tools",
            json!({"content": skill_md("pdf-kit", "Reads PDFs, renamed")}),
        )
        .await;
    assert_eq!((s, v["name"].as_str()), (200, Some("pdf-kit")), "{v}");
    assert_eq!(
        v["files"][0]["path"], "scripts/run.sh",
        "its files come along: {v}"
    );
    let (s, _) = d.get("/v1/skills/pdf-tools").await;
    assert_eq!(s, 404);
    let (_, ag) = d.get(&format!("/v1/agents/{id}")).await;
    assert_eq!(ag["skills"], json!(["pdf-kit"]), "{ag}");

    // A copy: another's files, its own SKILL.md.
    let (s, v) = d
        .post(
            "/v1/skills",
            json!({"content": skill_md("pdf-copy", "A copy"), "copyOf": "pdf-kit"}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["files"][0]["executable"], true, "{v}");
    assert_eq!(v["usedBy"], json!([]));
    let (s, p) = d
        .post(
            "/v1/skills",
            json!({"content": skill_md("pdf-other", "x"), "copyOf": "nothing"}),
        )
        .await;
    assert_problem(s, &p, 400, "skill unusable");

    let (s, _) = d.delete("/v1/skills/pdf-kit").await;
    assert_eq!(s, 204);
    let (_, ag) = d.get(&format!("/v1/agents/{id}")).await;
    assert_eq!(ag["skills"], json!([]), "{ag}");
    let (s, _) = d.delete("/v1/skills/pdf-kit").await;
    assert_eq!(s, 404);
    let (_, l) = d.get("/v1/skills").await;
    assert_eq!(l.as_array().unwrap().len(), 1, "{l}");
    assert!(l[0].get("scan").is_none(), "the list has no scan: {l}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_gives_a_skill_and_its_agents_cannot_pick_it() {
    let d = TestDaemon::start().await;
    d.fake_account("perso", "fk-SkillsApi1Token1111aaaa2222")
        .await;
    let (s, v) = d
        .post(
            "/v1/skills",
            json!({"content": skill_md("style", "House style")}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, p) = d
        .post("/v1/projects", json!({"folder": d.scope(), "agent": {"name": "Dev", "models": [{"account": "perso"}], "skills": ["style"]}}))
        .await;
    assert_eq!(s, 201, "{p}");
    let pid = p["id"].as_str().unwrap();
    let dev = p["agents"][0]["id"].as_str().unwrap();
    let (_, v) = d.get("/v1/skills/style").await;
    assert_eq!(v["usedBy"], json!(["agents/app/Dev"]), "{v}");

    let (s, p) = d
        .put(
            "/v1/skills/style",
            json!({"content": skill_md("style", "House style"), "projects": ["p_nope"]}),
        )
        .await;
    assert_problem(s, &p, 400, "project unknown");
    assert_eq!(p["detail"], "projects[0]: no project \"p_nope\"");
    let (s, v) = d
        .put(
            "/v1/skills/style",
            json!({"content": skill_md("style", "House style"), "projects": [pid]}),
        )
        .await;
    assert_eq!((s, v["projects"].clone()), (200, json!([pid])), "{v}");
    assert_eq!(v["usedBy"], json!([]), "its own pick is dropped: {v}");
    let (_, ag) = d.get(&format!("/v1/agents/{dev}")).await;
    assert_eq!(
        (ag["skills"].clone(), ag["projectSkills"].clone()),
        (json!([]), json!(["style"])),
        "{ag}"
    );

    let (s, e) = d
        .post(
            &format!("/v1/projects/{pid}/agents"),
            json!({"name": "Review", "models": [{"account": "perso"}], "skills": ["style"]}),
        )
        .await;
    assert_problem(s, &e, 400, "given by its project");

    // Renamed, the project follows; deleted, it loses it.
    let (s, _) = d
        .put(
            "/v1/skills/style",
            json!({"content": skill_md("house-style", "House style")}),
        )
        .await;
    assert_eq!(s, 200);
    let (_, ag) = d.get(&format!("/v1/agents/{dev}")).await;
    assert_eq!(ag["projectSkills"], json!(["house-style"]), "{ag}");
    let (s, _) = d.delete("/v1/skills/house-style").await;
    assert_eq!(s, 204);
    let (_, ag) = d.get(&format!("/v1/agents/{dev}")).await;
    assert_eq!(ag["projectSkills"], json!([]), "{ag}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zip_is_imported_from_its_shallowest_skill_md() {
    let d = TestDaemon::start().await;
    let md = skill_md("lint", "Lints things");
    let z = zip_of(&[
        ("repo-main/README.md", b"top", 0o644),
        ("repo-main/skills/lint/SKILL.md", md.as_bytes(), 0o644),
        ("repo-main/skills/lint/bin/lint", b"#!/bin/sh\n", 0o755),
        ("repo-main/skills/lint/.env", b"SECRET=1", 0o644),
        ("repo-main/skills/lint/same", b"bin/lint", 0o120_777),
        (
            "repo-main/skills/lint/deeper/SKILL.md",
            b"---\nname: other\n---\n",
            0o644,
        ),
    ]);
    let (s, v) = post_zip(&d, "", z.clone()).await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["name"], "lint");
    let files: Vec<(&str, bool)> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["executable"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        files,
        vec![("bin/lint", true), ("deeper/SKILL.md", false)],
        "hidden files and links left out"
    );
    assert_eq!(v["scan"]["executables"], json!(["bin/lint"]));
    let (s, p) = post_zip(&d, "", z.clone()).await;
    assert_problem(s, &p, 409, "skill exists");
    d.fake_account("perso", "fk-SkillsApi2Token1111aaaa2222")
        .await;
    let (s, proj) = d
        .post("/v1/projects", json!({"folder": d.scope(), "agent": {"name": "Dev", "models": [{"account": "perso"}]}}))
        .await;
    assert_eq!(s, 201, "{proj}");
    let pid = proj["id"].as_str().unwrap();
    let (s, v) = post_zip(&d, &format!("?replace=true&project={pid}"), z).await;
    assert_eq!((s, v["projects"].clone()), (200, json!([pid])), "{v}");
    let leftovers: Vec<_> = std::fs::read_dir(&d.state.config.skills_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        leftovers,
        vec![std::ffi::OsString::from("lint")],
        "no staging left behind"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_with_a_link_out_a_device_an_absolute_path_or_too_many_files_is_refused() {
    let d = TestDaemon::start().await;
    let md = skill_md("bad", "Bad");
    let ok: (&str, &[u8], u32) = ("bad/SKILL.md", md.as_bytes(), 0o644);

    let z = zip_of(&[ok, ("bad/out", b"../../.ssh/id_ed25519", 0o120_777)]);
    let (s, p) = post_zip(&d, "", z).await;
    assert_problem(s, &p, 400, "archive refused");
    assert_eq!(
        p["detail"],
        "bad/out: a link out of the archive (to ../../.ssh/id_ed25519)"
    );

    let mut z = zip_of(&[ok, ("bad/tty", b"", 0o644)]);
    set_mode(&mut z, "bad/tty", 0o020_666);
    let (s, p) = post_zip(&d, "", z).await;
    assert_problem(s, &p, 400, "archive refused");
    assert_eq!(p["detail"], "bad/tty: a device or special file");

    let mut z = zip_of(&[ok, ("Xetc/cron.d/job", b"* * * * * sh", 0o644)]);
    let at = z.windows(9).position(|w| w == b"Xetc/cron").unwrap();
    while let Some(i) = z.windows(9).position(|w| w == b"Xetc/cron") {
        z[i] = b'/';
    }
    assert!(at > 0);
    let (s, p) = post_zip(&d, "", z).await;
    assert_problem(s, &p, 400, "archive refused");
    assert_eq!(p["detail"], "/etc/cron.d/job: an absolute path");

    let names: Vec<String> = (0..2001).map(|i| format!("bad/f{i}")).collect();
    let mut entries = vec![ok];
    entries.extend(names.iter().map(|n| (n.as_str(), &b"x"[..], 0o644)));
    let (s, p) = post_zip(&d, "", zip_of(&entries)).await;
    assert_problem(s, &p, 400, "archive refused");
    assert_eq!(p["detail"], "the archive has 2002 entries, more than 2000");

    let (s, p) = post_zip(&d, "", b"not a zip".to_vec()).await;
    assert_problem(s, &p, 400, "archive refused");
    assert!(!d.state.config.skills_dir.join("bad").exists());
    assert_eq!(
        std::fs::read_dir(&d.state.config.skills_dir)
            .map(Iterator::count)
            .unwrap_or(0),
        0
    );
    d.stop().await;
}

/// An HTTPS server of the test CA answering `body` at /skill.zip, 404 elsewhere.
async fn archive_server(ca: &TestCa, body: Vec<u8>) -> (u16, tokio::task::JoinHandle<()>) {
    use http_body_util::Full;
    use hyper_util::rt::TokioIo;
    let tls = ca.server_config(&["localhost"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let body = Arc::new(body);
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (tls, body) = (tls.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(t) = tokio_rustls::TlsAcceptor::from(tls).accept(s).await else {
                    return;
                };
                let svc =
                    hyper::service::service_fn(move |r: hyper::Request<hyper::body::Incoming>| {
                        let body = body.clone();
                        async move {
                            let (status, b) = if r.uri().path() == "/skill.zip" {
                                (200, body.to_vec())
                            } else {
                                (404, b"no".to_vec())
                            };
                            let mut res = hyper::Response::new(Full::new(bytes::Bytes::from(b)));
                            *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            Ok::<_, std::convert::Infallible>(res)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(t), svc)
                    .await;
            });
        }
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_is_imported_from_an_https_url_trusting_the_configured_ca() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, &ca.pem).unwrap();
    let d = TestDaemon::start_with(Options {
        build_ca_bundle: Some(pem),
        ..Options::default()
    })
    .await;
    let md = skill_md("fetched", "Fetched over TLS");
    let (port, task) =
        archive_server(&ca, zip_of(&[("fetched/SKILL.md", md.as_bytes(), 0o644)])).await;
    let url = format!("https://localhost:{port}/skill.zip");
    let (s, v) = d.post("/v1/skills/import-url", json!({"url": url})).await;
    assert_eq!(s, 201, "{v}: {}", daemon_support::logs());
    assert_eq!(v["name"], "fetched");

    let (s, p) = d
        .post(
            "/v1/skills/import-url",
            json!({"url": format!("https://localhost:{port}/gone.zip")}),
        )
        .await;
    assert_problem(s, &p, 502, "fetch failed");
    assert!(p["detail"].as_str().unwrap().contains("404"), "{p}");
    for bad in [
        format!("http://localhost:{port}/skill.zip"),
        "file:///etc/passwd".into(),
        "not a url".into(),
    ] {
        let (s, p) = d.post("/v1/skills/import-url", json!({"url": bad})).await;
        assert_problem(s, &p, 400, "url invalid");
    }
    task.abort();
    d.stop().await;

    // Without the CA, the same server is not trusted.
    let d = TestDaemon::start().await;
    let (port, task) =
        archive_server(&ca, zip_of(&[("fetched/SKILL.md", md.as_bytes(), 0o644)])).await;
    let (s, p) = d
        .post(
            "/v1/skills/import-url",
            json!({"url": format!("https://localhost:{port}/skill.zip")}),
        )
        .await;
    assert_problem(s, &p, 502, "fetch failed");
    task.abort();
    d.stop().await;
}
