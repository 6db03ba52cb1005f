//! `handler skill …`: the skills library (`/v1/skills`): list, show, new, edit (its SKILL.md in
//! `$EDITOR`, or from a file), rm, import (a zip archive or an https:// URL) and scan (what
//! handlerd finds in its files, no model involved).

use std::io::{IsTerminal, Read};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::out::{Ctx, Refused, print_fields, print_json, print_table, seg, table, text};

/// `handler skill …`.
#[derive(Subcommand, Debug)]
pub enum SkillCommand {
    /// List the library's skills (an invalid one with why).
    #[command(visible_alias = "ls")]
    List,
    /// Show a skill: its files, who gets it, its digest and its SKILL.md.
    Show {
        /// The skill's name.
        name: String,
    },
    /// Make a skill: a SKILL.md from --description, or the file --content names.
    New(NewArgs),
    /// Change a skill's SKILL.md (in $EDITOR, or from --content) or the projects giving it.
    Edit(EditArgs),
    /// Remove a skill (the agents that picked it lose it).
    #[command(alias = "remove")]
    Rm {
        /// The skill's name.
        name: String,
    },
    /// Import a skill from a zip archive (a file) or an https:// URL (an archive, a repository's
    /// folder).
    Import {
        /// A `.zip` file, or an `https://` URL.
        source: String,
        /// Give it to this project's agents (the project's id).
        #[arg(long)]
        project: Option<String>,
        /// Replace the skill of that name if there is one.
        #[arg(long)]
        replace: bool,
    },
    /// What handlerd finds in a skill's files: executables, binaries, hosts, hidden text, blobs.
    Scan {
        /// The skill's name.
        name: String,
    },
    /// Have the built-in skill reviewer read it (a run, read-only): its verdict and findings.
    Review {
        /// The skill's name.
        name: String,
        /// What you expect it to do (the reviewer says where it differs).
        #[arg(long, value_name = "TEXT")]
        expect: Option<String>,
    },
}

/// What `skill new` takes.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// Its name (a SKILL.md is written with it and --description).
    #[arg(required_unless_present = "content", conflicts_with = "content")]
    pub name: Option<String>,
    /// What it is for: when a model should use it.
    #[arg(long, requires = "name")]
    pub description: Option<String>,
    /// Its SKILL.md from this file (`-`: stdin); its frontmatter names it.
    #[arg(long, value_name = "FILE")]
    pub content: Option<String>,
    /// Start with another skill's other files.
    #[arg(long, value_name = "SKILL")]
    pub copy_of: Option<String>,
    /// Give it to this project's agents (the project's id); repeatable.
    #[arg(long = "project", value_name = "ID")]
    pub projects: Vec<String>,
}

/// What `skill edit` takes.
#[derive(Args, Debug)]
pub struct EditArgs {
    /// The skill's name.
    pub name: String,
    /// Its new SKILL.md from this file (`-`: stdin); a new name in it renames the skill.
    #[arg(long, value_name = "FILE")]
    pub content: Option<String>,
    /// The projects giving it, exactly these (ids); repeatable.
    #[arg(long = "project", value_name = "ID", conflicts_with = "no_projects")]
    pub projects: Vec<String>,
    /// No project gives it any more.
    #[arg(long)]
    pub no_projects: bool,
}

/// Runs `handler skill …`; returns the exit code.
pub(crate) async fn run(cmd: SkillCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        SkillCommand::List => {
            let v = ctx.api.get("/v1/skills").await?;
            ctx.show(&v, print_list);
        }
        SkillCommand::Show { name } => {
            let v = ctx.api.get(&skill_path(&name)).await?;
            ctx.show(&v, print_skill);
        }
        SkillCommand::New(a) => new(&ctx, a).await?,
        SkillCommand::Edit(a) => edit(&ctx, a).await?,
        SkillCommand::Rm { name } => {
            let v = ctx.api.delete(&skill_path(&name)).await?;
            ctx.done(&v, &format!("skill {name} removed"));
        }
        SkillCommand::Import {
            source,
            project,
            replace,
        } => import(&ctx, &source, project.as_deref(), replace).await?,
        SkillCommand::Scan { name } => {
            let v = ctx.api.get(&skill_path(&name)).await?;
            if ctx.json {
                print_json(&v["scan"]);
            } else {
                print!("{}", scan_text(&v["scan"]));
            }
        }
        SkillCommand::Review { name, expect } => {
            return super::runs::review(&ctx, &name, expect).await;
        }
    }
    Ok(0)
}

