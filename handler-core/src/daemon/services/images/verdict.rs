//! Pure: what the check (D.4) asks of a new image's answers, and the dummy model access it runs
//! with: a token login on an account with a dummy token, else a provider with a dummy key and
//! endpoints nothing answers, else (a file login) an account with an empty credential file —
//! and, when such a harness offers an ACP auth method taking an API key, a dummy key given by
//! `authenticate` (its login is validated online, the check has no network: decision 0077).

use std::collections::BTreeMap;

use handler_contracts::control::ModelAccess;
use handler_contracts::parse::from_toml;
use handler_contracts::{Account, HarnessDescriptor, Provider};
use serde_json::Value;

/// The dummy account's or provider's name.
pub const CHECK_NAME: &str = "handler-check";
/// Where the dummy provider's endpoints point: a port nothing answers on.
pub const NOWHERE: &str = "http://127.0.0.1:9/v1";

/// The model the check runs with.
#[derive(Debug, Clone)]
pub enum Dummy {
    /// An account with a dummy token (a token login): the token's value.
    Token(Account, String),
    /// An account of a file login: its credential file's content.
    LoginFile(Account),
    /// A provider with a dummy key: the key's value.
    Provider(Provider, String),
}

/// The dummy model access for `d` and what it is made of.
pub fn dummy(d: &HarnessDescriptor) -> Result<(ModelAccess, Dummy), String> {
    let token_login = d.login.as_ref().filter(|l| l.token.is_some());
    let account = |token: bool| {
        let t = if token {
            format!("token = {{ secret = \"accounts/{CHECK_NAME}/token\" }}\n")
        } else {
            String::new()
        };
        from_toml::<Account>(
            "check account",
            &format!(
                "apiVersion = \"handler.account/v1\"\nharness = \"{}\"\n{t}",
                d.name
            ),
        )
        .map_err(|e| e.to_string())
    };
    let by_account = ModelAccess {
        account: Some(CHECK_NAME.into()),
        ..ModelAccess::default()
    };
    if let Some(l) = token_login {
        let prefix = l.token_prefix.clone().unwrap_or_default();
        let token = format!("{prefix}handler-check-dummy-token-0000");
        return Ok((by_account, Dummy::Token(account(true)?, token)));
    }
    if let Some(protocol) = d.provider_protocols.first() {
        let endpoints: String = d
            .provider_protocols
            .iter()
            .map(|p| format!("{} = \"{NOWHERE}\"\n", p.as_str()))
            .collect();
        let p = from_toml::<Provider>(
            "check provider",
            &format!(
                "apiVersion = \"handler.provider/v1\"\napiKey = {{ secret = \"providers/{CHECK_NAME}/apiKey\" }}\n[endpoints]\n{endpoints}[[models]]\nid = \"handler-check-model\"\n"
            ),
        )
        .map_err(|e| format!("{e} ({})", protocol.as_str()))?;
        let access = ModelAccess {
            provider: Some(CHECK_NAME.into()),
            harness: Some(d.name.clone()),
            model: Some("handler-check-model".into()),
            ..ModelAccess::default()
        };
        return Ok((
            access,
            Dummy::Provider(p, "sk-handler-check-dummy-key-0000".into()),
        ));
    }
    Ok((by_account, Dummy::LoginFile(account(false)?)))
}

/// The dummy API key the check gives by ACP `authenticate` to a harness on a file login.
pub const DUMMY_ACP_KEY: &str = "handler-check-dummy-acp-key-0000";

/// For a harness on a file login, whose session/new validates the login online (gemini's
/// Google login; the check has no network): the params of the ACP `authenticate` request that
/// puts it on a dummy API key instead, with the first of initialize's `authMethods` taking one
/// (`_meta["api-key"]`); None when it offers none (the check goes on with the login file).
pub fn offline_authenticate(initialize: &Value) -> Option<Value> {
    let method = initialize["authMethods"]
        .as_array()?
        .iter()
        .find(|m| m["_meta"].get("api-key").is_some())?;
    let id = method["id"].as_str()?;
    Some(serde_json::json!({"methodId": id, "_meta": {"api-key": DUMMY_ACP_KEY}}))
}

/// The content a state file starts with in the check of a file-login harness: `{}` for a JSON
/// file, else nothing (the slot's declared `initial` is for the real login).
pub fn empty_initial(target: &str) -> &'static str {
    if target.ends_with(".json") { "{}" } else { "" }
}

