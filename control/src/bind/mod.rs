//! Binding: which network a pod, service or Kubernetes NetworkPolicy binds to, decided by the
//! `NetworkBindingPolicy` objects (seed: "Binding", "NetworkBindingPolicy fields", "Dynamic
//! network names with CEL").
//!
//! # What is guaranteed
//!
//! **Order.** Valid policies are ordered by `spec.priority`, lowest first (omitted = 0), ties
//! broken by `metadata.name` in byte-wise lexicographic order; within a policy, rules are tried
//! in list order. This gives one total order of rules, and "higher priority" below means
//! "earlier in that order". A policy applies only to the kinds in `spec.matchKind`; an omitted
//! (or empty) `matchKind` applies to every kind.
//!
//! **Selectors.** A rule's `selector` selects by `name` (exactly `metadata.name`),
//! `matchLabels`, `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`; `NotIn` holds
//! where the label is absent, as in Kubernetes) and `namespaceSelector` (over the labels of the
//! resource's namespace, which the caller passes). Every condition given must hold; an omitted
//! selector selects every resource.
//!
//! **Decision.** The first rule in the order that *decides* fixes the binding; nothing after it
//! is looked at:
//! - an allow rule with a static `network` decides when its selector matches, unless that network
//!   is shielded (below), in which case it is skipped as if it did not match;
//! - an allow rule with `celExpression`: the selector filters first; then the expression runs
//!   with the resource as `object`. `optional.none()` → the rule does not match, evaluation
//!   continues with the next rule and then the next policy. `optional.of("")` → the resource is
//!   explicitly unbound ([`Binding::ExplicitlyUnbound`]) and evaluation stops (an empty name is
//!   never shielded). `optional.of(name)` → binds `name`, unless `name` is shielded, in which case
//!   the rule is skipped as if it did not match;
//! - no rule decides → [`Binding::NoMatch`].
//!
//! **Deny.** A deny rule (`policy: deny`) names a static `network` and may select only by
//! `name` (no selector = every resource of the policy's kinds). When it selects the resource,
//! that network becomes *shielded* for the rest of the walk: every later rule in the order —
//! the following rules of the same policy and every lower-priority policy — that would bind the
//! resource to that network is skipped (as if it did not match), and the walk goes on. A deny
//! rule never decides by itself and has no effect on rules before it: a higher-priority policy
//! (or an earlier rule of the same policy) that binds the network still wins.
//!
//! **Validity.** A policy is compiled once per version (a changed `spec`; see
//! [`BindingPolicies::update`]). A policy with any error — an expression that does not compile,
//! no rules, an allow rule with neither or both of `network` and `celExpression`, a deny rule
//! with an expression, without a network or with label selectors, an unknown
//! `matchExpressions` operator — is ignored by binding entirely; its status carries `Valid=False`
//! and, for expression errors, `CELValid=False` with the compiler's message
//! ([`BindingPolicies::status`]).
//!
//! **Evaluation errors.** An expression that fails when run (a field the resource lacks, a wrong
//! overload) or returns something other than an optional string makes its rule not match for
//! that resource; the walk continues. Each such failure is returned in [`Decision::errors`] and
//! counted ([`BindingPolicies::evaluation_errors`]); binding never panics on a resource.
//!
//! **Pods vs services.** Pods are matched once, when they are created: call
//! [`BindingPolicies::bind_pod`] at creation, store the decision with the pod (its
//! `NetworkEndpoint`), and never re-evaluate it when policies or labels change. Services are
//! matched continuously: [`ContinuousBindings`] keeps each service's (and each Kubernetes
//! NetworkPolicy's) binding and re-evaluates on object, namespace-label and policy changes,
//! reporting what changed.
//!
//! # Cost
//!
//! Rules are indexed by one label (or name) they pin, from the resource's `matchLabels`/`In`,
//! its `name`, or the `namespaceSelector`'s; a bind looks only at the rules indexed under the
//! resource's own labels, name and namespace labels plus the rules that pin nothing, in order. The
//! resource is converted to a CEL value once per bind, and only if an expression runs.

