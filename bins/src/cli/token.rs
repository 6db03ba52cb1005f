//! `handler token rotate` (issue 27 F12, decision 0133): handlerd writes a new token over its
//! token file and refuses the old one from then on; this CLI reads the file at each run, a web UI
//! tab opened with the old token must be opened again (`handler ui`).

use clap::Subcommand;
use handler_core::client::Discovery;
use handler_core::client::api::Api;

/// `handler token …`.
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Replace handlerd's token: the old one (a web UI tab, a copied URL) is refused from now on.
    Rotate,
}

/// Runs `handler token …`.
pub(crate) async fn run(c: TokenCommand, json: bool) -> anyhow::Result<i32> {
    match c {
        TokenCommand::Rotate => {
            let api = Api::new(Discovery::from_process_env()?);
            api.post("/v1/token/rotate", &serde_json::json!({})).await?;
            if json {
                println!("{}", serde_json::json!({"rotated": true}));
            } else {
                println!(
                    "the token is rotated: the old one is refused from now on (open the web UI again: handler ui)"
                );
            }
            Ok(0)
        }
    }
}
