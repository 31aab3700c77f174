//! Structural checks of an object against its CRD's OpenAPI schema ([`super::crd::schema`]):
//! what the API server checks before any rule runs, with every error reported with its full
//! field path — unlike a decoder, which stops at the first error and names only the parent of a
//! missing field.
//!
//! Checked: `type` (`object`, `array`, `string`, `integer`, `number`, `boolean`), `required`,
//! `enum`, `minimum`/`maximum`, `maxItems`/`maxLength`/`maxProperties`, recursively through
//! `properties`, `items` and `additionalProperties`. A `null` counts as absent (the API server
//! prunes it from fields that are not nullable). Unknown fields are not errors (the API server
//! prunes them). Rules (`x-kubernetes-validations`) are not evaluated here: control's own
//! validation ([`super::validate`]) checks the same things.

use serde_json::Value;

/// One structural error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field, e.g. `spec.ipv4Subnet.prefix`, `spec.rules[1].network`.
    pub path: String,
    /// What is wrong, in the API server's words (`Required value`, `Unsupported value …`).
    pub error: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at {}: {}", self.path, self.error)
    }
}

/// Every structural error of `value` against `schema`, in document order.
pub fn check(schema: &Value, value: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    walk(schema, value, "", &mut out);
    out
}

fn join(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_owned()
    } else {
        format!("{base}.{name}")
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn walk(schema: &Value, value: &Value, path: &str, out: &mut Vec<FieldError>) {
    let here = if path.is_empty() {
        "the document"
    } else {
        path
    };
    let mut err = |error: String| {
        out.push(FieldError {
            path: here.to_owned(),
            error,
        })
    };
    if value.is_null() {
        return;
    }
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let got = type_name(value);
        let fits = got == want || (want == "number" && got == "integer");
        if !fits {
            err(format!(
                "Invalid value: \"{got}\": {here} must be of type {want}"
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            let list: Vec<String> = allowed.iter().map(ToString::to_string).collect();
            err(format!(
                "Unsupported value: {value}: supported values: {}",
                list.join(", ")
            ));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            if n < min {
                err(format!(
                    "Invalid value: {value}: {here} in body should be greater than or equal to {min}"
                ));
            }
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            if n > max {
                err(format!(
                    "Invalid value: {value}: {here} in body should be less than or equal to {max}"
                ));
            }
        }
    }
    let limit = |key: &str| schema.get(key).and_then(Value::as_u64);
    match value {
        Value::String(s) => {
            if let Some(max) = limit("maxLength") {
                if s.chars().count() as u64 > max {
                    err(format!("Too long: may not be more than {max} bytes"));
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = limit("maxItems") {
                if items.len() as u64 > max {
                    err(format!(
                        "Too many: {}: must have at most {max} items",
                        items.len()
                    ));
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{here}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            if let Some(max) = limit("maxProperties") {
                if map.len() as u64 > max {
                    err(format!(
                        "Too many: {}: must have at most {max} properties",
                        map.len()
                    ));
                }
            }
            for name in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if map.get(name).is_none_or(Value::is_null) {
                    out.push(FieldError {
                        path: join(path, name),
                        error: "Required value".to_owned(),
                    });
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (name, child) in map {
                match properties.and_then(|p| p.get(name)) {
                    Some(child_schema) => walk(child_schema, child, &join(path, name), out),
                    None => {
                        if let Some(a) = additional {
                            walk(a, child, &format!("{here}[{name:?}]"), out);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_error_with_its_full_path() {
        let schema = super::super::crd::schema("Network").expect("the Network schema");
        let doc = json!({
            "apiVersion": "lace-cni.io/v1alpha1", "kind": "Network",
            "metadata": {"name": "n"},
            "spec": {
                "type": "l4",
                "ipv4Subnet": {"hostLocalPrefixLength": "24"},
                "ipv6Subnet": {"prefix": "fd00::/48", "hostLocalPrefixLength": 300},
                "externalPrefixes": "192.0.2.0/24",
                "anonymous": null
            }
        });
        let errors = check(schema, &doc);
        let mut paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        paths.sort_unstable();
        assert_eq!(
            paths,
            [
                "spec.externalPrefixes",
                "spec.ipv4Subnet.hostLocalPrefixLength",
                "spec.ipv4Subnet.prefix",
                "spec.ipv6Subnet.hostLocalPrefixLength",
                "spec.type",
            ],
            "{errors:?}"
        );
        let of = |p: &str| errors.iter().find(|e| e.path == p).unwrap();
        assert_eq!(of("spec.ipv4Subnet.prefix").error, "Required value");
        assert!(
            of("spec.type").error.contains("\"l4\""),
            "{}",
            of("spec.type")
        );
        assert!(check(schema, &json!({"spec": {"type": "l3"}}))
            .iter()
            .all(|e| e.path != "spec.type"));
    }
}
