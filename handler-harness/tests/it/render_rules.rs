//! render's rules, each asserted on its own: B5 errors (with their text), B3, B6, B7, B8, E4,
//! E5, E6, B9, determinism (proptest) and the secret never in argv (proptest).

use crate::common;

use common::*;
use handler_contracts::access::FileSource;
use handler_contracts::harness::{McpServer, McpTransport, PermissionMode};
use handler_harness::render::render;
use handler_harness::{RenderContext, RenderError, SANDBOX_ENV_PATH, render_json};
use proptest::prelude::*;

fn err(input: &handler_contracts::RenderInput, ctx: &handler_harness::RenderContext) -> String {
    render(input, ctx)
        .expect_err("render must refuse")
        .to_string()
}

// ---- B5: one error per input a harness cannot honour, its text asserted ------------------

#[test]
fn b5_model_without_model_option() {
    let mut i = base_input("gemini", "account", PermissionMode::Ask);
    i.agent.config.model = Some("gemini-2.5-pro".into());
    assert_eq!(
        err(&i, &context()),
        "agent.config.model: gemini cannot honour it (B5): \"gemini-2.5-pro\" cannot be chosen: it has no modelOption"
    );
}

#[test]
fn b5_skills_without_skills_dir() {
    let mut i = base_input("claude-code", "account", PermissionMode::Ask);
    i.descriptor.skills_dir = None;
    i.skills = vec!["/skills/pdf".into()];
    assert_eq!(
        err(&i, &context()),
        "skills: claude-code cannot honour it (B5): it has no skillsDir"
    );
}

#[test]
fn b5_mcp_transport_not_accepted() {
    let mut i = base_input("vibe", "provider", PermissionMode::Ask);
    i.mcp_servers = vec![http_server()];
    assert_eq!(
        err(&i, &context()),
        "mcpServers[0]: vibe cannot honour it (B5): server \"docs\" uses transport http, not one it accepts (stdio)"
    );
}

#[test]
fn b5_permission_mode_not_mapped() {
    let i = base_input("pi", "provider", PermissionMode::Ask);
    assert_eq!(
        err(&i, &context()),
        "permissionMode: pi cannot honour it (B5): \"ask\" is not a mode it has (it maps: bypass)"
    );
}

#[test]
fn b5_instructions_without_instructions_flag_in_a_terminal() {
    let mut i = base_input("codex", "account", PermissionMode::Ask);
    i.terminal = Some(vec![]);
    let mut ctx = context();
    ctx.instructions = Some("Be brief.".into());
    assert_eq!(
        err(&i, &ctx),
        "context.instructions: codex cannot honour it (B5): its terminal has no instructionsFlag: an agent with instructions has no terminal"
    );
}

#[test]
fn b5_terminal_on_a_harness_without_one() {
    let mut i = base_input("claude-code", "account", PermissionMode::Ask);
    i.descriptor.terminal = None;
    i.terminal = Some(vec![]);
    assert_eq!(
        err(&i, &context()),
        "terminal: claude-code cannot honour it (B5): it has no terminal program"
    );
}

#[test]
fn b5_terminal_that_cannot_take_the_model() {
    let mut i = base_input("gemini", "account", PermissionMode::Ask);
    i.terminal = Some(vec![]);
    i.agent.config.model = Some("gemini-2.5-pro".into());
    assert_eq!(
        err(&i, &context()),
        "agent.config.model: gemini cannot honour it (B5): its terminal cannot take a model (\"gemini-2.5-pro\")"
    );
}

#[test]
fn b5_terminal_that_cannot_take_mcp_servers() {
    let mut i = base_input("codex", "account", PermissionMode::Ask);
    i.terminal = Some(vec![]);
    i.mcp_servers = vec![stdio_server()];
    assert_eq!(
        err(&i, &context()),
        "mcpServers: codex cannot honour it (B5): its terminal cannot take MCP servers"
    );
}

#[test]
fn b5_terminal_env_takes_stdio_servers_only() {
    let mut i = base_input("vibe", "provider", PermissionMode::Ask);
    i.descriptor.mcp_transports.push(McpTransport::Http);
    i.terminal = Some(vec![]);
    i.mcp_servers = vec![http_server()];
    assert_eq!(
        err(&i, &context()),
        "mcpServers[0]: vibe cannot honour it (B5): its terminal takes only stdio MCP servers, not \"docs\""
    );
}

