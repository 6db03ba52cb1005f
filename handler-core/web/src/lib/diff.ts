// A file's earlier version against its text now, line by line (an LCS; beyond 2 000 lines a
// side, both shown whole: removed then added).
export type Line = { kind: "same" | "added" | "removed"; text: string };

export function lineDiff(before: string, after: string): Line[] {
  const a = before.split("\n");
  const b = after.split("\n");
  if (a.length > 2000 || b.length > 2000) {
    return [...a.map((text) => ({ kind: "removed" as const, text })), ...b.map((text) => ({ kind: "added" as const, text }))];
  }
  const n = a.length, m = b.length;
  const lcs: Uint16Array[] = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out: Line[] = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push({ kind: "same", text: a[i] }); i++; j++; }
    else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ kind: "removed", text: a[i++] });
    else out.push({ kind: "added", text: b[j++] });
  }
  while (i < n) out.push({ kind: "removed", text: a[i++] });
  while (j < m) out.push({ kind: "added", text: b[j++] });
  return out;
}

/** A diff's line with its numbers: the earlier file's (removed and same lines) and the new one's. */
export type NumberedLine = Line & { old: number | null; new: number | null };

/** `lineDiff` with each line's number in the earlier text and in the new one, from 1. */
export function numberedDiff(before: string, after: string): NumberedLine[] {
  let o = 0, n = 0;
  return lineDiff(before, after).map((l) => ({
    ...l,
    old: l.kind === "added" ? null : ++o,
    new: l.kind === "removed" ? null : ++n,
  }));
}
