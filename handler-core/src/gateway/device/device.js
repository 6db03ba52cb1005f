// Handler's device page (D.7, docs/remote.md), served by the gateway: pairs this browser with a
// daemon from the one-time code (the QR code's fragment, never sent to the gateway), then talks to
// it in envelopes sealed with WebCrypto (X25519, HKDF-SHA256, AES-256-GCM with the header as
// associated data) — the gateway routes them and reads nothing. What the agent says is shown as
// text, never as HTML.

const enc = new TextEncoder();
const dec = new TextDecoder();
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const STORE = "handler.device";
const $ = (id) => document.getElementById(id);

const b64 = (bytes) => {
  let s = "";
  for (const b of new Uint8Array(bytes)) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
};
const unb64 = (t) => {
  let s = t.replace(/-/g, "+").replace(/_/g, "/");
  while (s.length % 4) s += "=";
  return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
};
const concat = (...parts) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let i = 0;
  for (const p of parts) { out.set(p, i); i += p.length; }
  return out;
};
const hex = (b) => [...b].map((x) => x.toString(16).padStart(2, "0")).join("");

async function hkdf(salt, ikm, info, n) {
  const k = await crypto.subtle.importKey("raw", ikm, "HKDF", false, ["deriveBits"]);
  return new Uint8Array(await crypto.subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt: enc.encode(salt), info }, k, n * 8));
}
async function hmac(key, parts) {
  const k = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const msg = concat(...parts.flatMap((p) => [p, new Uint8Array([0])]));
  return new Uint8Array(await crypto.subtle.sign("HMAC", k, msg));
}
function normalize(code) {
  const s = code.replace(/[- ]/g, "").toUpperCase();
  if (s.length !== 20 || [...s].some((c) => !ALPHABET.includes(c))) throw new Error("not a pairing code: 20 letters A–Z and digits 2–7");
  return s;
}
async function codeKeys(code) {
  const c = enc.encode(normalize(code));
  const salt = "handler.remote.pair.v1";
  return {
    pairingId: hex(await hkdf(salt, c, enc.encode("id"), 16)),
    claim: b64(await hkdf(salt, c, enc.encode("claim"), 32)),
    mac: await hkdf(salt, c, enc.encode("mac"), 32),
  };
}

async function gw(method, path, body, token) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = `Bearer ${token}`;
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let v = null;
  try { v = text ? JSON.parse(text) : null; } catch { v = null; }
  return { status: r.status, body: v };
}

let st = JSON.parse(localStorage.getItem(STORE) || "null");
const save = () => localStorage.setItem(STORE, JSON.stringify(st));
let keys = null; // {send, recv} AES keys
let waiting = new Map(); // id → resolve
let current = null; // {id, acp}
let nextId = 1;

async function link() {
  const priv = await crypto.subtle.importKey("jwk", st.jwk, { name: "X25519" }, false, ["deriveBits"]);
  const dpk = unb64(st.daemonPk);
  const peer = await crypto.subtle.importKey("raw", dpk, { name: "X25519" }, false, []);
  const shared = new Uint8Array(await crypto.subtle.deriveBits({ name: "X25519", public: peer }, priv, 256));
  const okm = await hkdf("handler.remote.v1", shared, concat(enc.encode("keys"), dpk, unb64(st.devicePk)), 64);
  const aes = (k) => crypto.subtle.importKey("raw", k, "AES-GCM", false, ["encrypt", "decrypt"]);
  keys = { recv: await aes(okm.slice(0, 32)), send: await aes(okm.slice(32)) };
}
const aad = (from, to, n, t) => enc.encode(`handler.remote.v1\0${from}\0${to}\0${n}\0${t}\0`);

async function send(obj) {
  st.n += 1;
  save();
  const n = st.n, t = Date.now();
  const nonce = crypto.getRandomValues(new Uint8Array(12));
  const ct = await crypto.subtle.encrypt({ name: "AES-GCM", iv: nonce, additionalData: aad(st.deviceId, st.daemonId, n, t) }, keys.send, enc.encode(JSON.stringify(obj)));
  const e = { v: 1, from: st.deviceId, to: st.daemonId, n, t, nonce: b64(nonce), ct: b64(ct) };
  const r = await gw("POST", `/v1/mail/${st.daemonId}`, e, st.token);
  if (r.status === 401) unpaired("this device was revoked");
  else if (r.status !== 202) throw new Error(`the gateway answered ${r.status}`);
}
function call(method, params) {
  const id = nextId++;
  return new Promise((resolve) => { waiting.set(id, resolve); send({ jsonrpc: "2.0", id, method, params }); });
}
function acp(method, params) {
  const id = nextId++;
  return new Promise((resolve) => {
    waiting.set(`${current.id}/${id}`, resolve);
    send({ session: current.id, message: { jsonrpc: "2.0", id, method, params } });
  });
}

