// Matching a hash route against a pattern (`/projects/:id`): pure, so it is tested without a
// browser (route-match.test.ts); the router re-exports it.

/** The parts of the path matched by `pattern` (`:name` a segment), or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const [p, q] = path.split("?");
  const a = pattern.split("/");
  const b = p.split("/");
  if (a.length !== b.length) return null;
  const out: Record<string, string> = {};
  for (let i = 0; i < a.length; i++) {
    if (a[i].startsWith(":")) out[a[i].slice(1)] = decodeURIComponent(b[i]);
    else if (a[i] !== b[i]) return null;
  }
  for (const [k, v] of new URLSearchParams(q ?? "")) out[k] = v;
  return out;
}
