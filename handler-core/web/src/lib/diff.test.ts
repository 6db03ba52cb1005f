import { describe, expect, test } from "vitest";
import { lineDiff, numberedDiff } from "./diff";

describe("lineDiff", () => {
  test("kept, removed and added lines in order", () => {
    expect(lineDiff("a\nb\nc", "a\nc\nd")).toEqual([
      { kind: "same", text: "a" },
      { kind: "removed", text: "b" },
      { kind: "same", text: "c" },
      { kind: "added", text: "d" },
    ]);
  });
  test("identical texts are all the same", () => {
    expect(lineDiff("x\ny", "x\ny").every((l) => l.kind === "same")).toBe(true);
  });
  test("beyond 2000 lines a side, both whole: removed then added", () => {
    const big = Array.from({ length: 2001 }, (_, i) => `l${i}`).join("\n");
    const out = lineDiff(big, "new");
    expect(out).toHaveLength(2002);
    expect(out[0]).toEqual({ kind: "removed", text: "l0" });
    expect(out[2001]).toEqual({ kind: "added", text: "new" });
  });
});

describe("numberedDiff", () => {
  test("each line carries its number in the earlier file and in the new one", () => {
    expect(numberedDiff("a\nb\nc", "a\nc\nd").map((l) => [l.kind, l.old, l.new])).toEqual([
      ["same", 1, 1],
      ["removed", 2, null],
      ["same", 3, 2],
      ["added", null, 3],
    ]);
  });
  test("a new file's lines are numbered from 1 on the new side only", () => {
    expect(numberedDiff("", "x\ny").filter((l) => l.kind === "added").map((l) => l.new)).toEqual([1, 2]);
  });
});
