//! Field ownership for server-side apply: the set of leaf fields a manager owns, the
//! `metadata.managedFields` encoding of it (`FieldsV1`), and apply's merge.
//!
//! Ownership is tracked per leaf: a scalar, a list (lists are atomic — a simplification of the
//! real server's `listType: map/set` granularity), or an empty map. In `metadata` only
//! `labels`, `annotations`, `ownerReferences` and `finalizers` are owned, as in the real
//! server.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// A field path: map keys from the root (`["spec", "type"]`).
pub(crate) type Path = Vec<String>;

/// Every owned leaf of `v`, restricted to what `in_scope` accepts.
pub(crate) fn leaves(v: &Value, in_scope: &dyn Fn(&[String]) -> bool) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    let Some(root) = v.as_object() else {
        return out;
    };
    for (k, child) in root {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                if let Some(m) = child.as_object() {
                    for key in ["labels", "annotations"] {
                        if let Some(Value::Object(entries)) = m.get(key) {
                            for e in entries.keys() {
                                out.insert(vec!["metadata".into(), key.into(), e.clone()]);
                            }
                        }
                    }
                    for key in ["ownerReferences", "finalizers"] {
                        if m.get(key).is_some_and(|x| !x.is_null()) {
                            out.insert(vec!["metadata".into(), key.into()]);
                        }
                    }
                }
            }
            _ => walk(child, vec![k.clone()], &mut out),
        }
    }
    out.retain(|p| in_scope(p));
    out
}

fn walk(v: &Value, path: Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let mut p = path.clone();
                p.push(k.clone());
                walk(child, p, out);
            }
        }
        Value::Null => {}
        _ => {
            out.insert(path);
        }
    }
}

/// The value at `path`.
pub(crate) fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.as_object()?.get(k))
}

/// Sets `path` to `value`, creating maps on the way (replacing non-maps).
pub(crate) fn set(v: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        *v = value;
        return;
    };
    let mut cur = v;
    for k in parents {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Value::Object(m) = cur else { return };
        cur = m
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !cur.is_object() {
        *cur = Value::Object(Map::new());
    }
    if let Value::Object(m) = cur {
        m.insert(last.clone(), value);
    }
}

/// Removes `path`, and the maps it leaves empty (below the top level).
pub(crate) fn remove(v: &mut Value, path: &[String]) {
    fn go(cur: &mut Value, path: &[String]) -> bool {
        let Some(m) = cur.as_object_mut() else {
            return false;
        };
        match path {
            [] => false,
            [last] => {
                m.remove(last);
                m.is_empty()
            }
            [first, rest @ ..] => {
                if let Some(child) = m.get_mut(first) {
                    if go(child, rest) {
                        m.remove(first);
                    }
                }
                m.is_empty()
            }
        }
    }
    if let Some((top, rest)) = path.split_first() {
        if rest.is_empty() {
            if let Some(m) = v.as_object_mut() {
                m.remove(top);
            }
        } else if let Some(child) = v.get_mut(top) {
            go(child, rest);
        }
    }
}

/// Whether one path is a prefix of the other (the fields overlap).
pub(crate) fn overlaps(a: &[String], b: &[String]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// `FieldsV1` of a set: `{"f:spec": {"f:type": {}}}`; a path that is also a parent gets `"."`.
pub(crate) fn encode(paths: &BTreeSet<Path>) -> Value {
    let mut root = Value::Object(Map::new());
    for p in paths {
        let mut cur = &mut root;
        for k in p {
            let Value::Object(m) = cur else { break };
            cur = m
                .entry(format!("f:{k}"))
                .or_insert_with(|| Value::Object(Map::new()));
        }
        if let Value::Object(m) = cur {
            if !m.is_empty() {
                m.insert(".".into(), Value::Object(Map::new()));
            }
        }
    }
    // A leaf that later became a parent is marked with ".".
    fn mark(v: &mut Value, paths: &BTreeSet<Path>, here: &mut Path) {
        if let Value::Object(m) = v {
            let is_leaf = paths.contains(here);
            if is_leaf && !m.is_empty() && !m.contains_key(".") {
                m.insert(".".into(), Value::Object(Map::new()));
            }
            for (k, child) in m.iter_mut() {
                if let Some(name) = k.strip_prefix("f:") {
                    here.push(name.to_owned());
                    mark(child, paths, here);
                    here.pop();
                }
            }
        }
    }
    mark(&mut root, paths, &mut Vec::new());
    root
}

/// The set a `FieldsV1` value encodes (keys other than `f:` and `.` — list element keys from
/// other writers — own their list as a whole).
pub(crate) fn decode(v: &Value) -> BTreeSet<Path> {
    fn go(v: &Value, here: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(m) = v.as_object() else { return };
        if (m.is_empty() || m.contains_key(".")) && !here.is_empty() {
            out.insert(here.clone());
        }
        let mut element_keys = false;
        for (k, child) in m {
            if let Some(name) = k.strip_prefix("f:") {
                here.push(name.to_owned());
                go(child, here, out);
                here.pop();
            } else if k != "." {
                element_keys = true;
            }
        }
        if element_keys && !here.is_empty() {
            out.insert(here.clone());
        }
    }
    let mut out = BTreeSet::new();
    go(v, &mut Vec::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leaves_encode_decode_round_trip() {
        let v = json!({
            "apiVersion": "v1", "kind": "X",
            "metadata": {"name": "n", "labels": {"a": "1"}, "ownerReferences": [{"name": "p"}]},
            "spec": {"type": "l3", "sub": {"prefix": "10.0.0.0/8"}, "list": [1, 2], "empty": {}},
        });
        let all = leaves(&v, &|_| true);
        let want: BTreeSet<Path> = [
            vec!["metadata", "labels", "a"],
            vec!["metadata", "ownerReferences"],
            vec!["spec", "type"],
            vec!["spec", "sub", "prefix"],
            vec!["spec", "list"],
            vec!["spec", "empty"],
        ]
        .into_iter()
        .map(|p| p.into_iter().map(String::from).collect())
        .collect();
        assert_eq!(all, want);
        assert_eq!(decode(&encode(&all)), all);
    }

    #[test]
    fn remove_prunes_empty_maps_below_the_top() {
        let mut v = json!({"spec": {"a": {"b": 1}, "c": 2}});
        remove(&mut v, &["spec".into(), "a".into(), "b".into()]);
        assert_eq!(v, json!({"spec": {"c": 2}}));
        remove(&mut v, &["spec".into(), "c".into()]);
        assert_eq!(v, json!({"spec": {}}));
    }
}
