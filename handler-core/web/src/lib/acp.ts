// A session's attachment (F.4) spoken with the official ACP SDK over the session's WebSocket:
// one JSON-RPC message per frame; the token as the `bearer.<token>` subprotocol beside ACP's.
import { client, type AnyMessage, type Stream } from "@agentclientprotocol/sdk";
import type {
  RequestPermissionRequest,
  RequestPermissionResponse,
  SessionNotification,
} from "@agentclientprotocol/sdk";
import { token } from "./token";

/** ACP's subprotocol (handler_contracts::acp). */
export const ACP_SUBPROTOCOL = "acp.v1";

/** The daemon's session state (`_handler/session_state`, F.4). */
export type SessionState = { busy?: boolean; pendingPermissions?: number; attached?: number; state?: string };

export type Handlers = {
  update(n: SessionNotification): void;
  permission(req: RequestPermissionRequest, answer: (r: RequestPermissionResponse) => void): void;
  resolved(p: { requestId?: unknown; toolCallId?: string; outcome?: unknown }): void;
  state(s: SessionState): void;
  turnEnded(p: unknown): void;
  closed(code: number, reason: string): void;
};

/** A WebSocket as the SDK's message stream. `session/update` notifications go straight to
 * `onUpdate`, ahead of the SDK (whose per-message schema check cost ≈ 0.28 ms each: 2.8 s of a
 * 10 000-update replay, decision 0173); the transcript takes them as untrusted data anyway. Every
 * other message goes through the SDK. */
function wsStream(ws: WebSocket, onUpdate: (n: SessionNotification) => void, onClose: (code: number, reason: string) => void): Stream {
  const readable = new ReadableStream<AnyMessage>({
    start(ctrl) {
      ws.addEventListener("message", (e) => {
        let msg: { method?: unknown; id?: unknown; params?: unknown };
        try {
          msg = JSON.parse(String(e.data));
        } catch {
          return; /* not JSON: the daemon never sends that */
        }
        if (msg?.method === "session/update" && msg.id === undefined) {
          const p = msg.params as SessionNotification | undefined;
          if (p && typeof p === "object" && p.update && typeof p.update === "object") onUpdate(p);
          return;
        }
        ctrl.enqueue(msg as AnyMessage);
      });
      ws.addEventListener("close", (e) => {
        onClose(e.code, e.reason);
        try {
          ctrl.close();
        } catch {
          /* already closed */
        }
      });
    },
  });
  const writable = new WritableStream<AnyMessage>({
    write(msg) {
      ws.send(JSON.stringify(msg));
    },
    close() {
      ws.close(1000);
    },
  });
  return { readable, writable };
}

/** An open attachment: the SDK's connection to the agent through the daemon. */
export type Attachment = Awaited<ReturnType<typeof attach>>;

/** Attaches to a session and loads it (replay, modes, state, pending requests). */
export async function attach(sessionId: string, acpSessionId: string, cwd: string, h: Handlers) {
  const t = token() ?? "";
  const ws = new WebSocket(`ws://${location.host}/v1/sessions/${encodeURIComponent(sessionId)}/acp`, [
    ACP_SUBPROTOCOL,
    `bearer.${t}`,
  ]);
  await new Promise<void>((ok, fail) => {
    ws.addEventListener("open", () => ok(), { once: true });
    ws.addEventListener("close", (e) => fail(new Error(e.reason || `closed (${e.code})`)), { once: true });
  });
  performance.mark("handler:attach-open");
  const app = client({ name: "handler-web" })
    .onRequest(
      "session/request_permission",
      (c) => new Promise<RequestPermissionResponse>((answer) => h.permission(c.params, answer)),
    )
    .onNotification("_handler/session_state", (p) => p as SessionState, (c) => h.state(c.params))
    .onNotification("_handler/permission_resolved", (p) => p as Record<string, unknown>, (c) => h.resolved(c.params))
    .onNotification("_handler/turn_ended", (p) => p, (c) => h.turnEnded(c.params))
    .onNotification("*", () => {});
  const conn = app.connect(wsStream(ws, h.update, h.closed));
  const agent = conn.agent;
  await agent.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "handler-web", version: "0" },
  });
  const loaded = await agent.request("session/load", { sessionId: acpSessionId, cwd, mcpServers: [] });
  performance.mark("handler:loaded");
  return {
    loaded,
    prompt: (text: string) =>
      agent.request("session/prompt", { sessionId: acpSessionId, prompt: [{ type: "text", text }] }),
    cancel: () => agent.notify("session/cancel", { sessionId: acpSessionId }),
    setMode: (modeId: string) => agent.request("session/set_mode", { sessionId: acpSessionId, modeId }),
    setConfig: (configId: string, value: string) =>
      agent.request("session/set_config_option", { sessionId: acpSessionId, configId, value }),
    close: () => conn.close(),
  };
}
