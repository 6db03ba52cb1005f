//! The `handler` resource verbs against a real handlerd (its sandboxes never start here): their
//! tables and sentences (insta snapshots, ids, paths and times filtered), `--json` answering the
//! API's objects, secrets read from stdin and never printed, errors as one line naming what and
//! how to fix with the documented exit codes (no backtrace, even with RUST_BACKTRACE=1),
//! completions and man pages naming every verb.

use std::path::Path;
use std::process::{Child, Command};

use serde_json::Value;
use test_support::user::free_port;

struct Daemon {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        test_support::handlerd::stop(&mut self.child);
    }
}

fn env(dir: &Path, port: u16) -> Vec<(&'static str, String)> {
    let mut env = test_support::handlerd::env(dir, &dir.join("harnesses"), port);
    env.push(("HOME", dir.join("home").display().to_string()));
    env
}

async fn start() -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    for d in ["home", "harnesses", "work"] {
        std::fs::create_dir_all(p.join(d)).unwrap();
    }
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_handlerd"));
    cmd.env("HANDLER_SANDBOX_COMMAND", "/bin/false");
    for (k, v) in env(p, port) {
        cmd.env(k, v);
    }
    let (child, _token) = test_support::handlerd::spawn(cmd, p, port).await;
    Daemon { child, port, dir }
}

/// One run of `handler`: its exit code, stdout, stderr.
struct Run {
    code: i32,
    out: String,
    err: String,
}

fn handler_in(dir: &Path, port: u16, args: &[&str], stdin: &str) -> Run {
    let mut c = assert_cmd::Command::new(env!("CARGO_BIN_EXE_handler"));
    c.args(args).write_stdin(stdin).env("RUST_BACKTRACE", "1");
    for (k, v) in env(dir, port) {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

impl Daemon {
    fn run(&self, args: &[&str]) -> Run {
        self.run_in(args, "")
    }
    fn run_in(&self, args: &[&str], stdin: &str) -> Run {
        handler_in(self.dir.path(), self.port, args, stdin)
    }
    /// Succeeds, or fails the test with what it said.
    fn ok(&self, args: &[&str]) -> String {
        self.ok_in(args, "")
    }
    fn ok_in(&self, args: &[&str], stdin: &str) -> String {
        let r = self.run_in(args, stdin);
        assert_eq!(r.code, 0, "handler {args:?}: {}{}", r.out, r.err);
        r.out
    }
    fn json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }
    /// Fails with `code`, one line on stderr starting `handler: `.
    fn fails(&self, args: &[&str], stdin: &str, code: i32) -> String {
        let r = self.run_in(args, stdin);
        assert_eq!(r.code, code, "handler {args:?}: {}{}", r.out, r.err);
        one_line(&r.err)
    }
    fn filters(&self) -> Vec<(String, String)> {
        vec![
            (
                regex_escape(&self.dir.path().display().to_string()),
                "[DIR]".into(),
            ),
            (r"\b[ap]_[0-9a-f]{10}\b".into(), "[ID]".into()),
            (
                r"\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)".into(),
                "[TIME]".into(),
            ),
            // A day alone (a token's expiry: a year from the test's day).
            (r"\b\d{4}-\d\d-\d\d\b".into(), "[DATE]".into()),
            (format!(":{}\\b", self.port), ":[PORT]".into()),
        ]
    }
    fn snap(&self, name: &str, text: &str) {
        let mut s = insta::Settings::clone_current();
        for (re, with) in self.filters() {
            s.add_filter(&re, with);
        }
        s.set_prepend_module_to_snapshot(false);
        s.bind(|| insta::assert_snapshot!(name, text));
    }
}

fn regex_escape(s: &str) -> String {
    s.replace('.', "\\.")
}

fn one_line(err: &str) -> String {
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "not one line: {err}");
    assert!(lines[0].starts_with("handler: "), "{err}");
    assert!(
        !err.contains("backtrace") && !err.contains("Stack"),
        "{err}"
    );
    lines[0].to_string()
}

