import { describe, expect, test } from "vitest";
import { listingOf } from "./folders";

describe("listingOf", () => {
  test("nothing typed up to a slash lists the work folders", () => {
    expect(listingOf("")).toBeNull();
    expect(listingOf("code")).toBeNull();
    expect(listingOf("/")).toBeNull();
  });
  test("a path lists the folder up to its last slash", () => {
    expect(listingOf("/home/me/")).toBe("/home/me");
    expect(listingOf("/home/me/co")).toBe("/home/me");
    expect(listingOf("/home/me/code/app")).toBe("/home/me/code");
  });
});
