// Folder pickers (D.13): what to list for what a person typed — the work folders while nothing
// ends in `/`, then the folders of the one typed up to its last `/`.
import { get } from "./api";

/** The folder to list for `typed` (`null`: the work folders themselves). */
export function listingOf(typed: string): string | null {
  const cut = typed.lastIndexOf("/");
  if (cut <= 0) return null;
  return typed.slice(0, cut);
}

/** The folders to suggest for `typed`; none when the daemon refuses (a folder outside the work
 * folders, typed by hand). */
export async function suggestFolders(typed: string): Promise<string[]> {
  const at = listingOf(typed);
  try {
    const l = await get("/v1/directories", { query: { path: at ?? undefined } });
    return l.folders;
  } catch {
    return [];
  }
}
