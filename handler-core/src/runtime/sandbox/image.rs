//! `handler-sandbox-podman image <verb>` (A.7): build (a Containerfile, build args passed to
//! podman by name, `--no-intermediate` keeping no intermediate image), read a file out of an
//! image, inspect, remove (refused while a container uses it, image mounts included), tag,
//! list. Exit 0 when done, 1 otherwise with the reason on stderr. A build stopped by SIGTERM
//! (a cancelled D.4 build) stops podman and removes the working containers it left.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::process::Stdio;

use handler_sandbox::plan::labels;
use handler_sandbox::verbs::Build;
use serde_json::{Value, json};

use super::{engine, log, podman};

/// The build secret id the extra CA bundle is given as (`/run/secrets/handler-ca-bundle`).
pub const CA_BUNDLE_SECRET: &str = "handler-ca-bundle";

/// Why `--ca-bundle PATH` is refused.
#[derive(Debug, thiserror::Error)]
enum CaBundleError {
    #[error("image build: --ca-bundle {path}: {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("image build: --ca-bundle {0}: not a PEM certificate bundle (or a path with a comma)")]
    NotPem(String),
}

/// `--secret id=handler-ca-bundle,src=PATH` for a readable PEM bundle `path`.
fn ca_bundle_args(path: &str) -> Result<Vec<String>, CaBundleError> {
    let text = fs::read_to_string(path).map_err(|source| CaBundleError::Unreadable {
        path: path.to_string(),
        source,
    })?;
    if !text.contains("-----BEGIN CERTIFICATE-----") || path.contains(',') {
        return Err(CaBundleError::NotPem(path.to_string()));
    }
    Ok(vec![
        "--secret".into(),
        format!("id={CA_BUNDLE_SECRET},src={path}"),
    ])
}

fn fail(msg: impl std::fmt::Display) -> i32 {
    log(&msg.to_string());
    1
}

/// `image build`: prints the new image's id on stdout.
#[expect(
    clippy::too_many_lines,
    reason = "the build's argv, one flag per Build field, then its run and cleanup"
)]
pub fn build(req: &Build) -> i32 {
    let tmp = match tempdir() {
        Ok(t) => t,
        Err(e) => return fail(format!("image build: {e}")),
    };
    let iid = format!("{tmp}/iid");
    let mut args: Vec<String> = vec!["build".into(), "--iidfile".into(), iid.clone()];
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    if let Some(f) = &req.file {
        args.extend(["--file".into(), f.clone()]);
    } else if engine::current() == engine::Kind::Docker {
        // A.7's default is the context's Containerfile; docker's own would be its Dockerfile.
        args.extend(["--file".into(), format!("{}/Containerfile", req.context)]);
    }
    for t in &req.tags {
        args.extend(["--tag".into(), t.clone()]);
    }
    for a in &req.build_args {
        let (name, value) = match a.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        if name.is_empty() || !handler_sandbox::validate::is_env_name(&name) {
            let _ = fs::remove_dir_all(&tmp);
            return fail(format!(
                "image build: {name:?} is not a build argument name"
            ));
        }
        if let Some(v) = value {
            env.insert(name.clone(), v);
        }
        args.extend(["--build-arg".into(), name]);
    }
    if req.no_intermediate {
        if engine::current() == engine::Kind::Podman {
            args.push("--layers=false".into());
        }
        args.extend(["--rm".into(), "--force-rm".into()]);
    }
    if req.no_cache {
        args.push("--no-cache".into());
    }
    if let Some(ca) = &req.ca_bundle {
        if engine::current() == engine::Kind::Docker {
            let _ = fs::remove_dir_all(&tmp);
            return fail(format!(
                "image build: --ca-bundle {ca}: build secrets need BuildKit, which this Docker \
                 client lacks (classic builder); add the CAs to the Containerfile instead"
            ));
        }
        match ca_bundle_args(ca) {
            Ok(a) => args.extend(a),
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                return fail(e);
            }
        }
    }
    args.push(req.context.clone());
    let dangling_before =
        (req.no_intermediate && engine::current() == engine::Kind::Docker).then(dangling_images);
    // podman build's progress goes to our stderr: our stdout is the id only.
    let mut cmd = podman::command(&args);
    cmd.envs(&env)
        .envs(docker_build_env())
        .stdout(Stdio::from(std::io::stderr().as_fd_owned()))
        .stderr(Stdio::inherit());
    let status = match run_stoppable(cmd) {
        Stopped::Ended(st) => st,
        Stopped::BySignal(n) => {
            let _ = fs::remove_dir_all(&tmp);
            log("image build: stopped by a signal: its working containers removed");
            return 128 + n;
        }
    };
    let mut built = None;
    let code = match status {
        Ok(st) if st.success() => match fs::read_to_string(&iid) {
            Ok(id) => {
                let id = id.trim().trim_start_matches("sha256:").to_string();
                println!("{id}");
                built = Some(id);
                0
            }
            Err(e) => fail(format!("image build: no image id: {e}")),
        },
        Ok(st) => fail(format!(
            "image build failed ({} exit {})",
            engine::current().name(),
            st.code().unwrap_or(-1)
        )),
        Err(e) => fail(format!(
            "image build: cannot run {}: {e}",
            engine::current().name()
        )),
    };
    if let Some(before) = dangling_before {
        remove_new_dangling(&before, built.as_deref());
    }
    let _ = fs::remove_dir_all(&tmp);
    code
}