fn skill_path(name: &str) -> String {
    format!("/v1/skills/{}", seg(name))
}

fn print_list(v: &Value) {
    print_table(
        v,
        &[
            "name",
            "description",
            "files",
            "projects",
            "used by",
            "problem",
        ],
        |s| {
            vec![
                text(s, "name"),
                text(s, "description"),
                s["files"].as_array().map_or(0, Vec::len).to_string(),
                text(s, "projects"),
                text(s, "usedBy"),
                text(s, "error"),
            ]
        },
        "no skills",
    );
}

fn print_skill(v: &Value) {
    print_fields(
        v,
        &[
            "name",
            "description",
            "digest",
            "projects",
            "usedBy",
            "error",
        ],
    );
    let files = v["files"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !files.is_empty() {
        println!();
        let rows = files.iter().map(|f| {
            vec![
                text(f, "path"),
                text(f, "size"),
                if f["executable"] == json!(true) {
                    "yes".into()
                } else {
                    String::new()
                },
            ]
        });
        println!("{}", table(&["file", "bytes", "executable"], rows));
    }
    let findings = scan_text(&v["scan"]);
    if findings != NOTHING_FOUND {
        println!("\nscan:");
        print!("{findings}");
    }
    if let Some(c) = v["content"].as_str() {
        println!("\nSKILL.md:\n{}", c.trim_end());
    }
}

const NOTHING_FOUND: &str =
    "nothing found: no executables, binaries, hosts, hidden text or blobs\n";

/// The scan as lines: each kind with its paths or `path:line text`.
pub(crate) fn scan_text(scan: &Value) -> String {
    let mut out = String::new();
    for (key, title) in [("executables", "executables"), ("binaries", "binaries")] {
        for p in scan[key].as_array().map(Vec::as_slice).unwrap_or_default() {
            out.push_str(&format!("{title}: {}\n", p.as_str().unwrap_or_default()));
        }
    }
    for (key, title) in [
        ("hosts", "host"),
        ("hiddenText", "hidden text"),
        ("blobs", "blob"),
    ] {
        for h in scan[key].as_array().map(Vec::as_slice).unwrap_or_default() {
            out.push_str(&format!(
                "{title}: {}:{} {}\n",
                text(h, "path"),
                text(h, "line"),
                text(h, "text")
            ));
        }
    }
    if out.is_empty() {
        NOTHING_FOUND.to_string()
    } else {
        out
    }
}

/// A SKILL.md's text from FILE, or stdin for `-`.
fn read_content(file: &str) -> anyhow::Result<String> {
    if file == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("--content -: reading stdin")?;
        return Ok(s);
    }
    std::fs::read_to_string(file).with_context(|| format!("--content: {file}"))
}

/// The SKILL.md `skill new NAME --description D` writes: the description as a folded block,
/// so that no character of it needs escaping.
pub(crate) fn minimal_skill_md(name: &str, description: &str) -> String {
    let block: String = description
        .lines()
        .map(|l| format!("  {}\n", l.trim()))
        .collect();
    format!("---\nname: {name}\ndescription: >\n{block}---\n\n# {name}\n\n{description}\n")
}

async fn new(ctx: &Ctx, a: NewArgs) -> anyhow::Result<()> {
    let content = match (&a.content, &a.name) {
        (Some(file), _) => read_content(file)?,
        (None, Some(name)) => {
            let Some(d) = &a.description else {
                return Err(Refused(format!(
                    "skill new {name}: --description is needed (what the skill is for), or --content FILE"
                ))
                .into());
            };
            minimal_skill_md(name, d)
        }
        (None, None) => return Err(Refused("skill new: NAME or --content FILE".into()).into()),
    };
    let mut body = json!({"content": content});
    if !a.projects.is_empty() {
        body["projects"] = json!(a.projects);
    }
    if let Some(c) = &a.copy_of {
        body["copyOf"] = json!(c);
    }
    let v = ctx.api.post("/v1/skills", &body).await?;
    ctx.done(&v, &format!("skill {} made", text(&v, "name")));
    Ok(())
}

