// The Control API (D) over fetch, typed by its own description: `paths` (api-types.ts, generated
// from openapi.json) names every path, its parameters, its body and its answer, so a call that
// does not match the daemon's description fails `npm run check`. The token as `Authorization:
// Bearer`, never in a URL; problems (RFC 9457) as `Problem` errors carrying status, title and
// detail.
import createClient from "openapi-fetch";
import { token } from "./token";
import type { components, paths } from "./api-types";

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

const client = createClient<paths>({
  credentials: "omit",
  cache: "no-store",
  headers: { Accept: "application/json" },
  // The global fetch when called, not when loaded (a test stubs it).
  fetch: (request) => fetch(request),
});
client.use({
  onRequest({ request }) {
    const t = token();
    if (t) request.headers.set("Authorization", `Bearer ${t}`);
    return request;
  },
});

type Method = "get" | "put" | "post" | "patch" | "delete";
/** The paths that have `method`. */
type PathsFor<M extends Method> = { [P in keyof paths]: paths[P] extends { [K in M]: unknown } ? P : never }[keyof paths];
type Op<P extends keyof paths, M extends Method> = paths[P] extends { [K in M]: infer O } ? O : never;
/** A request body as the daemon reads it: a field that may be null may be left out (serde reads a
 * missing `Option` as `None`; openapi-typescript types a field with a `default` as required, true
 * of answers, not of requests). A defaulted field that may not be null stays required. */
type Sendable<T> = T extends readonly (infer U)[]
  ? Sendable<U>[]
  : T extends object
    ? Flat<{ [K in keyof T as null extends T[K] ? K : never]?: Sendable<T[K]> } & { [K in keyof T as null extends T[K] ? never : K]: Sendable<T[K]> }>
    : T;
type Flat<T> = { [K in keyof T]: T[K] };
/** What a call passes: its path parameters, its query, its JSON body, as the operation has them. */
type Opts<O> = (O extends { parameters: infer Q } ? Pick<Q, ("path" | "query") & keyof Q> : unknown) &
  (O extends { requestBody: { content: { "application/json": infer B } } } ? { body: Sendable<B> } : unknown);
/** The JSON body `method` on `path` takes, for a page that builds one apart from the call. */
export type Body<P extends keyof paths, M extends Method> = Op<P, M> extends { requestBody: { content: { "application/json": infer B } } }
  ? Sendable<B>
  : never;
/** The options argument, optional when nothing in it is required. */
type Args<O> = {} extends Opts<O> ? [opts?: Opts<O>] : [opts: Opts<O>];
type OkStatus = 200 | 201 | 202 | 203 | 204 | 205 | 206;
/** A 2xx answer's JSON body (undefined for one without a body, e.g. 204). */
type Ok<O> = O extends { responses: infer R }
  ? { [S in keyof R & OkStatus]: R[S] extends { content: { "application/json": infer D } } ? D : undefined }[keyof R & OkStatus]
  : never;

type Loose = { path?: object; query?: object; body?: unknown };

/** One call; answers the parsed body, or throws the problem. */
async function send(method: Method, path: string, opts: Loose | undefined, parseAs: "json" | "text" = "json"): Promise<unknown> {
  const request = client.request as unknown as (
    method: string,
    url: string,
    init: Record<string, unknown>,
  ) => Promise<{ data?: unknown; error?: unknown; response: Response }>;
  const { data, error, response } = await request(method, path, {
    // Absolute, so the same in a test (no document) as in the page.
    baseUrl: globalThis.location.origin,
    params: { path: opts?.path, query: opts?.query },
    body: opts?.body,
    parseAs,
    // A text answer: no Accept, as a link would ask.
    ...(parseAs === "text" ? { headers: { Accept: null } } : {}),
  });
  if (!response.ok) {
    const p = (typeof error === "object" ? error : null) as { title?: string; detail?: string } | null;
    throw new Problem(response.status, p?.title ?? response.statusText, p?.detail ?? "");
  }
  return data;
}

export const get = <P extends PathsFor<"get">>(path: P, ...[opts]: Args<Op<P, "get">>) =>
  send("get", path, opts as Loose) as Promise<Ok<Op<P, "get">>>;
export const post = <P extends PathsFor<"post">>(path: P, ...[opts]: Args<Op<P, "post">>) =>
  send("post", path, opts as Loose) as Promise<Ok<Op<P, "post">>>;
export const put = <P extends PathsFor<"put">>(path: P, ...[opts]: Args<Op<P, "put">>) =>
  send("put", path, opts as Loose) as Promise<Ok<Op<P, "put">>>;
export const patch = <P extends PathsFor<"patch">>(path: P, ...[opts]: Args<Op<P, "patch">>) =>
  send("patch", path, opts as Loose) as Promise<Ok<Op<P, "patch">>>;
export const del = <P extends PathsFor<"delete">>(path: P, ...[opts]: Args<Op<P, "delete">>) =>
  send("delete", path, opts as Loose) as Promise<Ok<Op<P, "delete">>>;

/** A GET whose answer is text (a log; openapi.json gives it no schema); a problem as `Problem`. */
export const getText = <P extends PathsFor<"get">>(path: P, ...[opts]: Args<Op<P, "get">>) =>
  send("get", path, opts as Loose, "text").then((t) => (t as string | undefined) ?? "");
