// The daemon's token (D intro). `handler ui` hands the page a one-time code in the URL fragment
// (/#code=…, never sent to the server in the URL; valid once, 60 s): the page exchanges it for the
// token (POST /ui/exchange), keeps the token in sessionStorage for this tab and removes the code
// from the address bar at once, so no URL, history entry or file holds the token (decision 0133).
// A token given by hand in the fragment (/#token=…) is still taken the same way.
const KEY = "handler.token";

/** Takes the code or token out of the fragment, if one is there, and keeps the token. */
export async function adoptFragmentToken(loc: Location = window.location): Promise<void> {
  const m = /^#(token|code)=([^&]+)(?:&(.*))?$/.exec(loc.hash);
  if (!m) return;
  const rest = m[3] ? `#${decodeURIComponent(m[3])}` : "#/";
  history.replaceState(null, "", `${loc.pathname}${rest}`);
  const value = decodeURIComponent(m[2]);
  if (m[1] === "token") {
    sessionStorage.setItem(KEY, value);
    return;
  }
  try {
    const r = await fetch("/ui/exchange", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ code: value }),
    });
    if (r.ok) {
      const body = (await r.json()) as { token?: string };
      if (body.token) sessionStorage.setItem(KEY, body.token);
    }
  } catch {
    // No token: the page asks for one, as without a fragment.
  }
}

/** The kept token, if any. */
export function token(): string | null {
  return sessionStorage.getItem(KEY);
}

/** Keeps a token pasted by hand. */
export function setToken(t: string): void {
  sessionStorage.setItem(KEY, t.trim());
}