mod cel;
mod celtype;
mod selector;
mod services;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::api::{
    Condition, MatchKind, NetworkBindingPolicy, NetworkBindingPolicySpec, PolicyStatus, RulePolicy,
};

pub use self::cel::{CelCompileError, CelEvalError};
pub use self::celtype::{CelType, TypeError};
pub use self::selector::{compile_requirements, Labels, Requirement, Selector, SelectorProblem};
pub use self::services::{BindingChange, ContinuousBindings, ObjectError};

/// The condition type reporting whether a policy's expressions compile.
pub const CEL_VALID: &str = "CELValid";
/// The condition type reporting whether a policy is valid as a whole (and so used).
pub const VALID: &str = "Valid";

/// What a resource binds to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Binding {
    /// Bound to the named network.
    Network(String),
    /// A `celExpression` returned `optional.of("")`: deliberately bound to no network.
    ExplicitlyUnbound,
    /// No rule decided: bound to no network.
    NoMatch,
}

impl Binding {
    /// The network, if bound.
    pub fn network(&self) -> Option<&str> {
        match self {
            Binding::Network(n) => Some(n),
            _ => None,
        }
    }
}

/// A binding and how it came about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The outcome.
    pub binding: Binding,
    /// The policy and rule index that decided; `None` for [`Binding::NoMatch`].
    pub decided_by: Option<(Arc<str>, usize)>,
    /// Expressions that failed on this resource (their rules did not match).
    pub errors: Vec<EvaluationError>,
}

/// One failed evaluation of a rule's expression on one resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NetworkBindingPolicy {policy}: spec.rules[{rule}].celExpression on {kind:?} {resource}: {error}")]
pub struct EvaluationError {
    /// The policy.
    pub policy: Arc<str>,
    /// The rule index.
    pub rule: usize,
    /// The resource's kind.
    pub kind: MatchKind,
    /// The resource, `namespace/name`.
    pub resource: String,
    /// What went wrong.
    pub error: CelEvalError,
}

/// Why a policy is invalid (and so ignored by binding).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// `metadata.name` is missing.
    #[error("NetworkBindingPolicy without metadata.name; give the policy a name")]
    MissingName,
    /// `spec.rules` is empty.
    #[error("NetworkBindingPolicy {policy}: spec.rules is empty; add at least one rule")]
    NoRules {
        /// The policy.
        policy: String,
    },
    /// An allow rule sets both `network` and `celExpression`.
    #[error("NetworkBindingPolicy {policy}: spec.rules[{rule}] sets both network and celExpression; an allow rule sets exactly one")]
    NetworkAndExpression {
        /// The policy.
        policy: String,
        /// The rule index.
        rule: usize,
    },
    /// An allow rule sets neither `network` nor `celExpression`.
    #[error("NetworkBindingPolicy {policy}: spec.rules[{rule}] sets neither network nor celExpression; an allow rule sets exactly one")]
    NoTarget {
        /// The policy.
        policy: String,
        /// The rule index.
        rule: usize,
    },
    /// A static `network` is the empty string.
    #[error("NetworkBindingPolicy {policy}: spec.rules[{rule}].network is empty; name a network (to leave resources unbound, use a celExpression returning optional.of(''))")]
    EmptyNetwork {
        /// The policy.
        policy: String,
        /// The rule index.
        rule: usize,
    },
    /// A deny rule sets `celExpression`.
    #[error("NetworkBindingPolicy {policy}: spec.rules[{rule}] is a deny rule with a celExpression; a deny rule shields a static network, set network instead")]
    DenyWithExpression {
        /// The policy.
        policy: String,
        /// The rule index.
        rule: usize,
    },
    /// A deny rule has no `network`.
    #[error("NetworkBindingPolicy {policy}: spec.rules[{rule}] is a deny rule without network; name the network it shields")]
    DenyWithoutNetwork {
        /// The policy.
        policy: String,
        /// The rule index.
        rule: usize,
    },
    /// A deny rule selects by labels or namespace.
    #[error("NetworkBindingPolicy {policy}: spec.rules[{rule}].selector of a deny rule uses labels or namespaceSelector; a deny rule selects by name only, keep only selector.name")]
    DenyByLabels {
        /// The policy.
        policy: String,
        /// The rule index.
        rule: usize,
    },
    /// A selector is malformed.
    #[error("NetworkBindingPolicy {policy}: spec.rules[{rule}].selector.{field}: {problem}")]
    Selector {
        /// The policy.
        policy: String,
        /// The rule index.
        rule: usize,
        /// The field inside the selector.
        field: String,
        /// What is wrong.
        problem: SelectorProblem,
    },
    /// An expression does not compile or cannot be valid.
    #[error("NetworkBindingPolicy {policy}: spec.rules[{rule}].celExpression is invalid: {error}")]
    Cel {
        /// The policy.
        policy: String,
        /// The rule index.
        rule: usize,
        /// The compiler's verdict.
        error: CelCompileError,
    },
}

