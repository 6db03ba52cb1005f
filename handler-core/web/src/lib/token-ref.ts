// A token login's token: the body the API takes (TokenInput) and what an account's token
// reference says (AccountInfo.token: where it is, never the value).
import type { Schemas } from "./api";

/** The API's TokenInput from the form's choice and text. */
export function tokenInput(kind: string, text: string): Schemas["TokenInput"] {
  if (kind === "command") return { command: text.trim().split(/\s+/).filter(Boolean) };
  if (kind === "env") return { env: text.trim() };
  if (kind === "file") return { file: text.trim() };
  return { value: text };
}

/** Which form an account's token has, in words (never its value). */
export function tokenWhere(t: Schemas["SecretRef"] | null | undefined): string {
  if (!t) return "no token";
  if ("secret" in t) return "token pasted (in the secret store)";
  if ("env" in t) return `token from the environment variable ${t.env}`;
  if ("file" in t) return `token from the file ${t.file}`;
  return `token from the command ${t.command.join(" ")}`;
}
