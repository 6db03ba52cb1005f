import { describe, expect, test } from "vitest";
import { Transcript, usageText } from "./transcript";

const chunk = (kind: string, text: string) => ({ sessionUpdate: kind, content: { type: "text", text } });

describe("Transcript", () => {
  test("chunks of one kind join into one message; another kind starts the next", () => {
    const t = new Transcript();
    t.apply(chunk("agent_thought_chunk", "hm"));
    t.apply(chunk("agent_message_chunk", "Hel"));
    t.apply(chunk("agent_message_chunk", "lo"));
    t.apply(chunk("user_message_chunk", "hi"));
    expect(t.entries.map((e) => [e.kind, "text" in e ? e.text : ""])).toEqual([
      ["thought", "hm"],
      ["agent", "Hello"],
      ["user", "hi"],
    ]);
  });
  test("a tool call's updates merge into it, in its place, and replace the entry", () => {
    const t = new Transcript();
    t.apply({ sessionUpdate: "tool_call", toolCallId: "c1", title: "Edit a.txt", kind: "edit", status: "pending", locations: [{ path: "/w/a.txt", line: 3 }] });
    t.apply(chunk("agent_message_chunk", "meanwhile"));
    const before = t.entries[0];
    t.apply({ sessionUpdate: "tool_call_update", toolCallId: "c1", status: "completed", content: [{ type: "diff", path: "/w/a.txt", oldText: "x", newText: "y" }] });
    expect(t.entries).toHaveLength(2);
    const e = t.entries[0];
    expect(e).not.toBe(before);
    expect(e).toMatchObject({ kind: "tool", id: "c1", title: "Edit a.txt", toolKind: "edit", status: "completed", locations: [{ path: "/w/a.txt", line: 3 }] });
    expect(e.kind === "tool" && e.content[0]).toMatchObject({ type: "diff", newText: "y" });
    expect(e.key).toBe(before.key);
  });
  test("an update for a call never announced is shown as a call of its own", () => {
    const t = new Transcript();
    t.apply({ sessionUpdate: "tool_call_update", toolCallId: "late", status: "failed" });
    expect(t.entries[0]).toMatchObject({ kind: "tool", id: "late", title: "tool call", status: "failed" });
  });
  test("a plan replaces the plan just before it; usage is kept; other kinds are not the transcript's", () => {
    const t = new Transcript();
    t.apply({ sessionUpdate: "plan", entries: [{ content: "a", status: "pending" }] });
    t.apply({ sessionUpdate: "plan", entries: [{ content: "a", status: "completed" }] });
    expect(t.entries).toHaveLength(1);
    expect(t.apply({ sessionUpdate: "usage_update", used: 12345, size: 200000, cost: { amount: 0.4213, currency: "USD" } })).toBe(true);
    expect(usageText(t.usage!)).toBe("12.3k / 200k tokens · 0.42 USD");
    expect(t.apply({ sessionUpdate: "current_mode_update", currentModeId: "x" })).toBe(false);
  });
  test("an update's fields of the wrong type are left out, never trusted", () => {
    const t = new Transcript();
    t.apply({ sessionUpdate: "tool_call", toolCallId: "x", title: 42, status: {}, kind: ["edit"], content: "<b>", locations: [null, 7, { path: "/a" }] });
    expect(t.entries[0]).toMatchObject({ title: "tool call", status: "pending", toolKind: undefined, content: [], locations: [{ path: "/a" }] });
    t.apply({ sessionUpdate: "plan", entries: "nope" });
    expect(t.entries[1]).toMatchObject({ kind: "plan", entries: [] });
    t.apply({ sessionUpdate: "usage_update", used: "lots", size: 10, cost: { amount: "1", currency: "USD" } });
    expect(t.usage).toEqual({ used: 0, size: 10, cost: null });
  });
  test("the last prompt is the newest user message", () => {
    const t = new Transcript();
    expect(t.lastPrompt()).toBeNull();
    t.prompt("first");
    t.apply(chunk("agent_message_chunk", "ok"));
    t.prompt("second");
    t.apply(chunk("agent_message_chunk", "ok"));
    expect(t.lastPrompt()).toBe("second");
  });
  test("5 000 calls and their updates: each update finds its own call", () => {
    const t = new Transcript();
    for (let i = 0; i < 5000; i++) {
      t.apply({ sessionUpdate: "tool_call", toolCallId: `c${i}`, title: `Read f${i}`, kind: "read", status: "pending" });
      t.apply({ sessionUpdate: "tool_call_update", toolCallId: `c${i}`, status: "completed" });
    }
    expect(t.entries).toHaveLength(5000);
    expect(t.entries.every((e) => e.kind === "tool" && e.status === "completed")).toBe(true);
    expect(t.entries[4999]).toMatchObject({ id: "c4999", title: "Read f4999" });
  });
});