#[test]
fn b5_provider_on_an_account_only_harness() {
    let mut i = base_input("gemini", "account", PermissionMode::Ask);
    i.agent = provider_agent("gemini");
    i.secrets = [("apiKey".to_string(), FAKE_KEY.to_string())].into();
    assert_eq!(
        err(&i, &context()),
        "agent.provider: gemini cannot honour it (B5): it runs only on an account, not on a provider"
    );
}

#[test]
fn b5_provider_without_an_endpoint_the_harness_speaks() {
    let mut i = base_input("codex", "provider", PermissionMode::Ask);
    i.agent
        .provider_spec
        .as_mut()
        .unwrap()
        .endpoints
        .retain(|p, _| p.as_str() == "openai-chat");
    assert_eq!(
        err(&i, &context()),
        "agent.providerSpec.endpoints: codex cannot honour it (B5): provider \"llamacpp\" has no endpoint for a protocol it speaks (responses)"
    );
}

#[test]
fn b5_account_connectors_on_a_harness_without_them() {
    let mut i = base_input("codex", "account", PermissionMode::Ask);
    i.agent.config.account_connectors = true;
    assert_eq!(
        err(&i, &context()),
        "agent.config.accountConnectors: codex cannot honour it (B5): it has no account connectors"
    );
}

#[test]
fn b5_provider_file_for_a_slot_the_harness_lacks() {
    let mut i = base_input("vibe", "provider", PermissionMode::Ask);
    i.agent
        .files
        .insert("prompt_md".into(), FileSource::Content("x".into()));
    assert_eq!(
        err(&i, &context()),
        "agent.files.prompt_md: vibe cannot honour it (B5): no config file slot \"prompt_md\" (it has: config_toml)"
    );
}

#[test]
fn an_unresolved_file_source_is_refused() {
    let mut i = base_input("codex", "provider", PermissionMode::Ask);
    i.agent.files.insert(
        "config_toml".into(),
        FileSource::File("~/codex.toml".into()),
    );
    assert_eq!(
        err(&i, &context()),
        "agent.files.config_toml: an unresolved file source: the control plane gives render its content"
    );
}

#[test]
fn a_file_login_not_logged_in_is_refused() {
    let mut i = base_input("codex", "account", PermissionMode::Ask);
    i.agent.account_login = None;
    assert_eq!(
        err(&i, &context()),
        "agent.accountLogin: account \"perso\" is not logged in (no credential file)"
    );
}

#[test]
fn errors_never_carry_a_secret() {
    let mut i = base_input("claude-code", "account", PermissionMode::Ask);
    i.secrets.insert("apiKey".into(), FAKE_KEY.into());
    let e = err(&i, &context());
    assert_eq!(
        e,
        "secrets.apiKey: not a secret of this agent (an account has `token`, a provider `apiKey`)"
    );
    assert!(!e.contains(FAKE_KEY));
}

// ---- what reaches the launch ---------------------------------------------------------------

#[test]
fn e5_the_key_and_token_reach_only_env() {
    let l = render(
        &base_input("claude-code", "account", PermissionMode::Ask),
        &context(),
    )
    .unwrap();
    assert_eq!(l.env["CLAUDE_CODE_OAUTH_TOKEN"], FAKE_TOKEN);
    assert_eq!(l.env["CLAUDE_CODE_SUBSCRIPTION_TYPE"], "pro");
    for name in ["codex", "pi", "vibe", "claude-code"] {
        let l = render(
            &base_input(
                name,
                "provider",
                *common::descriptor(name).permissions.keys().last().unwrap(),
            ),
            &context(),
        )
        .unwrap();
        assert!(l.env.values().any(|v| v == FAKE_KEY), "{name}");
        assert!(
            l.files.iter().all(|f| !f.content.contains(FAKE_KEY)),
            "{name}: key in a file"
        );
        assert!(l.argv.iter().all(|a| !a.contains(FAKE_KEY)), "{name}");
    }
}

#[test]
fn e4_egress_is_the_logins_hosts_or_the_providers_host_in_the_container() {
    let l = render(
        &base_input("codex", "account", PermissionMode::Ask),
        &context(),
    )
    .unwrap();
    let e: Vec<_> = l
        .egress
        .iter()
        .map(handler_contracts::AllowEntry::as_str)
        .collect();
    assert_eq!(
        e,
        [
            "api.openai.com:443",
            "auth.openai.com:443",
            "chatgpt.com:443"
        ]
    );
    let l = render(
        &base_input("codex", "provider", PermissionMode::Ask),
        &context(),
    )
    .unwrap();
    let e: Vec<_> = l
        .egress
        .iter()
        .map(handler_contracts::AllowEntry::as_str)
        .collect();
    assert_eq!(e, ["host.containers.internal:3000"]);
    let cfg = l
        .files
        .iter()
        .find(|f| f.target == "/home/agent/.codex/config.toml")
        .unwrap();
    assert!(
        cfg.content
            .contains("base_url = \"http://host.containers.internal:3000/v1\""),
        "{}",
        cfg.content
    );
}

