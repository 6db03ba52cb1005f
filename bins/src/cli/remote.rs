//! `handler remote …` (D.7, docs/remote.md): remote control from the terminal — set up a
//! gateway, pair a device (the one-time code and its QR code drawn in the terminal), list and
//! revoke devices, the connector's light.

use clap::Subcommand;
use serde_json::{Value, json};

use super::out::{Ctx, print_table, seg, text};

/// `handler remote …`.
#[derive(Subcommand, Debug)]
pub enum RemoteCommand {
    /// Register with a gateway (https://…; http:// only on loopback) and poll it.
    Setup {
        /// The gateway's URL.
        gateway: String,
    },
    /// The connector's light: off, idle, ok, unauthorized, unreachable.
    Status,
    /// A one-time code (and its QR code) to pair a phone or another computer with.
    Pair,
    /// The paired devices.
    #[command(visible_alias = "ls", alias = "list")]
    Devices,
    /// Revoke a device: the gateway refuses it from then on.
    #[command(visible_alias = "rm", alias = "remove")]
    Revoke {
        /// The device's id (`handler remote devices`).
        device: String,
    },
    /// Forget the gateway and every device.
    Off,
}

/// The QR code of `uri` as text (two rows per line), to scan off the terminal.
pub(crate) fn qr_text(uri: &str) -> String {
    use qrcode::render::unicode::Dense1x2;
    qrcode::QrCode::new(uri.as_bytes())
        .map(|q| {
            q.render::<Dense1x2>()
                .dark_color(Dense1x2::Light)
                .light_color(Dense1x2::Dark)
                .quiet_zone(true)
                .build()
        })
        .unwrap_or_default()
}

fn light_line(v: &Value) -> String {
    let mut line = format!("remote control: {}", text(v, "state"));
    if let Some(g) = v["gateway"].as_str() {
        line.push_str(&format!(
            " — gateway {g}, {} device(s), {} shared session(s), {} attached",
            v["devices"], v["shared"], v["attached"]
        ));
    }
    if let Some(d) = v["detail"].as_str() {
        line.push_str(&format!(" ({d})"));
    }
    line
}

/// Runs `handler remote …`; returns the exit code.
pub(crate) async fn run(cmd: RemoteCommand, json: bool) -> anyhow::Result<i32> {
    let ctx = Ctx::new(json)?;
    match cmd {
        RemoteCommand::Setup { gateway } => {
            let v = ctx
                .api
                .put("/v1/remote", &json!({"gateway": gateway}))
                .await?;
            ctx.done(
                &v,
                &format!("{}\nnext: handler remote pair", light_line(&v)),
            );
        }
        RemoteCommand::Status => {
            let v = ctx.api.get("/v1/remote").await?;
            ctx.done(&v, &light_line(&v));
        }
        RemoteCommand::Pair => {
            let v = ctx.api.post("/v1/remote/pairings", &json!({})).await?;
            if ctx.json {
                println!("{v}");
            } else {
                println!("{}", qr_text(v["uri"].as_str().unwrap_or_default()));
                println!(
                    "Scan it with the phone, or open {} and type the code:",
                    text(&v, "uri").split('#').next().unwrap_or_default()
                );
                println!("\n    {}\n", text(&v, "code"));
                println!("It can be used once, until {}.", text(&v, "expiresAt"));
            }
        }
        RemoteCommand::Devices => {
            let v = ctx.api.get("/v1/remote/devices").await?;
            if ctx.json {
                println!("{v}");
            } else {
                print_table(
                    &v,
                    &["device", "name", "paired", "last seen", "attached"],
                    |d| {
                        vec![
                            text(d, "id"),
                            text(d, "name"),
                            text(d, "pairedAt"),
                            text(d, "lastSeenAt"),
                            d["attached"].as_array().map_or(0, Vec::len).to_string(),
                        ]
                    },
                    "no devices (pair one: handler remote pair)",
                );
            }
        }
        RemoteCommand::Revoke { device } => {
            ctx.api
                .delete(&format!("/v1/remote/devices/{}", seg(&device)))
                .await?;
            ctx.done(&json!({"id": device}), &format!("device {device} revoked"));
        }
        RemoteCommand::Off => {
            ctx.api.delete("/v1/remote").await?;
            ctx.done(&json!({"state": "off"}), "remote control is off");
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_qr_code_is_drawn_in_blocks_and_the_light_says_what_is_set() {
        let q = qr_text("https://gw.example/device#code=ABCD-EFGH-IJKL-MNOP-QRST");
        assert!(q.lines().count() > 15, "{q}");
        assert!(q.contains('▀') || q.contains('▄') || q.contains('█'));
        let off = light_line(&json!({"state": "off", "devices": 0}));
        assert_eq!(off, "remote control: off");
        let on = light_line(
            &json!({"state": "unauthorized", "gateway": "https://g", "devices": 1, "shared": 2, "attached": 0, "detail": "again"}),
        );
        assert_eq!(
            on,
            "remote control: unauthorized — gateway https://g, 1 device(s), 2 shared session(s), 0 attached (again)"
        );
    }
}
