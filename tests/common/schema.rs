//! A small JSON Schema checker, enough for the published schemas (the enriched event's, the
//! query API's OpenAPI document): `$ref` (a JSON pointer into the same document), `anyOf`,
//! `enum`, `type` (one or a list), `required`, `properties`, `additionalProperties`, `items`.

use serde_json::Value;

/// Checks `v` against `schema`, whose `$ref`s point into `root`; the error names the path.
pub(crate) fn check(schema: &Value, root: &Value, v: &Value, path: &str) -> Result<(), String> {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => root.pointer(r.trim_start_matches('#')).ok_or_else(|| format!("{path}: $ref {r} points nowhere"))?,
        None => schema,
    };
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let errors: Vec<String> = any.iter().filter_map(|s| check(s, root, v, path).err()).collect();
        if errors.len() == any.len() {
            return Err(format!("{path}: matches none of anyOf: {}", errors.join("; ")));
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(v) {
            return Err(format!("{path}: {v} not in {options:?}"));
        }
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let ok = types.iter().any(|t| match *t {
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            _ => false,
        });
        if !ok {
            return Err(format!("{path}: {v} is not {types:?}"));
        }
    }
    if let Some(obj) = v.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            if !obj.contains_key(r.as_str().unwrap()) {
                return Err(format!("{path}: missing {r}"));
            }
        }
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => check(s, root, val, &format!("{path}.{k}"))?,
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => return Err(format!("{path}: undeclared field {k}")),
                    Some(s @ Value::Object(_)) => check(s, root, val, &format!("{path}.{k}"))?,
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            check(items, root, x, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}