/// How a stoppable podman build ended.
pub(super) enum Stopped {
    /// It ended by itself (or could not start).
    Ended(std::io::Result<std::process::ExitStatus>),
    /// SIGTERM, SIGINT or SIGHUP came: it was stopped and what it left removed.
    BySignal(i32),
}

/// The buildah working containers (podman's `--external` ones) now.
fn working_containers() -> Vec<String> {
    podman::run(&["ps", "-a", "--external", "--format", "{{.ID}}"])
        .map(|o| {
            o.lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `cmd` (a podman build) in its own process group; a stopping signal stops the group
/// (SIGTERM, SIGKILL after 10 s) and removes the working containers that appeared meanwhile: a
/// stopped podman build leaves its working container behind (D.4: a cancelled build removes
/// what it built).
pub(super) fn run_stoppable(mut cmd: std::process::Command) -> Stopped {
    use std::os::unix::process::CommandExt;
    let before = working_containers();
    cmd.process_group(0);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Stopped::Ended(Err(e)),
    };
    rt.block_on(async move {
        let mut signals =
            match crate::runtime::signals::Signals::new(&crate::runtime::signals::STOPPING) {
                Ok(s) => s,
                Err(e) => return Stopped::Ended(Err(e)),
            };
        let mut child = match tokio::process::Command::from(cmd).spawn() {
            Ok(c) => c,
            Err(e) => return Stopped::Ended(Err(e)),
        };
        let n = tokio::select! {
            st = child.wait() => return Stopped::Ended(st),
            n = signals.recv() => n,
        };
        if let Some(pid) = child.id() {
            let group = nix::unistd::Pid::from_raw(-(pid as i32));
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGTERM);
            if tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait().await;
            }
        }
        for c in working_containers() {
            if !before.contains(&c) {
                let _ = podman::run(&["rm", "--force", &c]);
            }
        }
        Stopped::BySignal(n)
    })
}