impl PolicyError {
    fn is_cel(&self) -> bool {
        matches!(self, PolicyError::Cel { .. })
    }
}

/// What a compiled rule does once its selector matches.
#[derive(Debug)]
enum Action {
    /// Bind this network.
    Static(String),
    /// Bind what the expression yields.
    Cel(::cel::Program),
    /// Shield this network from later rules.
    Deny(String),
}

#[derive(Debug)]
struct CompiledRule {
    selector: Selector,
    action: Action,
}

/// One policy version, compiled (valid or not). Shared between [`BindingPolicies`] versions
/// while its spec is unchanged.
#[derive(Debug)]
struct CompiledPolicy {
    name: Arc<str>,
    spec: NetworkBindingPolicySpec,
    /// Unique per compilation: identifies this version in [`BindingPolicies::serials`].
    serial: u64,
    kinds: u8,
    has_cel: bool,
    rules: Vec<CompiledRule>,
    errors: Vec<PolicyError>,
    evaluation_errors: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    generation: Option<i64>,
    policy: Arc<CompiledPolicy>,
}

/// One rule in the global order.
#[derive(Debug, Clone, Copy)]
struct RuleRef {
    policy: u32,
    rule: u32,
    kinds: u8,
}

/// Label key → value → rule positions (ascending).
type LabelIndex = HashMap<String, HashMap<String, Vec<u32>>>;

const ALL_KINDS: u8 = 0b111;

fn kind_bit(kind: MatchKind) -> u8 {
    match kind {
        MatchKind::Pod => 1,
        MatchKind::Service => 2,
        MatchKind::NetworkPolicy => 4,
    }
}

fn kind_slot(kind: MatchKind) -> usize {
    match kind {
        MatchKind::Pod => 0,
        MatchKind::Service => 1,
        MatchKind::NetworkPolicy => 2,
    }
}

const KINDS: [MatchKind; 3] = [MatchKind::Pod, MatchKind::Service, MatchKind::NetworkPolicy];

/// The compiled set of binding policies: decides bindings, reports policy status.
///
/// Build it with [`BindingPolicies::new`], keep it, and call [`BindingPolicies::update`] with
/// the full list on every policy change: unchanged policies keep their compiled programs.
#[derive(Debug, Default)]
pub struct BindingPolicies {
    cel: cel::CelEnv,
    /// Every policy by name, valid or not.
    entries: BTreeMap<String, Entry>,
    /// Valid policies in binding order.
    active: Vec<Arc<CompiledPolicy>>,
    /// Every rule of `active`, in binding order.
    order: Vec<RuleRef>,
    /// Per kind: positions of rules that pin no label or name (ascending).
    unindexed: [Vec<u32>; 3],
    by_name: HashMap<String, Vec<u32>>,
    by_label: LabelIndex,
    by_namespace_label: LabelIndex,
    /// Per kind: serials of the valid policies applying to it, in order.
    serials: [Vec<u64>; 3],
    next_serial: u64,
    compilations: u64,
}

