//! Shared test data: the render matrix (each harness × account/provider × permission mode ×
//! skills, MCP servers, terminal, caches), with visibly fake secrets.
#![allow(dead_code)]

use std::collections::BTreeMap;

use handler_contracts::access::{AgentSpec, FileSource, Provider};
use handler_contracts::harness::{
    HarnessDescriptor, McpServer, NameValue, PermissionMode, RemoteMcpTransport, RenderInput,
};
use handler_harness::{RenderContext, RenderRequest, builtin};

pub(crate) const FAKE_TOKEN: &str = "sk-ant-oat01-FAKE-PHANTOM-TOKEN-0000000000000000";
pub(crate) const FAKE_KEY: &str = "sk-FAKE-PHANTOM-KEY-00000000000000000000";

pub(crate) fn descriptor(name: &str) -> HarnessDescriptor {
    builtin(name)
        .expect("a platform harness")
        .expect("its descriptor parses")
}

pub(crate) fn provider() -> Provider {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "handler.provider/v1",
        "endpoints": {
            "anthropic": "http://127.0.0.1:3000",
            "openai-chat": "http://127.0.0.1:3000/v1",
            "responses": "http://localhost:3000/v1"
        },
        "apiKey": {"secret": "providers/llamacpp/apiKey"},
        "models": [
            {"id": "qwen3.8-27B", "name": "Qwen 3.8 27B", "contextWindow": 200000, "maxOutput": 32000,
             "reasoning": true, "images": false, "temperature": 0.6},
            {"id": "small-4B", "contextWindow": 20000, "reasoning": false}
        ]
    }))
    .unwrap()
}

pub(crate) fn context() -> RenderContext {
    RenderContext {
        data_dir: "/home/ada/.local/share/handler-ai".into(),
        agent_id: "a-7f3c".into(),
        instructions: None,
        shared_state: None,
    }
}

pub(crate) fn account_agent(harness: &str) -> AgentSpec {
    let d = descriptor(harness);
    let login = d.login.as_ref().expect("a harness with a login");
    AgentSpec {
        harness: harness.into(),
        account: Some("perso".into()),
        provider: None,
        account_login: login
            .file
            .as_ref()
            .map(|_| "/home/ada/.local/share/handler-ai/accounts/perso/credential".into()),
        account_plan: login.plans.as_ref().map(|p| p[0].clone()),
        provider_spec: None,
        files: BTreeMap::new(),
        config: Default::default(),
    }
}

pub(crate) fn provider_agent(harness: &str) -> AgentSpec {
    let mut files = BTreeMap::new();
    if harness == "codex" {
        files.insert(
            "instructions_md".to_string(),
            FileSource::Content("You are Codex, on a local model.\n".into()),
        );
    }
    AgentSpec {
        harness: harness.into(),
        account: None,
        provider: Some("llamacpp".into()),
        account_login: None,
        account_plan: None,
        provider_spec: Some(provider()),
        files,
        config: Default::default(),
    }
}

pub(crate) fn base_input(harness: &str, access: &str, mode: PermissionMode) -> RenderInput {
    let (agent, secret) = if access == "account" {
        let d = descriptor(harness);
        let token = d
            .login
            .as_ref()
            .and_then(|l| l.token.as_ref())
            .map(|_| ("token".to_string(), FAKE_TOKEN.to_string()));
        (account_agent(harness), token)
    } else {
        (
            provider_agent(harness),
            Some(("apiKey".to_string(), FAKE_KEY.to_string())),
        )
    };
    RenderInput {
        descriptor: descriptor(harness),
        agent,
        scope: "/home/ada/code/shop".into(),
        secrets: secret.into_iter().collect(),
        skills: vec![],
        mcp_servers: vec![],
        terminal: None,
        permission_mode: mode,
        caches: BTreeMap::new(),
    }
}

