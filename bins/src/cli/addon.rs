//! `handler addon …`: the addons (G.1, G.5): list, show one (with the bindings using it), the
//! catalog Handler ships, add (preview, confirm, install) from `catalog:<name>`, a folder or an
//! archive's URL, and rm.

use clap::Subcommand;
use serde_json::{Value, json};

use super::out::{Ctx, Refused, confirm, print_json, print_table, seg, text};

/// `handler addon …`.
#[derive(Subcommand, Debug)]
pub enum AddonCommand {
    /// List the addons: built-in, installed and the user's own.
    #[command(visible_alias = "ls")]
    List,
    /// One addon: where it comes from, its version, hosts, settings, secret slots, commands,
    /// skills, its image's state and the bindings using it.
    Show {
        /// The addon's name.
        name: String,
    },
    /// The catalog Handler ships, installed or not.
    Catalog,
    /// Install an addon: a catalog name, an absolute folder or an https:// .tar.gz URL. Shows what
    /// it brings and asks first.
    Add {
        /// A catalog name, a folder, or a URL.
        source: String,
        /// Install without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Remove an installed addon.
    #[command(alias = "remove")]
    Rm {
        /// The addon's name.
        name: String,
    },
}

/// What the server is given as the source: a bare name is a catalog entry; a relative folder
/// made absolute.
fn source_of(s: &str) -> anyhow::Result<String> {
    if s.starts_with("https://") || s.starts_with("catalog:") || s.starts_with('/') {
        return Ok(s.to_string());
    }
    if !s.contains('/') && !std::path::Path::new(s).exists() {
        return Ok(format!("catalog:{s}"));
    }
    Ok(std::fs::canonicalize(s)?.display().to_string())
}

fn join(v: &Value, key: &str) -> String {
    v[key]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    x.get("name")
                        .unwrap_or(x)
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn print_preview(p: &Value) {
    println!("addon {} from {}", text(p, "name"), text(p, "source"));
    for (label, key) in [
        ("hosts", "egress"),
        ("settings", "settings"),
        ("secret slots", "secretSlots"),
        ("env", "env"),
        ("commands", "commands"),
        ("MCP server", "mcp"),
        ("skills", "skills"),
    ] {
        let v = join(p, key);
        if !v.is_empty() {
            println!("  {label}: {v}");
        }
    }
    if let Some(i) = p["image"].as_str() {
        println!("  image: {i} (its Containerfile runs code when built)");
    }
    if let Some(r) = p["replaces"].as_str() {
        println!("  replaces: the {r} addon of that name");
    }
}

/// A slot list as `name (required)`, comma-separated.
fn slot_list(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    let req = if s["required"] == true {
                        " (required)"
                    } else {
                        ""
                    };
                    format!("{}{req}", text(s, "name"))
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// Where an addon comes from, for a person.
fn origin(a: &Value) -> String {
    if a["builtin"] == true {
        "built-in".into()
    } else if a["source"].is_string() {
        text(a, "source")
    } else if a["overridesBuiltin"] == true {
        "the user's own (in place of the built-in one)".into()
    } else {
        "the user's own".into()
    }
}

/// An addon's image state, for a person.
fn image_state(a: &Value) -> Option<String> {
    let image = a["image"].as_str()?;
    Some(if a["imagePresent"] == true {
        match a["builtAt"].as_str() {
            Some(at) => format!("{image} (built {at})"),
            None => format!("{image} (built)"),
        }
    } else {
        format!("{image} (not built)")
    })
}

/// `handler addon show`: the AddonInfo and the bindings using it.
fn print_addon(a: &Value) {
    println!("addon {}", text(a, "name"));
    let mut lines = vec![
        ("description", text(a, "description")),
        ("source", origin(a)),
        ("version", text(a, "version")),
        ("image", image_state(a).unwrap_or_default()),
        ("hosts", join(a, "egress")),
        ("settings", slot_list(&a["settings"])),
        ("secret slots", slot_list(&a["secretSlots"])),
        ("commands", join(a, "commands")),
        ("skills", join(a, "skills")),
        ("bindings", join(a, "bindings")),
        ("directory", text(a, "directory")),
        ("error", text(a, "error")),
    ];
    if a["updateAvailable"] == true {
        lines.push(("update", "available (add it again to see it)".into()));
    }
    for (label, v) in lines {
        if !v.is_empty() {
            println!("  {label}: {v}");
        }
    }
}

/// The AddonInfo of `name` with `bindings`: the names of the bindings that use it.
async fn addon_with_bindings(ctx: &Ctx, name: &str) -> anyhow::Result<Value> {
    let mut a = ctx.api.get(&format!("/v1/addons/{}", seg(name))).await?;
    let bindings = ctx.api.get("/v1/bindings").await?;
    let using: Vec<Value> = bindings
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["addon"].as_str() == Some(name))
        .map(|b| b["name"].clone())
        .collect();
    if let Some(o) = a.as_object_mut() {
        o.insert("bindings".into(), Value::Array(using));
    }
    Ok(a)
}

/// Runs `handler addon …`.
pub(crate) async fn run(cmd: AddonCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        AddonCommand::List => {
            let v = ctx.api.get("/v1/addons").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["name", "source", "error"],
                    |a| {
                        let src = if a["builtin"] == true {
                            "built-in".into()
                        } else {
                            text(a, "source")
                        };
                        vec![text(a, "name"), src, text(a, "error")]
                    },
                    "no addons",
                );
            });
        }
        AddonCommand::Show { name } => {
            let a = addon_with_bindings(&ctx, &name).await?;
            ctx.show(&a, print_addon);
        }
        AddonCommand::Catalog => {
            let v = ctx.api.get("/v1/addon-catalog").await?;
            ctx.show(&v, |v| {
                print_table(
                    v,
                    &["name", "installed", "description"],
                    |e| {
                        vec![
                            text(e, "name"),
                            text(e, "installed"),
                            text(e, "description"),
                        ]
                    },
                    "the catalog is empty",
                );
            });
        }
        AddonCommand::Add { source, yes } => {
            let source = source_of(&source)?;
            let p = ctx
                .api
                .post("/v1/addons/preview", &json!({"source": source}))
                .await?;
            if !yes {
                print_preview(&p);
                if !confirm("Install it?") {
                    return Err(Refused(
                        "not installed: not confirmed (--yes to skip the question)".into(),
                    )
                    .into());
                }
            }
            let body = json!({"source": source, "digest": p["digest"]});
            let v = ctx.api.post("/v1/addons/install", &body).await?;
            if json {
                print_json(&v);
            } else {
                println!("addon {} installed", text(&v["addon"], "name"));
            }
        }
        AddonCommand::Rm { name } => {
            let v = ctx
                .api
                .delete(&format!("/v1/addons/{}", seg(&name)))
                .await?;
            ctx.done(&v, &format!("addon {name} removed"));
        }
    }
    Ok(0)
}