const TOKEN: &str = "sk-ant-oat01-cli-test-token-93k";
const KEY: &str = "sk-or-cli-test-key-5521";

#[tokio::test]
async fn accounts_providers_and_secrets_from_the_command_line() {
    let d = start().await;
    d.snap("account_list_empty", &d.ok(&["account", "list"]));
    // A pasted token comes from stdin, is checked (its prefix) and never repeated.
    let e = d.fails(
        &[
            "account",
            "add",
            "cc",
            "--harness",
            "claude-code",
            "--token",
        ],
        "not-a-claude-token\n",
        1,
    );
    assert!(
        e.contains("422") && !e.contains("not-a-claude-token"),
        "{e}"
    );
    let out = d.ok_in(
        &[
            "account",
            "add",
            "cc",
            "--harness",
            "claude-code",
            "--description",
            "Mine",
            "--token",
        ],
        &format!("{TOKEN}\n"),
    );
    assert_eq!(out, "account cc added (logged in)\n");
    d.ok(&[
        "account",
        "add",
        "vf",
        "--harness",
        "vibe",
        "--context",
        "Work",
    ]);
    d.snap("account_list", &d.ok(&["account", "list"]));
    let cc = d.json(&["account", "show", "cc"]);
    assert_eq!(
        cc["token"],
        serde_json::json!({"secret": "accounts/cc/token"})
    );
    d.ok(&["account", "token", "cc", "--token-env", "CC_TOKEN"]);
    assert_eq!(
        d.json(&["account", "show", "cc"])["token"],
        serde_json::json!({"env": "CC_TOKEN"})
    );
    // `account login` of a token login says what to run instead (exit 2).
    assert_eq!(d.run(&["account", "login", "cc"]).code, 2);
    d.ok(&["account", "rm", "vf"]);
    let e = d.fails(&["account", "show", "vf"], "", 1);
    assert!(e.contains("404") && e.contains("vf"), "{e}");

    // Providers from the templates; the key from stdin, to the secret store only.
    d.snap("provider_templates", &d.ok(&["provider", "templates"]));
    d.ok(&["provider", "add", "local", "--template", "llamacpp"]);
    let out = d.ok_in(
        &["provider", "add", "or", "--template", "openrouter", "--key"],
        &format!("{KEY}\n"),
    );
    assert_eq!(out, "provider or added (key set)\n");
    d.ok(&[
        "provider",
        "edit",
        "local",
        "--model",
        "qwen",
        "--description",
        "llama-server",
    ]);
    d.snap("provider_list", &d.ok(&["provider", "list"]));
    let local = d.json(&["provider", "show", "local"]);
    assert_eq!(local["models"][0]["id"], "qwen");
    assert_eq!(
        local["endpoints"]["openai-chat"],
        "http://127.0.0.1:8080/v1"
    );

    // Secrets: set from stdin, listed without values; accounts/ is the account's own.
    d.ok_in(
        &[
            "secret",
            "set",
            "custom/deploy.key",
            "--description",
            "deploys",
        ],
        "v-8812\n",
    );
    let list = d.ok(&["secret", "list"]);
    d.snap("secret_list", &list);
    let e = d.fails(&["secret", "set", "accounts/cc/token"], "x\n", 1);
    assert!(e.contains("accounts/"), "{e}");
    let e = d.fails(&["secret", "set", "custom/empty"], "", 2);
    assert!(e.contains("empty"), "{e}");
    d.ok(&["secret", "rm", "custom/deploy.key"]);
    d.ok(&["provider", "rm", "or"]);
    let everything = format!(
        "{}{}",
        d.ok(&["--json", "secret", "list"]),
        d.ok(&["--json", "account", "list"])
    );
    for secret in [TOKEN, KEY, "v-8812"] {
        assert!(!everything.contains(secret));
    }
    let log = std::fs::read_to_string(d.dir.path().join("handlerd.log")).unwrap();
    assert!(
        !log.contains(TOKEN) && !log.contains(KEY),
        "a secret in handlerd's log"
    );
}

