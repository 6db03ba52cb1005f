// The daemon's token (D intro): handed over in the URL fragment (/#token=…, never sent to the
// server), kept in sessionStorage for this tab, removed from the address bar at once.
const KEY = "handler.token";

/** Takes the token out of the fragment, if it is there, and keeps it. */
export function adoptFragmentToken(loc: Location = window.location): void {
  const m = /^#token=([^&]+)(?:&(.*))?$/.exec(loc.hash);
  if (!m) return;
  sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
  const rest = m[2] ? `#${decodeURIComponent(m[2])}` : "#/";
  history.replaceState(null, "", `${loc.pathname}${rest}`);
}

/** The kept token, if any. */
export function token(): string | null {
  return sessionStorage.getItem(KEY);
}

/** Keeps a token pasted by hand. */
export function setToken(t: string): void {
  sessionStorage.setItem(KEY, t.trim());
}
