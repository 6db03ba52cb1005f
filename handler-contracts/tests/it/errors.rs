//! Bad documents get clear errors naming the field (and, for hand-written TOML, its line and
//! column), never quoting a secret.

use handler_contracts::access::{Account, Provider};
use handler_contracts::addon::Binding;
use handler_contracts::parse::{DocumentError, from_json, from_toml};
use handler_contracts::sandbox::SandboxSpec;

fn toml_err<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str) -> DocumentError {
    from_toml::<T>("doc.toml", text).unwrap_err()
}

#[test]
fn an_unknown_major_api_version_is_refused_naming_it() {
    let e = toml_err::<Account>("apiVersion = \"handler.account/v2\"\nharness = \"codex\"\n");
    assert_eq!(e.path(), "apiVersion");
    assert!(
        e.to_string()
            .contains("unknown major version v2 of handler.account"),
        "{e}"
    );
    assert_eq!(e.position(), (1, 14));

    let e = from_json::<SandboxSpec>("spec", r#"{"apiVersion":"handler.sandbox/v3"}"#).unwrap_err();
    assert_eq!(e.path(), "apiVersion");
    assert!(
        e.to_string()
            .contains("unknown major version v3 of handler.sandbox"),
        "{e}"
    );

    let e = toml_err::<Provider>("apiVersion = \"handler.account/v1\"\n");
    assert!(
        e.to_string()
            .contains("this is a handler.account document, expected handler.provider/v1"),
        "{e}"
    );
}

#[test]
fn an_unknown_key_in_a_provider_is_refused_with_line_and_column() {
    let text = "apiVersion = \"handler.provider/v1\"\n[endpoints]\nopenai-chat = \"http://127.0.0.1:3000/v1\"\n[[models]]\nid = \"m\"\ncontextWindw = 1000\n";
    let e = toml_err::<Provider>(text);
    assert_eq!(e.path(), "models[0].contextWindw");
    assert!(e.message().contains("unknown field `contextWindw`"), "{e}");
    assert_eq!(e.position(), (6, 1));
    assert!(e.to_string().contains("(line 6, column 1)"), "{e}");

    let e = toml_err::<Provider>("apiVersion = \"handler.provider/v1\"\nendpoint = {}\n");
    assert!(e.message().contains("unknown field `endpoint`"), "{e}");
    assert_eq!(e.position().0, 2);

    let e = toml_err::<Account>(
        "apiVersion = \"handler.account/v1\"\nharness = \"codex\"\nplna = \"pro\"\n",
    );
    assert!(e.message().contains("unknown field `plna`"), "{e}");
    assert_eq!(e.position(), (3, 1));
}

#[test]
fn an_unknown_protocol_is_named() {
    let e = toml_err::<Provider>(
        "apiVersion = \"handler.provider/v1\"\n[endpoints]\nopenai = \"http://x:1/v1\"\n",
    );
    assert!(e.message().contains("openai"), "{e}");
    assert_eq!(e.position().0, 3);
}

#[test]
fn a_literal_key_where_a_reference_belongs_is_refused_without_quoting_it() {
    let secret = "sk-or-v1-0123456789abcdefSECRETVALUE";
    let text = format!(
        "apiVersion = \"handler.provider/v1\"\napiKey = \"{secret}\"\n[endpoints]\nopenai-chat = \"https://openrouter.ai/api/v1\"\n[[models]]\nid = \"m\"\n"
    );
    let e = toml_err::<Provider>(&text);
    assert_eq!(e.path(), "apiKey");
    assert!(
        e.message()
            .contains("a literal secret is not allowed here (E2)"),
        "{e}"
    );
    assert_eq!(e.position().0, 2);
    assert!(
        !e.to_string().contains(secret),
        "the error quotes the secret: {e}"
    );
    assert!(
        !format!("{e:?}").contains(secret),
        "the error's Debug quotes the secret"
    );

    let e = toml_err::<Account>(
        "apiVersion = \"handler.account/v1\"\nharness = \"claude-code\"\ntoken = \"sk-ant-oat01-abcdefghijklmnopqrstuvwxyz\"\n",
    );
    assert_eq!(e.path(), "token");
    assert!(!e.to_string().contains("sk-ant-oat01"), "{e}");

    let e = toml_err::<Binding>(
        "apiVersion = \"handler.binding/v1\"\naddon = \"github\"\n[secrets]\ntoken = \"ghp_abcdefghijklmnop\"\n",
    );
    assert_eq!(e.path(), "secrets.token");
    assert!(!e.to_string().contains("ghp_abcdefghijklmnop"), "{e}");
}

#[test]
fn a_reference_has_exactly_one_known_key() {
    let e = toml_err::<Account>(
        "apiVersion = \"handler.account/v1\"\nharness = \"claude-code\"\ntoken = { secret = \"a/b\", env = \"X\" }\n",
    );
    assert!(e.message().contains("exactly one key"), "{e}");
    let e = toml_err::<Account>(
        "apiVersion = \"handler.account/v1\"\nharness = \"claude-code\"\ntoken = { vault = \"x\" }\n",
    );
    assert!(e.message().contains("unknown field `vault`"), "{e}");
}

fn spec_with_allow(entry: &str) -> String {
    format!(
        r#"{{"apiVersion":"handler.sandbox/v1","name":"n","image":"i","argv":["a"],"workdir":"/w",
            "user":{{"mode":"host-user","home":"/home/agent"}},
            "network":{{"mode":"filtered","allow":["example.com:443",{}],"enforcement":"enforce"}}}}"#,
        serde_json::to_string(entry).unwrap()
    )
}

#[test]
fn each_bad_allow_list_form_is_refused_naming_the_entry() {
    let cases = [
        ("example.com", "has no port"),
        ("example.com:", "has no port"),
        ("example.com:0", "invalid port"),
        ("example.com:70000", "invalid port"),
        (
            "api.*.example.com:443",
            "wildcard may only be the whole first label",
        ),
        (
            "*example.com:443",
            "wildcard may only be the whole first label",
        ),
        ("1.2.3.256:80", "not a valid IPv4 address"),
    ];
    for (entry, want) in cases {
        let e = from_json::<SandboxSpec>("spec", &spec_with_allow(entry)).unwrap_err();
        assert_eq!(e.path(), "network.allow[1]", "{entry}: {e}");
        assert!(e.message().contains(want), "{entry}: {e}");
        assert!(
            e.message().contains(entry.trim_end_matches(':')),
            "{entry}: the entry is named: {e}"
        );
    }
    assert!(from_json::<SandboxSpec>("spec", &spec_with_allow("*.example.com:443")).is_ok());
}

#[test]
fn a_toml_syntax_error_has_a_position() {
    let e = toml_err::<Account>("apiVersion = \"handler.account/v1\"\nharness = \n");
    assert_eq!(e.position().0, 2, "{e}");
    assert_eq!(e.path(), "");
}
