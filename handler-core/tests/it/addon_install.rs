//! Installing addons through a real daemon (G.5): the catalog listed and installed; a folder
//! previewed then installed (its files, the lock file's entry, AddonInfo.source); content changed
//! after the preview refused (422); a link out of the folder refused, alone or through other
//! links; the user's own addon
//! neither replaced (422) nor removed (409); a built-in-free removal refused while a binding
//! uses it, then allowed. An https:// .tar.gz served over real TLS (a test CA) previewed and
//! installed, other content refused (422), its bad entries refused naming them; stale stagings
//! removed; an archive over 32 MiB refused (422); an uninstall removing the addon's image, or
//! keeping it when the runtime refuses.

use crate::daemon_support;

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::egress_support::TestCa;
use daemon_support::{Options, TestDaemon, assert_problem};
use serde_json::{Value, json};

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A valid addon `name` without image in `dir`: env, a setting, a secret slot, egress, a skill.
fn source(dir: &Path, name: &str) {
    write(
        &dir.join("addon.toml"),
        &format!(
            "apiVersion = \"handler.addon/v1\"\nname = \"{name}\"\ndescription = \"Notes\"\negress = [\"notes.example.org:443\"]\n\n[env]\nNOTES_FORMAT = \"md\"\n\n[settings.url]\nenv = \"NOTES_URL\"\nrequired = true\n\n[secretSlots.token]\nenv = \"NOTES_TOKEN\"\n"
        ),
    );
    write(
        &dir.join("skills/notes-howto/SKILL.md"),
        "---\nname: notes-howto\ndescription: How to file notes\n---\nUse notes.\n",
    );
}

async fn preview(d: &TestDaemon, src: &str) -> (u16, Value) {
    d.post("/v1/addons/preview", json!({"source": src})).await
}

#[tokio::test]
async fn a_folder_is_previewed_then_installed_and_recorded() {
    let d = TestDaemon::start().await;
    let src = d.home.path().join("src/notes");
    source(&src, "notes");
    let s = src.display().to_string();
    let (st, p) = preview(&d, &s).await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["name"], "notes");
    assert_eq!(
        p["env"],
        json!(["NOTES_FORMAT", "NOTES_TOKEN", "NOTES_URL"])
    );
    assert_eq!(p["egress"], json!(["notes.example.org:443"]));
    assert_eq!(p["skills"], json!(["notes-howto"]));
    assert_eq!(p["settings"][0]["name"], "url");
    assert_eq!(p["secretSlots"][0]["name"], "token");
    assert!(p.get("replaces").is_none(), "{p}");
    let digest = p["digest"].as_str().unwrap().to_string();
    assert!(
        d.home
            .path()
            .join(format!(
                ".local/state/handler-ai/addon-staging/{digest}/notes/addon.toml"
            ))
            .is_file(),
        "staged under its digest"
    );

    // Changed after the preview: refused, nothing installed.
    write(&src.join("extra.txt"), "more");
    let (st, e) = d
        .post("/v1/addons/install", json!({"source": s, "digest": digest}))
        .await;
    assert_eq!(st, 422, "{e}");
    assert!(e["detail"].as_str().unwrap().contains("digest"), "{e}");
    let addons = d.home.path().join(".config/handler-ai/addons");
    assert!(!addons.join("notes").exists());
    std::fs::remove_file(src.join("extra.txt")).unwrap();

    let (st, i) = d
        .post("/v1/addons/install", json!({"source": s, "digest": digest}))
        .await;
    assert_eq!(st, 201, "{i}");
    assert_eq!(i["addon"]["name"], "notes");
    assert_eq!(i["addon"]["source"], s.as_str());
    assert_eq!(i["addon"]["builtin"], false);
    assert!(i["addon"].get("error").is_none(), "{i}");
    assert!(i.get("build").is_none(), "no image, no build: {i}");
    assert!(addons.join("notes/skills/notes-howto/SKILL.md").is_file());
    let lock =
        std::fs::read_to_string(d.home.path().join(".config/handler-ai/addons.lock.toml")).unwrap();
    let lock: toml::Table = toml::from_str(&lock).unwrap();
    let e = &lock["addons"]["notes"];
    assert_eq!(e["source"].as_str(), Some(s.as_str()));
    assert_eq!(e["digest"].as_str(), Some(digest.as_str()));
    assert!(e["installedAt"].as_str().unwrap().contains('T'), "{e}");

    // Previewed again: it replaces the installed one (an update).
    let (_, p) = preview(&d, &s).await;
    assert_eq!(p["replaces"], "installed");

    // A binding uses it: removal refused; then allowed, folder and lock entry gone.
    let (st, b) = d
        .post(
            "/v1/bindings",
            json!({"name": "nb", "addon": "notes", "settings": {"url": "u"}}),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    let (st, e) = d.delete("/v1/addons/notes").await;
    assert_eq!(st, 409, "{e}");
    assert!(e["detail"].as_str().unwrap().contains("nb"), "{e}");
    assert_eq!(d.delete("/v1/bindings/nb").await.0, 204);
    let (st, e) = d.delete("/v1/addons/notes").await;
    assert_eq!(st, 204, "{e}");
    assert!(!addons.join("notes").exists());
    let lock =
        std::fs::read_to_string(d.home.path().join(".config/handler-ai/addons.lock.toml")).unwrap();
    assert!(!lock.contains("notes"), "{lock}");
}

