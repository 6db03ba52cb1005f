//! Pure validators for the rules about one document (or one document and the descriptors it
//! names): secret paths (D.14), skill names (D.17), contexts (D.19), mini apps (H.1/H.2), addons
//! (G1), bindings (G2), knowledge folders (K1/K2, the part without the file system), accounts and
//! model access (E1), descriptors (B.1), and `~/` expansion (§0).

use std::collections::{BTreeMap, BTreeSet};

use crate::access::{Account, Protocol, Provider, SecretRef};
use crate::addon::{AddonManifest, Binding, SecretDelivery, addon_image};
use crate::allow::entry_for_url;
use crate::control::{ModelAccess, SkillFileRequest};
use crate::harness::{HarnessDescriptor, SlotKind};
use crate::miniapp::MiniAppManifest;
use crate::sandbox::{CA_ENV_VARS, PROXY_ENV_VARS};

/// A rule broken, with the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ValidationError {
    /// The field, e.g. `needs.secrets[1]`.
    pub path: String,
    /// What is wrong with it, secret-looking words replaced by `…`.
    pub message: String,
}

impl ValidationError {
    /// An error about `path`. A secret-looking word in either (a key pasted where a reference
    /// or a name belongs, then quoted) becomes `…` (decision 0041).
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ValidationError {
            path: crate::parse::redact_secret_words(&path.into()),
            message: crate::parse::redact_secret_words(&message.into()),
        }
    }
}

type Result<T = ()> = std::result::Result<T, ValidationError>;

fn err<T>(path: impl Into<String>, message: impl Into<String>) -> Result<T> {
    Err(ValidationError::new(path, message))
}

/// A secret store path (D.14): `/`-separated segments of `[A-Za-z0-9_.-]`, none empty or starting
/// with a dot.
pub fn validate_secret_path(path: &str) -> Result {
    if path.is_empty() {
        return err("path", "a secret path is empty");
    }
    for seg in path.split('/') {
        if seg.is_empty() {
            return err("path", format!("secret path {path:?} has an empty segment"));
        }
        if seg.starts_with('.') {
            return err(
                "path",
                format!("secret path {path:?}: a segment starts with a dot"),
            );
        }
        if !seg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        {
            return err(
                "path",
                format!(
                    "secret path {path:?}: segments hold only letters, digits, '_', '.' and '-'"
                ),
            );
        }
    }
    Ok(())
}

/// Checks a reference's own form (E2): a `{ secret }` names a valid store path, an `{ env }` a
/// variable name, a `{ file }` a path, a `{ command }` a program.
pub fn validate_secret_ref(field: &str, r: &SecretRef) -> Result {
    match r {
        SecretRef::Secret(p) => validate_secret_path(p)
            .map_err(|e| ValidationError::new(format!("{field}.secret"), e.message)),
        SecretRef::Env(v) if !is_env_name(v) => err(
            format!("{field}.env"),
            format!("{v:?} is not an environment variable name"),
        ),
        SecretRef::File(f) if f.is_empty() => err(format!("{field}.file"), "an empty path"),
        SecretRef::Command(c) if c.first().is_none_or(std::string::String::is_empty) => {
            err(format!("{field}.command"), "an empty program")
        }
        _ => Ok(()),
    }
}

fn is_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A skill name (D.17): 1–64 lowercase letters, digits and single hyphens.
pub fn validate_skill_name(name: &str) -> Result {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        err(
            "name",
            format!(
                "skill name {name:?}: 1–64 lowercase letters, digits and single hyphens, not at either end"
            ),
        )
    }
}

/// A context name (D.19): 1–32 letters, digits, spaces, - and _; never "any".
pub fn validate_context_name(name: &str) -> Result {
    let n = name.chars().count();
    if !(1..=32).contains(&n)
        || !name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
    {
        return err(
            "name",
            format!("context name {name:?}: 1–32 letters, digits, spaces, '-' and '_'"),
        );
    }
    if name.eq_ignore_ascii_case("any") {
        return err(
            "name",
            "\"any\" is not a context name: it means every context",
        );
    }
    Ok(())
}

/// Names a mini app's secret may not take (H.2): the platform's.
fn reserved_app_env(name: &str) -> bool {
    name.starts_with("HANDLER_")
        || name.starts_with("DENO_")
        || matches!(name, "PATH" | "HOME" | "NO_COLOR" | "TINI_SUBREAPER")
        || PROXY_ENV_VARS.iter().any(|p| p.eq_ignore_ascii_case(name))
}

