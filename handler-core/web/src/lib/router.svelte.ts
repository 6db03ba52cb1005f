// Hash routes (#/projects/<id>…): the fragment never reaches the server, like the token.
export const route = $state({ path: location.hash.slice(1) || "/" });

/** Reads the route from the address bar again (after `history.replaceState`, which fires no event). */
export function sync() {
  route.path = location.hash.slice(1) || "/";
}

window.addEventListener("hashchange", sync);

export function go(path: string) {
  location.hash = path;
}

export { match } from "./route-match";