impl BindingPolicies {
    /// Compiles `policies`. Invalid ones are kept out of binding; their errors are in
    /// [`BindingPolicies::errors`] and [`BindingPolicies::status`].
    pub fn new(policies: &[NetworkBindingPolicy]) -> BindingPolicies {
        let mut set = BindingPolicies::default();
        set.update(policies);
        set
    }

    /// Replaces the policy set with `policies` (the complete list). A policy whose name and
    /// `spec` are unchanged keeps its compiled form (its expressions are not recompiled; its
    /// generation is refreshed). Returns how many policies were compiled by this call.
    pub fn update(&mut self, policies: &[NetworkBindingPolicy]) -> usize {
        let mut previous = std::mem::take(&mut self.entries);
        let mut compiled = 0;
        for p in policies {
            let name = p.metadata.name.clone().unwrap_or_default();
            let generation = p.metadata.generation;
            let policy = match previous.remove(&name) {
                Some(e) if e.policy.spec == p.spec => e.policy,
                _ => {
                    compiled += 1;
                    Arc::new(self.compile(&name, &p.spec))
                }
            };
            self.entries.insert(name, Entry { generation, policy });
        }
        self.compilations += compiled as u64;
        self.reindex();
        compiled
    }

    fn compile(&mut self, name: &str, spec: &NetworkBindingPolicySpec) -> CompiledPolicy {
        let policy = name.to_owned();
        let mut errors = Vec::new();
        if name.is_empty() {
            errors.push(PolicyError::MissingName);
        }
        if spec.rules.is_empty() {
            errors.push(PolicyError::NoRules {
                policy: policy.clone(),
            });
        }
        let mut rules = Vec::with_capacity(spec.rules.len());
        let mut has_cel = false;
        for (i, r) in spec.rules.iter().enumerate() {
            has_cel |= r.cel_expression.is_some();
            let selector = match Selector::compile(r.selector.as_ref()) {
                Ok(s) => s,
                Err(problems) => {
                    errors.extend(problems.into_iter().map(|(field, problem)| {
                        PolicyError::Selector {
                            policy: policy.clone(),
                            rule: i,
                            field,
                            problem,
                        }
                    }));
                    continue;
                }
            };
            let action = match (r.policy.unwrap_or_default(), &r.network, &r.cel_expression) {
                (RulePolicy::Deny, _, Some(_)) => Err(PolicyError::DenyWithExpression {
                    policy: policy.clone(),
                    rule: i,
                }),
                (RulePolicy::Deny, None, None) => Err(PolicyError::DenyWithoutNetwork {
                    policy: policy.clone(),
                    rule: i,
                }),
                (RulePolicy::Deny, Some(_), None) if !selector.by_name_only() => {
                    Err(PolicyError::DenyByLabels {
                        policy: policy.clone(),
                        rule: i,
                    })
                }
                (RulePolicy::Deny, Some(n), None) if n.is_empty() => {
                    Err(PolicyError::EmptyNetwork {
                        policy: policy.clone(),
                        rule: i,
                    })
                }
                (RulePolicy::Deny, Some(n), None) => Ok(Action::Deny(n.clone())),
                (RulePolicy::Allow, Some(_), Some(_)) => Err(PolicyError::NetworkAndExpression {
                    policy: policy.clone(),
                    rule: i,
                }),
                (RulePolicy::Allow, None, None) => Err(PolicyError::NoTarget {
                    policy: policy.clone(),
                    rule: i,
                }),
                (RulePolicy::Allow, Some(n), None) if n.is_empty() => {
                    Err(PolicyError::EmptyNetwork {
                        policy: policy.clone(),
                        rule: i,
                    })
                }
                (RulePolicy::Allow, Some(n), None) => Ok(Action::Static(n.clone())),
                (RulePolicy::Allow, None, Some(source)) => self
                    .cel
                    .compile(source)
                    .map(Action::Cel)
                    .map_err(|error| PolicyError::Cel {
                        policy: policy.clone(),
                        rule: i,
                        error,
                    }),
            };
            match action {
                Ok(action) => rules.push(CompiledRule { selector, action }),
                Err(e) => errors.push(e),
            }
        }
        let kinds = match &spec.match_kind {
            Some(kinds) if !kinds.is_empty() => kinds.iter().fold(0, |m, k| m | kind_bit(*k)),
            _ => ALL_KINDS,
        };
        self.next_serial += 1;
        CompiledPolicy {
            name: Arc::from(name),
            spec: spec.clone(),
            serial: self.next_serial,
            kinds,
            has_cel,
            rules,
            errors,
            evaluation_errors: AtomicU64::new(0),
        }
    }