#[tokio::test]
async fn the_catalog_is_listed_and_installed() {
    let d = TestDaemon::start().await;
    let (st, c) = d.get("/v1/addon-catalog").await;
    assert_eq!(st, 200, "{c}");
    let names: Vec<&str> = c
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["playwright", "shopify"]);
    assert!(
        c.as_array()
            .unwrap()
            .iter()
            .all(|e| e["installed"] == false)
    );
    let (_, all) = d.get("/v1/addons").await;
    assert!(
        all.as_array()
            .unwrap()
            .iter()
            .all(|a| a["name"] != "shopify"),
        "the catalog is not loaded: {all}"
    );
    let (st, p) = preview(&d, "catalog:shopify").await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["image"], "localhost/handler-ai-addon-shopify");
    assert_eq!(p["commands"], json!(["shopify"]));
    assert_eq!(p["skills"], json!(["shopify-theme"]));
    let (st, i) = d
        .post(
            "/v1/addons/install",
            json!({"source": "catalog:shopify", "digest": p["digest"]}),
        )
        .await;
    assert_eq!(st, 201, "{i}");
    assert_eq!(i["addon"]["source"], "catalog:shopify");
    assert_eq!(i["addon"]["updateAvailable"], false);
    assert!(i["addon"].get("error").is_none(), "{i}");
    let (_, c) = d.get("/v1/addon-catalog").await;
    let shop = c
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "shopify")
        .unwrap()
        .clone();
    assert_eq!(shop["installed"], true);
    // What is installed differs from what Handler ships: an update is available.
    write(
        &d.home.path().join(".config/handler-ai/addons.lock.toml"),
        &std::fs::read_to_string(d.home.path().join(".config/handler-ai/addons.lock.toml"))
            .unwrap()
            .replace(p["digest"].as_str().unwrap(), "0000"),
    );
    let (_, a) = d.get("/v1/addons/shopify").await;
    assert_eq!(a["updateAvailable"], true, "{a}");
    assert_eq!(preview(&d, "catalog:nope").await.0, 404);
}

#[tokio::test]
async fn a_link_out_of_the_folder_is_refused() {
    let d = TestDaemon::start().await;
    let src = d.home.path().join("src/linky");
    source(&src, "linky");
    std::os::unix::fs::symlink("../../../.config", src.join("out")).unwrap();
    let (st, e) = preview(&d, &src.display().to_string()).await;
    assert_eq!(st, 422, "{e}");
    assert!(e["detail"].as_str().unwrap().contains("out"), "{e}");
    std::fs::remove_file(src.join("out")).unwrap();
    // F9 (issue 27): each of these stays inside read alone; together `p` is the folder's parent.
    std::os::unix::fs::symlink(".", src.join("q")).unwrap();
    std::os::unix::fs::symlink("q/..", src.join("p")).unwrap();
    std::os::unix::fs::symlink("p/..", src.join("r")).unwrap();
    let (st, e) = preview(&d, &src.display().to_string()).await;
    assert_problem(st, &e, 422, "source refused");
    assert!(
        e["detail"]
            .as_str()
            .unwrap()
            .contains("p: a link out of the addon"),
        "{e}"
    );
    for l in ["p", "q", "r"] {
        std::fs::remove_file(src.join(l)).unwrap();
    }
    std::os::unix::fs::symlink("skills/notes-howto/SKILL.md", src.join("inside")).unwrap();
    assert_eq!(preview(&d, &src.display().to_string()).await.0, 200);
    let (st, e) = preview(&d, "relative/path").await;
    assert_eq!(st, 400, "{e}");
    assert!(e["detail"].as_str().unwrap().starts_with("source:"), "{e}");
}