#[test]
fn e6_state_slots_are_the_agents_own_per_model() {
    let l = render(
        &base_input("claude-code", "account", PermissionMode::Ask),
        &context(),
    )
    .unwrap();
    let state: Vec<_> = l
        .mounts
        .iter()
        .map(|m| (m.source.as_str(), m.target.as_str()))
        .collect();
    assert_eq!(
        state,
        [
            (
                "/home/ada/.local/share/handler-ai/agent-state/a-7f3c/claude-code@perso/config_dir",
                "/home/agent/.claude"
            ),
            (
                "/home/ada/.local/share/handler-ai/agent-state/a-7f3c/claude-code@perso/settings",
                "/home/agent/.claude.json"
            ),
        ]
    );
    // Decision 0170: in a machine of a profile that shares its agents' state, the same slots
    // are the profile's, per harness and login; a profile name that is not a segment refused.
    let shared = RenderContext {
        shared_state: Some("team".into()),
        ..context()
    };
    let l = render(
        &base_input("claude-code", "account", PermissionMode::Ask),
        &shared,
    )
    .unwrap();
    assert_eq!(
        l.mounts[0].source,
        "/home/ada/.local/share/handler-ai/profile-state/team/claude-code@perso/config_dir"
    );
    let bad = RenderContext {
        shared_state: Some("../x".into()),
        ..context()
    };
    assert!(
        render(
            &base_input("claude-code", "account", PermissionMode::Ask),
            &bad
        )
        .is_err()
    );
    // the per-session slot (~/.claude/projects) is the daemon's; a file login is bound on top
    let l = render(
        &base_input("vibe", "account", PermissionMode::Ask),
        &context(),
    )
    .unwrap();
    assert!(l.mounts.iter().any(|m| m.target == "/home/agent/.vibe/.env"
        && m.source.ends_with("/accounts/perso/credential")));
    assert!(
        !l.mounts
            .iter()
            .any(|m| m.target == "/home/agent/.vibe/logs/session")
    );
}