async fn edit(ctx: &Ctx, a: EditArgs) -> anyhow::Result<()> {
    let projects = if a.no_projects {
        Some(Vec::new())
    } else if a.projects.is_empty() {
        None
    } else {
        Some(a.projects.clone())
    };
    let content = match &a.content {
        Some(file) => read_content(file)?,
        None => {
            let now = ctx.api.get(&skill_path(&a.name)).await?;
            let current = now["content"].as_str().unwrap_or_default().to_string();
            if projects.is_some() {
                current
            } else if std::io::stdin().is_terminal() {
                match in_editor(&a.name, &current)? {
                    Some(changed) => changed,
                    None => {
                        println!("skill {}: unchanged", a.name);
                        return Ok(());
                    }
                }
            } else {
                return Err(Refused(format!(
                    "skill edit {}: no terminal for $EDITOR: give --content FILE or --project",
                    a.name
                ))
                .into());
            }
        }
    };
    let mut body = json!({"content": content});
    if let Some(p) = projects {
        body["projects"] = json!(p);
    }
    let v = ctx.api.put(&skill_path(&a.name), &body).await?;
    ctx.done(&v, &format!("skill {} saved", text(&v, "name")));
    Ok(())
}

/// The text edited in `$VISUAL`/`$EDITOR` (else `vi`); none when it was left as it was.
fn in_editor(name: &str, current: &str) -> anyhow::Result<Option<String>> {
    let dir = std::env::temp_dir().join(format!("handler-skill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    let file = dir.join(format!("{}-SKILL.md", name.replace('/', "_")));
    std::fs::write(&file, current).with_context(|| format!("{}", file.display()))?;
    let editor = std::env::var("VISUAL")
        .or_else(|_| std::env::var("EDITOR"))
        .unwrap_or_else(|_| "vi".into());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&file)
        .status()
        .with_context(|| format!("running the editor {editor}"));
    let edited = std::fs::read_to_string(&file);
    let _ = std::fs::remove_dir_all(&dir);
    if !status?.success() {
        return Err(Refused(format!("the editor {editor} failed: nothing saved")).into());
    }
    let edited = edited.context("reading the edited SKILL.md")?;
    Ok((edited != current).then_some(edited))
}

async fn import(
    ctx: &Ctx,
    source: &str,
    project: Option<&str>,
    replace: bool,
) -> anyhow::Result<()> {
    let mut query = Vec::new();
    if let Some(p) = project {
        query.push(format!("project={}", seg(p)));
    }
    if replace {
        query.push("replace=true".to_string());
    }
    let q = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    let looks_like_url = source.contains("://");
    let v = if looks_like_url {
        let body = json!({"url": source});
        ctx.api
            .post(&format!("/v1/skills/import-url{q}"), &body)
            .await?
    } else {
        let bytes = std::fs::read(source).with_context(|| format!("SOURCE: {source}"))?;
        ctx.api
            .post_bytes(
                &format!("/v1/skills/import-zip{q}"),
                bytes.into(),
                "application/zip",
            )
            .await?
    };
    ctx.done(
        &v,
        &format!(
            "skill {} imported: SKILL.md and {} other files",
            text(&v, "name"),
            v["files"].as_array().map_or(0, Vec::len)
        ),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_reads_as_one_line_per_finding() {
        let scan = json!({"executables": ["run.sh"], "binaries": [], "hosts": [
            {"path": "SKILL.md", "line": 3, "text": "example.com"}],
            "hiddenText": [], "blobs": []});
        assert_eq!(
            scan_text(&scan),
            "executables: run.sh\nhost: SKILL.md:3 example.com\n"
        );
        assert_eq!(scan_text(&json!({})), NOTHING_FOUND);
    }

    #[test]
    fn a_new_skill_md_names_itself_and_keeps_its_description_as_typed() {
        let md = minimal_skill_md("greet", "Say: \"hello\"");
        let fm = handler_contracts::skill::frontmatter(&md).unwrap();
        assert_eq!(
            (fm.name.as_str(), fm.description.as_str()),
            ("greet", "Say: \"hello\"")
        );
    }
}