/// F2 (issue 27): an addon naming another image than its own `localhost/handler-ai-addon-<name>`
/// (here the egress proxy's, whose switch would retag it) is refused by the preview and by the
/// install (422 addon invalid naming `image`), and nothing is installed.
#[tokio::test]
async fn an_addon_naming_another_image_than_its_own_is_refused() {
    let d = TestDaemon::start().await;
    let src = d.home.path().join("src/proxy");
    for image in [
        "localhost/handler-network-filter",
        "localhost/handler-ai-toolbox",
        "docker.io/library/debian",
        "-x",
    ] {
        write(
            &src.join("addon.toml"),
            &format!(
                "apiVersion = \"handler.addon/v1\"\nname = \"proxy\"\nimage = {image:?}\ncommands = [\"proxy\"]\n"
            ),
        );
        write(&src.join("Containerfile"), "FROM ${TOOLBOX_IMAGE}\n");
        let (st, e) = preview(&d, &src.display().to_string()).await;
        assert_problem(st, &e, 422, "addon invalid");
        let detail = e["detail"].as_str().unwrap();
        assert!(
            detail.contains("image: ") && detail.contains("localhost/handler-ai-addon-proxy"),
            "{image}: {e}"
        );
        let entries = vec![
            handler_core::daemon::services::addon_install::SourceEntry::File {
                path: "Containerfile".into(),
                bytes: b"FROM ${TOOLBOX_IMAGE}\n".to_vec(),
                exec: false,
            },
            handler_core::daemon::services::addon_install::SourceEntry::File {
                path: "addon.toml".into(),
                bytes: std::fs::read(src.join("addon.toml")).unwrap(),
                exec: false,
            },
        ];
        let digest = handler_core::daemon::services::addon_install::digest(&entries);
        let (st, e) = d
            .post(
                "/v1/addons/install",
                json!({"source": src.display().to_string(), "digest": digest}),
            )
            .await;
        assert_problem(st, &e, 422, "addon invalid");
        assert!(e["detail"].as_str().unwrap().contains("image: "), "{e}");
        assert!(
            !d.home
                .path()
                .join(".config/handler-ai/addons/proxy")
                .exists()
        );
    }
    // Its own name's image is previewed.
    write(
        &src.join("addon.toml"),
        "apiVersion = \"handler.addon/v1\"\nname = \"proxy\"\nimage = \"localhost/handler-ai-addon-proxy\"\ncommands = [\"proxy\"]\n",
    );
    let (st, p) = preview(&d, &src.display().to_string()).await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["image"], "localhost/handler-ai-addon-proxy");
    d.stop().await;
}

#[tokio::test]
async fn the_users_own_addon_is_neither_replaced_nor_removed() {
    let d = TestDaemon::start().await;
    let own = d.home.path().join(".config/handler-ai/addons/mine");
    source(&own, "mine");
    let src = d.home.path().join("src/mine");
    source(&src, "mine");
    write(&src.join("extra.txt"), "other content");
    let s = src.display().to_string();
    let (st, p) = preview(&d, &s).await;
    assert_eq!(st, 200, "{p}");
    assert_eq!(p["replaces"], "own");
    let (st, e) = d
        .post(
            "/v1/addons/install",
            json!({"source": s, "digest": p["digest"]}),
        )
        .await;
    assert_eq!(st, 422, "{e}");
    assert!(!own.join("extra.txt").exists(), "not replaced");
    let (st, e) = d.delete("/v1/addons/mine").await;
    assert_eq!(st, 409, "{e}");
    assert!(own.join("addon.toml").is_file(), "not removed");
}