    /// Rebuilds the order and the indexes from `entries`.
    fn reindex(&mut self) {
        let mut active: Vec<Arc<CompiledPolicy>> = self
            .entries
            .values()
            .filter(|e| e.policy.errors.is_empty())
            .map(|e| Arc::clone(&e.policy))
            .collect();
        active.sort_by(|a, b| {
            (a.spec.priority, a.name.as_bytes()).cmp(&(b.spec.priority, b.name.as_bytes()))
        });
        self.order.clear();
        self.unindexed = Default::default();
        self.by_name.clear();
        self.by_label.clear();
        self.by_namespace_label.clear();
        self.serials = Default::default();
        for (pi, p) in active.iter().enumerate() {
            for (slot, kind) in KINDS.iter().enumerate() {
                if p.kinds & kind_bit(*kind) != 0 {
                    self.serials[slot].push(p.serial);
                }
            }
            for (ri, r) in p.rules.iter().enumerate() {
                let pos = self.order.len() as u32;
                self.order.push(RuleRef {
                    policy: pi as u32,
                    rule: ri as u32,
                    kinds: p.kinds,
                });
                let s = &r.selector;
                if let Some(name) = &s.name {
                    self.by_name.entry(name.clone()).or_default().push(pos);
                } else if let Some((key, values)) = s.labels.iter().find_map(Requirement::pinned) {
                    file(&mut self.by_label, key, &values, pos);
                } else if let Some((key, values)) = s.namespace.iter().find_map(Requirement::pinned)
                {
                    file(&mut self.by_namespace_label, key, &values, pos);
                } else {
                    for (slot, kind) in KINDS.iter().enumerate() {
                        if p.kinds & kind_bit(*kind) != 0 {
                            self.unindexed[slot].push(pos);
                        }
                    }
                }
            }
        }
        self.active = active;
    }

    /// Decides the network of a pod being created. **Call once per pod, at creation**: the
    /// seed matches pods once, so the daemon stores the decision with the pod and does not
    /// re-evaluate it when policies or labels change later.
    pub fn bind_pod(
        &self,
        pod: &serde_json::Value,
        namespace_labels: &BTreeMap<String, String>,
    ) -> Decision {
        self.decide(MatchKind::Pod, pod, namespace_labels)
    }

    /// The binding of a resource of `kind` (an unstructured object with `metadata.name`,
    /// `metadata.namespace`, `metadata.labels`) in a namespace labelled `namespace_labels`.
    pub fn bind(
        &self,
        kind: MatchKind,
        object: &serde_json::Value,
        namespace_labels: &BTreeMap<String, String>,
    ) -> Binding {
        self.decide(kind, object, namespace_labels).binding
    }

