// An agent's model access (D.1, E) as forms offer it: each account, and each provider through
// each harness that speaks one of its endpoints' protocols; a choice is `account:<name>` or
// `provider:<name>:<harness>`.

/** What an account, a provider and a harness contribute to the choices. */
import type { Schemas } from "./api";

export type AccountLike = { name: string; harness?: string | null };
export type ProviderLike = { name: string; description?: string | null; endpoints: Record<string, string>; models: { id: string }[] };
export type HarnessLike = { name: string; product: string; providerProtocols: string[] };

/** One choice: its value and what a person reads. */
export type Source = { value: string; label: string };

/** Every choice, accounts first. */
export function modelSources(accounts: AccountLike[], providers: ProviderLike[], harnesses: HarnessLike[]): Source[] {
  return [
    ...accounts.map((a) => ({ value: `account:${a.name}`, label: `${a.name} (account, ${a.harness})` })),
    ...providers.flatMap((p) =>
      harnesses
        .filter((h) => h.providerProtocols.some((proto) => proto in p.endpoints))
        .map((h) => ({ value: `provider:${p.name}:${h.name}`, label: `${p.description ?? p.name} (provider) through ${h.product}` })),
    ),
  ];
}

/** The ModelAccess of a choice and a model id (blank: the default one). */
export function accessOf(source: string, model: string): Schemas["ModelAccess"] {
  const [kind, name, harness] = source.split(":");
  const m = model.trim() ? { model: model.trim() } : {};
  return kind === "account" ? { account: name, ...m } : { provider: name, harness, ...m };
}

/** The choice of a saved ModelAccess. */
export function sourceOf(m: { account?: string | null; provider?: string | null; harness?: string | null }): string {
  return m.account ? `account:${m.account}` : `provider:${m.provider}:${m.harness}`;
}

/** The model ids a choice's provider serves (suggestions), none for an account. */
export function offeredModels(source: string, providers: ProviderLike[]): string[] {
  const [kind, name] = source.split(":");
  return kind === "provider" ? (providers.find((p) => p.name === name)?.models ?? []).map((m) => m.id) : [];
}