/// One entry of a test archive, written as is (no path checks).
#[derive(Clone)]
enum T<'a> {
    File(&'a str, &'a [u8], u32),
    Dir(&'a str),
    Link(&'a str, &'a str),
    Char(&'a str),
    /// A pax global header, as forges' archives start with.
    Global,
}

fn tar_gz(entries: &[T<'_>]) -> Vec<u8> {
    use flate2::{Compression, write::GzEncoder};
    use tar::{EntryType, Header};
    let mut b = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for e in entries {
        let mut h = Header::new_ustar();
        let none: &[u8] = &[];
        let (path, data, ty, mode): (&str, &[u8], EntryType, u32) = match e {
            T::File(p, d, m) => (*p, *d, EntryType::Regular, *m),
            T::Dir(p) => (*p, none, EntryType::Directory, 0o755),
            T::Link(p, t) => {
                h.set_link_name(t).unwrap();
                (*p, none, EntryType::Symlink, 0o777)
            }
            T::Char(p) => (*p, none, EntryType::Char, 0o644),
            T::Global => (
                "pax_global_header",
                &b"52 comment=0123456789012345678901234567890123456789\n"[..],
                EntryType::XGlobalHeader,
                0o644,
            ),
        };
        h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_entry_type(ty);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

const MANIFEST: &str = "apiVersion = \"handler.addon/v1\"\nname = \"tarred\"\ndescription = \"From an archive\"\negress = [\"tarred.example.org:443\"]\n";
const SKILL: &str = "---\nname: tarred-howto\ndescription: How\n---\nUse it.\n";

/// A forge-like archive of the addon `tarred`: one top folder, a pax global header.
fn tarred(extra: &[T<'_>]) -> Vec<u8> {
    let mut v = vec![
        T::Global,
        T::Dir("tarred-main/"),
        T::File("tarred-main/addon.toml", MANIFEST.as_bytes(), 0o644),
        T::File(
            "tarred-main/skills/tarred-howto/SKILL.md",
            SKILL.as_bytes(),
            0o644,
        ),
        T::File("tarred-main/bin/run", b"#!/bin/sh\n", 0o755),
        T::Link("tarred-main/latest", "bin/run"),
    ];
    v.extend(extra.iter().cloned());
    tar_gz(&v)
}

/// An HTTPS server of the test CA answering what `body` holds now at any path.
pub(crate) async fn archive_server(
    ca: &TestCa,
    body: Arc<Mutex<Vec<u8>>>,
) -> (u16, tokio::task::JoinHandle<()>) {
    use http_body_util::Full;
    use hyper_util::rt::TokioIo;
    let tls = ca.server_config(&["localhost"]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (tls, body) = (tls.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(t) = tokio_rustls::TlsAcceptor::from(tls).accept(s).await else {
                    return;
                };
                let svc =
                    hyper::service::service_fn(move |_r: hyper::Request<hyper::body::Incoming>| {
                        let b = body.lock().unwrap().clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                bytes::Bytes::from(b),
                            )))
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

/// A daemon trusting the test CA for its fetches.
pub(crate) async fn trusting(ca: &TestCa, dir: &Path) -> TestDaemon {
    let pem = dir.join("ca.pem");
    std::fs::write(&pem, &ca.pem).unwrap();
    TestDaemon::start_with(Options {
        build_ca_bundle: Some(pem),
        ..Options::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_archive_is_previewed_then_installed_and_other_content_refused() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let d = trusting(&ca, dir.path()).await;
    let body = Arc::new(Mutex::new(tarred(&[])));
    let (port, task) = archive_server(&ca, body.clone()).await;
    let url = format!("https://localhost:{port}/tarred-main.tar.gz");
    let (st, p) = preview(&d, &url).await;
    assert_eq!(st, 200, "{p}: {}", daemon_support::logs());
    assert_eq!(p["name"], "tarred");
    assert_eq!(p["source"], url.as_str());
    assert_eq!(p["egress"], json!(["tarred.example.org:443"]));
    assert_eq!(p["skills"], json!(["tarred-howto"]));
    let digest = p["digest"].as_str().unwrap().to_string();
    let staging = d
        .home
        .path()
        .join(".local/state/handler-ai/addon-staging")
        .join(&digest);
    assert!(staging.join("tarred/addon.toml").is_file(), "staged");

    // The archive changed after the preview: refused, nothing installed.
    *body.lock().unwrap() = tarred(&[T::File("tarred-main/extra.txt", b"more", 0o644)]);
    let (st, e) = d
        .post(
            "/v1/addons/install",
            json!({"source": url, "digest": digest}),
        )
        .await;
    assert_problem(st, &e, 422, "digest differs");
    let addons = d.home.path().join(".config/handler-ai/addons");
    assert!(!addons.join("tarred").exists());

    *body.lock().unwrap() = tarred(&[]);
    let (st, i) = d
        .post(
            "/v1/addons/install",
            json!({"source": url, "digest": digest}),
        )
        .await;
    assert_eq!(st, 201, "{i}");
    assert_eq!(i["addon"]["source"], url.as_str());
    assert!(i["addon"].get("error").is_none(), "{i}");
    let installed = addons.join("tarred");
    assert!(installed.join("skills/tarred-howto/SKILL.md").is_file());
    assert!(!installed.join("pax_global_header").exists());
    {
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(installed.join("bin/run")).unwrap();
        assert_ne!(m.permissions().mode() & 0o111, 0, "the exec bit kept");
    }
    assert_eq!(
        std::fs::read_link(installed.join("latest")).unwrap(),
        Path::new("bin/run")
    );
    assert!(
        !staging.exists(),
        "the staging folder goes after the install"
    );

    // An archive's content digests as the same folder's does.
    let folder = d.home.path().join("src/tarred");
    write(&folder.join("addon.toml"), MANIFEST);
    write(&folder.join("skills/tarred-howto/SKILL.md"), SKILL);
    write(&folder.join("bin/run"), "#!/bin/sh\n");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            folder.join("bin/run"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("bin/run", folder.join("latest")).unwrap();
    let (st, f) = preview(&d, &folder.display().to_string()).await;
    assert_eq!(st, 200, "{f}");
    assert_eq!(f["digest"], digest.as_str());
    task.abort();
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_with_a_link_out_an_absolute_path_a_device_or_too_many_files_is_refused() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let d = trusting(&ca, dir.path()).await;
    let body = Arc::new(Mutex::new(Vec::new()));
    let (port, task) = archive_server(&ca, body.clone()).await;
    let url = format!("https://localhost:{port}/a.tar.gz");
    let names: Vec<String> = (0..2001).map(|i| format!("tarred-main/f{i}")).collect();
    let many: Vec<T<'_>> = names.iter().map(|n| T::File(n, b"", 0o644)).collect();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            tarred(&[T::Link("tarred-main/out", "../../etc/passwd")]),
            "tarred-main/out: a link out of the archive",
        ),
        (
            tarred(&[T::Link("tarred-main/up", "../tarred-main/addon.toml")]),
            "up: a link out of the addon",
        ),
        (
            tarred(&[T::File("/etc/cron.d/x", b"x", 0o644)]),
            "/etc/cron.d/x: an absolute path",
        ),
        (
            tarred(&[T::File("tarred-main/../x", b"x", 0o644)]),
            "tarred-main/../x: a path leaving the archive",
        ),
        (
            tarred(&[T::Char("tarred-main/null")]),
            "tarred-main/null: a device",
        ),
        (tarred(&many), "more than 2000"),
        (b"not gzip at all".to_vec(), "not a .tar.gz archive"),
    ];
    for (archive, want) in cases {
        *body.lock().unwrap() = archive;
        let (st, e) = preview(&d, &url).await;
        assert_problem(st, &e, 422, "source refused");
        let detail = e["detail"].as_str().unwrap();
        assert!(detail.contains(want), "{want}: {e}");
    }
    assert!(
        !d.home
            .path()
            .join(".config/handler-ai/addons/tarred")
            .exists()
    );
    let (st, e) = preview(&d, "https://").await;
    assert_problem(st, &e, 400, "source invalid");
    task.abort();
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_over_32_mib_is_refused_422_a_skills_400() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let d = trusting(&ca, dir.path()).await;
    let body = Arc::new(Mutex::new(vec![0u8; (32 << 20) + 1]));
    let (port, task) = archive_server(&ca, body).await;
    let url = format!("https://localhost:{port}/big.tar.gz");
    let (st, e) = preview(&d, &url).await;
    assert_problem(st, &e, 422, "source refused");
    assert!(
        e["detail"].as_str().unwrap().contains("more than 32 MiB"),
        "{e}"
    );
    let (st, e) = d
        .post(
            "/v1/addons/install",
            json!({"source": url, "digest": "0".repeat(64)}),
        )
        .await;
    assert_problem(st, &e, 422, "source refused");
    // The same fetch for a skill keeps the skills importer's answer (D.17's archive refusals).
    let (st, e) = d
        .post(
            "/v1/skills/import-url",
            json!({"url": format!("https://localhost:{port}/big.zip")}),
        )
        .await;
    assert_problem(st, &e, 400, "archive refused");
    task.abort();
    d.stop().await;
}

#[tokio::test]
async fn a_previews_staging_older_than_an_hour_goes_at_the_next_preview() {
    let d = TestDaemon::start().await;
    let staging = d.home.path().join(".local/state/handler-ai/addon-staging");
    for n in ["old", "recent"] {
        std::fs::create_dir_all(staging.join(n).join("x")).unwrap();
    }
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    std::fs::File::open(staging.join("old"))
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    let src = d.home.path().join("src/notes");
    source(&src, "notes");
    let (st, p) = preview(&d, &src.display().to_string()).await;
    assert_eq!(st, 200, "{p}");
    assert!(!staging.join("old").exists(), "stale: removed");
    assert!(staging.join("recent").is_dir(), "recent: kept");
    assert!(staging.join(p["digest"].as_str().unwrap()).is_dir());
}

/// An installed addon with an image, as Handler installs it (its folder and its lock entry).
fn installed_with_image(d: &TestDaemon, name: &str) {
    let dir = d.home.path().join(".config/handler-ai/addons").join(name);
    write(
        &dir.join("addon.toml"),
        &format!(
            "apiVersion = \"handler.addon/v1\"\nname = \"{name}\"\nimage = \"localhost/handler-ai-addon-{name}\"\ncommands = [\"{name}\"]\n"
        ),
    );
    write(&dir.join("Containerfile"), "FROM ${TOOLBOX_IMAGE}\n");
    let lock = d.home.path().join(".config/handler-ai/addons.lock.toml");
    let mut text = std::fs::read_to_string(&lock).unwrap_or_default();
    text.push_str(&format!(
        "[addons.{name}]\nsource = \"/src/{name}\"\ndigest = \"00\"\ninstalledAt = \"2026-12-02T00:00:00Z\"\n"
    ));
    write(&lock, &text);
}

#[tokio::test]
async fn an_uninstall_removes_the_addons_image_or_keeps_it_when_the_runtime_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("verbs.log");
    // The runtime's image verbs: logged; `remove` refused for an image a container uses.
    let script = format!(
        "printf '%s\\n' \"$*\" >> {}; case \"$*\" in 'image remove -- '*busy*) echo 'image in use by a container' >&2; exit 1;; esac",
        log.display()
    );
    let d = TestDaemon::start_with(Options {
        sandbox_command: Some(vec!["sh".into(), "-c".into(), script, "sh".into()]),
        ..Options::default()
    })
    .await;
    installed_with_image(&d, "idle");
    installed_with_image(&d, "busy");
    let (_, a) = d.get("/v1/addons/idle").await;
    assert!(a.get("error").is_none(), "{a}");
    let (st, e) = d.delete("/v1/addons/idle").await;
    assert_eq!(st, 204, "{e}");
    let verbs = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        verbs
            .lines()
            .any(|l| l == "image remove -- localhost/handler-ai-addon-idle:latest"),
        "{verbs}"
    );
    let (st, e) = d.delete("/v1/addons/busy").await;
    assert_eq!(st, 204, "the uninstall succeeds: {e}");
    assert!(
        !d.home
            .path()
            .join(".config/handler-ai/addons/busy")
            .exists()
    );
    assert!(
        daemon_support::logs().contains("the addon's image is kept"),
        "the refusal is logged"
    );
}
