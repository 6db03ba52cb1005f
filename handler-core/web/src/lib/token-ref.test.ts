import { describe, expect, test } from "vitest";
import { tokenInput, tokenWhere } from "./token-ref";

describe("tokenInput", () => {
  test("a value is kept as typed; a path or name is trimmed", () => {
    expect(tokenInput("value", " sk-1 ")).toEqual({ value: " sk-1 " });
    expect(tokenInput("file", " ~/t.txt ")).toEqual({ file: "~/t.txt" });
    expect(tokenInput("env", "TOKEN\n")).toEqual({ env: "TOKEN" });
  });
  test("a command is split on spaces", () => {
    expect(tokenInput("command", "  pass show  work/api ")).toEqual({ command: ["pass", "show", "work/api"] });
  });
});

describe("tokenWhere", () => {
  test("says where the token is, never a value", () => {
    expect(tokenWhere(null)).toBe("no token");
    expect(tokenWhere({ secret: "accounts/perso/token" })).toBe("token pasted (in the secret store)");
    expect(tokenWhere({ env: "TOKEN" })).toBe("token from the environment variable TOKEN");
    expect(tokenWhere({ file: "~/t" })).toBe("token from the file ~/t");
    expect(tokenWhere({ command: ["get-token"] })).toBe("token from the command get-token");
  });
});