#[test]
fn e6_geminis_settings_select_the_google_login_it_is_given() {
    // gemini --acp authenticates session/new with settings.security.auth.selectedType, else
    // with an API key (decision 0077): its state starts on the login Handler gives it
    let d = descriptor("gemini");
    let slot = &d.state_slots["settings"];
    assert_eq!(slot.target, "~/.gemini/settings.json");
    assert!(!slot.credential && !slot.per_session);
    let initial: serde_json::Value =
        serde_json::from_str(slot.initial.as_deref().expect("an initial content")).unwrap();
    let selected = initial["security"]["auth"]["selectedType"]
        .as_str()
        .unwrap();
    assert_eq!(selected, "oauth-personal");
    assert_eq!(
        d.login.as_ref().and_then(|l| l.file.as_deref()),
        Some(".gemini/oauth_creds.json"),
        "the Google login's file"
    );
    let init: serde_json::Value = serde_json::from_str(include_str!(
        "../../../fixtures/harness/gemini/initialize.json"
    ))
    .unwrap();
    let offered: Vec<&str> = init["authMethods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert!(offered.contains(&selected), "{offered:?}");
    // mounted as the agent's own state inside ~/.gemini, beside the account's login file
    let l = render(
        &base_input("gemini", "account", PermissionMode::Ask),
        &context(),
    )
    .unwrap();
    let m: Vec<_> = l
        .mounts
        .iter()
        .map(|m| (m.source.as_str(), m.target.as_str()))
        .collect();
    let state = "/home/ada/.local/share/handler-ai/agent-state/a-7f3c/gemini@perso";
    assert_eq!(
        m,
        [
            (&*format!("{state}/gemini_dir"), "/home/agent/.gemini"),
            (
                "/home/ada/.local/share/handler-ai/accounts/perso/credential",
                "/home/agent/.gemini/oauth_creds.json"
            ),
            (
                &*format!("{state}/settings"),
                "/home/agent/.gemini/settings.json"
            ),
        ]
    );
}

#[test]
fn p7_session_defaults_carry_the_mode_and_the_accounts_model() {
    let mut i = base_input("claude-code", "account", PermissionMode::Bypass);
    i.agent.config.model = Some("sonnet".into());
    let sd = render(&i, &context()).unwrap().session_defaults.unwrap();
    assert_eq!(sd.mode_id.as_deref(), Some("bypassPermissions"));
    assert_eq!(sd.config_options["model"], "sonnet");
    // a provider's model is in its configuration, not set over ACP
    let mut i = base_input("vibe", "provider", PermissionMode::Ask);
    i.agent.config.model = Some("small-4B".into());
    let l = render(&i, &context()).unwrap();
    assert!(l.session_defaults.unwrap().config_options.is_empty());
    let cfg = &l
        .files
        .iter()
        .find(|f| f.target.ends_with("config.toml"))
        .unwrap()
        .content;
    assert!(cfg.contains("active_model = \"small-4B\""), "{cfg}");
}

#[test]
fn b6_stdio_servers_of_a_sandbox_env_harness_are_wrapped() {
    let mut i = base_input("claude-code", "provider", PermissionMode::Ask);
    i.mcp_servers = vec![stdio_server()];
    let l = render(&i, &context()).unwrap();
    let sd = l.session_defaults.unwrap();
    let McpServer::Stdio {
        command, args, env, ..
    } = &sd.mcp_servers[0]
    else {
        panic!()
    };
    assert_eq!(command, SANDBOX_ENV_PATH);
    assert_eq!(
        args,
        &[
            "--drop",
            "ANTHROPIC_API_KEY",
            "--keep",
            "TICKETS_TOKEN",
            "--",
            "tickets-mcp",
            "--project",
            "shop"
        ]
    );
    assert_eq!(env[0].name, "TICKETS_TOKEN");
    let script = l
        .files
        .iter()
        .find(|f| f.target == SANDBOX_ENV_PATH)
        .unwrap();
    assert_eq!(script.mode.as_deref(), Some("0755"));
    assert!(script.content.starts_with("#!/usr/bin/env python3"));
    // gemini inherits (mcpEnv default): unchanged
    let mut i = base_input("gemini", "account", PermissionMode::Ask);
    i.mcp_servers = vec![stdio_server()];
    let l = render(&i, &context()).unwrap();
    assert_eq!(l.session_defaults.unwrap().mcp_servers[0], stdio_server());
    assert!(!l.files.iter().any(|f| f.target == SANDBOX_ENV_PATH));
}

#[test]
fn b7_pi_gets_its_mcp_config_file() {
    let mut i = base_input("pi", "provider", PermissionMode::Bypass);
    i.mcp_servers = vec![stdio_server(), http_server()];
    let l = render(&i, &context()).unwrap();
    let f = l
        .files
        .iter()
        .find(|f| f.target == "/home/agent/.pi/agent/mcp.json")
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&f.content).unwrap();
    assert_eq!(
        v["settings"],
        serde_json::json!({"allowInstall": false, "scriptMode": false})
    );
    assert_eq!(v["mcpServers"]["tickets"]["command"], SANDBOX_ENV_PATH);
    assert_eq!(v["mcpServers"]["tickets"]["directTools"], true);
    assert_eq!(
        v["mcpServers"]["docs"]["url"],
        "https://mcp.example.com/mcp"
    );
    assert_eq!(v["mcpServers"]["docs"]["directTools"], true);
    assert_eq!(
        l.session_defaults.unwrap().mcp_servers.len(),
        2,
        "sessionDefaults still carry them (P8)"
    );
}