/// The untagged leaf images (docker's `dangling`).
fn dangling_images() -> Vec<String> {
    podman::run(&["images", "-q", "--no-trunc", "--filter", "dangling=true"])
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// `--no-intermediate` on Docker: its classic builder keeps each earlier stage as an untagged
/// image; those that appeared during the build are removed (their untagged parents with them),
/// but the image built, untagged too until the daemon tags it (a multi-stage build's last
/// stage: a part's, decision 0164).
fn remove_new_dangling(before: &[String], built: Option<&str>) {
    for id in dangling_images() {
        let short = id.trim_start_matches("sha256:");
        if !before.contains(&id)
            && built != Some(short)
            && let Err(e) = podman::run(&["rmi", &id])
        {
            log(&format!("image build: an intermediate image stays: {e}"));
        }
    }
}

/// A copy of this process's stderr, for a child's stdout (our stdout carries the result only).
pub(super) fn stderr_fd() -> std::os::fd::OwnedFd {
    std::io::stderr().as_fd_owned()
}

trait AsFdOwned {
    fn as_fd_owned(&self) -> std::os::fd::OwnedFd;
}

impl AsFdOwned for std::io::Stderr {
    fn as_fd_owned(&self) -> std::os::fd::OwnedFd {
        use std::os::fd::AsFd;
        self.as_fd()
            .try_clone_to_owned()
            .expect("stderr can be duplicated")
    }
}

pub(super) fn tempdir() -> std::io::Result<String> {
    let base = std::env::temp_dir();
    for i in 0..100u32 {
        let p = base.join(format!("handler-image-{}-{i}", std::process::id()));
        if fs::create_dir(&p).is_ok() {
            return Ok(p.to_string_lossy().into_owned());
        }
    }
    Err(std::io::Error::other("no temporary folder"))
}

/// `image read IMAGE PATH`: the file's bytes on stdout; a folder or a missing path is refused.
pub fn read(image: &str, path: &str) -> i32 {
    if !path.starts_with('/') {
        return fail(format!("image read: {path:?} is not an absolute path"));
    }
    let ctr = match podman::run(&[
        "create",
        "--pull=never",
        "--entrypoint",
        engine::current().no_entrypoint(),
        "--label",
        "handler.image-read=1",
        image,
        "/",
    ]) {
        Ok(id) => id.trim().to_string(),
        Err(e) => return fail(format!("image read: {e}")),
    };
    let tmp = match tempdir() {
        Ok(t) => t,
        Err(e) => {
            let _ = podman::run(&["rm", "-f", &ctr]);
            return fail(format!("image read: {e}"));
        }
    };
    let dest = format!("{tmp}/out");
    let code = match podman::run(&["cp", &format!("{ctr}:{path}"), &dest]) {
        Err(e) => fail(format!("image read: no file {path:?} in {image}: {e}")),
        Ok(_) => match fs::symlink_metadata(&dest) {
            Ok(m) if m.is_dir() => fail(format!(
                "image read: {path:?} is a folder in {image}, not a file"
            )),
            Ok(m) if m.is_file() => match fs::read(&dest) {
                Ok(bytes) => {
                    let mut out = std::io::stdout().lock();
                    if out.write_all(&bytes).and_then(|()| out.flush()).is_ok() {
                        0
                    } else {
                        1
                    }
                }
                Err(e) => fail(format!("image read: {e}")),
            },
            Ok(_) => fail(format!(
                "image read: {path:?} is not a regular file in {image}"
            )),
            Err(e) => fail(format!("image read: {e}")),
        },
    };
    let _ = podman::run(&["rm", "-f", &ctr]);
    let _ = fs::remove_dir_all(&tmp);
    code
}

/// An image the engine cannot show.
#[derive(Debug, thiserror::Error)]
enum NoImage {
    #[error("no image {image:?}: {source}")]
    Engine {
        image: String,
        source: podman::PodmanError,
    },
    #[error("no image {0:?}")]
    Missing(String),
}

fn inspect_value(image: &str) -> Result<Value, NoImage> {
    let v = podman::json(&["image", "inspect", image]).map_err(|source| NoImage::Engine {
        image: image.to_string(),
        source,
    })?;
    let i = v
        .get(0)
        .ok_or_else(|| NoImage::Missing(image.to_string()))?;
    // Docker's inspect has the id as `sha256:<hex>` and the labels only in Config.
    let id = i["Id"].as_str().map_or(Value::Null, |s| {
        Value::String(s.trim_start_matches("sha256:").into())
    });
    let labels = match &i["Labels"] {
        Value::Null => i["Config"]["Labels"].clone(),
        l => l.clone(),
    };
    Ok(json!({
        "id": id,
        "names": i["RepoTags"],
        "digest": i["Digest"],
        "created": i["Created"],
        "size": i["Size"],
        "labels": labels,
        "env": i["Config"]["Env"],
        "entrypoint": i["Config"]["Entrypoint"],
        "cmd": i["Config"]["Cmd"],
        "layers": i["RootFS"]["Layers"],
    }))
}

/// `image inspect IMAGE`: its id, names, size, labels, env and layers (bottom first) as JSON.
pub fn inspect(image: &str) -> i32 {
    match inspect_value(image) {
        Ok(v) => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            0
        }
        Err(e) => fail(format!("image inspect: {e}")),
    }
}

