//! What the control plane reads from disk on every use: harness descriptors (platform data),
//! accounts and providers (hand-written TOML, E), as one snapshot that answers E1's look-ups.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use handler_contracts::parse::from_toml;
use handler_contracts::validate::{
    AccessCatalog, UnusableDocument, validate_account, validate_descriptor, validate_provider,
};
use handler_contracts::{Account, HarnessDescriptor, Provider};

use crate::daemon::config::DaemonConfig;

/// Everything E1 looks up, read at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The harness descriptors, by name.
    pub descriptors: BTreeMap<String, HarnessDescriptor>,
    /// Descriptors that could not be read: name → reason (logged, not offered).
    pub broken_descriptors: BTreeMap<String, String>,
    /// The accounts, by name, or why each file is invalid.
    pub accounts: BTreeMap<String, Result<Account, UnusableDocument>>,
    /// The providers, by name, or why each file is invalid.
    pub providers: BTreeMap<String, Result<Provider, UnusableDocument>>,
}

impl AccessCatalog for Snapshot {
    fn descriptor(&self, harness: &str) -> Option<&HarnessDescriptor> {
        self.descriptors.get(harness)
    }
    fn account(&self, name: &str) -> Option<Result<&Account, &UnusableDocument>> {
        self.accounts.get(name).map(Result::as_ref)
    }
    fn provider(&self, name: &str) -> Option<Result<&Provider, &UnusableDocument>> {
        self.providers.get(name).map(Result::as_ref)
    }
}

/// A name of an account or a provider (its file stem): letters, digits, `-`, `_`, `.`; not
/// starting with a dot.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn toml_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = rd
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let stem = p.file_stem()?.to_str()?.to_string();
            (p.extension()? == "toml" && valid_name(&stem)).then_some((stem, p))
        })
        .collect();
    out.sort();
    out
}

/// Reads one account file; the error names the file, the field and its line.
pub fn read_account(
    path: &Path,
    name: &str,
    descriptors: &BTreeMap<String, HarnessDescriptor>,
) -> Result<Account, UnusableDocument> {
    let what = format!("accounts/{name}.toml");
    let a: Account = from_toml(&what, &read_text(path, &what)?)?;
    validate_account(&a, descriptors.get(&a.harness))?;
    Ok(a)
}

/// Reads one provider file.
pub fn read_provider(path: &Path, name: &str) -> Result<Provider, UnusableDocument> {
    let what = format!("providers/{name}.toml");
    let p: Provider = from_toml(&what, &read_text(path, &what)?)?;
    validate_provider(&p)?;
    Ok(p)
}

/// A hand-written file's text; `what` names it in the error.
fn read_text(path: &Path, what: &str) -> Result<String, UnusableDocument> {
    std::fs::read_to_string(path).map_err(|e| UnusableDocument::Unreadable {
        what: what.to_string(),
        reason: e.to_string(),
    })
}

/// The platform's descriptors (handler-harness's embedded data), then those of every folder (a
/// later one's harness of the same name wins).
pub fn read_descriptors(
    dirs: &[PathBuf],
) -> (
    BTreeMap<String, HarnessDescriptor>,
    BTreeMap<String, String>,
) {
    let mut ok = BTreeMap::new();
    let mut broken = BTreeMap::new();
    for name in handler_harness::builtin_names() {
        match handler_harness::builtin(name) {
            Some(Ok(d)) => {
                ok.insert(name.to_string(), d);
            }
            Some(Err(e)) => {
                broken.insert(name.to_string(), e.message().to_string());
            }
            None => {}
        }
    }
    for dir in dirs {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in rd.flatten() {
            let file = e.path().join("harness.toml");
            let Some(name) = e.file_name().to_str().map(String::from) else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let parsed =
                from_toml::<HarnessDescriptor>(&format!("harnesses/{name}/harness.toml"), &text)
                    .map_err(|e| e.to_string())
                    .and_then(|d| {
                        validate_descriptor(&d)
                            .map(|()| d)
                            .map_err(|e| e.to_string())
                    })
                    .and_then(|d| {
                        if d.name == name {
                            Ok(d)
                        } else {
                            Err(format!(
                                "name {:?} differs from its folder {name:?}",
                                d.name
                            ))
                        }
                    });
            match parsed {
                Ok(d) => {
                    broken.remove(&name);
                    ok.insert(name, d);
                }
                Err(why) => {
                    tracing::warn!(harness = %name, error = %why, "harness descriptor unusable");
                    broken.insert(name, why);
                }
            }
        }
    }
    (ok, broken)
}

impl Snapshot {
    /// Reads everything now.
    pub fn read(config: &DaemonConfig) -> Snapshot {
        let (descriptors, broken_descriptors) = read_descriptors(&config.harnesses_dirs);
        let accounts = toml_files(&config.accounts_dir)
            .into_iter()
            .map(|(name, p)| {
                let r = read_account(&p, &name, &descriptors);
                (name, r)
            })
            .collect();
        let providers = toml_files(&config.providers_dir)
            .into_iter()
            .map(|(name, p)| {
                let r = read_provider(&p, &name);
                (name, r)
            })
            .collect();
        Snapshot {
            descriptors,
            broken_descriptors,
            accounts,
            providers,
        }
    }
}
