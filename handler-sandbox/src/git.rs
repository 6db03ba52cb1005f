//! Reading what the host's git takes from a repository's own files, so the plan can keep all of
//! it read-only in a sandbox that can write the repository's working tree (issue 11, item 5): the
//! `gitdir:` line of a `.git` file (a worktree's, a submodule's), the `commondir` file of a git
//! directory, and the paths a git config names (`core.hooksPath`, `include.path`,
//! `includeIf.<condition>.path`). Pure text functions; handler-core reads the files and resolves
//! the paths.

/// The path a `.git` file names (`gitdir: <path>`), as written; `None` when it is no gitfile
/// (git then refuses it too: "invalid gitfile format").
pub fn gitfile_target(text: &str) -> Option<&str> {
    let line = text.lines().next()?;
    let path = line.strip_prefix("gitdir:")?.trim();
    (!path.is_empty()).then_some(path)
}

/// The path a git directory's `commondir` file names, as written (relative to the git directory
/// when not absolute); `None` when empty.
pub fn commondir_target(text: &str) -> Option<&str> {
    let path = text.lines().next()?.trim_end();
    (!path.is_empty()).then_some(path)
}

/// Which setting of a git config named a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigPathKey {
    /// `core.hooksPath`: relative to the working tree's top folder.
    HooksPath,
    /// `include.path` or `includeIf.<condition>.path`: relative to the config file's folder.
    Include,
}

/// The paths a git config text names that decide what git runs: `core.hooksPath` and every
/// include (conditional ones too: whether the condition holds is not looked at, all count). Keys
/// are matched as git does (section and key names case-insensitive, subsection as written);
/// values are unquoted (`"…"`, the `\\` `\"` escapes) and a trailing comment is dropped. Lines
/// that are no `key = value` are skipped, never an error: a text git itself refuses runs nothing.
pub fn config_paths(text: &str) -> Vec<(ConfigPathKey, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    for raw in text.lines() {
        let mut line = raw.trim();
        if line.starts_with('[') {
            let Some(end) = line.find(']') else {
                continue;
            };
            section = section_name(&line[1..end]);
            line = line[end + 1..].trim();
            if line.is_empty() {
                continue;
            }
        }
        if line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim().to_ascii_lowercase(), v.trim()),
            None => continue,
        };
        let kind = if section == "core" && key == "hookspath" {
            ConfigPathKey::HooksPath
        } else if key == "path" && (section == "include" || section.starts_with("includeif.")) {
            ConfigPathKey::Include
        } else {
            continue;
        };
        let v = unquote(value);
        if !v.is_empty() {
            out.push((kind, v));
        }
    }
    out
}

/// `core`, `includeIf "gitdir:~/x/"` → `core`, `includeif.gitdir:~/x/` (section lowercased).
fn section_name(inner: &str) -> String {
    let inner = inner.trim();
    match inner.split_once(char::is_whitespace) {
        Some((s, sub)) => format!(
            "{}.{}",
            s.to_ascii_lowercase(),
            sub.trim().trim_matches('"')
        ),
        None => inner.to_ascii_lowercase(),
    }
}

fn unquote(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(match n {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
            }
            '#' | ';' if !quoted => break,
            _ => out.push(c),
        }
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitfile_and_commondir() {
        assert_eq!(
            gitfile_target("gitdir: /r/.git/worktrees/wt\n"),
            Some("/r/.git/worktrees/wt")
        );
        assert_eq!(
            gitfile_target("gitdir: ../.git/modules/m"),
            Some("../.git/modules/m")
        );
        assert_eq!(gitfile_target("nonsense\n"), None);
        assert_eq!(gitfile_target(""), None);
        assert_eq!(gitfile_target("gitdir:   \n"), None);
        assert_eq!(commondir_target("../..\n"), Some("../.."));
        assert_eq!(commondir_target("\n"), None);
    }

    #[test]
    fn config_paths_finds_hooks_and_includes() {
        let text = r#"
[core]
	repositoryformatversion = 0
	HooksPath = .husky   # husky
[Include]
	path = "../shared config"
[includeIf "gitdir:~/work/"]
	path = ~/work.gitconfig
[remote "origin"]
	path = not-an-include
[core] hookspath = "a\"b" ; comment
; [include] path = commented
"#;
        assert_eq!(
            config_paths(text),
            vec![
                (ConfigPathKey::HooksPath, ".husky".to_string()),
                (ConfigPathKey::Include, "../shared config".to_string()),
                (ConfigPathKey::Include, "~/work.gitconfig".to_string()),
                (ConfigPathKey::HooksPath, "a\"b".to_string()),
            ]
        );
        assert!(config_paths("garbage\n[[[\n=\n").is_empty());
    }
}
