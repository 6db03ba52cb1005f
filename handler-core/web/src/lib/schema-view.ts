// A run's interface (D.18) shown from its JSON Schemas, as pure functions: the input form's
// fields from `fields` (titles, enums, lists), its values typed back for the request; the
// result as nodes from `result` — `"x-handler": "verdict"` on an enum is the run's outcome (its
// first value the best, its last the worst), `"x-handler": "code-ref"` on {path, lines: [from,
// to]} a place in the subject whose lines handlerd reads now (not the agent's quote of them).

type Schema = Record<string, any>;

/** One input of the run's form. */
export type Field = {
  name: string;
  title: string;
  description?: string;
  kind: "text" | "long-text" | "number" | "integer" | "boolean" | "enum" | "lines";
  options?: string[];
  required: boolean;
};

const titleOf = (name: string, s: Schema | undefined) => (typeof s?.title === "string" ? s.title : name);

/** The fields of an object schema, in its order; what a form cannot take shown as text. */
export function formFields(schema: unknown): Field[] {
  const s = (schema ?? {}) as Schema;
  const required = new Set<string>(Array.isArray(s.required) ? s.required : []);
  return Object.entries((s.properties ?? {}) as Record<string, Schema>).map(([name, p]) => {
    const base = { name, title: titleOf(name, p), description: p?.description, required: required.has(name) };
    if (Array.isArray(p?.enum)) return { ...base, kind: "enum" as const, options: p.enum.map(String) };
    if (p?.type === "boolean") return { ...base, kind: "boolean" as const };
    if (p?.type === "integer") return { ...base, kind: "integer" as const };
    if (p?.type === "number") return { ...base, kind: "number" as const };
    if (p?.type === "array") return { ...base, kind: "lines" as const };
    const long = p?.format === "textarea" || (typeof p?.maxLength === "number" ? p.maxLength > 200 : true);
    return { ...base, kind: long ? ("long-text" as const) : ("text" as const) };
  });
}

/** The values a form's raw inputs give: numbers parsed, lines split, empty optional ones left out. */
export function formValues(fields: Field[], raw: Record<string, string | boolean>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) {
    const v = raw[f.name];
    if (f.kind === "boolean") {
      out[f.name] = v === true;
      continue;
    }
    const text = typeof v === "string" ? v : "";
    if (!text.trim() && !f.required) continue;
    if (f.kind === "number" || f.kind === "integer") out[f.name] = Number(text);
    else if (f.kind === "lines") out[f.name] = text.split("\n").map((l) => l.trim()).filter(Boolean);
    else out[f.name] = text;
  }
  return out;
}

/** One part of a result as shown. */
export type Node =
  | { kind: "verdict"; title: string; value: string; rank: number }
  | { kind: "text"; title: string; value: string }
  | { kind: "code-ref"; title: string; path: string; from: number; to: number }
  | { kind: "list"; title: string; items: Node[] }
  | { kind: "group"; title: string; children: Node[] };

/** The nodes of `value` as `schema` describes it (a value with no schema shown as text). */
export function resultNodes(schema: unknown, value: unknown, title = ""): Node[] {
  const s = (schema ?? {}) as Schema;
  if (s["x-handler"] === "verdict" && Array.isArray(s.enum) && typeof value === "string") {
    const at = s.enum.indexOf(value);
    const rank = s.enum.length > 1 && at >= 0 ? at / (s.enum.length - 1) : 1;
    return [{ kind: "verdict", title, value, rank }];
  }
  if (s["x-handler"] === "code-ref" && isCodeRef(value)) {
    return [{ kind: "code-ref", title, path: value.path, from: value.lines[0], to: value.lines[1] }];
  }
  if (Array.isArray(value)) {
    const items = value.flatMap((v, i) => resultNodes(s.items, v, `${i + 1}`));
    return [{ kind: "list", title, items }];
  }
  if (value && typeof value === "object") {
    const props = (s.properties ?? {}) as Record<string, Schema>;
    const names = [...Object.keys(props).filter((k) => k in value), ...Object.keys(value).filter((k) => !(k in props))];
    const children = names.flatMap((k) => resultNodes(props[k], (value as Record<string, unknown>)[k], titleOf(k, props[k])));
    return title ? [{ kind: "group", title, children }] : children;
  }
  return [{ kind: "text", title, value: value == null ? "" : String(value) }];
}

function isCodeRef(v: unknown): v is { path: string; lines: [number, number] } {
  const r = v as { path?: unknown; lines?: unknown } | null;
  return (
    !!r &&
    typeof r.path === "string" &&
    Array.isArray(r.lines) &&
    r.lines.length === 2 &&
    r.lines.every((n) => Number.isInteger(n) && n >= 1) &&
    r.lines[0] <= r.lines[1]
  );
}

/** Lines `from`..`to` (1-based, at most 50) of `text`, numbered. */
export function linesOf(text: string, from: number, to: number): { n: number; text: string }[] {
  const all = text.split("\n");
  const last = Math.min(to, from + 49, all.length);
  const out = [];
  for (let n = from; n <= last; n++) out.push({ n, text: all[n - 1] });
  return out;
}
