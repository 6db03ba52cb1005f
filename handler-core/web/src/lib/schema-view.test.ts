import { describe, expect, test } from "vitest";
import { formFields, formValues, linesOf, resultNodes } from "./schema-view";

describe("formFields and formValues", () => {
  const schema = {
    type: "object",
    required: ["expectation"],
    properties: {
      expectation: { type: "string", title: "What you expect it to do" },
      depth: { enum: ["quick", "thorough"] },
      max: { type: "integer" },
      strict: { type: "boolean" },
      hosts: { type: "array", items: { type: "string" } },
    },
  };
  test("fields by their title, enums, lists, in order", () => {
    const f = formFields(schema);
    expect(f.map((x) => [x.name, x.title, x.kind, x.required])).toEqual([
      ["expectation", "What you expect it to do", "long-text", true],
      ["depth", "depth", "enum", false],
      ["max", "max", "integer", false],
      ["strict", "strict", "boolean", false],
      ["hosts", "hosts", "lines", false],
    ]);
    expect(f[1].options).toEqual(["quick", "thorough"]);
  });
  test("values typed back, empty optional ones left out", () => {
    const f = formFields(schema);
    expect(formValues(f, { expectation: "fills forms", max: "3", strict: true, hosts: "a.com\n\n b.com " })).toEqual({
      expectation: "fills forms",
      max: 3,
      strict: true,
      hosts: ["a.com", "b.com"],
    });
  });
});

describe("resultNodes", () => {
  const schema = {
    type: "object",
    properties: {
      verdict: { enum: ["no-concerns", "caution", "do-not-install"], "x-handler": "verdict", title: "Verdict" },
      summary: { type: "string" },
      findings: {
        type: "array",
        items: { type: "object", properties: { text: { type: "string" }, where: { "x-handler": "code-ref" } } },
      },
    },
  };
  test("a verdict ranked by its place, text, a list of groups with a code reference", () => {
    const v = { verdict: "caution", summary: "Reads files.", findings: [{ text: "curl", where: { path: "SKILL.md", lines: [2, 3] } }] };
    expect(resultNodes(schema, v)).toEqual([
      { kind: "verdict", title: "Verdict", value: "caution", rank: 0.5 },
      { kind: "text", title: "summary", value: "Reads files." },
      {
        kind: "list",
        title: "findings",
        items: [
          {
            kind: "group",
            title: "1",
            children: [
              { kind: "text", title: "text", value: "curl" },
              { kind: "code-ref", title: "where", path: "SKILL.md", from: 2, to: 3 },
            ],
          },
        ],
      },
    ]);
  });
  test("a code reference that is not one is shown as text, a value outside the enum as the worst", () => {
    const bad = resultNodes({ "x-handler": "code-ref" }, { path: "x", lines: [3, 1] }, "where");
    expect(bad[0].kind).toBe("group");
    expect(resultNodes(schema.properties.verdict, "great", "Verdict")).toEqual([{ kind: "verdict", title: "Verdict", value: "great", rank: 1 }]);
  });
});

describe("linesOf", () => {
  test("numbered lines of a range, bounded by the text", () => {
    expect(linesOf("a\nb\nc", 2, 9)).toEqual([{ n: 2, text: "b" }, { n: 3, text: "c" }]);
  });
});
