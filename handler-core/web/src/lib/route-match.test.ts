import { describe, expect, test } from "vitest";
import { match } from "./route-match";

describe("match", () => {
  test("a fixed path matches itself only", () => {
    expect(match("/machines", "/machines")).toEqual({});
    expect(match("/machines", "/apps")).toBeNull();
    expect(match("/machines", "/machines/x")).toBeNull();
  });
  test("named segments are decoded", () => {
    expect(match("/projects/:id", "/projects/p_1")).toEqual({ id: "p_1" });
    expect(match("/terminals/:a/:c", "/terminals/a%2Fb/c%20d")).toEqual({ a: "a/b", c: "c d" });
  });
  test("the query joins the parts, a segment count must agree", () => {
    expect(match("/projects/:p/agents/:a", "/projects/p1/agents/new?from=a2")).toEqual({ p: "p1", a: "new", from: "a2" });
    expect(match("/projects/:p/agents/:a", "/projects/p1")).toBeNull();
  });
});
