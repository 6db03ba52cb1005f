//! Validation of a SandboxSpec on its own (exit 65, the field named): names, paths, env, files,
//! mounts, writable paths, resources, labels. What this host can enforce is the plan's business
//! (exit 64, `plan`).

use std::collections::BTreeSet;

use handler_contracts::sandbox::{
    CA_ENV_VARS, DISPLAY_ENV_VARS, MountKind, NetworkPolicy, PROXY_ENV_VARS, SandboxSpec,
};

use crate::error::SpecError;

type Result<T = ()> = std::result::Result<T, SpecError>;

fn invalid<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T> {
    Err(SpecError::invalid(field, message))
}

/// Label keys the runtime writes itself; a spec's labels may not use them.
pub const RESERVED_LABEL_PREFIXES: [&str; 4] = [
    "handler.launcher.",
    "handler.image-mount.",
    "handler.sandbox",
    "handler.instance",
];

/// A container name podman accepts: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`, at most 128 characters.
pub fn is_sandbox_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// An environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// An absolute, normalized path: starts with `/`, no `.`, `..` or empty component, no trailing
/// `/` (except `/` itself), no NUL or newline.
pub fn check_abs_path(field: &str, p: &str) -> Result {
    if !p.starts_with('/') {
        return invalid(field, format!("{p:?} is not an absolute path"));
    }
    if p.contains('\0') || p.contains('\n') {
        return invalid(field, format!("{p:?} holds a NUL or newline"));
    }
    if p != "/"
        && p[1..]
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return invalid(
            field,
            format!("{p:?} is not normalized (no '.', '..', '//' or trailing '/')"),
        );
    }
    Ok(())
}

/// Whether `inner` is `outer` or inside it (both normalized absolute paths).
pub fn is_within(inner: &str, outer: &str) -> bool {
    outer == "/"
        || inner == outer
        || (inner.starts_with(outer) && inner.as_bytes()[outer.len()] == b'/')
}

/// A file mode written in octal: `644`, `0644`, `0755`, `4755` is refused (no special bits).
pub fn parse_mode(field: &str, mode: &str) -> Result<u32> {
    let digits = mode.strip_prefix('0').unwrap_or(mode);
    if !(3..=3).contains(&digits.len()) || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return invalid(
            field,
            format!("{mode:?} is not an octal file mode like \"0644\""),
        );
    }
    Ok(u32::from_str_radix(digits, 8).expect("octal digits"))
}

fn check_memory(v: &str) -> bool {
    let v = v.trim_end_matches(['b', 'k', 'm', 'g', 'B', 'K', 'M', 'G']);
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && v.bytes().any(|b| b != b'0')
}

fn check_cpus(v: &str) -> bool {
    let mut parts = v.splitn(2, '.');
    let int = parts.next().unwrap_or("");
    let frac = parts.next();
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
        && v.parse::<f64>().is_ok_and(|x| x > 0.0)
}

/// The writable folders of the instance: `writablePaths`, plus the home when neither a writable
/// path nor a read-write mount holds it (A3: the home MUST be writable).
pub fn writable_dirs(spec: &SandboxSpec) -> Vec<String> {
    let mut dirs = spec.writable_paths.clone();
    let home = &spec.user.home;
    let covered = spec.writable_paths.iter().any(|w| is_within(home, w))
        || spec
            .mounts
            .iter()
            .any(|m| !m.read_only && is_within(home, &m.target));
    if !covered {
        dirs.push(home.clone());
    }
    dirs
}

/// A spec that passed [`validate_spec`]: the only way to the plan ([`crate::plan_launch`]), so
/// a spec is validated exactly once on its way to podman.
#[derive(Debug, Clone, Copy)]
pub struct ValidSpec<'a> {
    spec: &'a SandboxSpec,
}

impl<'a> ValidSpec<'a> {
    /// The spec itself.
    pub fn spec(&self) -> &'a SandboxSpec {
        self.spec
    }
}

impl std::ops::Deref for ValidSpec<'_> {
    type Target = SandboxSpec;

    fn deref(&self) -> &SandboxSpec {
        self.spec
    }
}

