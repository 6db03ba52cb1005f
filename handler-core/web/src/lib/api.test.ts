import { afterEach, beforeEach, describe, expect, test, vi } from "vitest";
import { del, get, getText, post, Problem } from "./api";

const TOKEN = "tok-0123456789";
let seen: Request[] = [];

function answer(status: number, body: string | null, type = "application/json") {
  vi.stubGlobal(
    "fetch",
    vi.fn(async (r: Request) => {
      seen.push(r);
      return new Response(body, { status, headers: body === null ? {} : { "Content-Type": type } });
    }),
  );
}

beforeEach(() => {
  seen = [];
  // The page's origin and the token kept for the tab (token.ts reads sessionStorage).
  vi.stubGlobal("location", new URL("http://127.0.0.1:7430/#/settings"));
  vi.stubGlobal("sessionStorage", { getItem: (k: string) => (k === "handler.token" ? TOKEN : null) });
});
afterEach(() => vi.unstubAllGlobals());

describe("the typed calls", () => {
  test("a 2xx JSON answer is the data", async () => {
    answer(200, JSON.stringify({ id: "s1", state: "running" }));
    const s = await get("/v1/sessions/{id}", { path: { id: "s1" } });
    expect(s).toEqual({ id: "s1", state: "running" });
    expect(seen[0].method).toBe("GET");
    expect(seen[0].url).toBe("http://127.0.0.1:7430/v1/sessions/s1");
    expect(seen[0].headers.get("Accept")).toBe("application/json");
  });

  test("a problem+json 4xx throws a Problem with its status, title and detail", async () => {
    answer(404, JSON.stringify({ type: "about:blank", title: "not found", status: 404, detail: "no session s9" }), "application/problem+json");
    const e = await get("/v1/sessions/{id}", { path: { id: "s9" } }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(Problem);
    expect(e).toMatchObject({ status: 404, title: "not found", detail: "no session s9" });
  });

  test("a refusal without a problem body is a Problem too", async () => {
    answer(502, "bad gateway", "text/plain");
    const e = await get("/v1/agents").catch((x: unknown) => x);
    expect(e).toBeInstanceOf(Problem);
    expect((e as Problem).status).toBe(502);
  });

  test("the token goes as Authorization: Bearer, never in the URL; no cookies, no cache", async () => {
    answer(200, "[]");
    await get("/v1/sessions", { query: { project: "p1" } });
    const r = seen[0];
    expect(r.headers.get("Authorization")).toBe(`Bearer ${TOKEN}`);
    expect(r.url).not.toContain(TOKEN);
    expect(r.url).toBe("http://127.0.0.1:7430/v1/sessions?project=p1");
    expect(r.credentials).toBe("omit");
    expect(r.cache).toBe("no-store");
  });

  test("no token kept: no Authorization header", async () => {
    vi.stubGlobal("sessionStorage", { getItem: () => null });
    answer(200, "[]");
    await get("/v1/agents");
    expect(seen[0].headers.has("Authorization")).toBe(false);
  });

  test("a path parameter with a slash or a space is escaped", async () => {
    answer(200, JSON.stringify({ path: "web/my key" }));
    await get("/v1/secrets/{path}", { path: { path: "web/my key" } });
    expect(seen[0].url).toBe("http://127.0.0.1:7430/v1/secrets/web%2Fmy%20key");
  });

  test("a body goes as JSON; a 204 answers undefined", async () => {
    answer(201, JSON.stringify({ id: "s2" }));
    await post("/v1/sessions", { body: { agentId: "a1", origin: "ui" } });
    expect(seen[0].method).toBe("POST");
    expect(seen[0].headers.get("Content-Type")).toBe("application/json");
    expect(await seen[0].json()).toEqual({ agentId: "a1", origin: "ui" });

    answer(204, null);
    expect(await del("/v1/agents/{id}", { path: { id: "a1" } })).toBeUndefined();
    expect(seen[1].method).toBe("DELETE");
    expect(seen[1].body).toBeNull();
  });

  test("a text answer (a log) is its text", async () => {
    answer(200, "line 1\nline 2\n", "text/plain; charset=utf-8");
    expect(await getText("/v1/apps/{name}/logs", { path: { name: "my app" } })).toBe("line 1\nline 2\n");
    expect(seen[0].url).toBe("http://127.0.0.1:7430/v1/apps/my%20app/logs");
    expect(seen[0].headers.get("Accept")).toBeNull();
    expect(seen[0].headers.get("Authorization")).toBe(`Bearer ${TOKEN}`);
  });
});