/// A mini app's name (H.1): `^[a-z][a-z0-9-]{0,29}$`.
pub fn validate_miniapp_name(name: &str) -> Result {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 30
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if ok {
        Ok(())
    } else {
        err(
            "name",
            format!("{name:?}: a lowercase DNS label of 1–30 characters, starting with a letter"),
        )
    }
}

/// A mini app's secret name (H.2).
pub fn validate_miniapp_secret_name(field: &str, name: &str) -> Result {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
    if !ok {
        return err(
            field,
            format!(
                "{name:?}: uppercase letters, digits and '_', starting with a letter, at most 64"
            ),
        );
    }
    if reserved_app_env(name) {
        return err(field, format!("{name:?} is reserved for the platform"));
    }
    Ok(())
}

/// A relative, normalized path: no leading `/`, no `.`/`..`/empty component.
fn validate_relative_path(field: &str, p: &str) -> Result {
    if p.is_empty() || p.starts_with('/') {
        return err(field, format!("{p:?} is not a relative path"));
    }
    if p.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return err(
            field,
            format!("{p:?} is not normalized (no '.', '..' or empty components)"),
        );
    }
    Ok(())
}

fn overlaps(a: &str, b: &str) -> bool {
    let inside = |x: &str, y: &str| x == y || x.starts_with(&format!("{y}/"));
    inside(a, b) || inside(b, a)
}

/// An `app.toml` (H.1, H.2).
pub fn validate_miniapp(m: &MiniAppManifest) -> Result {
    validate_miniapp_name(&m.name)?;
    semver::Version::parse(&m.version).map_err(|e| {
        ValidationError::new(
            "version",
            format!("{:?} is not a semantic version: {e}", m.version),
        )
    })?;
    let entry = m.server_entry();
    validate_relative_path("server.entry", entry)?;
    let server_dir = entry.rsplit_once('/').map(|(d, _)| d).ok_or_else(|| {
        ValidationError::new(
            "server.entry",
            "the entry must be inside a directory (installed whole)",
        )
    })?;
    validate_relative_path("ui.dir", m.ui_dir())?;
    if overlaps(server_dir, m.ui_dir()) {
        return err(
            "ui.dir",
            format!(
                "{:?} overlaps the server directory {server_dir:?}",
                m.ui_dir()
            ),
        );
    }
    if let Some(needs) = &m.needs {
        let mut seen = BTreeSet::new();
        for (i, s) in needs.secrets.iter().enumerate() {
            let field = format!("needs.secrets[{i}]");
            validate_miniapp_secret_name(&field, s)?;
            if !seen.insert(s) {
                return err(field, format!("{s:?} is listed twice"));
            }
        }
        if needs.files.len() > 10 {
            return err("needs.files", "at most 10 files or folders");
        }
        for (i, f) in needs.files.iter().enumerate() {
            if f.path.is_empty() {
                return err(format!("needs.files[{i}].path"), "an empty path");
            }
        }
    }
    for route in m.routes.keys() {
        let field = format!("routes.{route:?}");
        let Some((method, path)) = route.split_once(' ') else {
            return err(field, "a route is \"METHOD /path\"");
        };
        if !matches!(method, "POST" | "PUT" | "PATCH" | "DELETE") {
            return err(
                field,
                format!("method {method:?}: one of POST, PUT, PATCH, DELETE"),
            );
        }
        if !path.starts_with("/api/") {
            return err(field, format!("path {path:?} must start with /api/"));
        }
    }
    Ok(())
}

/// Env var names the platform owns (G1): never an addon's.
fn reserved_addon_env(name: &str) -> bool {
    matches!(name, "PATH" | "HOME") || PROXY_ENV_VARS.contains(&name) || CA_ENV_VARS.contains(&name)
}

