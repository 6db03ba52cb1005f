//! The chat's state machine: replay, updates → lines, permissions, the turn's end.

use serde_json::json;

use super::*;

fn plain(a: &[Action]) -> Vec<String> {
    a.iter()
        .filter_map(|x| match x {
            Action::Show(Out::Markdown(s) | Out::Line(s)) => Some(strip_ansi(s)),
            _ => None,
        })
        .collect()
}

fn update(seq: u64, u: serde_json::Value) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": "s", "update": u, "_meta": {"handler.dev/seq": seq}}})
}

#[test]
fn streamed_text_is_shown_by_whole_lines_and_the_rest_at_the_turns_end() {
    let mut c = Chat::new("s");
    let p = c.prompt("hi");
    assert_eq!(p["params"]["prompt"][0]["text"], "hi");
    assert!(c.busy);
    let chunk = |t: &str| {
        update(
            1,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": t}}),
        )
    };
    assert!(plain(&c.on_message(&chunk("Hel"))).is_empty());
    assert_eq!(plain(&c.on_message(&chunk("lo\nwor"))), vec!["Hello"]);
    let end = c.on_message(
        &json!({"jsonrpc": "2.0", "id": p["id"], "result": {"stopReason": "end_turn"}}),
    );
    assert_eq!(plain(&end), vec!["wor"]);
    assert_eq!(end.last(), Some(&Action::TurnEnded("end_turn".into())));
    assert!(!c.busy);
}

#[test]
fn a_tool_call_is_one_line_with_its_status_and_its_diff_coloured() {
    let mut c = Chat::new("s");
    let a = c.on_message(&update(
        3,
        json!({"sessionUpdate": "tool_call", "toolCallId": "t1",
        "title": "Edit hello.txt", "status": "pending"}),
    ));
    assert_eq!(plain(&a), vec!["· Edit hello.txt pending"]);
    let a = c.on_message(&update(4, json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1",
        "status": "completed", "content": [{"type": "diff", "path": "hello.txt", "oldText": "a\nb\n", "newText": "a\nc\n"}]})));
    assert_eq!(
        plain(&a),
        vec![
            "✓ Edit hello.txt completed",
            "  diff hello.txt",
            "  - b",
            "  + c"
        ]
    );
    let Action::Show(Out::Line(minus)) = &a[2] else {
        panic!()
    };
    assert!(minus.contains("\u{1b}["), "coloured: {minus:?}");
    assert_eq!(c.last_seq, 4);
}

#[test]
fn plans_modes_and_replayed_prompts_are_lines() {
    let mut c = Chat::new("s");
    let a = c.on_message(&update(
        1,
        json!({"sessionUpdate": "plan", "entries": [
        {"content": "read", "status": "completed"}, {"content": "write", "status": "pending"}]}),
    ));
    assert_eq!(plain(&a), vec!["plan:", "  [x] read", "  [ ] write"]);
    let a = c.on_message(&update(2, json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "do it"}})));
    assert_eq!(plain(&a), vec!["> do it"]);
    let a = c.on_message(&update(
        3,
        json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}),
    ));
    assert_eq!(plain(&a), vec!["mode: plan"]);
    assert_eq!(c.mode.as_deref(), Some("plan"));
}

#[test]
fn a_permission_is_asked_with_a_key_per_kind_and_answered_by_it() {
    let mut c = Chat::new("s");
    let a = c.on_message(
        &json!({"jsonrpc": "2.0", "id": "perm-1", "method": "session/request_permission",
        "params": {"sessionId": "s", "toolCall": {"toolCallId": "c", "title": "rm -rf build"},
        "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "always", "name": "Always", "kind": "allow_always"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}}),
    );
    let Some(Action::Ask(p)) = a.last() else {
        panic!("{a:?}")
    };
    assert_eq!(p.options.iter().map(|o| o.0).collect::<String>(), "yan");
    let q = strip_ansi(&p.question());
    assert_eq!(q, "? rm -rf build  [y] Allow  [a] Always  [n] Reject");
    let ans = c.answer(p, 'N').unwrap();
    assert_eq!(ans["id"], "perm-1");
    assert_eq!(ans["result"]["outcome"]["optionId"], "no");
    assert!(c.answer(p, 'x').is_none());
    assert_eq!(c.cancelled(p)["result"]["outcome"]["outcome"], "cancelled");
    // Another client answered first: the question is withdrawn.
    let w = c.on_message(&json!({"jsonrpc": "2.0", "method": "_handler/permission_resolved", "params": {"requestId": "perm-1"}}));
    assert_eq!(w, vec![Action::Withdrawn(json!("perm-1"))]);
}

#[test]
fn load_asks_for_what_came_after_the_last_seq_and_reads_modes() {
    let mut c = Chat::new("acp-1");
    let l = c.load("/w", 0);
    assert!(l["params"].get("_meta").is_none());
    let a = c.on_message(&json!({"jsonrpc": "2.0", "id": l["id"], "result": {"modes": {"currentModeId": "default",
        "availableModes": [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}]},
        "configOptions": [{"id": "model", "category": "model", "options": [{"value": "opus"}, {"value": "sonnet"}]}]}}));
    assert_eq!(a, vec![Action::Loaded]);
    assert_eq!(c.modes.len(), 2);
    assert_eq!(
        c.model_option,
        Some(("model".into(), vec!["opus".into(), "sonnet".into()]))
    );
    assert_eq!(c.set_model("sonnet")["method"], "session/set_config_option");
    let again = c.load("/w", 7);
    assert_eq!(again["params"]["_meta"]["handler.dev/afterSeq"], 7);
    assert_eq!(c.set_mode("plan")["params"]["modeId"], "plan");
    assert_eq!(c.cancel()["method"], "session/cancel");
}

#[test]
fn an_agents_request_the_chat_cannot_serve_is_answered_with_an_error() {
    let mut c = Chat::new("s");
    let a = c.on_message(
        &json!({"jsonrpc": "2.0", "id": 9, "method": "fs/read_text_file", "params": {}}),
    );
    let [Action::Send(v)] = a.as_slice() else {
        panic!("{a:?}")
    };
    assert_eq!(v["error"]["code"], -32601);
    let p = c.prompt("x");
    let a = c.on_message(&json!({"jsonrpc": "2.0", "id": p["id"], "error": {"code": -32011, "message": "turn in progress"}}));
    assert_eq!(a, vec![Action::Failed("turn in progress".into())]);
}