/// The containers using image `id`: as their root filesystem or through an image mount (A6).
pub fn users_of(id: &str) -> Result<Vec<String>, podman::PodmanError> {
    let mut names = Vec::new();
    for filter in [
        format!("label={}{id}", labels::IMAGE_MOUNT_PREFIX),
        format!("ancestor={id}"),
    ] {
        for n in podman::run(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"])?.lines()
        {
            if !n.trim().is_empty() && !names.contains(&n.trim().to_string()) {
                names.push(n.trim().to_string());
            }
        }
    }
    Ok(names)
}

/// `image remove IMAGE`: refused while a container uses it.
pub fn remove(image: &str) -> i32 {
    let id = match podman::run(&["image", "inspect", "--format", "{{.Id}}", image]) {
        Ok(id) => id.trim().trim_start_matches("sha256:").to_string(),
        Err(e) => return fail(format!("image remove: no image {image:?}: {e}")),
    };
    match users_of(&id) {
        Ok(users) if !users.is_empty() => {
            return fail(format!(
                "image remove: {image} is in use by {}",
                users.join(", ")
            ));
        }
        Ok(_) => {}
        Err(e) => return fail(format!("image remove: {e}")),
    }
    match podman::run(&["rmi", image]) {
        Ok(_) => 0,
        Err(e) => fail(format!("image remove: {e}")),
    }
}

/// `image tag SOURCE TARGET`.
pub fn tag(source: &str, target: &str) -> i32 {
    match podman::run(&["tag", source, target]) {
        Ok(_) => 0,
        Err(e) => fail(format!("image tag: {e}")),
    }
}

/// `image list [REFERENCE]`: a JSON array of {id, names, created, size}.
pub fn list(reference: Option<&str>) -> i32 {
    if engine::current() == engine::Kind::Docker {
        return list_docker(reference);
    }
    let mut args = vec!["images", "--format", "json"];
    let filter;
    if let Some(r) = reference {
        filter = format!("reference={r}");
        args.extend(["--filter", filter.as_str()]);
    }
    match podman::json(&args) {
        Ok(v) => {
            let items: Vec<Value> = v
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| json!({"id": i["Id"], "names": i["Names"], "created": i["Created"], "size": i["Size"]}))
                .collect();
            println!("{}", Value::Array(items));
            0
        }
        Err(e) => fail(format!("image list: {e}")),
    }
}

/// Docker's builds: the classic builder, which every daemon has (20.10's client may lack buildx).
pub fn docker_build_env() -> Vec<(&'static str, &'static str)> {
    if engine::current() == engine::Kind::Docker {
        vec![("DOCKER_BUILDKIT", "0")]
    } else {
        Vec::new()
    }
}

/// `image list` on Docker: its listing gives one JSON object a line, names as repository:tag.
fn list_docker(reference: Option<&str>) -> i32 {
    let mut args = vec!["images", "--no-trunc", "--format", "{{json .}}"];
    if let Some(r) = reference {
        args.push(r);
    }
    match podman::run(&args) {
        Ok(text) => {
            let items: Vec<Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .map(|i| {
                    let name = format!(
                        "{}:{}",
                        i["Repository"].as_str().unwrap_or(""),
                        i["Tag"].as_str().unwrap_or("")
                    );
                    let id = i["ID"].as_str().unwrap_or("").trim_start_matches("sha256:");
                    json!({"id": id, "names": [name], "created": i["CreatedAt"], "size": i["Size"]})
                })
                .collect();
            println!("{}", Value::Array(items));
            0
        }
        Err(e) => fail(format!("image list: {e}")),
    }
}
