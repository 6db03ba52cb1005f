// Agent output is untrusted (issue 17): markdown without raw HTML, sanitized by DOMPurify,
// links only http(s) (or relative when asked), opened in a new tab without referrer or opener.
import { Marked } from "marked";
import DOMPurify from "dompurify";

const marked = new Marked({ gfm: true, breaks: false, async: false });
// Raw HTML in the source is shown as text, never parsed.
marked.use({
  renderer: {
    html({ text }) {
      return escapeHtml(text);
    },
  },
});

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

let hooked = false;
function hook(allowRelative: () => boolean) {
  if (hooked) return;
  hooked = true;
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") {
      const href = node.getAttribute("href") ?? "";
      const safe = /^https?:\/\//i.test(href) || (allowRelative() && /^[\w./#-]+$/.test(href) && !href.includes(":"));
      if (!safe) node.removeAttribute("href");
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
    if (node.tagName === "IMG") node.remove();
  });
}

let relative = false;

/** Untrusted markdown as safe HTML. */
export function renderMarkdown(src: string, opts: { relativeLinks?: boolean } = {}): string {
  hook(() => relative);
  relative = !!opts.relativeLinks;
  const html = marked.parse(src) as string;
  return DOMPurify.sanitize(html, {
    ALLOWED_TAGS: ["p", "br", "strong", "em", "del", "code", "pre", "blockquote", "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td"],
    ALLOWED_ATTR: ["href", "target", "rel", "start"],
  });
}

/** An untrusted one-line title (a tool call's, a permission question's) as inline markdown:
 *  code, emphasis and strike only — no links, no images, no blocks. */
export function renderInline(src: string): string {
  const html = marked.parseInline(src) as string;
  return DOMPurify.sanitize(html, { ALLOWED_TAGS: ["code", "strong", "em", "del"], ALLOWED_ATTR: [] });
}