pub(crate) fn stdio_server() -> McpServer {
    McpServer::Stdio {
        name: "tickets".into(),
        command: "tickets-mcp".into(),
        args: vec!["--project".into(), "shop".into()],
        env: vec![NameValue {
            name: "TICKETS_TOKEN".into(),
            value: "FAKE-binding-phantom-0000".into(),
        }],
    }
}

pub(crate) fn http_server() -> McpServer {
    McpServer::Remote {
        transport: RemoteMcpTransport::Http,
        name: "docs".into(),
        url: "https://mcp.example.com/mcp".into(),
        headers: vec![NameValue {
            name: "Authorization".into(),
            value: "Bearer FAKE-binding-phantom-1111".into(),
        }],
    }
}

/// The variants rendered besides the plain one.
pub(crate) const VARIANTS: [&str; 7] = [
    "skills",
    "mcp-stdio",
    "mcp-http",
    "terminal",
    "caches",
    "model",
    "full",
];

pub(crate) fn apply(input: &mut RenderInput, ctx: &mut RenderContext, variant: &str) {
    let skills = || {
        vec![
            "/home/ada/.config/handler-ai/skills/pdf-forms".to_string(),
            "/home/ada/.config/handler-ai/skills/release-notes".to_string(),
        ]
    };
    let caches = || {
        BTreeMap::from([
            (
                "~/.npm".to_string(),
                "/home/ada/.cache/handler-ai/caches/shop/npm".to_string(),
            ),
            (
                "~/.cache/uv".to_string(),
                "/home/ada/.cache/handler-ai/caches/shop/uv".to_string(),
            ),
        ])
    };
    let model = |input: &mut RenderInput| {
        if input.agent.provider.is_some() {
            input.agent.config.model = Some("small-4B".into());
        } else {
            input.agent.config.model = Some(
                match input.descriptor.name.as_str() {
                    "claude-code" => "sonnet",
                    "codex" => "gpt-5.5",
                    "vibe" => "mistral-medium-3.5",
                    _ => "gemini-2.5-pro",
                }
                .into(),
            );
        }
    };
    match variant {
        "plain" => {}
        "skills" => input.skills = skills(),
        "mcp-stdio" => input.mcp_servers = vec![stdio_server()],
        "mcp-http" => input.mcp_servers = vec![http_server()],
        "terminal" => input.terminal = Some(vec!["--verbose".into()]),
        "caches" => input.caches = caches(),
        "model" => model(input),
        "full" => {
            input.skills = skills();
            input.mcp_servers = vec![stdio_server()];
            input.caches = caches();
            input.terminal = Some(vec!["--verbose".into()]);
            ctx.instructions = Some("Answer in French.".into());
            model(input);
        }
        other => panic!("unknown variant {other}"),
    }
}

/// The whole matrix: (case name, request).
pub(crate) fn matrix() -> Vec<(String, RenderRequest)> {
    let mut out = vec![];
    for h in handler_harness::builtin_names() {
        let d = descriptor(h);
        let mut accesses = vec![];
        if d.login.is_some() {
            accesses.push("account");
        }
        if !d.provider_protocols.is_empty() {
            accesses.push("provider");
        }
        for access in accesses {
            let modes: Vec<PermissionMode> = d.permissions.keys().copied().collect();
            for mode in &modes {
                let mut ctx = context();
                let input = base_input(h, access, *mode);
                let _ = &mut ctx;
                out.push((
                    format!("{h}__{access}__{}__plain", mode.as_str()),
                    RenderRequest {
                        input,
                        context: ctx,
                    },
                ));
            }
            let widest = *modes.last().unwrap();
            for v in VARIANTS {
                let mut ctx = context();
                let mut input = base_input(h, access, widest);
                apply(&mut input, &mut ctx, v);
                out.push((
                    format!("{h}__{access}__{}__{v}", widest.as_str()),
                    RenderRequest {
                        input,
                        context: ctx,
                    },
                ));
            }
        }
    }
    out
}
