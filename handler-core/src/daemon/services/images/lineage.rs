//! Pure: whether an image was built FROM another (D.4's "every harness image FROM it"), read from
//! their layers as the runtime's `image inspect` gives them (`layers`, bottom first).

use serde_json::Value;

/// The layer ids of an `image inspect` answer, bottom first; empty when it names none.
pub fn layers(inspect: &Value) -> Vec<&str> {
    inspect["layers"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// True when `image` is `base` or was built FROM it: `base`'s layers, none of them missing, are
/// the bottom of `image`'s. An image or base without layers is never FROM anything.
pub fn built_from(image: &Value, base: &Value) -> bool {
    let (image, base) = (layers(image), layers(base));
    !base.is_empty() && image.starts_with(&base)
}

#[cfg(test)]
mod tests {
    use super::built_from;
    use serde_json::json;

    #[test]
    fn an_image_is_from_a_base_whose_layers_are_its_bottom_ones() {
        let tb = json!({"layers": ["a", "b"]});
        assert!(built_from(&json!({"layers": ["a", "b", "c"]}), &tb));
        assert!(built_from(&tb, &tb), "the base itself");
        assert!(!built_from(&json!({"layers": ["a", "x", "c"]}), &tb));
        assert!(!built_from(&json!({"layers": ["a"]}), &tb), "shorter");
        assert!(!built_from(&json!({"layers": ["b", "a", "c"]}), &tb));
        assert!(!built_from(&json!({"layers": ["a", "b"]}), &json!({})));
        assert!(!built_from(&json!({}), &tb));
        assert!(!built_from(&json!({"layers": []}), &json!({"layers": []})));
    }
}
