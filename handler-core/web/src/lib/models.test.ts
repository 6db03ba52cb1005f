import { describe, expect, test } from "vitest";
import { accessOf, modelSources, offeredModels, sourceOf } from "./models";

const providers = [{ name: "mistral", description: "Mistral API", endpoints: { "openai-chat": "https://x" }, models: [{ id: "large" }, { id: "small" }] }];
const harnesses = [
  { name: "vibe", product: "Mistral Vibe", providerProtocols: ["openai-chat"] },
  { name: "claude-code", product: "Claude Code", providerProtocols: ["anthropic"] },
];

describe("modelSources", () => {
  test("accounts first, then a provider through each harness that speaks its protocol only", () => {
    expect(modelSources([{ name: "perso", harness: "codex" }], providers, harnesses)).toEqual([
      { value: "account:perso", label: "perso (account, codex)" },
      { value: "provider:mistral:vibe", label: "Mistral API (provider) through Mistral Vibe" },
    ]);
  });
});

describe("accessOf and sourceOf", () => {
  test("a choice becomes a ModelAccess and back", () => {
    expect(accessOf("account:perso", " ")).toEqual({ account: "perso" });
    expect(accessOf("provider:mistral:vibe", "large")).toEqual({ provider: "mistral", harness: "vibe", model: "large" });
    expect(sourceOf({ provider: "mistral", harness: "vibe" })).toBe("provider:mistral:vibe");
    expect(sourceOf({ account: "perso" })).toBe("account:perso");
  });
  test("a provider's models are offered, an account's none", () => {
    expect(offeredModels("provider:mistral:vibe", providers)).toEqual(["large", "small"]);
    expect(offeredModels("account:perso", providers)).toEqual([]);
  });
});