#[test]
fn b8_terminal_argv_is_command_flags_model_mcp_instructions_then_args() {
    let mut i = base_input("claude-code", "account", PermissionMode::AcceptEdits);
    i.agent.config.model = Some("sonnet".into());
    i.mcp_servers = vec![http_server()];
    i.terminal = Some(vec!["--resume".into()]);
    let mut ctx = context();
    ctx.instructions = Some("Be brief.".into());
    let l = render(&i, &ctx).unwrap();
    assert_eq!(
        l.argv,
        [
            "claude",
            "--permission-mode",
            "acceptEdits",
            "--model",
            "sonnet",
            "--mcp-config",
            "/home/agent/.handler/terminal-mcp.json",
            "--append-system-prompt",
            "Be brief.",
            "--resume",
        ]
    );
    assert!(l.session_defaults.is_none());
    let f = l
        .files
        .iter()
        .find(|f| f.target == "/home/agent/.handler/terminal-mcp.json")
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&f.content).unwrap();
    assert_eq!(v["mcpServers"]["docs"]["type"], "http");
    // vibe takes the model and servers in env
    let mut i = base_input("vibe", "account", PermissionMode::Bypass);
    i.agent.config.model = Some("mistral-medium-3.5".into());
    i.mcp_servers = vec![stdio_server()];
    i.terminal = Some(vec![]);
    let l = render(&i, &context()).unwrap();
    assert_eq!(l.argv, ["vibe", "--auto-approve"]);
    assert_eq!(l.env["VIBE_ACTIVE_MODEL"], "mistral-medium-3.5");
    let servers: serde_json::Value = serde_json::from_str(&l.env["VIBE_MCP_SERVERS"]).unwrap();
    assert_eq!(servers[0]["transport"], "stdio");
    assert_eq!(servers[0]["command"], SANDBOX_ENV_PATH);
}

#[test]
fn b9_the_compaction_reserve_reaches_each_harness() {
    // qwen: window 200000, maxOutput 32000 → reserve 32000; small-4B: window 20000, no maxOutput → 10000 (half)
    let l = render(
        &base_input("pi", "provider", PermissionMode::Bypass),
        &context(),
    )
    .unwrap();
    let settings = &l
        .files
        .iter()
        .find(|f| f.target.ends_with("settings.json"))
        .unwrap();
    assert!(settings.seed);
    let v: serde_json::Value = serde_json::from_str(&settings.content).unwrap();
    assert_eq!(v["compaction"]["reserveTokens"], 32000);
    let mut i = base_input("vibe", "provider", PermissionMode::Ask);
    i.agent.config.model = Some("small-4B".into());
    let l = render(&i, &context()).unwrap();
    let cfg = &l
        .files
        .iter()
        .find(|f| f.target.ends_with("config.toml"))
        .unwrap()
        .content;
    assert!(cfg.contains("auto_compact_threshold = 10000"), "{cfg}");
    assert!(cfg.contains("auto_compact_threshold = 168000"), "{cfg}");
    let l = render(
        &base_input("codex", "provider", PermissionMode::Ask),
        &context(),
    )
    .unwrap();
    let cfg = &l
        .files
        .iter()
        .find(|f| f.target.ends_with("config.toml"))
        .unwrap()
        .content;
    assert!(
        cfg.contains("model_auto_compact_token_limit = 168000"),
        "{cfg}"
    );
    let l = render(
        &base_input("claude-code", "provider", PermissionMode::Ask),
        &context(),
    )
    .unwrap();
    assert_eq!(l.env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"], "200000");
    assert_eq!(l.env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"], "84");
    assert_eq!(l.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"], "32000");
}

#[test]
fn render_json_reports_bad_json_and_renders_good_json() {
    assert!(matches!(render_json("{"), Err(RenderError::Json(_))));
    let (_, req) = common::matrix().into_iter().next().unwrap();
    let out = render_json(&serde_json::to_string(&req).unwrap()).unwrap();
    assert!(out.contains("\"apiVersion\": \"handler.harness-launch/v1\""));
}

// ---- properties ----------------------------------------------------------------------------

fn secret_strategy() -> impl Strategy<Value = String> {
    "[!-~]{8,48}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn render_is_deterministic_and_never_puts_a_secret_in_argv(
        case in 0usize..200,
        secret in secret_strategy(),
        args in proptest::collection::vec("[a-z-]{1,12}", 0..4),
        instructions in proptest::option::of("[A-Za-z .]{1,40}"),
    ) {
        let matrix = common::matrix();
        let (_, mut req) = matrix[case % matrix.len()].clone();
        for v in req.input.secrets.values_mut() {
            *v = secret.clone();
        }
        if req.input.terminal.is_some() {
            req.input.terminal = Some(args);
            req.context.instructions = instructions;
        }
        let a = render(&req.input, &req.context);
        let b = render(&req.input, &req.context);
        prop_assert_eq!(&a, &b);
        let json = serde_json::to_string(&req).unwrap();
        prop_assert_eq!(render_json(&json).map_err(|e| e.to_string()), render_json(&json).map_err(|e| e.to_string()));
        if let Ok(l) = a {
            for arg in &l.argv {
                prop_assert!(!arg.contains(secret.as_str()), "secret in argv");
            }
        }
    }
}