/// Every rule about the spec on its own (65), in the order of contract A's sections: identity,
/// env, mounts, writable paths, files, resources, display, labels, injections.
pub fn validate_spec(spec: &SandboxSpec) -> Result<ValidSpec<'_>> {
    check_identity(spec)?;
    check_env(spec)?;
    let targets = check_mounts(spec)?;
    check_writable_paths(spec, &targets)?;
    check_files(spec, &targets)?;
    check_resources(spec)?;
    if let Some(d) = &spec.display {
        check_abs_path("display.socket", &d.socket)?;
    }
    check_labels(spec)?;
    if matches!(spec.network, NetworkPolicy::None) && !spec.injections.is_empty() {
        return invalid(
            "injections",
            "a sandbox without network cannot have injections (A.3)",
        );
    }
    Ok(ValidSpec { spec })
}

/// An image reference as the runtime is given one: not empty, no space or control character,
/// and not starting with `-` (an engine would read it as an option).
fn is_image_reference(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('-') && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The name, the image, the process, the workdir and the home.
fn check_identity(spec: &SandboxSpec) -> Result {
    if !is_sandbox_name(&spec.name) {
        return invalid(
            "name",
            format!(
                "{:?}: letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128",
                spec.name
            ),
        );
    }
    if !is_image_reference(&spec.image) {
        return invalid(
            "image",
            format!("{:?} is not an image reference", spec.image),
        );
    }
    if spec.argv.is_empty() {
        return invalid("argv", "the process to run is missing (an empty argv)");
    }
    for (i, a) in spec.argv.iter().enumerate() {
        if a.contains('\0') {
            return invalid(format!("argv[{i}]"), "holds a NUL byte");
        }
    }
    if let Some(r) = &spec.oci_runtime
        && !handler_contracts::sandbox::is_oci_runtime(r)
    {
        return invalid(
            "ociRuntime",
            format!("{r:?} is not an OCI runtime's name or absolute path"),
        );
    }
    check_abs_path("workdir", &spec.workdir)?;
    check_abs_path("user.home", &spec.user.home)?;
    if spec.user.home == "/" {
        return invalid("user.home", "the home cannot be /");
    }
    Ok(())
}

/// Env (A3, A6, A7, A.3): names, values, and the names the runtime sets itself; `pathAppend`.
fn check_env(spec: &SandboxSpec) -> Result {
    for (name, value) in &spec.env {
        check_env_var(spec, name, value)?;
    }
    let prepend = spec.path_prepend.iter().map(|p| ("pathPrepend", p));
    let append = spec.path_append.iter().map(|p| ("pathAppend", p));
    for (i, (name, p)) in prepend.chain(append).enumerate() {
        let field = format!("{name}[{i}]");
        check_abs_path(&field, p)?;
        if p.contains(':') {
            return invalid(field, format!("{p:?}: a PATH entry cannot hold ':'"));
        }
    }
    Ok(())
}

/// One env entry: a valid name and value that the runtime does not set itself.
fn check_env_var(spec: &SandboxSpec, name: &str, value: &str) -> Result {
    let filtered = matches!(spec.network, NetworkPolicy::Filtered { .. });
    let field = format!("env.{name}");
    if !is_env_name(name) {
        return invalid(
            field,
            format!("{name:?} is not an environment variable name"),
        );
    }
    if value.contains('\0') {
        return invalid(field, "the value holds a NUL byte");
    }
    if name == "HOME" {
        return invalid(field, "HOME is user.home (A3): the env must not set it");
    }
    if name == "PATH" && !(spec.path_append.is_empty() && spec.path_prepend.is_empty()) {
        return invalid(
            field,
            "with pathAppend or pathPrepend the runtime sets PATH (A6): the env must not",
        );
    }
    if name == "DISPLAY" || name == "WAYLAND_DISPLAY" {
        return invalid(
            field,
            format!("{name} is the runtime's (A7): a display is given with `display`"),
        );
    }
    if spec.display.is_some() && DISPLAY_ENV_VARS.contains(&name) {
        return invalid(
            field,
            format!("with a display the runtime sets {name} (A7)"),
        );
    }
    if filtered && PROXY_ENV_VARS.iter().any(|p| p.eq_ignore_ascii_case(name)) {
        return invalid(
            field,
            format!("a filtered sandbox's {name} is the runtime's (A.3)"),
        );
    }
    if !spec.injections.is_empty() && CA_ENV_VARS.contains(&name) {
        return invalid(
            field,
            format!("with injections the runtime sets {name} (A.3, trust)"),
        );
    }
    Ok(())
}

/// Mounts and image mounts (A2): normalized paths, scopes at their own path, read-only kinds,
/// no target twice. The targets, for the checks after.
fn check_mounts(spec: &SandboxSpec) -> Result<BTreeSet<&str>> {
    let mut targets: BTreeSet<&str> = BTreeSet::new();
    for (i, m) in spec.mounts.iter().enumerate() {
        check_abs_path(&format!("mounts[{i}].source"), &m.source)?;
        check_abs_path(&format!("mounts[{i}].target"), &m.target)?;
        if m.target == "/" {
            return invalid(format!("mounts[{i}].target"), "a mount cannot cover /");
        }
        if m.kind == MountKind::Scope && m.target != m.source {
            return invalid(
                format!("mounts[{i}].target"),
                format!(
                    "a scope mount is at its own path (A2): target must be {:?}",
                    m.source
                ),
            );
        }
        if matches!(m.kind, MountKind::Knowledge | MountKind::Subject) && !m.read_only {
            return invalid(
                format!("mounts[{i}].readOnly"),
                format!("a {:?} mount is read-only", m.kind),
            );
        }
        if !targets.insert(&m.target) {
            return invalid(
                format!("mounts[{i}].target"),
                format!("{:?} is mounted twice", m.target),
            );
        }
    }
    for (i, m) in spec.image_mounts.iter().enumerate() {
        if !is_image_reference(&m.image) {
            return invalid(
                format!("imageMounts[{i}].image"),
                format!("{:?} is not an image reference", m.image),
            );
        }
        check_abs_path(&format!("imageMounts[{i}].target"), &m.target)?;
        if m.target == "/" || !targets.insert(&m.target) {
            return invalid(
                format!("imageMounts[{i}].target"),
                format!("{:?} is already mounted", m.target),
            );
        }
    }
    Ok(targets)
}

/// Writable paths: not the root, not twice, not a mount target, not inside another.
fn check_writable_paths(spec: &SandboxSpec, targets: &BTreeSet<&str>) -> Result {
    let mut seen = BTreeSet::new();
    for (i, w) in spec.writable_paths.iter().enumerate() {
        let field = format!("writablePaths[{i}]");
        check_abs_path(&field, w)?;
        if w == "/" {
            return invalid(field, "the root cannot be writable (A3: read-only rootfs)");
        }
        if !seen.insert(w) {
            return invalid(field, format!("{w:?} is listed twice"));
        }
        if targets.contains(w.as_str()) {
            return invalid(field, format!("{w:?} is also a mount target"));
        }
        if let Some(other) = spec
            .writable_paths
            .iter()
            .find(|o| *o != w && is_within(w, o))
        {
            return invalid(
                field,
                format!("{w:?} is inside the writable path {other:?}"),
            );
        }
    }
    Ok(())
}

/// Files: each target once, a valid mode, seed files inside a writable path and not a mount.
fn check_files(spec: &SandboxSpec, targets: &BTreeSet<&str>) -> Result {
    let writable = writable_dirs(spec);
    let mut file_targets = BTreeSet::new();
    for (i, f) in spec.files.iter().enumerate() {
        let field = format!("files[{i}].target");
        check_abs_path(&field, &f.target)?;
        if !file_targets.insert(&f.target) || targets.contains(f.target.as_str()) {
            return invalid(field, format!("{:?} is given twice", f.target));
        }
        if let Some(mode) = &f.mode {
            parse_mode(&format!("files[{i}].mode"), mode)?;
        }
        if f.seed {
            let in_writable = writable
                .iter()
                .any(|w| is_within(&f.target, w) && f.target != *w);
            let under_mount = spec
                .mounts
                .iter()
                .map(|m| &m.target)
                .chain(spec.image_mounts.iter().map(|m| &m.target))
                .any(|t| is_within(&f.target, t));
            if !in_writable || under_mount {
                return invalid(
                    field,
                    "a seed file is written into a writable path (the home or a writablePaths entry), not into a mount",
                );
            }
        }
    }
    Ok(())
}

/// Resources: a memory size and a positive number of cpus, as podman reads them.
fn check_resources(spec: &SandboxSpec) -> Result {
    let Some(r) = &spec.resources else {
        return Ok(());
    };
    if let Some(m) = &r.memory
        && !check_memory(m)
    {
        return invalid(
            "resources.memory",
            format!("{m:?} is not a memory size like \"512m\" or \"2g\""),
        );
    }
    if let Some(c) = &r.cpus
        && !check_cpus(c)
    {
        return invalid(
            "resources.cpus",
            format!("{c:?} is not a positive number of cpus like \"1.5\""),
        );
    }
    Ok(())
}

/// Labels: keys podman can carry, values without newline or NUL, none of the runtime's own.
fn check_labels(spec: &SandboxSpec) -> Result {
    for (k, v) in &spec.labels {
        let field = format!("labels.{k}");
        if k.is_empty()
            || k.chars()
                .any(|c| c == '=' || c.is_whitespace() || c.is_control())
        {
            return invalid(
                field,
                "a label key holds no '=', space or control character",
            );
        }
        if v.contains('\n') || v.contains('\0') {
            return invalid(field, "a label value holds no newline or NUL");
        }
        if RESERVED_LABEL_PREFIXES.iter().any(|p| k.starts_with(p)) {
            return invalid(field, "this label belongs to the runtime");
        }
    }
    Ok(())
}

/// Why a folder cannot be an agent's scope or a work folder (D.13, issue 11 item 3): Handler's
/// own folders (config, data, state, cache…) never reach a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlacementError {
    #[error("{folder} is Handler's {what} folder")]
    /// The folder is one of Handler's own.
    IsHandlers {
        /// The folder refused.
        folder: String,
        /// Which of Handler's folders it is (`config`, `data`…).
        what: String,
    },
    #[error("{folder} holds Handler's {what} folder ({dir})")]
    /// The folder holds one of Handler's own folders.
    HoldsHandlers {
        /// The folder refused.
        folder: String,
        /// Which of Handler's folders it is (`config`, `data`…).
        what: String,
        /// That folder's path.
        dir: String,
    },
    #[error("{folder} is inside Handler's {what} folder ({dir})")]
    /// The folder is inside one of Handler's own folders.
    InsideHandlers {
        /// The folder refused.
        folder: String,
        /// Which of Handler's folders it is (`config`, `data`…).
        what: String,
        /// That folder's path.
        dir: String,
    },
    #[error("{folder} is not inside a work folder")]
    /// The folder is in no work folder.
    OutsideWorkFolders {
        /// The folder refused.
        folder: String,
    },
}