    /// [`BindingPolicies::bind`], with the deciding rule and the evaluation errors met.
    pub fn decide(
        &self,
        kind: MatchKind,
        object: &serde_json::Value,
        namespace_labels: &BTreeMap<String, String>,
    ) -> Decision {
        let metadata = object.get("metadata");
        let name = metadata
            .and_then(|m| m.get("name"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let labels = metadata
            .and_then(|m| m.get("labels"))
            .and_then(serde_json::Value::as_object);

        // Candidates: rules filed under this resource's name or labels, plus unindexed ones.
        let mut candidates: Vec<u32> = Vec::new();
        if let Some(hits) = self.by_name.get(name) {
            candidates.extend_from_slice(hits);
        }
        if let Some(labels) = labels {
            for (key, value) in labels {
                if let (Some(values), Some(value)) = (self.by_label.get(key), value.as_str()) {
                    if let Some(hits) = values.get(value) {
                        candidates.extend_from_slice(hits);
                    }
                }
            }
        }
        for (key, value) in namespace_labels {
            if let Some(hits) = self.by_namespace_label.get(key).and_then(|v| v.get(value)) {
                candidates.extend_from_slice(hits);
            }
        }
        let unindexed = &self.unindexed[kind_slot(kind)];
        let walk: &[u32] = if candidates.is_empty() {
            unindexed
        } else {
            candidates.extend_from_slice(unindexed);
            candidates.sort_unstable();
            &candidates
        };
        self.walk(kind, object, walk, namespace_labels)
    }

    /// Walks the rules at positions `walk` (ascending; a superset of those that can match).
    fn walk(
        &self,
        kind: MatchKind,
        object: &serde_json::Value,
        walk: &[u32],
        namespace_labels: &BTreeMap<String, String>,
    ) -> Decision {
        let metadata = object.get("metadata");
        let name = metadata
            .and_then(|m| m.get("name"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let labels = metadata
            .and_then(|m| m.get("labels"))
            .and_then(serde_json::Value::as_object);
        let bit = kind_bit(kind);
        let mut shielded: Vec<&str> = Vec::new();
        let mut context = None;
        let mut errors = Vec::new();
        for &pos in walk {
            let at = self.order[pos as usize];
            if at.kinds & bit == 0 {
                continue;
            }
            let policy = &self.active[at.policy as usize];
            let rule = &policy.rules[at.rule as usize];
            if !rule.selector.matches(name, &labels, namespace_labels) {
                continue;
            }
            let decided = |binding| Decision {
                binding,
                decided_by: Some((Arc::clone(&policy.name), at.rule as usize)),
                errors: Vec::new(),
            };
            match &rule.action {
                Action::Deny(network) => shielded.push(network),
                Action::Static(network) => {
                    if !shielded.contains(&network.as_str()) {
                        return Decision {
                            errors,
                            ..decided(Binding::Network(network.clone()))
                        };
                    }
                }
                Action::Cel(program) => {
                    let context = context.get_or_insert_with(|| self.cel.context(object));
                    match cel::evaluate(program, context) {
                        Ok(None) => {}
                        Ok(Some(network)) if network.is_empty() => {
                            return Decision {
                                errors,
                                ..decided(Binding::ExplicitlyUnbound)
                            };
                        }
                        Ok(Some(network)) => {
                            if !shielded.contains(&network.as_str()) {
                                return Decision {
                                    errors,
                                    ..decided(Binding::Network(network))
                                };
                            }
                        }
                        Err(error) => {
                            policy.evaluation_errors.fetch_add(1, Ordering::Relaxed);
                            errors.push(EvaluationError {
                                policy: Arc::clone(&policy.name),
                                rule: at.rule as usize,
                                kind,
                                resource: resource_name(metadata, name),
                                error,
                            });
                        }
                    }
                }
            }
        }
        Decision {
            binding: Binding::NoMatch,
            decided_by: None,
            errors,
        }
    }

    /// Names of the policies used for binding, in binding order.
    pub fn active(&self) -> Vec<&str> {
        self.active.iter().map(|p| &*p.name).collect()
    }

    /// The errors of every invalid policy, by policy name.
    pub fn errors(&self) -> Vec<&PolicyError> {
        self.entries
            .values()
            .flat_map(|e| e.policy.errors.iter())
            .collect()
    }

    /// How many policy versions were compiled since this set was created (unchanged policies
    /// are not recompiled by [`BindingPolicies::update`]).
    pub fn compilations(&self) -> u64 {
        self.compilations
    }

    /// Failed expression evaluations per policy since the policy version was compiled.
    pub fn evaluation_errors(&self) -> Vec<(&str, u64)> {
        self.entries
            .iter()
            .map(|(n, e)| {
                (
                    n.as_str(),
                    e.policy.evaluation_errors.load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// The versions of the valid policies that apply to `kind`, in order: equal lists mean
    /// equal bindings for every resource of that kind.
    pub fn fingerprint(&self, kind: MatchKind) -> &[u64] {
        &self.serials[kind_slot(kind)]
    }

    /// The `CELValid` condition of policy `name`: `False` (reason `CompileError`) with the
    /// compiler's messages if an expression does not compile, else `True`.
    pub fn cel_condition(&self, name: &str) -> Option<Condition> {
        let e = self.entries.get(name)?;
        let p = &e.policy;
        let cel_errors: Vec<String> = p
            .errors
            .iter()
            .filter(|e| e.is_cel())
            .map(ToString::to_string)
            .collect();
        Some(if cel_errors.is_empty() {
            condition(
                CEL_VALID,
                true,
                if p.has_cel {
                    "Compiled"
                } else {
                    "NoExpressions"
                },
                if p.has_cel {
                    "every celExpression compiles".to_owned()
                } else {
                    "the policy has no celExpression".to_owned()
                },
                e.generation,
            )
        } else {
            condition(
                CEL_VALID,
                false,
                "CompileError",
                cel_errors.join("; "),
                e.generation,
            )
        })
    }

    /// The status control writes for policy `name`: `CELValid` and `Valid` (reason `Invalid`
    /// with every error, the policy being ignored by binding). `lastTransitionTime` is left
    /// for the writer, which knows the previous status.
    pub fn status(&self, name: &str) -> Option<PolicyStatus> {
        let e = self.entries.get(name)?;
        let cel = self.cel_condition(name)?;
        let valid = if e.policy.errors.is_empty() {
            condition(
                VALID,
                true,
                "Valid",
                "used for binding".to_owned(),
                e.generation,
            )
        } else {
            let all: Vec<String> = e.policy.errors.iter().map(ToString::to_string).collect();
            condition(
                VALID,
                false,
                "Invalid",
                format!("ignored by binding: {}", all.join("; ")),
                e.generation,
            )
        };
        Some(PolicyStatus {
            conditions: vec![cel, valid],
        })
    }

    /// The `CELValid` condition of every policy, by name.
    pub fn conditions(&self) -> Vec<(String, Condition)> {
        self.entries
            .keys()
            .filter_map(|n| Some((n.clone(), self.cel_condition(n)?)))
            .collect()
    }
}

fn file(index: &mut LabelIndex, key: &str, values: &[&str], pos: u32) {
    let by_value = index.entry(key.to_owned()).or_default();
    for v in values {
        let list = by_value.entry((*v).to_owned()).or_default();
        // `In` may repeat a value; file the rule once.
        if list.last() != Some(&pos) {
            list.push(pos);
        }
    }
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: None,
        observed_generation: generation,
    }
}

fn resource_name(metadata: Option<&serde_json::Value>, name: &str) -> String {
    match metadata
        .and_then(|m| m.get("namespace"))
        .and_then(serde_json::Value::as_str)
    {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests;
