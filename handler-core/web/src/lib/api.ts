// The Control API (D) over fetch: the token as `Authorization: Bearer`, never in a URL;
// problems (RFC 9457) as `Problem` errors carrying status, title and detail.
import { token } from "./token";
import type { components } from "./api-types";

export type Schemas = components["schemas"];
export type Project = Schemas["Project"];
export type Agent = Schemas["Agent"];
export type Session = Schemas["Session"];

/** A refused request: the problem the daemon answered. */
export class Problem extends Error {
  constructor(
    public status: number,
    public title: string,
    public detail: string,
  ) {
    super(`${title}: ${detail}`);
  }
}

/** One call; answers the body (null for 204). */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await res.text();
  const json = text ? JSON.parse(text) : null;
  if (!res.ok) {
    throw new Problem(res.status, json?.title ?? res.statusText, json?.detail ?? "");
  }
  return json as T;
}

export const get = <T>(path: string) => call<T>("GET", path);

/** A GET whose answer is text (a log); a problem as `Problem`. */
export async function getText(path: string): Promise<string> {
  const t = token();
  const res = await fetch(path, {
    headers: t ? { Authorization: `Bearer ${t}` } : {},
    credentials: "omit",
    cache: "no-store",
  });
  const text = await res.text();
  if (!res.ok) {
    const json = text.startsWith("{") ? JSON.parse(text) : null;
    throw new Problem(res.status, json?.title ?? res.statusText, json?.detail ?? "");
  }
  return text;
}
export const post = <T>(path: string, body?: unknown) => call<T>("POST", path, body ?? {});
export const put = <T>(path: string, body: unknown) => call<T>("PUT", path, body);
export const patch = <T>(path: string, body: unknown) => call<T>("PATCH", path, body);
export const del = <T>(path: string) => call<T>("DELETE", path);

/** A path segment, escaped. */
export const seg = (s: string) => encodeURIComponent(s);