/// A folder Handler keeps for itself: what it is (`config`, `data`…) and its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// What the folder is for (`config`, `data`, `state`, `cache`…).
    pub what: String,
    /// Its path.
    pub dir: String,
}

fn reserved_clash(folder: &str, reserved: &[Reserved], holds: bool) -> Option<PlacementError> {
    reserved.iter().find_map(|r| {
        let (f, what, dir) = (folder.to_string(), r.what.clone(), r.dir.clone());
        if folder == r.dir {
            Some(PlacementError::IsHandlers { folder: f, what })
        } else if is_within(folder, &r.dir) {
            Some(PlacementError::InsideHandlers {
                folder: f,
                what,
                dir,
            })
        } else if holds && is_within(&r.dir, folder) {
            Some(PlacementError::HoldsHandlers {
                folder: f,
                what,
                dir,
            })
        } else {
            None
        }
    })
}

/// D.13 at every save and every start: `scope` (canonical) is inside one of `roots` (canonical
/// work folders) and is not, does not hold and is not inside any of Handler's own folders.
pub fn check_scope_placement(
    scope: &str,
    roots: &[String],
    reserved: &[Reserved],
) -> std::result::Result<(), PlacementError> {
    if let Some(e) = reserved_clash(scope, reserved, true) {
        return Err(e);
    }
    if roots.iter().any(|r| is_within(scope, r)) {
        Ok(())
    } else {
        Err(PlacementError::OutsideWorkFolders {
            folder: scope.to_string(),
        })
    }
}