#[tokio::test]
async fn agents_projects_contexts_and_folders_from_the_command_line() {
    let d = start().await;
    let work = d.dir.path().join("work");
    let work_s = work.display().to_string();
    std::fs::create_dir_all(work.join("a")).unwrap();
    std::fs::create_dir_all(work.join("p")).unwrap();
    assert_eq!(
        d.ok(&["folder", "add", &work_s]),
        format!("agents may work in {work_s}\n")
    );
    d.snap("folder_list", &d.ok(&["folder", "list"]));
    d.ok(&["context", "add", "Work", "--color", "violet"]);
    let e = d.fails(&["context", "add", "Bad", "--color", "red"], "", 1);
    assert!(e.contains("color"), "{e}");
    d.ok(&["provider", "add", "local", "--template", "llamacpp"]);

    // An ad-hoc agent, its network switched: the widening flags say what they give.
    let scope = work.join("a").display().to_string();
    let made = d.json(&[
        "agent",
        "new",
        "--provider",
        "local",
        "--harness",
        "vibe",
        "--scope",
        &scope,
        "--name",
        "alpha",
    ]);
    let id = made["id"].as_str().unwrap().to_string();
    d.snap("agent_list", &d.ok(&["agent", "list"]));
    d.snap("agent_show", &d.ok(&["agent", "show", &id]));
    let r = d.run(&["agent", "network", &id, "--network", "open"]);
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        r.err
            .contains("--network open: its sandboxes reach any host"),
        "{}",
        r.err
    );
    assert!(r.out.starts_with("network: open\n"), "{}", r.out);
    let r = d.run(&[
        "agent",
        "network",
        &id,
        "--network",
        "filtered",
        "--log-only",
        "--allow",
        "example.org:443",
    ]);
    assert!(r.code == 0 && r.err.contains("only logged"), "{}", r.err);
    assert_eq!(
        r.out,
        "network: filtered (log-only)\nallow: example.org:443\n"
    );
    // The live switch back (PATCH).
    assert_eq!(
        d.ok(&["agent", "network", &id, "--enforce"]),
        "network: filtered (enforce)\nallow: example.org:443\n"
    );
    d.ok(&["agent", "network", &id, "--disallow", "example.org:443"]);
    assert_eq!(
        d.json(&["agent", "show", &id])["allow"],
        serde_json::json!([])
    );
    d.ok(&["agent", "edit", &id, "--name", "renamed", "--containers"]);
    let a = d.json(&["agent", "show", &id]);
    assert_eq!(
        (a["name"].as_str(), a["confinement"].as_str()),
        (Some("renamed"), Some("nested"))
    );
    let e = d.fails(&["agent", "new", "--name", "x"], "", 2);
    assert!(e.contains("--account"), "{e}");

    // A project in the Work context, its first agent on the provider (made for any context).
    let folder = work.join("p").display().to_string();
    let p = d.json(&[
        "project",
        "new",
        &folder,
        "--context",
        "Work",
        "--provider",
        "local",
        "--harness",
        "vibe",
    ]);
    let pid = p["id"].as_str().unwrap().to_string();
    d.ok(&["project", "edit", &pid, "--description", "the p project"]);
    d.snap("project_list", &d.ok(&["project", "list"]));
    d.snap("project_show", &d.ok(&["project", "show", &pid]));
    d.snap("context_list", &d.ok(&["context", "list"]));
    let agents = d.json(&["agent", "list", "--project", &pid]);
    assert_eq!(agents.as_array().map(Vec::len), Some(1));
    let e = d.fails(&["agent", "rm", agents[0]["id"].as_str().unwrap()], "", 1);
    assert!(e.contains("409"), "{e}");
    let e = d.fails(&["context", "rm", "Work"], "", 1);
    assert!(e.contains("409"), "{e}");
    d.ok(&["project", "rm", &pid]);
    d.ok(&["context", "rm", "Work"]);
    d.ok(&["agent", "rm", &id]);
    assert_eq!(
        d.ok(&["agent", "list"]),
        "no agents (make one: handler agent new --account A)\n"
    );
    assert_eq!(
        d.ok(&["folder", "rm", &work_s]),
        format!("{work_s} is no longer a work folder\n")
    );
    let e = d.fails(&["folder", "rm", &work_s], "", 2);
    assert!(e.contains("is not a work folder"), "{e}");
}