/// An `addon.toml` (G1). `dir_name`: the folder it was read from, which must be its name.
#[expect(
    clippy::too_many_lines,
    reason = "G1 read as one list: one check per addon field, in the manifest's order"
)]
pub fn validate_addon(a: &AddonManifest, dir_name: Option<&str>) -> Result {
    if let Some(dir) = dir_name
        && dir != a.name
    {
        return err(
            "name",
            format!("{:?} differs from its directory {dir:?}", a.name),
        );
    }
    if let Some(image) = &a.image {
        if !is_repository_component(&a.name) {
            return err(
                "name",
                format!(
                    "{:?}: an addon with an image is named as an image repository is \
                     (lowercase letters, digits, and '.', '_' or '-' between them)",
                    a.name
                ),
            );
        }
        let own = addon_image(&a.name);
        if *image != own {
            return err(
                "image",
                format!(
                    "{image:?}: an addon's image is {own:?}, its own name's (G.4 tags it :latest; \
                     another name would replace an image that is not the addon's)"
                ),
            );
        }
    }
    if a.image.is_some() && a.commands.is_empty() {
        return err(
            "commands",
            "required with image: exactly what the image's bin/ provides",
        );
    }
    if a.image.is_none() && !a.commands.is_empty() {
        return err("commands", "commands need an image that provides them");
    }
    let mut env_names: BTreeMap<String, String> = BTreeMap::new();
    let mut claim = |name: &str, field: String| -> Result {
        if !is_env_name(name) {
            return err(
                field,
                format!("{name:?} is not an environment variable name"),
            );
        }
        if reserved_addon_env(name) {
            return err(field, format!("{name} belongs to the platform"));
        }
        if let Some(other) = env_names.insert(name.to_string(), field.clone()) {
            return err(field, format!("{name} is also set by {other}"));
        }
        Ok(())
    };
    for name in a.env.keys() {
        claim(name, format!("env.{name}"))?;
    }
    for (slot, s) in &a.settings {
        claim(&s.env, format!("settings.{slot}.env"))?;
    }
    for (slot, s) in &a.secret_slots {
        claim(&s.env, format!("secretSlots.{slot}.env"))?;
    }
    for (slot, s) in &a.secret_slots {
        if let Some(hosts) = &s.hosts {
            if s.delivery == Some(SecretDelivery::Env) {
                return err(
                    format!("secretSlots.{slot}.hosts"),
                    "hosts go only with proxy delivery",
                );
            }
            for (i, h) in hosts.iter().enumerate() {
                if !a.egress.contains(h) {
                    return err(
                        format!("secretSlots.{slot}.hosts[{i}]"),
                        format!("{h} is not one of the addon's egress entries"),
                    );
                }
            }
        }
    }
    if let Some(mcp) = &a.mcp {
        match mcp.command.first() {
            None => return err("mcp.command", "an empty command"),
            Some(c) if !a.commands.contains(c) => {
                return err(
                    "mcp.command",
                    format!("{c:?} is not one of the addon's commands"),
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether `s` can end an image repository's path component after a `-` (the OCI distribution
/// grammar: lowercase letters and digits, separated by one `.`, one or two `_`, or `-`s).
fn is_repository_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !b.first().is_some_and(|&c| alnum(c)) || !b.last().is_some_and(|&c| alnum(c)) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &s[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-')) {
            return false;
        }
    }
    true
}

/// A binding against its addon (G2). `addon`: `None` when no addon of that name is known, or
/// `Err(reason)` when the addon is invalid.
pub fn validate_binding(
    b: &Binding,
    addon: Option<std::result::Result<&AddonManifest, &str>>,
) -> Result {
    let a = match addon {
        None => return err("addon", format!("unknown addon {:?}", b.addon)),
        Some(Err(why)) => return err("addon", format!("addon {:?} is invalid: {why}", b.addon)),
        Some(Ok(a)) => a,
    };
    for slot in b.settings.keys() {
        if !a.settings.contains_key(slot) {
            return err(
                format!("settings.{slot}"),
                format!("addon {} declares no setting {slot:?}", a.name),
            );
        }
    }
    for (slot, r) in &b.secrets {
        if !a.secret_slots.contains_key(slot) {
            return err(
                format!("secrets.{slot}"),
                format!("addon {} declares no secret slot {slot:?}", a.name),
            );
        }
        validate_secret_ref(&format!("secrets.{slot}"), r)?;
    }
    for (slot, s) in &a.settings {
        if s.required && !b.settings.contains_key(slot) {
            return err(
                format!("settings.{slot}"),
                "required by the addon, not bound",
            );
        }
    }
    for (slot, s) in &a.secret_slots {
        if s.required && !b.secrets.contains_key(slot) {
            return err(
                format!("secrets.{slot}"),
                "required by the addon, not bound",
            );
        }
    }
    Ok(())
}

/// Knowledge folders (K1, K2 without the file system): each relative to `root` ("." the root
/// itself) or absolute inside it; returns them relative, canonical, sorted and deduplicated.
/// Symbolic links and "is a directory" are the caller's to check on the real paths.
pub fn normalize_knowledge_folders(root: &str, folders: &[String]) -> Result<Vec<String>> {
    let root = root.trim_end_matches('/');
    let mut out = BTreeSet::new();
    for (i, f) in folders.iter().enumerate() {
        let field = format!("knowledge[{i}]");
        let rel = if f.starts_with('/') {
            if f == root || f.trim_end_matches('/') == root {
                ".".to_string()
            } else {
                match f.strip_prefix(&format!("{root}/")) {
                    Some(r) => r.to_string(),
                    None => {
                        return err(field, format!("{f:?} is outside the knowledge root {root}"));
                    }
                }
            }
        } else {
            f.clone()
        };
        let mut parts: Vec<&str> = Vec::new();
        for c in rel.split('/') {
            match c {
                "" | "." => {}
                ".." => return err(field, format!("{f:?}: '..' is not allowed")),
                c if c.starts_with('.') => {
                    return err(field, format!("{f:?} has a hidden component {c:?}"));
                }
                c => parts.push(c),
            }
        }
        out.insert(if parts.is_empty() {
            ".".to_string()
        } else {
            parts.join("/")
        });
    }
    let list: Vec<String> = out.into_iter().collect();
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for (i, a) in list.iter().enumerate() {
        for b in &list[i + 1..] {
            if a == "." || b.starts_with(&format!("{a}/")) {
                return err(
                    "knowledge",
                    format!("{b:?} is inside {a:?}: give one of them"),
                );
            }
        }
        let name = a.rsplit('/').next().unwrap_or(a);
        if let Some(other) = names.insert(name, a) {
            return err(
                "knowledge",
                format!("{other:?} and {a:?} would both be /knowledge/{name}"),
            );
        }
    }
    Ok(list)
}

/// Expands `~` and `~/…` in a hand-written host path (§0) with `home`; `~user` is refused; the
/// result must be absolute.
pub fn expand_home(field: &str, path: &str, home: &str) -> Result<String> {
    let home = home.trim_end_matches('/');
    let expanded = if path == "~" {
        home.to_string()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("{home}/{rest}")
    } else if path.starts_with('~') {
        return err(
            field,
            format!("{path:?}: ~user is not supported, write ~/ or an absolute path"),
        );
    } else {
        path.to_string()
    };
    if !expanded.starts_with('/') {
        return err(field, format!("{path:?} is not an absolute path"));
    }
    Ok(expanded)
}

/// A state slot's seeds (decision 0154): from the person's home, to a normalized place in a
/// folder slot (a file slot's seed is the slot), filters only on JSON or TOML, never a credential.
fn validate_seeds(name: &str, s: &crate::harness::StateSlot) -> Result {
    use crate::harness::is_credential_name;
    if !s.seed.is_empty() && (s.credential || s.per_session) {
        return err(
            format!("stateSlots.{name}.seed"),
            "a credential or per-session slot is never seeded",
        );
    }
    if s.kind == SlotKind::File && s.seed.len() > 1 {
        return err(
            format!("stateSlots.{name}.seed"),
            "a file slot has at most one seed",
        );
    }
    let normal = |p: &str| {
        !p.is_empty()
            && !p.starts_with('/')
            && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
    };
    for (i, seed) in s.seed.iter().enumerate() {
        let field = format!("stateSlots.{name}.seed[{i}]");
        match seed.source.strip_prefix("~/") {
            Some(rest) if normal(rest.trim_end_matches('/')) => {}
            _ => {
                return err(
                    format!("{field}.source"),
                    format!(
                        "{:?} is not a path in the person's home (~/…, without . or ..)",
                        seed.source
                    ),
                );
            }
        }
        let file_name = seed
            .source
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default();
        if is_credential_name(file_name) {
            return err(
                format!("{field}.source"),
                format!("{file_name:?} is a login or credential file, which is never seeded"),
            );
        }
        match (&seed.target, s.kind) {
            (Some(_), SlotKind::File) => {
                return err(
                    format!("{field}.target"),
                    "a file slot's seed is the slot itself",
                );
            }
            (Some(t), SlotKind::Dir) if !normal(t) => {
                return err(
                    format!("{field}.target"),
                    format!("{t:?} is not a relative path without . or .."),
                );
            }
            (Some(t), SlotKind::Dir) if is_credential_name(t.rsplit('/').next().unwrap_or(t)) => {
                return err(
                    format!("{field}.target"),
                    format!("{t:?} is a credential file's name"),
                );
            }
            _ => {}
        }
        let filtered = !seed.keep.is_empty() || !seed.drop.is_empty();
        let structured = file_name.ends_with(".json") || file_name.ends_with(".toml");
        if filtered && !structured {
            return err(
                field,
                format!("keep and drop filter a .json or .toml file, not {file_name:?}"),
            );
        }
    }
    Ok(())
}

/// A descriptor's own consistency (B.1).
pub fn validate_descriptor(d: &HarnessDescriptor) -> Result {
    if d.permissions.is_empty() {
        return err("permissions", "at least one permission mode must be mapped");
    }
    if d.acp_command.is_empty() {
        return err("acpCommand", "an empty command");
    }
    if d.image.is_empty()
        || d.image.starts_with('-')
        || d.image.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return err("image", format!("{:?} is not an image repository", d.image));
    }
    if d.image.contains('@') || d.image.rsplit('/').next().is_some_and(|l| l.contains(':')) {
        return err("image", "a repository without tag or digest (B.6)");
    }
    if d.state_slots.values().filter(|s| s.per_session).count() > 1 {
        return err("stateSlots", "at most one perSession slot");
    }
    for (name, s) in &d.state_slots {
        if s.credential && (s.kind != SlotKind::File || s.per_session) {
            return err(
                format!("stateSlots.{name}"),
                "a credential slot is a file, not per-session",
            );
        }
        validate_seeds(name, s)?;
    }
    if let Some(login) = &d.login {
        match (&login.token, &login.file) {
            (Some(_), Some(_)) | (None, None) => {
                return err("login", "exactly one of token and file");
            }
            (None, Some(file)) => {
                if !d
                    .state_slots
                    .values()
                    .any(|s| s.credential && s.target.ends_with(&format!("/{file}")))
                {
                    return err(
                        "login.file",
                        format!("{file:?} is not the file of a credential state slot"),
                    );
                }
                if login.command.as_ref().is_none_or(std::vec::Vec::is_empty) {
                    return err("login.command", "a file login needs its command");
                }
            }
            (Some(_), None) => {}
        }
        if login.plans.is_some() != login.plan_env.is_some() {
            return err("login", "plans and planEnv go together (both or neither)");
        }
        if !login.terms.starts_with("https://") {
            return err("login.terms", "an https:// URL");
        }
    }
    if let Some(t) = &d.terminal {
        let mapped: BTreeSet<_> = d.permissions.keys().collect();
        let flags: BTreeSet<_> = t.permissions.keys().collect();
        if mapped != flags {
            return err(
                "terminal.permissions",
                "exactly the modes `permissions` maps",
            );
        }
        if t.model_flag.is_some() && t.model_env.is_some() {
            return err("terminal", "modelFlag and modelEnv: not both");
        }
        if t.mcp_config_flag.is_some() && t.mcp_servers_env.is_some() {
            return err("terminal", "mcpConfigFlag and mcpServersEnv: not both");
        }
    }
    Ok(())
}

/// An account on its own and against its harness (E, E1, E2). `harness`: the descriptor it
/// names, `None` when unknown.
pub fn validate_account(a: &Account, harness: Option<&HarnessDescriptor>) -> Result {
    let Some(d) = harness else {
        return err("harness", format!("unknown harness {:?}", a.harness));
    };
    let Some(login) = &d.login else {
        return err(
            "harness",
            format!("{} has no login: it runs on providers only", d.name),
        );
    };
    if let Some(plan) = &a.plan {
        match &login.plans {
            Some(plans) if plans.contains(plan) => {}
            Some(plans) => {
                return err(
                    "plan",
                    format!(
                        "{plan:?} is not one of {}'s plans: {}",
                        d.name,
                        plans.join(", ")
                    ),
                );
            }
            None => return err("plan", format!("{} has no plans to choose from", d.name)),
        }
    }
    if a.connectors && !d.account_connectors {
        return err(
            "connectors",
            format!("{} has no account connectors", d.name),
        );
    }
    if let Some(token) = &a.token {
        if login.is_file_login() {
            return err(
                "token",
                format!(
                    "{} logs in with a file Handler keeps: an account of it has no token",
                    d.name
                ),
            );
        }
        validate_secret_ref("token", token)?;
    }
    validate_contexts(a.contexts.as_deref())
}

fn validate_contexts(contexts: Option<&[String]>) -> Result {
    for (i, c) in contexts.unwrap_or_default().iter().enumerate() {
        if c != "any" {
            validate_context_name(c)
                .map_err(|e| ValidationError::new(format!("contexts[{i}]"), e.message))?;
        }
    }
    Ok(())
}

/// A provider on its own (E, E2).
pub fn validate_provider(p: &Provider) -> Result {
    if p.endpoints.is_empty() {
        return err("endpoints", "at least one endpoint");
    }
    for (proto, url) in &p.endpoints {
        if entry_for_url(url).is_none() {
            return err(
                format!("endpoints.{}", proto.as_str()),
                format!("{url:?} is not an http(s) URL"),
            );
        }
    }
    if p.models.is_empty() {
        return err("models", "at least one model");
    }
    let mut ids = BTreeSet::new();
    for (i, m) in p.models.iter().enumerate() {
        if m.id.is_empty() {
            return err(format!("models[{i}].id"), "an empty id");
        }
        if !ids.insert(&m.id) {
            return err(
                format!("models[{i}].id"),
                format!("{:?} is listed twice", m.id),
            );
        }
        if let (Some(w), Some(o)) = (m.context_window, m.max_output)
            && o >= w
        {
            return err(
                format!("models[{i}].maxOutput"),
                "must be smaller than contextWindow",
            );
        }
    }
    if let Some(k) = &p.api_key {
        validate_secret_ref("apiKey", k)?;
    }
    validate_contexts(p.contexts.as_deref())
}

/// A request writing one file of a skill (D.17): exactly one of `text` and `base64`.
pub fn validate_skill_file_request(r: &SkillFileRequest) -> Result {
    match (&r.text, &r.base64) {
        (Some(_), None) | (None, Some(_)) => Ok(()),
        _ => err("text", "exactly one of text and base64"),
    }
}

/// What model access resolves to once E1 holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAccess {
    /// The harness the agent runs.
    pub harness: String,
    /// The provider's protocol the harness uses (its first choice the provider has).
    pub protocol: Option<Protocol>,
    /// The model: the one asked for, else a provider's first.
    pub model: Option<String>,
}

/// Why a hand-written document found on disk (an account's or a provider's file) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnusableDocument {
    /// The file could not be read.
    #[error("{what}: {reason}")]
    Unreadable {
        /// The file, as the user knows it (`accounts/<name>.toml`).
        what: String,
        /// The system's words.
        reason: String,
    },
    /// It does not parse (TOML syntax or shape).
    #[error(transparent)]
    Parse(#[from] crate::parse::DocumentError),
    /// It parses but breaks a rule.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

/// What E1 needs to look up. `Err(why)` for a document that exists but is unusable.
pub trait AccessCatalog {
    /// The descriptor of a harness, `None` when unknown.
    fn descriptor(&self, harness: &str) -> Option<&HarnessDescriptor>;
    /// An account by name: `None` when it does not exist, `Err(reason)` when its document is
    /// invalid.
    fn account(&self, name: &str) -> Option<std::result::Result<&Account, &UnusableDocument>>;
    /// A provider by name: `None` when it does not exist, `Err(reason)` when its document is
    /// invalid.
    fn provider(&self, name: &str) -> Option<std::result::Result<&Provider, &UnusableDocument>>;
}

/// E1: whether an agent may run with this model access; the reason names what is wrong.
pub fn check_model_access(
    access: &ModelAccess,
    catalog: &dyn AccessCatalog,
) -> Result<ResolvedAccess> {
    match (&access.account, &access.provider) {
        (Some(_), Some(_)) => err(
            "model",
            "names both an account and a provider: give exactly one",
        ),
        (None, None) => err(
            "model",
            "names neither an account nor a provider: give exactly one",
        ),
        (Some(name), None) => account_access(access, name, catalog),
        (None, Some(name)) => provider_access(access, name, catalog),
    }
}

/// E1 for an account: it exists, is valid against its harness, and is for the harness asked.
fn account_access(
    access: &ModelAccess,
    name: &str,
    catalog: &dyn AccessCatalog,
) -> Result<ResolvedAccess> {
    let account = match catalog.account(name) {
        None => return err("account", format!("account {name:?} does not exist")),
        Some(Err(why)) => {
            return err("account", format!("account {name:?} is invalid: {why}"));
        }
        Some(Ok(a)) => a,
    };
    if let Some(h) = &access.harness
        && *h != account.harness
    {
        return err(
            "harness",
            format!("account {name:?} is for {}, not {h}", account.harness),
        );
    }
    validate_account(account, catalog.descriptor(&account.harness)).map_err(|e| {
        ValidationError::new("account", format!("account {name:?} is invalid: {e}"))
    })?;
    Ok(ResolvedAccess {
        harness: account.harness.clone(),
        protocol: None,
        model: access.model.clone(),
    })
}

/// E1 for a provider: it exists and is valid, the harness talks one of its protocols, and the
/// model asked is one of its models (its first by default).
fn provider_access(
    access: &ModelAccess,
    name: &str,
    catalog: &dyn AccessCatalog,
) -> Result<ResolvedAccess> {
    let provider = match catalog.provider(name) {
        None => return err("provider", format!("provider {name:?} does not exist")),
        Some(Err(why)) => {
            return err("provider", format!("provider {name:?} is invalid: {why}"));
        }
        Some(Ok(p)) => p,
    };
    validate_provider(provider).map_err(|e| {
        ValidationError::new("provider", format!("provider {name:?} is invalid: {e}"))
    })?;
    let Some(h) = &access.harness else {
        return err(
            "harness",
            format!("provider {name:?} needs the harness that talks to it"),
        );
    };
    let Some(d) = catalog.descriptor(h) else {
        return err("harness", format!("unknown harness {h:?}"));
    };
    let Some(protocol) = d
        .provider_protocols
        .iter()
        .find(|p| provider.endpoints.contains_key(p))
    else {
        let accepted: Vec<_> = d.provider_protocols.iter().map(|p| p.as_str()).collect();
        return err(
            "provider",
            if accepted.is_empty() {
                format!("{h} runs only on an account, not on a provider")
            } else {
                format!(
                    "provider {name:?} has no endpoint for a protocol {h} speaks ({})",
                    accepted.join(", ")
                )
            },
        );
    };
    if let Some(m) = &access.model
        && !provider.models.iter().any(|pm| pm.id == *m)
    {
        return err(
            "model",
            format!("{m:?} is not one of provider {name:?}'s models"),
        );
    }
    Ok(ResolvedAccess {
        harness: h.clone(),
        protocol: Some(*protocol),
        model: access
            .model
            .clone()
            .or_else(|| provider.models.first().map(|m| m.id.clone())),
    })
}

#[cfg(test)]
mod secret_ref_tests {
    use super::*;

    #[test]
    fn an_empty_command_is_an_error_naming_the_field_not_a_panic() {
        for argv in [vec![], vec![String::new()]] {
            let e = validate_secret_ref("token", &SecretRef::Command(argv)).unwrap_err();
            assert_eq!(e.path, "token.command");
        }
        assert!(validate_secret_ref("token", &SecretRef::Command(vec!["pass".into()])).is_ok());
    }
}

#[cfg(test)]
mod redaction_tests {
    use super::*;

    /// A key pasted where a variable name, a store path or a secret's name belongs is never
    /// quoted back (the `documents` fuzz target's oracle, decision 0041).
    #[test]
    fn a_pasted_key_is_not_quoted() {
        let key = "sk-abc1234567890xyz";
        let e = validate_secret_ref("token", &SecretRef::Env(key.into())).unwrap_err();
        assert_eq!(e.path, "token.env");
        assert!(!e.to_string().contains("abc1234567890"), "{e}");
        assert!(
            e.message.contains("is not an environment variable name"),
            "{e}"
        );
        let e =
            validate_secret_ref("token", &SecretRef::Secret(format!("{key}+/x=="))).unwrap_err();
        assert!(!e.to_string().contains("abc1234567890"), "{e}");
        let e = validate_miniapp_secret_name("needs.secrets[0]", key).unwrap_err();
        assert!(!e.to_string().contains("abc1234567890"), "{e}");
        // Names that do not look like secrets are still quoted.
        let e = validate_secret_ref("token", &SecretRef::Env("my-var".into())).unwrap_err();
        assert!(e.message.contains("\"my-var\""), "{e}");
        let e = validate_secret_path("providers/openrouter-long//apiKey").unwrap_err();
        assert!(
            e.message.contains("providers/openrouter-long//apiKey"),
            "{e}"
        );
    }
}