/// F.2: a folderless agent's session works in `work` (canonical), the `work/` of its session's
/// folder in Handler's state folder: the one folder inside Handler's own a sandbox may get
/// (decision 0111). `scope` (canonical, links resolved) must be exactly it; it may lie inside
/// Handler's folders but never be one nor hold one. Anything else gets the usual refusal.
pub fn check_session_work_placement(
    scope: &str,
    work: &str,
    reserved: &[Reserved],
) -> std::result::Result<(), PlacementError> {
    match reserved_clash(scope, reserved, true) {
        None => Ok(()),
        Some(PlacementError::InsideHandlers { .. }) if scope == work => Ok(()),
        Some(e) => Err(e),
    }
}

/// A work folder root may hold Handler's folders (`~`; the scopes inside are checked one by
/// one) but may not be one of them or inside one.
pub fn check_root_placement(
    root: &str,
    reserved: &[Reserved],
) -> std::result::Result<(), PlacementError> {
    reserved_clash(root, reserved, false).map_or(Ok(()), Err)
}

#[cfg(test)]
mod placement_tests {
    use super::*;

    fn reserved() -> Vec<Reserved> {
        [
            ("config", "/home/u/.config/handler-ai"),
            ("data", "/home/u/.local/share/handler-ai"),
        ]
        .into_iter()
        .map(|(w, d)| Reserved {
            what: w.into(),
            dir: d.into(),
        })
        .collect()
    }

