//! `handler ui`: opens the web UI (D intro) in the desktop's browser. The URL carries no token: a
//! one-time code handlerd gives (`POST /v1/ui/code`, valid 60 s) in its fragment, which the page
//! exchanges for the token and removes from the address bar (decision 0133), never in a process's
//! arguments: the browser is given a page in handlerd's config folder (0600) that sends it on to
//! `/#code=…`. `--print`, or no display to open it on, prints that URL instead (for another browser
//! on this machine).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use handler_core::client::{Discovery, config_dir};

/// `handler ui`'s arguments.
#[derive(Args, Debug)]
pub struct UiArgs {
    /// Print the URL (a one-time code, valid 60 s) instead of opening a browser.
    #[arg(long)]
    pub print: bool,
}

/// The UI's URL for a daemon on `port` with the one-time `code` in the fragment.
pub(crate) fn ui_url(port: u16, code: &str) -> String {
    format!("http://127.0.0.1:{port}/#code={code}")
}

/// A page that sends the browser on to `url` at once (no script: a meta refresh).
pub(crate) fn redirect_page(url: &str) -> String {
    let escaped = url
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    format!(
        "<!doctype html><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">\
         <meta http-equiv=\"refresh\" content=\"0;url={escaped}\"><title>Handler</title>\n"
    )
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// Runs `handler ui`.
pub async fn run_ui(args: &UiArgs) -> anyhow::Result<i32> {
    let d = Discovery::from_process_env()?;
    let port = d.port;
    let answer = handler_core::client::api::Api::new(d)
        .post("/v1/ui/code", &serde_json::json!({}))
        .await?;
    let code = answer["code"]
        .as_str()
        .context("handlerd gave no code for the web UI")?;
    let url = ui_url(port, code);
    let display =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if args.print || !display {
        println!("{url}");
        return Ok(0);
    }
    let dir: PathBuf = config_dir(&|k| std::env::var(k).ok())?;
    let page = dir.join("ui.html");
    write_private(&page, &redirect_page(&url))?;
    let status = std::process::Command::new("xdg-open")
        .arg(&page)
        .status()
        .context("cannot run xdg-open (no desktop?): `handler ui --print` prints the URL")?;
    if !status.success() {
        anyhow::bail!("xdg-open failed ({status}): `handler ui --print` prints the URL");
    }
    eprintln!("handler ui: opened http://127.0.0.1:{port}/");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_goes_in_the_fragment_and_the_page_has_no_script() {
        let url = ui_url(7430, "abc123");
        assert_eq!(url, "http://127.0.0.1:7430/#code=abc123");
        let page = redirect_page(&url);
        assert!(page.contains("content=\"0;url=http://127.0.0.1:7430/#code=abc123\""));
        assert!(!page.contains("<script"));
        assert!(redirect_page("x\"><script>").contains("x&quot;>&lt;script>"));
    }
}