#[tokio::test]
async fn builds_and_image_updates_from_the_command_line() {
    let d = start().await;
    let builds = d.json(&["build", "list"]);
    let e = d.fails(&["build", "cancel", "b_nosuchbuild"], "", 1);
    assert!(e.contains("404"), "{e}");
    let e = d.fails(&["build", "start", "no-such-target"], "", 1);
    assert!(e.contains("no-such-target"), "{e}");
    assert!(builds.is_array());
    d.snap(
        "image_updates_set",
        &d.ok(&["image-updates", "set", "weekly"]),
    );
    assert_eq!(d.json(&["image-updates", "show"])["schedule"], "weekly");
    assert_eq!(d.run(&["image-updates", "set", "hourly"]).code, 2);
}

#[tokio::test]
async fn errors_are_one_line_with_their_exit_code_and_no_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // No token file: handlerd never started.
    let r = handler_in(dir.path(), port, &["agent", "list"], "");
    assert_eq!(r.code, 3, "{}", r.err);
    let line = one_line(&r.err);
    assert!(line.contains("is handlerd started?"), "{line}");
    // A token but nobody listening: the fix is named.
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    std::fs::write(dir.path().join("config/token"), "t\n").unwrap();
    let r = handler_in(dir.path(), port, &["provider", "list"], "");
    assert_eq!(r.code, 3);
    assert!(
        one_line(&r.err).contains("handler daemon start"),
        "{}",
        r.err
    );
    // --debug prints the backtrace RUST_BACKTRACE asked for.
    let r = handler_in(dir.path(), port, &["--debug", "provider", "list"], "");
    assert_eq!(r.code, 3);
    assert!(
        r.err.starts_with("handler: ") && r.err.contains("Stack backtrace"),
        "{}",
        r.err
    );
    // A wrong command line: clap's usage error, exit 2.
    assert_eq!(
        handler_in(dir.path(), port, &["agent", "frobnicate"], "").code,
        2
    );
    // The exit codes are in --help.
    let help = handler_in(dir.path(), port, &["--help"], "").out;
    assert!(
        help.contains("Exit codes:") && help.contains("3  handlerd cannot be reached"),
        "{help}"
    );
}