    #[test]
    fn only_the_sessions_own_work_folder_is_exempt() {
        let r = [Reserved {
            what: "state".into(),
            dir: "/home/u/.local/state/handler-ai".into(),
        }];
        let work = "/home/u/.local/state/handler-ai/sessions/s_1/work";
        assert_eq!(check_session_work_placement(work, work, &r), Ok(()));
        // Another folder of the state folder, the session's folder itself, the state folder.
        for other in [
            "/home/u/.local/state/handler-ai/sessions/s_2/work",
            "/home/u/.local/state/handler-ai/sessions/s_1",
            "/home/u/.local/state/handler-ai/agents",
        ] {
            assert!(
                matches!(
                    check_session_work_placement(other, work, &r),
                    Err(PlacementError::InsideHandlers { .. })
                ),
                "{other}"
            );
        }
        assert!(matches!(
            check_session_work_placement("/home/u/.local/state/handler-ai", work, &r),
            Err(PlacementError::IsHandlers { .. })
        ));
        assert!(matches!(
            check_session_work_placement("/home/u/.local", work, &r),
            Err(PlacementError::HoldsHandlers { .. })
        ));
    }

    #[test]
    fn a_scope_inside_a_work_folder_and_away_from_handlers_folders() {
        let roots = vec!["/home/u/code".to_string(), "/home/u".to_string()];
        let r = reserved();
        assert_eq!(
            check_scope_placement("/home/u/code/app", &roots, &r),
            Ok(())
        );
        assert_eq!(check_scope_placement("/home/u/code", &roots, &r), Ok(()));
        // A sibling whose name starts like Handler's folder is not inside it.
        assert_eq!(
            check_scope_placement("/home/u/.config/handler-ai-other", &roots, &r),
            Ok(())
        );
        assert_eq!(
            check_scope_placement("/home/u/.local/share/handler-ai", &roots, &r),
            Err(PlacementError::IsHandlers {
                folder: "/home/u/.local/share/handler-ai".into(),
                what: "data".into()
            })
        );
        assert!(matches!(
            check_scope_placement("/home/u/.config/handler-ai/skills", &roots, &r),
            Err(PlacementError::InsideHandlers { .. })
        ));
        assert!(matches!(
            check_scope_placement("/home/u/.local", &roots, &r),
            Err(PlacementError::HoldsHandlers { .. })
        ));
        assert!(matches!(
            check_scope_placement("/home/u", &roots, &r),
            Err(PlacementError::HoldsHandlers { .. })
        ));
        assert_eq!(
            check_scope_placement("/srv/x", &roots, &r),
            Err(PlacementError::OutsideWorkFolders {
                folder: "/srv/x".into()
            })
        );
        // `/` as a root does not let Handler's folders through.
        assert!(check_scope_placement("/", &["/".to_string()], &r).is_err());
        assert_eq!(
            check_scope_placement("/home/u/.local/share/handler-ai", &[], &r)
                .unwrap_err()
                .to_string(),
            "/home/u/.local/share/handler-ai is Handler's data folder"
        );
    }

    #[test]
    fn a_work_folder_may_hold_handlers_folders_but_not_be_one() {
        let r = reserved();
        assert_eq!(check_root_placement("/home/u", &r), Ok(()));
        assert_eq!(check_root_placement("/home/u/code", &r), Ok(()));
        assert!(matches!(
            check_root_placement("/home/u/.local/share/handler-ai", &r),
            Err(PlacementError::IsHandlers { .. })
        ));
        assert!(matches!(
            check_root_placement("/home/u/.config/handler-ai/x", &r),
            Err(PlacementError::InsideHandlers { .. })
        ));
    }
}