async function open(e) {
  if (e.to !== st.deviceId || e.from !== st.daemonId) return null;
  let pt;
  try {
    pt = await crypto.subtle.decrypt({ name: "AES-GCM", iv: unb64(e.nonce), additionalData: aad(e.from, e.to, e.n, e.t) }, keys.recv, unb64(e.ct));
  } catch { console.warn("envelope refused: altered"); return null; }
  if (Date.now() - e.t > 600_000) { console.warn("envelope refused: expired"); return null; }
  if (e.n <= st.lastN) { console.warn("envelope refused: replayed"); return null; }
  st.lastN = e.n;
  save();
  return JSON.parse(dec.decode(pt));
}

async function poll() {
  for (;;) {
    let r;
    try { r = await gw("GET", `/v1/mail?after=${st.after}&wait=25`, undefined, st.token); } catch { r = { status: 0 }; }
    if (!st) return;
    if (r.status === 401) return unpaired("this device was revoked: pair it again");
    if (r.status !== 200) { $("status").textContent = "gateway unreachable"; await new Promise((ok) => setTimeout(ok, 3000)); continue; }
    $("status").textContent = "connected";
    for (const m of r.body.messages) {
      st.after = Math.max(st.after, m.seq);
      save();
      if (m.kind !== "envelope") continue;
      const v = await open(m.envelope);
      if (v) receive(v);
    }
  }
}

function receive(v) {
  if (v.refused) { console.warn(`the daemon refused an envelope: ${v.refused.reason}`); return; }
  if (v.session) {
    if (v.closed) { if (current?.id === v.session) say("tool", `Detached: ${v.closed.reason} (${v.closed.code})`); return; }
    const m = v.message;
    const key = `${v.session}/${m.id}`;
    if (m.method === undefined && waiting.has(key)) { waiting.get(key)(m); waiting.delete(key); return; }
    if (current?.id === v.session) show(m);
    return;
  }
  if (waiting.has(v.id)) { waiting.get(v.id)(v); waiting.delete(v.id); }
}

let lastAgent = null;
function say(kind, text) {
  const d = document.createElement("div");
  d.className = `msg ${kind}`;
  d.dataset.kind = kind;
  d.textContent = text;
  $("chat").append(d);
  d.scrollIntoView({ block: "end" });
  lastAgent = kind === "agent" ? d : null;
  return d;
}
// The agent's thinking, folded as the session page folds it.
function thought(text) {
  const last = $("chat").lastElementChild;
  if (last?.dataset.kind === "thought") { last.querySelector("pre").textContent += text; return; }
  const d = document.createElement("details");
  d.className = "msg";
  d.dataset.kind = "thought";
  const sum = document.createElement("summary");
  sum.textContent = "Thought";
  const pre = document.createElement("pre");
  pre.textContent = text;
  d.append(sum, pre);
  $("chat").append(d);
  lastAgent = null;
}
// A tool call, updated in place by its id: its kind, title and status, and each diff's file and
// new lines, collapsible.
const tools = new Map();
function tool(u) {
  let d = tools.get(u.toolCallId);
  if (!d) {
    d = document.createElement("details");
    d.className = "msg tool";
    d.dataset.kind = "tool";
    d.append(document.createElement("summary"));
    tools.set(u.toolCallId, d);
    $("chat").append(d);
    lastAgent = null;
  }
  d.dataset.title = u.title ?? d.dataset.title ?? "tool";
  d.dataset.status = u.status ?? d.dataset.status ?? "pending";
  d.dataset.toolKind = u.kind ?? d.dataset.toolKind ?? "other";
  d.firstChild.textContent = `⚙ ${d.dataset.title} · ${d.dataset.toolKind} · ${d.dataset.status}`;
  for (const c of u.content ?? []) {
    if (c.type !== "diff") continue;
    const head = document.createElement("div");
    head.textContent = c.path;
    const pre = document.createElement("pre");
    pre.textContent = (c.newText ?? "").split("\n").map((l, i) => `${String(i + 1).padStart(4)} + ${l}`).join("\n");
    d.append(head, pre);
  }
}
// The agent's plan, replaced whole by each update.
function plan(entries) {
  let d = document.getElementById("plan");
  if (!d) {
    d = document.createElement("ol");
    d.id = "plan";
    d.className = "msg";
    d.setAttribute("aria-label", "Plan");
    $("chat").append(d);
  }
  d.replaceChildren(...entries.map((e) => {
    const li = document.createElement("li");
    li.textContent = `${e.status === "completed" ? "✓" : e.status === "in_progress" ? "…" : "○"} ${e.content}`;
    return li;
  }));
  lastAgent = null;
}

