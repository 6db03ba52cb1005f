// The official TypeScript ACP SDK (@agentclientprotocol/sdk) as a session client (issue 13):
// over the session's WebSocket (`acp.v1` and `bearer.<token>` subprotocols), it attaches
// (initialize, session/load), prompts, detaches, then re-attaches with session/load and
// collects the replay. Prints one JSON line with what it saw; driven by
// bins/tests/it/daemon_sessions.rs::the_typescript_acp_sdk_attaches_prompts_and_replays.
//
// Usage: node --experimental-websocket acp_sdk_client.mjs <wsUrl> <acpSessionId> <cwd> <prompt>
// The token comes from $HANDLER_TOKEN (never in argv).
import { client } from "@agentclientprotocol/sdk";

const [url, sessionId, cwd, promptText] = process.argv.slice(2);
const token = process.env.HANDLER_TOKEN ?? "";
if (!url || !sessionId || !cwd || !promptText || !token) {
  console.error("usage: acp_sdk_client.mjs <wsUrl> <acpSessionId> <cwd> <prompt> (HANDLER_TOKEN set)");
  process.exit(2);
}

/** A WebSocket as the SDK's message stream (one JSON-RPC message per text frame). */
function wsStream(ws) {
  const readable = new ReadableStream({
    start(ctrl) {
      ws.addEventListener("message", (e) => ctrl.enqueue(JSON.parse(String(e.data))));
      ws.addEventListener("close", () => {
        try {
          ctrl.close();
        } catch {
          /* already closed */
        }
      });
    },
  });
  const writable = new WritableStream({
    write(msg) {
      ws.send(JSON.stringify(msg));
    },
    close() {
      ws.close(1000);
    },
  });
  return { readable, writable };
}

/** One attachment: initialize and session/load; the updates it got, the load's result. */
async function attach(updates) {
  const ws = new WebSocket(url, ["acp.v1", `bearer.${token}`]);
  await new Promise((ok, fail) => {
    ws.addEventListener("open", () => ok(), { once: true });
    ws.addEventListener("error", () => fail(new Error("WebSocket error")), { once: true });
  });
  const app = client({ name: "handler-sdk-test" })
    .onNotification("session/update", (c) => {
      updates.push({ update: c.params.update, seq: c.params._meta?.["handler.dev/seq"] ?? null });
    })
    .onNotification("*", () => {});
  const conn = app.connect(wsStream(ws));
  const init = await conn.agent.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "handler-sdk-test", version: "0" },
  });
  const loaded = await conn.agent.request("session/load", { sessionId, cwd, mcpServers: [] });
  return { ws, conn, init, loaded, protocol: ws.protocol };
}

function texts(updates) {
  return updates
    .filter((u) => u.update?.sessionUpdate?.endsWith("_message_chunk"))
    .map((u) => [u.update.sessionUpdate, u.update.content?.text ?? null]);
}

async function closeWs(ws) {
  if (ws.readyState === WebSocket.CLOSED) return;
  await new Promise((ok) => {
    ws.addEventListener("close", () => ok(), { once: true });
    ws.close(1000);
  });
}

const first = [];
const a = await attach(first);
const turn = await a.conn.agent.request("session/prompt", {
  sessionId,
  prompt: [{ type: "text", text: promptText }],
});
await closeWs(a.ws);

const replay = [];
const b = await attach(replay);
await closeWs(b.ws);

console.log(
  JSON.stringify({
    protocol: a.protocol,
    protocolVersion: a.init.protocolVersion,
    loadSession: a.init.agentCapabilities?.loadSession ?? false,
    stopReason: turn.stopReason,
    live: texts(first),
    replay: texts(replay),
    replaySeqs: replay.map((u) => u.seq),
    modes: b.loaded.modes?.currentModeId ?? null,
  }),
);
process.exit(0);
