//! `docs/api.md`'s list of routes, generated from the route table (`routes::table`) as
//! /openapi.json is, so the page cannot lag the router: one row per route (method, path, the
//! table's own summary and query parameters, how the token may come), written between two
//! markers. The drift test `api_control::docs_api_md_lists_every_route_of_the_table` compares
//! the committed page; `INSTA_UPDATE=always` (the one golden switch, decision 0054) rewrites it.

use super::routes::{Route, table};

/// The line that opens the generated part of `docs/api.md`.
pub const BEGIN: &str = "<!-- routes: generated from the route table (handler-core/src/daemon/api/routes.rs) by \
     INSTA_UPDATE=always cargo test -p handler-core --test it -- api_control::docs_api_md; do not edit -->";

/// The line that closes it.
pub const END: &str = "<!-- /routes -->";

/// A table cell's text: `|` would end the cell and `<…>` would read as HTML.
fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '|' | '<' | '>') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn row(route: &Route) -> String {
    let mut what = cell(route.summary);
    if !route.query.is_empty() {
        let names: Vec<String> = route.query.iter().map(|(n, _)| format!("`{n}`")).collect();
        what.push_str(&format!(" (query: {})", names.join(", ")));
    }
    let token = if route.upgrade {
        "header, or the `bearer.<token>` subprotocol"
    } else {
        "header"
    };
    format!(
        "| `{}` | `{}` | {what} | {token} |\n",
        route.method, route.path
    )
}

/// The generated part: the markers and, between them, the table of every route in the route
/// table's order.
pub fn routes_section() -> String {
    let mut out = format!("{BEGIN}\n\n| Method | Path | What | Token |\n|---|---|---|---|\n");
    for route in table() {
        out.push_str(&row(&route));
    }
    out.push('\n');
    out.push_str(END);
    out
}

/// `page` with its generated part (from [`BEGIN`] to [`END`], both included) replaced by
/// [`routes_section`]; `None` when the page does not hold both markers in that order.
pub fn with_routes(page: &str) -> Option<String> {
    let start = page.find(BEGIN)?;
    let end = start + page[start..].find(END)? + END.len();
    Some(format!(
        "{}{}{}",
        &page[..start],
        routes_section(),
        &page[end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_part_replaces_only_what_lies_between_the_markers() {
        let page = format!("# Title\n\nprose\n\n{BEGIN}\nstale\n{END}\n\nmore prose\n");
        let new = with_routes(&page).unwrap();
        assert!(new.starts_with("# Title\n\nprose\n\n"), "{new}");
        assert!(new.ends_with(&format!("{END}\n\nmore prose\n")), "{new}");
        assert!(!new.contains("stale"), "{new}");
        assert!(
            new.contains("| `GET` | `/openapi.json` | This description | header |"),
            "{new}"
        );
        assert_eq!(
            with_routes(&new).unwrap(),
            new,
            "generating twice changes nothing"
        );
        assert!(with_routes("no markers").is_none());
        assert!(with_routes(&format!("{END}\n{BEGIN}\n")).is_none());
    }

    #[test]
    fn a_cell_escapes_what_markdown_would_read() {
        assert_eq!(cell("a|b <token>"), "a\\|b \\<token\\>");
    }

    #[test]
    fn an_upgrade_route_says_the_subprotocol_may_carry_the_token() {
        let s = routes_section();
        assert!(
            s.contains("| `GET` | `/v1/agents/{id}/acp` | ACP over WebSocket"),
            "{s}"
        );
        let acp = s
            .lines()
            .find(|l| l.contains("`/v1/agents/{id}/acp`"))
            .unwrap();
        assert!(
            acp.ends_with("| header, or the `bearer.<token>` subprotocol |"),
            "{acp}"
        );
        assert!(
            acp.contains("(query: `account`, `provider`, `harness`, `model`)"),
            "{acp}"
        );
    }
}
