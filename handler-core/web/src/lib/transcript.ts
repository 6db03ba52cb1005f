// A session's transcript (F.4) from its ACP updates, as an ACP client shows it: messages joined
// from their chunks, a tool call per id (its kind, status, content and locations, later updates
// merged in), the plan, the agent's thoughts, the context's usage. Pure: the page feeds it the
// updates and renders `entries`. Every change replaces the entry it touches (entries are never
// mutated), so a page may keep them in a shallow (`$state.raw`) array and a 10 000-update replay
// costs one pass, with a map from a tool call's id to its place instead of a search.

export type ToolContent =
  | { type: "content"; content?: { type: string; text?: string } }
  | { type: "diff"; path: string; oldText?: string | null; newText: string }
  | { type: "terminal"; terminalId: string };
export type Location = { path: string; line?: number | null };
export type PlanEntry = { content: string; status: string; priority?: string };

export type Entry =
  | { key: number; kind: "user" | "agent" | "thought"; text: string }
  | {
      key: number;
      kind: "tool";
      id: string;
      title: string;
      status: string;
      toolKind?: string;
      content: ToolContent[];
      locations: Location[];
    }
  | { key: number; kind: "plan"; entries: PlanEntry[] };
export type ToolEntry = Extract<Entry, { kind: "tool" }>;

/** The context window's use (ACP `usage_update`): tokens in context, its size, the cost so far. */
export type Usage = { used: number; size: number; cost?: { amount: number; currency: string } | null };

type Update = { sessionUpdate?: string; [k: string]: unknown };

// An update is the agent's data: a field of the wrong type is left out, never trusted.
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
const list = <T>(v: unknown): T[] => (Array.isArray(v) ? v.filter((x) => x && typeof x === "object") : []) as T[];

function textOf(c: unknown): string {
  const b = c as { type?: string; text?: string } | undefined;
  return b?.type === "text" ? (b.text ?? "") : "";
}

export class Transcript {
  entries: Entry[] = [];
  usage: Usage | null = null;
  private tools = new Map<string, number>();
  private nextKey = 0;

  /** Applies one update; true when `entries` or `usage` changed (other kinds are the page's). */
  apply(u: Update): boolean {
    switch (u.sessionUpdate) {
      case "user_message_chunk":
      case "agent_message_chunk":
      case "agent_thought_chunk": {
        const kind = u.sessionUpdate === "user_message_chunk" ? "user" : u.sessionUpdate === "agent_message_chunk" ? "agent" : "thought";
        this.text(kind, textOf(u.content));
        return true;
      }
      case "tool_call":
      case "tool_call_update":
        this.tool(u);
        return true;
      case "plan": {
        const plan = list<PlanEntry>(u.entries);
        const last = this.entries.length - 1;
        if (this.entries[last]?.kind === "plan") this.entries[last] = { ...this.entries[last], entries: plan } as Entry;
        else this.entries.push({ key: this.nextKey++, kind: "plan", entries: plan });
        return true;
      }
      case "usage_update":
        const cost = u.cost as { amount?: unknown; currency?: unknown } | null | undefined;
        this.usage = {
          used: Number(u.used) || 0,
          size: Number(u.size) || 0,
          cost: cost && typeof cost.amount === "number" && typeof cost.currency === "string" ? { amount: cost.amount, currency: cost.currency } : null,
        };
        return true;
      default:
        return false;
    }
  }

  /** The person's own prompt, shown at once (the agent's echo of it is not awaited). */
  prompt(text: string) {
    this.entries.push({ key: this.nextKey++, kind: "user", text });
  }

  /** The last prompt the person sent, for ↑ in an empty composer. */
  lastPrompt(): string | null {
    for (let i = this.entries.length - 1; i >= 0; i--) {
      const e = this.entries[i];
      if (e.kind === "user") return e.text;
    }
    return null;
  }

  private text(kind: "user" | "agent" | "thought", chunk: string) {
    const last = this.entries.length - 1;
    const e = this.entries[last];
    if (e && e.kind === kind) this.entries[last] = { ...e, text: e.text + chunk };
    else this.entries.push({ key: this.nextKey++, kind, text: chunk });
  }

  private tool(u: Update) {
    const id = String(u.toolCallId ?? "");
    const at = this.tools.get(id);
    const old = at === undefined ? undefined : (this.entries[at] as ToolEntry);
    const next: ToolEntry = {
      key: old?.key ?? this.nextKey++,
      kind: "tool",
      id,
      title: str(u.title) || old?.title || "tool call",
      status: str(u.status) || old?.status || "pending",
      toolKind: str(u.kind) || old?.toolKind,
      content: u.content === undefined ? (old?.content ?? []) : list<ToolContent>(u.content),
      locations: u.locations === undefined ? (old?.locations ?? []) : list<Location>(u.locations),
    };
    if (at === undefined) {
      this.tools.set(id, this.entries.length);
      this.entries.push(next);
    } else this.entries[at] = next;
  }
}

/** "12.3k / 200k tokens · 0.42 USD": the usage as a person reads it. */
export function usageText(u: Usage): string {
  const k = (n: number) => (n >= 1000 ? `${(n / 1000).toFixed(n >= 100_000 ? 0 : 1)}k` : String(n));
  const cost = u.cost ? ` · ${u.cost.amount.toFixed(2)} ${u.cost.currency}` : "";
  return `${k(u.used)} / ${k(u.size)} tokens${cost}`;
}