function show(m) {
  if (m.method === "session/update") {
    const u = m.params.update;
    const text = u.content?.text ?? "";
    if (u.sessionUpdate === "user_message_chunk") say("user", text);
    else if (u.sessionUpdate === "agent_message_chunk") { if (lastAgent) lastAgent.textContent += text; else say("agent", text); }
    else if (u.sessionUpdate === "agent_thought_chunk") thought(text);
    else if (u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update") tool(u);
    else if (u.sessionUpdate === "plan") plan(u.entries ?? []);
  } else if (m.method === "session/request_permission") {
    const card = say("ask", `The agent asks: ${m.params.toolCall?.title ?? "permission"}`);
    card.dataset.request = String(m.id);
    card.setAttribute("role", "group");
    card.setAttribute("aria-label", "Permission request");
    for (const o of m.params.options ?? []) {
      const b = document.createElement("button");
      b.textContent = o.name;
      b.onclick = () => {
        send({ session: current.id, message: { jsonrpc: "2.0", id: m.id, result: { outcome: { outcome: "selected", optionId: o.optionId } } } });
        card.remove();
      };
      card.append(" ", b);
    }
  } else if (m.method === "_handler/permission_resolved") {
    document.querySelector(`[data-request='${CSS.escape(String(m.params.requestId))}']`)?.remove();
  }
}

async function sessions() {
  const r = await call("remote/sessions", {});
  const ul = $("sessions");
  ul.replaceChildren();
  for (const s of r.result?.sessions ?? []) {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.textContent = s.title || s.id;
    b.setAttribute("aria-label", `Open ${s.id}`);
    b.onclick = () => attach(s);
    li.append(b, s.busy ? " working…" : "", s.pendingPermissions ? ` ${s.pendingPermissions} question(s)` : "");
    ul.append(li);
  }
  if (!ul.children.length) ul.textContent = "No session is shared (share one on your computer).";
}

async function attach(s) {
  const r = await call("remote/attach", { sessionId: s.id });
  if (r.error) { $("error").textContent = `${r.error.message} (${r.error.code})`; return; }
  current = { id: s.id, acp: s.acpSessionId, cwd: s.cwd };
  $("chat").replaceChildren();
  tools.clear();
  lastAgent = null;
  $("title").textContent = s.title || s.id;
  $("home").hidden = true;
  $("session").hidden = false;
  await acp("initialize", { protocolVersion: 1, clientCapabilities: {} });
  await acp("session/load", { sessionId: s.acpSessionId, cwd: s.cwd, mcpServers: [] });
  document.body.dataset.attached = s.id;
}

function unpaired(why) {
  st = null;
  localStorage.removeItem(STORE);
  $("home").hidden = true;
  $("session").hidden = true;
  $("pair").hidden = false;
  $("status").textContent = "";
  if (why) $("error").textContent = why;
}

async function pair(code, name) {
  const k = await codeKeys(code);
  const v = await gw("GET", `/v1/pairings/${k.pairingId}`);
  if (v.status !== 200) throw new Error("no such pairing: the code is wrong, used or expired");
  const dpk = unb64(v.body.daemonPk);
  const tag = b64(await hmac(k.mac, [enc.encode("daemon"), enc.encode(v.body.daemonId), dpk]));
  if (tag !== v.body.tag) throw new Error("the computer's key does not match the code: not paired");
  const kp = await crypto.subtle.generateKey({ name: "X25519" }, true, ["deriveBits"]);
  const pk = new Uint8Array(await crypto.subtle.exportKey("raw", kp.publicKey));
  const proof = b64(await hmac(k.mac, [enc.encode("device"), pk, dpk]));
  const c = await gw("POST", `/v1/pairings/${k.pairingId}/claim`, { claim: k.claim, devicePk: b64(pk), proof, name });
  if (c.status !== 200) throw new Error(`the gateway refused the claim (${c.status})`);
  st = {
    deviceId: c.body.deviceId, daemonId: c.body.daemonId, token: c.body.token,
    jwk: await crypto.subtle.exportKey("jwk", kp.privateKey), devicePk: b64(pk), daemonPk: v.body.daemonPk,
    n: 0, lastN: 0, after: 0,
  };
  save();
}

async function start() {
  await link();
  $("pair").hidden = true;
  $("home").hidden = false;
  document.body.dataset.paired = st.deviceId;
  poll();
  await sessions();
}

$("pair").onsubmit = async (e) => {
  e.preventDefault();
  $("error").textContent = "";
  try { await pair($("code").value, $("name").value.slice(0, 64)); await start(); } catch (err) { $("error").textContent = String(err.message ?? err); }
};
$("prompt").onsubmit = async (e) => {
  e.preventDefault();
  const text = $("text").value.trim();
  if (!text || !current) return;
  $("text").value = "";
  say("user", text);
  $("send").disabled = true;
  const r = await acp("session/prompt", { sessionId: current.acp, prompt: [{ type: "text", text }] });
  $("send").disabled = false;
  lastAgent = null;
  if (r.error) $("error").textContent = `${r.error.message} (${r.error.code})`;
};
$("text").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("prompt").requestSubmit(); } };
$("refresh").onclick = () => sessions();
$("back").onclick = async () => {
  if (current) await call("remote/detach", { sessionId: current.id });
  current = null;
  $("session").hidden = true;
  $("home").hidden = false;
  delete document.body.dataset.attached;
  await sessions();
};
$("forget").onclick = () => unpaired("");

// The code from the QR code's fragment, then out of the address bar.
const fromHash = new URLSearchParams(location.hash.slice(1)).get("code");
if (fromHash) { $("code").value = fromHash; history.replaceState(null, "", location.pathname); }
if (st) start().catch((e) => { $("error").textContent = String(e); });
else $("pair").hidden = false;
