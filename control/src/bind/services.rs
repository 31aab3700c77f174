//! Services are matched continuously (seed: "Binding"), and so are Kubernetes NetworkPolicies
//! (their network is the one they are enforced in): [`ContinuousBindings`] keeps every such
//! object's current binding, for one kind, and re-evaluates exactly the objects a change can
//! affect.
//!
//! | change | re-evaluated |
//! |---|---|
//! | an object added or updated ([`ContinuousBindings::apply`]) | that object |
//! | a namespace's labels ([`ContinuousBindings::set_namespace_labels`]) | the objects in it, if the labels differ |
//! | the policies ([`ContinuousBindings::policies_changed`]) | every object, unless the policies that apply to the kind are the same versions in the same order |
//!
//! Each call returns the objects whose binding changed.

use std::collections::BTreeMap;

use super::{Binding, BindingPolicies};
use crate::api::MatchKind;

/// Why an object cannot be tracked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ObjectError {
    /// `metadata.name` or `metadata.namespace` is missing or not a string.
    #[error("{kind:?} object: metadata.{field} is missing; pass the object as the API server returns it")]
    MissingMetadata {
        /// The kind being tracked.
        kind: MatchKind,
        /// `name` or `namespace`.
        field: &'static str,
    },
}

/// An object whose binding changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingChange {
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The binding before (`None`: the object was not tracked).
    pub before: Option<Binding>,
    /// The binding now (`None`: the object was removed).
    pub after: Option<Binding>,
}

#[derive(Debug)]
struct Tracked {
    object: serde_json::Value,
    binding: Binding,
}

/// The current binding of every object of one kind.
#[derive(Debug)]
pub struct ContinuousBindings {
    kind: MatchKind,
    /// (namespace, name) → object.
    services: BTreeMap<(String, String), Tracked>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// [`BindingPolicies::fingerprint`] for the kind at the last full evaluation.
    evaluated_with: Option<Vec<u64>>,
}

impl ContinuousBindings {
    /// No objects yet; they will be bound as `kind` (`service` or `networkpolicy`).
    pub fn new(kind: MatchKind) -> Self {
        ContinuousBindings {
            kind,
            services: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            evaluated_with: None,
        }
    }

    /// The kind tracked.
    pub fn kind(&self) -> MatchKind {
        self.kind
    }

    /// The binding of object `namespace/name`, if tracked.
    pub fn binding(&self, namespace: &str, name: &str) -> Option<&Binding> {
        self.services
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|t| &t.binding)
    }

    /// Every tracked object and its binding, by namespace and name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Binding)> {
        self.services
            .iter()
            .map(|((ns, n), t)| (ns.as_str(), n.as_str(), &t.binding))
    }

    /// Adds or replaces an object and evaluates it.
    pub fn apply(
        &mut self,
        policies: &BindingPolicies,
        service: serde_json::Value,
    ) -> Result<Option<BindingChange>, ObjectError> {
        let kind = self.kind;
        let field = |f: &'static str| {
            service
                .get("metadata")
                .and_then(|m| m.get(f))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
                .ok_or(ObjectError::MissingMetadata { kind, field: f })
        };
        let key = (field("namespace")?, field("name")?);
        let labels = self.namespaces.get(&key.0).cloned().unwrap_or_default();
        let binding = policies.bind(kind, &service, &labels);
        let before = self
            .services
            .insert(
                key.clone(),
                Tracked {
                    object: service,
                    binding: binding.clone(),
                },
            )
            .map(|t| t.binding);
        if before.as_ref() == Some(&binding) {
            return Ok(None);
        }
        Ok(Some(BindingChange {
            namespace: key.0,
            name: key.1,
            before,
            after: Some(binding),
        }))
    }

    /// Stops tracking an object.
    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<BindingChange> {
        let t = self
            .services
            .remove(&(namespace.to_owned(), name.to_owned()))?;
        Some(BindingChange {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            before: Some(t.binding),
            after: None,
        })
    }

    /// Sets a namespace's labels (empty when the namespace is gone) and re-evaluates its
    /// objects if they changed.
    pub fn set_namespace_labels(
        &mut self,
        policies: &BindingPolicies,
        namespace: &str,
        labels: BTreeMap<String, String>,
    ) -> Vec<BindingChange> {
        let unchanged = self
            .namespaces
            .get(namespace)
            .map_or(labels.is_empty(), |old| *old == labels);
        if labels.is_empty() {
            self.namespaces.remove(namespace);
        } else {
            self.namespaces.insert(namespace.to_owned(), labels);
        }
        if unchanged {
            return Vec::new();
        }
        let range = (namespace.to_owned(), String::new())..;
        let keys: Vec<(String, String)> = self
            .services
            .range(range)
            .take_while(|((ns, _), _)| ns == namespace)
            .map(|(k, _)| k.clone())
            .collect();
        self.reevaluate(policies, keys)
    }

    /// Re-evaluates every object after a policy change, unless the policies that apply to the
    /// kind are unchanged since the last full evaluation.
    pub fn policies_changed(&mut self, policies: &BindingPolicies) -> Vec<BindingChange> {
        let fingerprint = policies.fingerprint(self.kind);
        if self.evaluated_with.as_deref() == Some(fingerprint) {
            return Vec::new();
        }
        self.evaluated_with = Some(fingerprint.to_vec());
        let keys: Vec<(String, String)> = self.services.keys().cloned().collect();
        self.reevaluate(policies, keys)
    }

    fn reevaluate(
        &mut self,
        policies: &BindingPolicies,
        keys: Vec<(String, String)>,
    ) -> Vec<BindingChange> {
        let empty = BTreeMap::new();
        let mut changes = Vec::new();
        for key in keys {
            let labels = self.namespaces.get(&key.0).unwrap_or(&empty);
            let Some(t) = self.services.get_mut(&key) else {
                continue;
            };
            let binding = policies.bind(self.kind, &t.object, labels);
            if binding != t.binding {
                let before = std::mem::replace(&mut t.binding, binding.clone());
                changes.push(BindingChange {
                    namespace: key.0,
                    name: key.1,
                    before: Some(before),
                    after: Some(binding),
                });
            }
        }
        changes
    }
}
