//! The forms of names and values the validators check, as regular expressions the JSON Schemas
//! carry (`pattern`), so that a client generated from `schemas/` refuses what Handler refuses.
//! Each is anchored and written in the common subset of ECMA-262 and Rust's `regex` (no
//! look-around). The Rust validators in [`crate::validate`] remain the reference; a test runs
//! the invalid fixtures through both.

/// A secret store path (D.14): `/`-separated segments of `[A-Za-z0-9_.-]`, none empty or
/// starting with a dot.
pub const SECRET_PATH: &str = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*$";

/// An environment variable's name: a letter or `_`, then letters, digits and `_`.
pub const ENV_NAME: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";

/// A skill's name (D.17): lowercase letters and digits in groups joined by single hyphens (at
/// most 64 characters, a length the schema states apart).
pub const SKILL_NAME: &str = r"^[a-z0-9]+(-[a-z0-9]+)*$";

/// A context's name (D.19): 1–32 letters, digits, spaces, `-` and `_` (the word `any`, which
/// means every context, matches too: a list of contexts may hold it).
pub const CONTEXT_NAME: &str = r"^[\p{Alphabetic}\p{N} _-]{1,32}$";

/// A mini app's name (H.1): a lowercase DNS label of 1–30 characters starting with a letter.
pub const MINIAPP_NAME: &str = r"^[a-z][a-z0-9-]{0,29}$";

/// A mini app's secret name (H.2): uppercase letters, digits and `_`, starting with a letter, at
/// most 64 characters.
pub const MINIAPP_SECRET_NAME: &str = r"^[A-Z][A-Z0-9_]{0,63}$";

/// A semantic version (semver.org's own expression).
pub const SEMVER: &str = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-((0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$";

/// One component of a normalized relative path: not empty, not `.` or `..`, no `/`.
macro_rules! component {
    () => {
        r"([^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+)"
    };
}

/// A relative, normalized path: no leading `/`, no `.`, `..` or empty component.
pub const RELATIVE_PATH: &str = concat!("^", component!(), "(/", component!(), ")*$");

/// A normalized path in the person's home (`~/.claude/settings.json`, a folder `~/x/`).
pub const HOME_PATH: &str = concat!("^~/", component!(), "(/", component!(), ")*/?$");

/// A relative, normalized path inside at least one directory (`server/main.ts`).
pub const RELATIVE_PATH_IN_DIR: &str = concat!("^(", component!(), "/)+", component!(), "$");

/// A mini app route (H.10): `METHOD /api/…` with a method that changes something.
pub const MINIAPP_ROUTE: &str = r"^(POST|PUT|PATCH|DELETE) /api/";

/// An image repository without tag or digest (B.6): no `@`, no `:` in the last segment.
pub const IMAGE_REPOSITORY: &str = r"^([^@/]*/)*[^@/:]+$";

/// An http(s) URL's beginning (the validators also parse its authority).
pub const HTTP_URL: &str = r"^https?://[^/?#]+";

/// An https URL's beginning.
pub const HTTPS_URL: &str = r"^https://";
