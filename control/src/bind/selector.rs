//! Compiled rule selectors: by `name` (exact), `matchLabels`, `matchExpressions` (`In`, `NotIn`,
//! `Exists`, `DoesNotExist`, with Kubernetes' meaning: `NotIn` holds where the label is absent),
//! and a nested `namespaceSelector` over the resource's namespace labels. Every condition given
//! must hold; an empty selector selects everything.

use std::collections::BTreeMap;

use crate::api::{LabelSelector, LabelSelectorRequirement, ResourceSelector};

/// Labels a requirement is checked against.
pub trait Labels {
    /// The value of label `key`, if set.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// `metadata.labels` of an unstructured object (non-string values are ignored).
impl Labels for Option<&serde_json::Map<String, serde_json::Value>> {
    fn label(&self, key: &str) -> Option<&str> {
        self.and_then(|m| m.get(key))
            .and_then(serde_json::Value::as_str)
    }
}

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Requirement {
    /// `matchLabels` entry.
    Equals(String, String),
    /// `In`: set, and one of the values.
    In(String, Vec<String>),
    /// `NotIn`: absent, or none of the values.
    NotIn(String, Vec<String>),
    /// `Exists`.
    Exists(String),
    /// `DoesNotExist`.
    DoesNotExist(String),
}

impl Requirement {
    /// Whether `labels` satisfy the requirement.
    pub fn holds(&self, labels: &impl Labels) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.label(k) == Some(v.as_str()),
            Requirement::In(k, vs) => labels.label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => labels.label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Requirement::Exists(k) => labels.label(k).is_some(),
            Requirement::DoesNotExist(k) => labels.label(k).is_none(),
        }
    }

    /// The label key and the values one of which the label must have, if the requirement
    /// pins it (`Equals`, `In`): what the binding index files the rule under.
    pub fn pinned(&self) -> Option<(&str, Vec<&str>)> {
        match self {
            Requirement::Equals(k, v) => Some((k, vec![v.as_str()])),
            Requirement::In(k, vs) => Some((k, vs.iter().map(String::as_str).collect())),
            _ => None,
        }
    }
}

/// Why a selector is malformed; the caller adds the policy and the field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectorProblem {
    /// The operator is not one of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    UnknownOperator {
        /// The label key.
        key: String,
        /// The operator as written.
        operator: String,
    },
    /// `In`/`NotIn` without values.
    MissingValues {
        /// The label key.
        key: String,
        /// The operator.
        operator: String,
    },
    /// `Exists`/`DoesNotExist` with values.
    UnexpectedValues {
        /// The label key.
        key: String,
        /// The operator.
        operator: String,
    },
}

impl std::fmt::Display for SelectorProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelectorProblem::UnknownOperator { key, operator } => write!(
                f,
                "operator {operator:?} for key {key:?} is unknown; use In, NotIn, Exists or DoesNotExist"
            ),
            SelectorProblem::MissingValues { key, operator } => write!(
                f,
                "operator {operator} for key {key:?} needs at least one value; list them in values"
            ),
            SelectorProblem::UnexpectedValues { key, operator } => write!(
                f,
                "operator {operator} for key {key:?} takes no values; remove values"
            ),
        }
    }
}

/// A compiled [`ResourceSelector`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// `name`: the resource's `metadata.name`, exactly.
    pub name: Option<String>,
    /// `matchLabels` then `matchExpressions`, over the resource's labels.
    pub labels: Vec<Requirement>,
    /// `namespaceSelector`, over the namespace's labels.
    pub namespace: Vec<Requirement>,
}

impl Selector {
    /// Compiles `selector` (`None` selects everything). Problems come with the field path
    /// relative to the selector (`matchExpressions[1]`, `namespaceSelector.matchExpressions[0]`).
    pub fn compile(
        selector: Option<&ResourceSelector>,
    ) -> Result<Selector, Vec<(String, SelectorProblem)>> {
        let Some(s) = selector else {
            return Ok(Selector::default());
        };
        let mut problems = Vec::new();
        let labels = requirements(&s.match_labels, &s.match_expressions, "", &mut problems);
        let namespace = match &s.namespace_selector {
            Some(LabelSelector {
                match_labels,
                match_expressions,
            }) => requirements(
                match_labels,
                match_expressions,
                "namespaceSelector.",
                &mut problems,
            ),
            None => Vec::new(),
        };
        if problems.is_empty() {
            Ok(Selector {
                name: s.name.clone(),
                labels,
                namespace,
            })
        } else {
            Err(problems)
        }
    }

    /// Whether the resource (`name`, `labels`) in a namespace with `namespace_labels` is
    /// selected.
    pub fn matches(
        &self,
        name: &str,
        labels: &impl Labels,
        namespace_labels: &impl Labels,
    ) -> bool {
        self.name.as_deref().is_none_or(|n| n == name)
            && self.labels.iter().all(|r| r.holds(labels))
            && self.namespace.iter().all(|r| r.holds(namespace_labels))
    }

    /// Whether only `name` is set (what a deny rule may use).
    pub fn by_name_only(&self) -> bool {
        self.labels.is_empty() && self.namespace.is_empty()
    }
}

fn requirements(
    match_labels: &BTreeMap<String, String>,
    match_expressions: &[LabelSelectorRequirement],
    prefix: &str,
    problems: &mut Vec<(String, SelectorProblem)>,
) -> Vec<Requirement> {
    compile_requirements(
        match_labels,
        match_expressions
            .iter()
            .map(|e| (e.key.as_str(), e.operator.as_str(), e.values.as_slice())),
        prefix,
        problems,
    )
}

/// Compiles a label selector's `matchLabels` and `matchExpressions` (each as key, operator,
/// values) into requirements; problems get the field path `{prefix}matchExpressions[i]`. The
/// one compiler of label selectors: binding rules and Kubernetes NetworkPolicy selectors use it.
pub fn compile_requirements<'a>(
    match_labels: &BTreeMap<String, String>,
    match_expressions: impl IntoIterator<Item = (&'a str, &'a str, &'a [String])>,
    prefix: &str,
    problems: &mut Vec<(String, SelectorProblem)>,
) -> Vec<Requirement> {
    let mut out: Vec<Requirement> = match_labels
        .iter()
        .map(|(k, v)| Requirement::Equals(k.clone(), v.clone()))
        .collect();
    for (i, (key, operator, values)) in match_expressions.into_iter().enumerate() {
        let needs_values = matches!(operator, "In" | "NotIn");
        let (key, operator_s) = (key.to_owned(), operator.to_owned());
        let problem = match operator {
            "In" | "NotIn" | "Exists" | "DoesNotExist" if needs_values && values.is_empty() => {
                Some(SelectorProblem::MissingValues {
                    key,
                    operator: operator_s,
                })
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" if !needs_values && !values.is_empty() => {
                Some(SelectorProblem::UnexpectedValues {
                    key,
                    operator: operator_s,
                })
            }
            "In" => {
                out.push(Requirement::In(key, values.to_vec()));
                None
            }
            "NotIn" => {
                out.push(Requirement::NotIn(key, values.to_vec()));
                None
            }
            "Exists" => {
                out.push(Requirement::Exists(key));
                None
            }
            "DoesNotExist" => {
                out.push(Requirement::DoesNotExist(key));
                None
            }
            _ => Some(SelectorProblem::UnknownOperator {
                key,
                operator: operator_s,
            }),
        };
        if let Some(p) = problem {
            problems.push((format!("{prefix}matchExpressions[{i}]"), p));
        }
    }
    out
}