/// Every verb of the clap tree, as `handler --help` lists them.
fn verbs() -> Vec<String> {
    use clap::CommandFactory;
    handler_bins::cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

#[test]
fn completions_and_man_pages_name_every_verb() {
    let dir = tempfile::tempdir().unwrap();
    let verbs = verbs();
    assert!(verbs.len() > 12, "{verbs:?}");
    for shell in ["bash", "zsh", "fish"] {
        let r = handler_in(dir.path(), 1, &["completions", shell], "");
        assert_eq!(r.code, 0, "{}", r.err);
        for v in &verbs {
            assert!(r.out.contains(v.as_str()), "{shell} completions lack {v}");
        }
    }
    let bash = handler_in(dir.path(), 1, &["completions", "bash"], "").out;
    std::fs::write(dir.path().join("handler.bash"), &bash).unwrap();
    let st = Command::new("bash")
        .arg("-n")
        .arg(dir.path().join("handler.bash"))
        .status()
        .unwrap();
    assert!(st.success(), "bash cannot parse its completions");
    let man = handler_in(dir.path(), 1, &["man"], "")
        .out
        .replace("\\-", "-");
    assert!(
        man.starts_with(".ie") || man.contains(".TH handler"),
        "{}",
        &man[..200.min(man.len())]
    );
    for v in &verbs {
        assert!(
            man.contains(&format!("handler-{v}(1)")),
            "the man page lacks {v}"
        );
    }
    let out = dir.path().join("man");
    let r = handler_in(dir.path(), 1, &["man", "--dir", out.to_str().unwrap()], "");
    assert_eq!(r.code, 0, "{}", r.err);
    for v in &verbs {
        let page = out.join(format!("handler-{v}.1"));
        assert!(
            std::fs::metadata(&page).is_ok_and(|m| m.len() > 0),
            "{} missing",
            page.display()
        );
    }
}

/// A zip archive of `files` (path, text, executable).
fn zip_of(files: &[(&str, &str, bool)]) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (path, text, exec) in files {
        let mode = if *exec { 0o755 } else { 0o644 };
        let o = zip::write::SimpleFileOptions::default().unix_permissions(mode);
        w.start_file(*path, o).unwrap();
        w.write_all(text.as_bytes()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

const LINT_MD: &str = "---\nname: lint\ndescription: Lints the project\n---\n\n# Lint\n\nRun `scripts/run.sh`; docs at https://lint.example.com/docs.\n";

#[tokio::test]
async fn skills_from_the_command_line() {
    let d = start().await;
    d.snap("skill_list_empty", &d.ok(&["skill", "list"]));
    // A new one from its description; again: 409, one line, exit 1.
    let out = d.ok(&[
        "skill",
        "new",
        "greet",
        "--description",
        "Greets: the person",
    ]);
    assert_eq!(out.trim(), "skill greet made");
    let e = d.fails(&["skill", "new", "greet", "--description", "x"], "", 1);
    assert!(e.contains("skill exists"), "{e}");
    let e = d.fails(&["skill", "new", "greet"], "", 2);
    assert!(e.contains("--description"), "{e}");
    // Imported from a zip archive: a script and a host the scan reports.
    let zip = d.dir.path().join("lint.zip");
    std::fs::write(
        &zip,
        zip_of(&[
            ("lint/SKILL.md", LINT_MD, false),
            ("lint/scripts/run.sh", "#!/bin/sh\necho lint\n", true),
        ]),
    )
    .unwrap();
    let zip = zip.display().to_string();
    let out = d.ok(&["skill", "import", &zip]);
    assert_eq!(
        out.trim(),
        "skill lint imported: SKILL.md and 1 other files"
    );
    let e = d.fails(&["skill", "import", &zip], "", 1);
    assert!(e.contains("skill exists"), "{e}");
    d.ok(&["skill", "import", &zip, "--replace"]);
    d.snap("skill_list", &d.ok(&["skill", "list"]));
    d.snap("skill_show", &d.ok(&["skill", "show", "lint"]));
    d.snap("skill_scan", &d.ok(&["skill", "scan", "lint"]));
    let scan = d.json(&["skill", "scan", "lint"]);
    assert_eq!(scan["executables"], serde_json::json!(["scripts/run.sh"]));
    assert_eq!(scan["hosts"][0]["text"], "lint.example.com", "{scan}");
    let v = d.json(&["skill", "show", "lint"]);
    assert!(v["digest"].as_str().unwrap().starts_with("sha256:"), "{v}");
    // Edited from stdin: a new name renames it; without a terminal nor a file: refused.
    let md = "---\nname: hello\ndescription: Says hello\n---\n# Hello\n";
    let out = d.ok_in(&["skill", "edit", "greet", "--content", "-"], md);
    assert_eq!(out.trim(), "skill hello saved");
    assert_eq!(
        d.json(&["skill", "show", "hello"])["description"],
        "Says hello"
    );
    let e = d.fails(&["skill", "edit", "hello"], "", 2);
    assert!(e.contains("--content FILE"), "{e}");
    // A project unknown, a URL that is not https://, a skill that is not there: one line each.
    let e = d.fails(
        &["skill", "edit", "hello", "--project", "p_0000000000"],
        "",
        1,
    );
    assert!(e.contains("projects[0]"), "{e}");
    let e = d.fails(&["skill", "import", "http://example.com/x.zip"], "", 1);
    assert!(e.contains("url invalid"), "{e}");
    let e = d.fails(&["skill", "show", "nope"], "", 1);
    assert!(e.contains("nope"), "{e}");
    // Removed.
    assert_eq!(
        d.ok(&["skill", "rm", "hello"]).trim(),
        "skill hello removed"
    );
    let names: Vec<Value> = d.json(&["skill", "list"]).as_array().unwrap().clone();
    assert_eq!(names.len(), 1);
    assert_eq!(names[0]["name"], "lint");
}

#[tokio::test]
async fn addons_from_the_command_line() {
    let d = start().await;
    let c = d.json(&["addon", "catalog"]);
    let names: Vec<&str> = c
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["playwright", "shopify"]);
    // Without a terminal nobody confirms: exit 2, nothing installed.
    let e = d.fails(&["addon", "add", "shopify"], "", 2);
    assert!(e.contains("not confirmed"), "{e}");
    let installed = d.dir.path().join("config/addons/shopify");
    assert!(!installed.exists());
    let out = d.ok(&["addon", "add", "shopify", "--yes"]);
    assert_eq!(out.trim(), "addon shopify installed");
    assert!(installed.join("addon.toml").is_file());
    let c = d.json(&["addon", "catalog"]);
    assert_eq!(c[1]["installed"], true, "{c}");
    let out = d.ok(&["addon", "rm", "shopify"]);
    assert_eq!(out.trim(), "addon shopify removed");
    assert!(!installed.exists());
    let e = d.fails(&["addon", "rm", "shopify"], "", 1);
    assert!(e.contains("shopify"), "{e}");
}

#[tokio::test]
async fn an_addon_is_shown_with_its_bindings_from_the_command_line() {
    let d = start().await;
    let src = d.dir.path().join("work/notes");
    std::fs::create_dir_all(src.join("skills/notes-howto")).unwrap();
    std::fs::write(
        src.join("addon.toml"),
        "apiVersion = \"handler.addon/v1\"\nname = \"notes\"\ndescription = \"Notes\"\negress = [\"notes.example.org:443\"]\n\n[settings.url]\nenv = \"NOTES_URL\"\nrequired = true\n\n[secretSlots.token]\nenv = \"NOTES_TOKEN\"\n",
    )
    .unwrap();
    std::fs::write(
        src.join("skills/notes-howto/SKILL.md"),
        "---\nname: notes-howto\ndescription: How to file notes\n---\nUse notes.\n",
    )
    .unwrap();
    let s = src.display().to_string();
    d.ok(&["addon", "add", &s, "--yes"]);
    let bindings = d.dir.path().join("config/bindings");
    std::fs::create_dir_all(&bindings).unwrap();
    std::fs::write(
        bindings.join("team-notes.toml"),
        "apiVersion = \"handler.binding/v1\"\naddon = \"notes\"\n\n[settings]\nurl = \"https://notes.example.org\"\n",
    )
    .unwrap();
    d.snap("addon_show", &d.ok(&["addon", "show", "notes"]));
    let a = d.json(&["addon", "show", "notes"]);
    assert_eq!(a["name"], "notes");
    assert_eq!(a["source"], s.as_str());
    assert_eq!(a["bindings"], serde_json::json!(["team-notes"]), "{a}");
    assert_eq!(a["secretSlots"][0]["name"], "token");
    let e = d.fails(&["addon", "show", "nope"], "", 1);
    assert!(e.contains("nope"), "{e}");
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        if e.path().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[tokio::test]
async fn mini_apps_from_the_command_line() {
    let d = start().await;
    let folder = d.dir.path().join("work/hello");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/miniapps/hello"),
        &folder,
    );
    let f = folder.display().to_string();
    let out = d.ok(&["app", "register", &f]);
    assert!(out.contains("registered hello"), "{out}");
    let list = d.json(&["app", "ls"]);
    assert_eq!(list[0]["name"], "hello");
    assert!(list[0]["deployed"].is_null(), "{list}");
    let out = d.ok(&["app", "deploy", "hello"]);
    assert_eq!(
        out.trim(),
        format!("deployed hello 1.0.0 at http://hello.localhost:{}/", d.port)
    );
    d.snap("app_ls", &d.ok(&["app", "ls"]));

    // A version that needs a secret: shown, not deployed without the person's yes.
    let m = std::fs::read_to_string(folder.join("app.toml")).unwrap();
    std::fs::write(
        folder.join("app.toml"),
        m.replace("version = \"1.0.0\"", "version = \"1.1.0\"")
            + "[needs]\nsecrets = [\"API_KEY\"]\n",
    )
    .unwrap();
    let show = d.ok(&["app", "show", "hello"]);
    assert!(show.contains("a deploy adds  secret API_KEY"), "{show}");
    let line = d.fails(&["app", "deploy", "hello"], "", 2);
    assert!(line.contains("--yes"), "{line}");
    let line = d.fails(&["app", "deploy", "hello", "--yes"], "", 1);
    assert!(
        line.contains("handler app secret set hello API_KEY"),
        "{line}"
    );
    let value = "sk-app-cli-Secret0Value";
    let r = d.run_in(
        &["app", "secret", "set", "hello", "API_KEY"],
        &format!("{value}\n"),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(!r.out.contains(value) && !r.err.contains(value));
    d.ok(&["app", "deploy", "hello", "--yes"]);
    let shown = d.ok(&["app", "show", "hello"]);
    assert!(shown.contains("secret    API_KEY (set)"), "{shown}");
    assert!(!shown.contains(value), "{shown}");
    d.snap("app_show", &shown);
    let out = d.ok(&["app", "rollback", "hello", "1.0.0"]);
    assert!(out.contains("serves 1.0.0 again"), "{out}");
    let log = d.ok(&["app", "logs", "hello"]);
    assert!(
        log.contains("deployed 1.1.0") && log.contains("rolled back to 1.0.0"),
        "{log}"
    );
    let none = d.ok(&["app", "notifications", "hello"]);
    assert!(none.contains("no notification from hello"), "{none}");
    // What the notify socket's keeper writes (services::apps::notify, tested for real in
    // daemon_apps): the command prints it as a table, and as it is with --json.
    std::fs::write(
        d.dir.path().join("data/apps/hello/notifications.json"),
        r#"{"notifications":[{"at":"2026-12-06T03:40:00Z","version":"1.0.0","title":"Run logged","body":"5 km"}]}"#,
    )
    .unwrap();
    let table = d.ok(&["app", "notifications", "hello"]);
    assert!(
        table.contains("Run logged") && table.contains("5 km") && table.contains("1.0.0"),
        "{table}"
    );
    let listed = d.json(&["app", "notifications", "hello"]);
    assert_eq!(listed[0]["title"], "Run logged", "{listed}");
    let url = d.ok(&["app", "open", "hello", "--print"]);
    assert!(
        url.trim().starts_with(&format!(
            "http://hello.localhost:{}/_handler/login?code=",
            d.port
        )),
        "{url}"
    );
    let line = d.fails(&["app", "logs", "nothing"], "", 1);
    assert!(line.contains("no mini app named \"nothing\""), "{line}");
    d.ok(&["app", "rm", "hello"]);
    assert_eq!(d.json(&["app", "ls"]), serde_json::json!([]));
    assert!(folder.join("app.toml").is_file());
}
