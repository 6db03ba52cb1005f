//! What an agent's bindings add to one start (G4): each selected binding checked again
//! (G2, G3), its secrets resolved and delivered, its skills, MCP server and addon part.

use std::collections::BTreeMap;

use handler_contracts::addon::SecretDelivery;
use handler_contracts::control::NetworkMode;
use handler_contracts::harness::McpServer;
use handler_sandbox::compose::AddonPart;

use super::gather;
use super::resolve::AddonLaunch;
use super::sources;
use crate::daemon::problem::{ApiError, ApiResult};
use crate::daemon::state::AppState;
use crate::daemon::store::StoredAgent;
use crate::daemon::store::addons::{AddonSet, secret_path};
use crate::daemon::store::skills;

/// G4: each selected binding, checked again (G2, G3), resolved for a start.
pub fn resolve_for_launch(
    app: &AppState,
    agent: &StoredAgent,
    network: NetworkMode,
) -> ApiResult<AddonLaunch> {
    let mut out = AddonLaunch::default();
    if agent.options.bindings.is_empty() {
        return Ok(out);
    }
    let unusable = |d: String| ApiError::bad_request("binding unusable", d);
    let set = AddonSet::read(&app.config);
    set.check_selection(&agent.options.bindings)
        .map_err(|e| unusable(e.to_string()))?;
    for name in &agent.options.bindings {
        let (b, a, m) = set.usable(name).map_err(|e| unusable(e.to_string()))?;
        let mut env: BTreeMap<String, String> = m.env.clone();
        for (slot, value) in &b.settings {
            env.insert(m.settings[slot].env.clone(), value.clone());
        }
        for (slot, r) in &b.secrets {
            let s = &m.secret_slots[slot];
            let store_name = secret_path(name, slot);
            let value = sources::resolve_secret(app, r)
                .map_err(|e| unusable(format!("binding {name:?}: secrets.{slot}: {e}")))?;
            let given = match s.delivery.unwrap_or_default() {
                SecretDelivery::Env => value.clone(),
                SecretDelivery::Proxy => {
                    let hosts = s.hosts.clone().unwrap_or_else(|| m.egress.clone());
                    let d = gather::deliver(&store_name, value.clone(), hosts, network);
                    out.injections.extend(d.injection);
                    d.given
                }
            };
            env.insert(s.env.clone(), given);
            out.secrets.push((store_name, value));
        }
        for e in &m.egress {
            out.egress
                .push((e.clone(), format!("addon {}: {name}", a.name)));
        }
        for s in &a.skills {
            let dir = skills::check_skill_dir(&a.dir.join("skills").join(s), s)
                .map_err(|e| unusable(format!("addon {}: {e}", a.name)))?;
            out.skills.push((s.clone(), dir));
        }
        if let Some(mcp) = &m.mcp {
            out.mcp_servers.push(McpServer::Stdio {
                name: a.name.clone(),
                command: mcp.command[0].clone(),
                args: mcp.command[1..].to_vec(),
                env: Vec::new(),
            });
        }
        out.parts.push(AddonPart {
            addon: a.name.clone(),
            binding: name.clone(),
            image: m.image.clone(),
            env,
        });
    }
    Ok(out)
}
