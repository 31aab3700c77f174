//! Label and field selectors as the API server parses them (`labelSelector`, `fieldSelector`
//! query parameters).

use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    /// `k=v`, `k==v`.
    Equals(String, String),
    /// `k!=v` (also matches objects without `k`).
    NotEquals(String, String),
    /// `k in (a,b)`.
    In(String, Vec<String>),
    /// `k notin (a,b)` (also matches objects without `k`).
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    DoesNotExist(String),
}

/// A parsed `labelSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<LabelRequirement>);

/// A parsed `fieldSelector`: `(field, value, equal)` terms, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<(String, String, bool)>);

/// Why a selector was refused (the message of a `400 BadRequest`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SelectorError {
    /// The label selector does not parse.
    #[error("unable to parse requirement: {0}")]
    Label(String),
    /// The field selector does not parse.
    #[error("invalid selector: '{0}'; can't understand '{1}'")]
    Field(String, String),
    /// The field is not one the resource can be selected by.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn set_values(term: &str, rest: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Label(format!("{term}: found '{rest}', expected: '('")))?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
    if values.iter().any(|v| !valid_value(v)) {
        return Err(SelectorError::Label(format!("{term}: invalid label value")));
    }
    Ok(values)
}

impl LabelSelector {
    pub(crate) fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in split_top(s) {
            let t = term.trim();
            let bad = || SelectorError::Label(format!("{t}: invalid label key or value"));
            let req = if let Some(k) = t.strip_prefix('!') {
                LabelRequirement::DoesNotExist(k.trim().to_owned())
            } else if let Some((k, v)) = t.split_once("!=") {
                LabelRequirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once("==") {
                LabelRequirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = t.split_once('=') {
                LabelRequirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = t.split_once(" notin ") {
                LabelRequirement::NotIn(k.trim().into(), set_values(t, rest)?)
            } else if let Some((k, rest)) = t.split_once(" in ") {
                LabelRequirement::In(k.trim().into(), set_values(t, rest)?)
            } else {
                LabelRequirement::Exists(t.to_owned())
            };
            let (key, value) = match &req {
                LabelRequirement::Equals(k, v) | LabelRequirement::NotEquals(k, v) => (k, Some(v)),
                LabelRequirement::In(k, _)
                | LabelRequirement::NotIn(k, _)
                | LabelRequirement::Exists(k)
                | LabelRequirement::DoesNotExist(k) => (k, None),
            };
            if !valid_key(key) || value.is_some_and(|v| !valid_value(v)) {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelRequirement::Equals(k, v) => get(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelRequirement::Exists(k) => get(k).is_some(),
            LabelRequirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// The fields a kind can be selected by, beyond `metadata.name` and `metadata.namespace`
/// (the API server's field label conversion functions).
fn selectable(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Namespace" => &["status.phase"],
        "Node" => &["spec.unschedulable"],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "Secret" => &["type"],
        _ => &[],
    }
}

impl FieldSelector {
    pub(crate) fn parse(s: &str, kind: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(terms));
        }
        for term in s.split(',') {
            let t = term.trim();
            let (field, value, equal) = if let Some((f, v)) = t.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = t.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = t.split_once('=') {
                (f, v, true)
            } else {
                return Err(SelectorError::Field(s.to_owned(), t.to_owned()));
            };
            let field = field.trim();
            if !matches!(field, "metadata.name" | "metadata.namespace")
                && !selectable(kind).contains(&field)
            {
                return Err(SelectorError::UnsupportedField(field.to_owned()));
            }
            terms.push((field.to_owned(), value.trim().to_owned(), equal));
        }
        Ok(Self(terms))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, want, equal)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let have = match object.pointer(&pointer) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            };
            // An unset boolean selects as "false" (spec.hostNetwork, spec.unschedulable).
            let have = if have.is_empty()
                && matches!(field.as_str(), "spec.hostNetwork" | "spec.unschedulable")
            {
                "false".to_owned()
            } else {
                have
            };
            (have == *want) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_grammar() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web)"));
        assert!(m("!missing"));
        assert!(m("missing!=x"));
        assert!(!m("missing"));
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("a=b c").is_err());
    }

    #[test]
    fn field_selector_fields_per_kind() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}});
        let f = FieldSelector::parse("spec.nodeName=n1,metadata.namespace!=kube-system", "Pod")
            .unwrap();
        assert!(f.matches(&pod));
        assert!(!FieldSelector::parse("spec.nodeName=n2", "Pod")
            .unwrap()
            .matches(&pod));
        assert_eq!(
            FieldSelector::parse("spec.nodeName=n1", "Service"),
            Err(SelectorError::UnsupportedField("spec.nodeName".into()))
        );
        assert!(FieldSelector::parse("spec.hostNetwork=false", "Pod")
            .unwrap()
            .matches(&pod));
    }
}
