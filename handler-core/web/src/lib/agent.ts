// An Agent (D.1) back into the AgentRequest (D.8) that keeps it as it is: what PUT takes.
import type { Agent, Body } from "./api";

export function requestOf(a: Agent): Body<"/v1/agents/{id}", "put"> {
  return {
    name: a.name ?? "",
    ...(a.description ? { description: a.description } : {}),
    ...(a.instructions ? { instructions: a.instructions } : {}),
    models: a.models.map((m) => ({
      ...(m.account ? { account: m.account } : { provider: m.provider, harness: m.harness }),
      ...(m.model ? { model: m.model } : {}),
    })),
    network: a.network,
    ...(a.network === "filtered" && a.egress ? { egress: a.egress } : {}),
    allow: a.allow ?? [],
    confinement: a.confinement,
    permissions: a.permissions,
    bindings: a.bindings ?? [],
    knowledge: a.knowledge ?? [],
    skills: a.skills ?? [],
    ...(a.display ? { display: a.display } : {}),
    // Kept as they are: a PUT that left them out would reset them (gitGuard to the guard).
    ...(a.gitGuard ? { gitGuard: a.gitGuard } : {}),
    ...(a.sessionTree ? { sessionTree: a.sessionTree } : {}),
    ...(a.seedState ? { seedState: a.seedState } : {}),
    ...(a.machine ? { machine: a.machine } : {}),
    ...(a.disposableDelayMs != null ? { disposableDelayMs: a.disposableDelayMs } : {}),
    ...(a.askDeniedHosts != null ? { askDeniedHosts: a.askDeniedHosts } : {}),
    ...(a.interface ? { interface: a.interface } : {}),
  };
}