/// What a session/new answer lacks of what `d` maps: each session mode its permissions set
/// (offered in `modes.availableModes` or a `mode` config option) and its model option.
pub fn missing(d: &HarnessDescriptor, session_new: &Value) -> Vec<String> {
    let mut offered: Vec<&str> = session_new["modes"]["availableModes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .collect();
    let options = session_new["configOptions"].as_array();
    for o in options.into_iter().flatten() {
        if o["category"] == "mode" || o["id"] == "mode" {
            offered.extend(
                o["options"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v["value"].as_str()),
            );
        }
    }
    let mut out = Vec::new();
    let wanted: BTreeMap<&str, String> = d
        .permissions
        .iter()
        .filter_map(|(p, m)| m.session_mode.as_deref().map(|s| (s, format!("{p:?}"))))
        .collect();
    for (mode, permission) in wanted {
        if !offered.contains(&mode) {
            out.push(format!(
                "session mode {mode:?} (permission {}) is not offered",
                permission.to_lowercase()
            ));
        }
    }
    if let Some(opt) = &d.model_option {
        let found = options
            .into_iter()
            .flatten()
            .any(|o| o["id"].as_str() == Some(opt.as_str()));
        if !found {
            out.push(format!("the model option {opt:?} is not offered"));
        }
    }
    out
}

/// The name of the check's probe stdio MCP server (D.4, B6).
pub const MCP_PROBE_NAME: &str = "handler-check-probe";

/// B6 over what the probe stdio MCP server recorded (`record`: its environment, `NAME=value`
/// lines; none: it did not start): it must have started and must not see any of `secrets`.
pub fn mcp_probe(record: Option<&str>, secrets: &[&str]) -> Result<(), String> {
    let Some(env) = record else {
        return Err(format!(
            "the stdio MCP server {MCP_PROBE_NAME:?} given at session/new did not start (B6)"
        ));
    };
    let seen: Vec<&str> = env
        .lines()
        .filter(|l| secrets.iter().any(|s| !s.is_empty() && l.contains(s)))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    if seen.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the stdio MCP server {MCP_PROBE_NAME:?} saw the dummy secret in {} (B6: the harness's secrets are dropped)",
            seen.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codex() -> HarnessDescriptor {
        handler_harness::builtin("codex").unwrap().unwrap()
    }

    #[test]
    fn a_real_session_new_offers_every_mapped_mode_and_the_model() {
        let text = include_str!("../../../../../fixtures/harness/codex/session-new.json");
        let v: Value = serde_json::from_str(text).unwrap();
        let v = v.get("result").cloned().unwrap_or(v);
        assert_eq!(missing(&codex(), &v), Vec::<String>::new());
    }

    #[test]
    fn a_missing_mode_or_model_option_is_named() {
        let v = json!({"sessionId": "s", "modes": {"availableModes": [{"id": "read-only"}]}});
        let m = missing(&codex(), &v);
        assert!(m.iter().any(|l| l.contains("\"workspace-write\"")), "{m:?}");
        assert!(
            m.iter().any(|l| l.contains("model option \"model\"")),
            "{m:?}"
        );
        assert!(!m.iter().any(|l| l.contains("\"read-only\"")), "{m:?}");
    }

    #[test]
    fn a_file_login_offering_an_api_key_method_is_authenticated_with_a_dummy_key() {
        let text = include_str!("../../../../../fixtures/harness/gemini/initialize.json");
        let v: Value = serde_json::from_str(text).unwrap();
        let v = v.get("result").cloned().unwrap_or(v);
        let a = offline_authenticate(&v).expect("gemini offers gemini-api-key");
        assert_eq!(a["methodId"], "gemini-api-key");
        assert_eq!(a["_meta"]["api-key"], DUMMY_ACP_KEY);
        let oauth_only = json!({"authMethods": [{"id": "oauth-personal", "name": "Google"}]});
        assert_eq!(offline_authenticate(&oauth_only), None);
        assert_eq!(offline_authenticate(&json!({"protocolVersion": 1})), None);
        let (_, d) = dummy(&handler_harness::builtin("gemini").unwrap().unwrap()).unwrap();
        assert!(matches!(d, Dummy::LoginFile(..)));
        assert_eq!(empty_initial("~/.gemini/settings.json"), "{}");
        assert_eq!(empty_initial("~/.vibe/config.toml"), "");
    }

    #[test]
    fn the_dummy_access_follows_the_login() {
        let (a, d) = dummy(&handler_harness::builtin("claude-code").unwrap().unwrap()).unwrap();
        assert_eq!(a.account.as_deref(), Some(CHECK_NAME));
        assert!(matches!(d, Dummy::Token(..)));
        let (a, d) = dummy(&codex()).unwrap();
        assert_eq!(a.provider.as_deref(), Some(CHECK_NAME));
        let Dummy::Provider(p, _) = d else { panic!() };
        assert!(p.endpoints.values().all(|e| e == NOWHERE));
    }

    #[test]
    fn the_mcp_probe_must_start_and_not_see_the_secret() {
        let secret = "fk-handler-check-dummy-token-0000";
        let all = [
            (
                "clean",
                mcp_probe(Some("HOME=/home/agent\nPATH=/bin\n"), &[secret]),
            ),
            (
                "saw it",
                mcp_probe(Some(&format!("HOME=/h\nFAKE_TOKEN={secret}\n")), &[secret]),
            ),
            ("did not start", mcp_probe(None, &[secret])),
        ];
        insta::assert_debug_snapshot!(all);
    }
}
