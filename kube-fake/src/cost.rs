//! The API server's static cost check of a CRD's validation rules: what makes a real
//! kube-apiserver refuse a CustomResourceDefinition with "estimated rule cost exceeds budget".
//!
//! When a CRD is written, the API server estimates, for every `x-kubernetes-validations` rule,
//! the most one evaluation can cost (CEL's static cost model, with Kubernetes' library costs and
//! sizes taken from the schema), multiplies it by how many times the rule can run for one object
//! (the product of `maxItems`/`maxProperties` of the lists and maps above it), and refuses the CRD
//! when one rule's product exceeds [`RULE_COST_LIMIT`] or all rules' sum exceeds
//! [`CRD_COST_LIMIT`]. A string, list or map without a bound is sized by what fits in the
//! largest request (3 MiB), which is what puts an innocent `self.matches(…)` on the items of an
//! unbounded list far over budget.
//!
//! The model here follows the server's (`apiextensions-apiserver`'s compilation and validation,
//! `cel-go`'s checker cost estimator, `apiserver/pkg/cel/library`'s costs) for what lace's rules
//! and ordinary CRD rules use: identifiers and selections, `has()`, logic, comparisons, `in`,
//! `size`, string functions (`matches`, `contains`, `startsWith`, `endsWith`, `indexOf`,
//! `substring`, …), the IP and CIDR library, the macros (`all`, `exists`, `exists_one`, `map`,
//! `filter`) and list, map and message literals. A function it does not know costs one call plus
//! a traversal of each string or list argument, at least what the server charges for the
//! functions it leaves at a fixed cost. Like the server, a map's keys have no size of their own
//! (the server types them as a bare string whose maximum size is 0).

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value;

/// `StaticEstimatedCostLimit`: one rule's estimated cost times the number of times it can run.
pub const RULE_COST_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`: the sum of that over every rule of a CRD's schema.
pub const CRD_COST_LIMIT: u64 = 100_000_000;
/// `MaxRequestSizeBytes`: what sizes an unbounded string, list or map.
const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;

/// `StringTraversalCostFactor`: a string's length times this is the cost of reading it once.
const STRING_TRAVERSAL: f64 = 0.1;
/// `RegexStringLengthCostFactor`: a pattern's length times this is its cost per unit of input.
const REGEX_LENGTH: f64 = 0.25;
/// The base costs of creating a list, a map and a message.
const LIST_CREATE: u64 = 10;
const MAP_CREATE: u64 = 30;
const STRUCT_CREATE: u64 = 40;

/// One rule's estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCost {
    /// Where the rule is, as the API server names it
    /// (`spec.validation.openAPIV3Schema.properties[spec]….x-kubernetes-validations[0].rule`).
    pub field: String,
    /// The rule.
    pub rule: String,
    /// The most one evaluation can cost.
    pub cost: u64,
    /// How many times it can run for one object.
    pub cardinality: u64,
}

impl RuleCost {
    /// What the API server holds against [`RULE_COST_LIMIT`].
    pub fn total(&self) -> u64 {
        self.cost.saturating_mul(self.cardinality)
    }
}

/// A rule that cannot be parsed (the schema check reports those; it has no estimate).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Unparsable {
    /// Where the rule is.
    pub field: String,
    /// The parser's message.
    pub message: String,
}

/// Every rule of `schema` (an `openAPIV3Schema`) with its estimate, in schema order.
pub fn rule_costs(schema: &Value) -> Result<Vec<RuleCost>, Unparsable> {
    let mut out = Vec::new();
    walk(schema, "spec.validation.openAPIV3Schema", Some(1), &mut out)?;
    Ok(out)
}

/// What the API server answers a CRD with this schema: (field, message) of each rule over
/// [`RULE_COST_LIMIT`], then the whole schema's if the sum is over [`CRD_COST_LIMIT`]. Empty:
/// the CRD is accepted.
pub fn refusals(schema: &Value) -> Result<Vec<(String, String)>, Unparsable> {
    let costs = rule_costs(schema)?;
    let mut out: Vec<(String, String)> = costs
        .iter()
        .filter(|c| c.total() > RULE_COST_LIMIT)
        .map(|c| {
            (
                c.field.clone(),
                over_budget("estimated rule cost", c.total(), RULE_COST_LIMIT),
            )
        })
        .collect();
    let sum = costs.iter().fold(0u64, |s, c| s.saturating_add(c.total()));
    if sum > CRD_COST_LIMIT {
        out.push((
            "spec.validation.openAPIV3Schema".to_owned(),
            over_budget(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                sum,
                CRD_COST_LIMIT,
            ),
        ));
    }
    Ok(out)
}

/// The API server's wording, factor included.
fn over_budget(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "Forbidden: {what} exceeds budget by factor of {factor} (try simplifying the rule, or \
         adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

// ---- the schema ------------------------------------------------------------------------------

/// Walks the schema below `node` (at `path`), which can occur `cardinality` times in one object
/// (`None`: below a list or map without a bound).
fn walk(
    node: &Value,
    path: &str,
    cardinality: Option<u64>,
    out: &mut Vec<RuleCost>,
) -> Result<(), Unparsable> {
    if let Some(rules) = node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for (i, r) in rules.iter().enumerate() {
            let rule = r.get("rule").and_then(Value::as_str).unwrap_or_default();
            let field = format!("{path}.x-kubernetes-validations[{i}].rule");
            let cost = estimate(rule, node).map_err(|message| Unparsable {
                field: field.clone(),
                message,
            })?;
            // Below an unbounded list or map, the server counts how many copies of this node
            // fit in the largest request.
            let cardinality =
                cardinality.unwrap_or_else(|| MAX_REQUEST_BYTES / (min_size(node) + 1));
            out.push(RuleCost {
                field,
                rule: rule.to_owned(),
                cost,
                cardinality,
            });
        }
    }
    if let Some(items) = node.get("items") {
        let n = bound(node, "maxItems");
        walk(
            items,
            &format!("{path}.items"),
            cardinality.zip(n).map(|(c, n)| c.saturating_mul(n)),
            out,
        )?;
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            walk(
                child,
                &format!("{path}.properties[{name}]"),
                cardinality,
                out,
            )?;
        }
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        let n = bound(node, "maxProperties");
        walk(
            values,
            &format!("{path}.additionalProperties"),
            cardinality.zip(n).map(|(c, n)| c.saturating_mul(n)),
            out,
        )?;
    }
    Ok(())
}

fn bound(node: &Value, key: &str) -> Option<u64> {
    node.get(key).and_then(Value::as_u64)
}

/// The fewest bytes a value of this schema takes in JSON (`MinSerializedSize`).
fn min_size(node: &Value) -> u64 {
    match node.get("type").and_then(Value::as_str) {
        Some("string") => 2,
        Some("boolean") => 4,
        Some("integer" | "number") => 1,
        Some("array") => 2,
        _ => {
            // `{}` plus every required property: `"name":value,`.
            let props = node.get("properties");
            let required = node
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str);
            required.fold(2, |size, name| {
                let child = props.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                size + name.len() as u64 + 4 + min_size(child)
            })
        }
    }
}

/// The most elements (characters, items, entries) a value of this schema can have, as the API
/// server sizes it (a scalar's is 1).
fn schema_size(node: &Value) -> u64 {
    match node.get("type").and_then(Value::as_str) {
        Some("string") => bound(node, "maxLength").unwrap_or_else(|| {
            if let Some(e) = node.get("enum").and_then(Value::as_array) {
                e.iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.chars().count() as u64)
                    .max()
                    .unwrap_or(0)
            } else {
                match node.get("format").and_then(Value::as_str) {
                    Some("date-time") => 35,
                    Some("date") => 10,
                    Some("duration") => 32,
                    _ => MAX_REQUEST_BYTES - 2,
                }
            }
        }),
        Some("array") => bound(node, "maxItems").unwrap_or_else(|| {
            let items = node.get("items").unwrap_or(&Value::Null);
            (MAX_REQUEST_BYTES - 2) / (min_size(items) + 1)
        }),
        Some("object")
            if node
                .get("additionalProperties")
                .is_some_and(Value::is_object) =>
        {
            bound(node, "maxProperties").unwrap_or_else(|| {
                let values = &node["additionalProperties"];
                // `"":value,` per entry.
                (MAX_REQUEST_BYTES - 2) / (min_size(values) + 4)
            })
        }
        Some("integer" | "number" | "boolean") => 1,
        // An object with properties: the server's type for it has no maximum size (0), so
        // comparing two costs nothing beyond reading them.
        _ => 0,
    }
}

// ---- the rule --------------------------------------------------------------------------------

/// What the estimator knows of an expression's value.
#[derive(Debug, Clone)]
enum Ty<'s> {
    /// A value of this schema node.
    Schema(&'s Value),
    /// A string of at most this many characters.
    Str(u64),
    /// A list of at most this many elements of this type.
    List(u64, Box<Ty<'s>>),
    /// A map key: a string the API server gives no size (its `StringType`, maximum 0).
    Key,
    /// A value of size 1: a number, a boolean, an IP, a CIDR.
    Scalar,
    /// Anything else (its size unknown, the most there is).
    Unknown,
}

impl<'s> Ty<'s> {
    /// CEL's `size()` of the value at most.
    fn size(&self) -> u64 {
        match self {
            Ty::Schema(n) => schema_size(n),
            Ty::Str(n) | Ty::List(n, _) => *n,
            Ty::Key => 0,
            Ty::Scalar => 1,
            Ty::Unknown => u64::MAX,
        }
    }

    fn is_schema_type(&self, t: &str) -> bool {
        matches!(self, Ty::Schema(n) if n.get("type").and_then(Value::as_str) == Some(t))
    }

    /// A string or a list: what function costs scale with.
    fn is_sequence(&self) -> bool {
        matches!(self, Ty::Str(_) | Ty::List(..) | Ty::Key)
            || self.is_schema_type("string")
            || self.is_schema_type("array")
    }

    /// The type of an element (a list's item, a map's value).
    fn element(&self) -> Ty<'s> {
        match self {
            Ty::Schema(n) => {
                if let Some(items) = n.get("items") {
                    Ty::Schema(items)
                } else if let Some(v) = n.get("additionalProperties").filter(|v| v.is_object()) {
                    Ty::Schema(v)
                } else {
                    Ty::Unknown
                }
            }
            Ty::List(_, e) => (**e).clone(),
            _ => Ty::Unknown,
        }
    }

    /// What a comprehension's single variable ranges over: a list's items, a map's keys.
    fn iterated(&self) -> Ty<'s> {
        match self {
            Ty::Schema(n) if n.get("additionalProperties").is_some_and(Value::is_object) => Ty::Key,
            _ => self.element(),
        }
    }

    /// A field of an object (or a map's value).
    fn field(&self, name: &str) -> Ty<'s> {
        match self {
            Ty::Schema(n) => match n.get("properties").and_then(|p| p.get(name)) {
                Some(child) => Ty::Schema(child),
                None => self.element(),
            },
            _ => Ty::Unknown,
        }
    }

    /// The wider of two (a conditional's result).
    fn union(self, other: Ty<'s>) -> Ty<'s> {
        if self.size() >= other.size() {
            self
        } else {
            other
        }
    }
}

fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

/// `ceil(x × factor)`, saturating.
fn factor(x: u64, f: f64) -> u64 {
    let v = (x as f64 * f).ceil();
    if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v as u64
    }
}

/// The most one evaluation of `rule` on a value of `node` can cost.
fn estimate(rule: &str, node: &Value) -> Result<u64, String> {
    let ast = cel::parser::Parser::new()
        .parse(rule)
        .map_err(|e| e.to_string())?;
    let mut est = Estimator {
        scope: vec![
            ("self".to_owned(), Ty::Schema(node)),
            ("oldSelf".to_owned(), Ty::Schema(node)),
        ],
    };
    Ok(est.cost(&ast).0)
}

struct Estimator<'s> {
    /// Variables in scope, innermost last.
    scope: Vec<(String, Ty<'s>)>,
}

impl<'s> Estimator<'s> {
    fn lookup(&self, name: &str) -> Option<Ty<'s>> {
        self.scope
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t.clone())
    }

    fn cost(&mut self, e: &IdedExpr) -> (u64, Ty<'s>) {
        match &e.expr {
            Expr::Literal(l) => (
                0,
                match l {
                    LiteralValue::String(s) => Ty::Str(s.chars().count() as u64),
                    LiteralValue::Bytes(b) => Ty::Str(b.len() as u64),
                    _ => Ty::Scalar,
                },
            ),
            Expr::Ident(name) => (1, self.lookup(name).unwrap_or(Ty::Unknown)),
            Expr::Select(sel) => {
                let (c, t) = self.cost(&sel.operand);
                if sel.test {
                    // has(): the presence test costs 1 on top of its operand.
                    (add(c, 1), Ty::Scalar)
                } else {
                    // Selecting from an object or a map costs 1.
                    (add(c, 1), t.field(&sel.field))
                }
            }
            Expr::List(list) => {
                let mut sum = LIST_CREATE;
                let mut elem: Option<Ty<'s>> = None;
                for x in &list.elements {
                    let (c, t) = self.cost(x);
                    sum = add(sum, c);
                    elem = Some(match elem {
                        Some(e) => e.union(t),
                        None => t,
                    });
                }
                (
                    sum,
                    Ty::List(
                        list.elements.len() as u64,
                        Box::new(elem.unwrap_or(Ty::Scalar)),
                    ),
                )
            }
            Expr::Map(map) => {
                let mut sum = MAP_CREATE;
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(m) = &entry.expr {
                        sum = add(sum, self.cost(&m.key).0);
                        sum = add(sum, self.cost(&m.value).0);
                    }
                }
                (sum, Ty::Unknown)
            }
            Expr::Struct(s) => {
                let mut sum = STRUCT_CREATE;
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        sum = add(sum, self.cost(&f.value).0);
                    }
                }
                (sum, Ty::Unknown)
            }
            Expr::Comprehension(comp) => {
                let (range_cost, range) = self.cost(&comp.iter_range);
                let (accu_cost, accu) = self.cost(&comp.accu_init);
                let accu_is_list = matches!(comp.accu_init.expr, Expr::List(_));
                self.scope.push((comp.accu_var.clone(), accu.clone()));
                let pushed = match &comp.iter_var2 {
                    Some(second) => {
                        let key = match range {
                            Ty::List(..) => Ty::Scalar,
                            _ if range.is_schema_type("array") => Ty::Scalar,
                            _ => Ty::Key,
                        };
                        self.scope.push((comp.iter_var.clone(), key));
                        self.scope.push((second.clone(), range.element()));
                        2
                    }
                    None => {
                        self.scope.push((comp.iter_var.clone(), range.iterated()));
                        1
                    }
                };
                let (cond, _) = self.cost(&comp.loop_cond);
                let (step, _) = self.cost(&comp.loop_step);
                self.scope.truncate(self.scope.len() - pushed);
                let (result_cost, result) = self.cost(&comp.result);
                self.scope.pop();
                let n = range.size();
                let total = add(
                    add(add(range_cost, accu_cost), result_cost),
                    n.saturating_mul(add(cond, step)),
                );
                let ty = if accu_is_list {
                    Ty::List(n, Box::new(range.iterated()))
                } else {
                    result
                };
                (total, ty)
            }
            Expr::Call(call) if call.func_name == "_?_:_" && call.args.len() == 3 => {
                // The condition, then the dearer branch.
                let (c, _) = self.cost(&call.args[0]);
                let (t, tt) = self.cost(&call.args[1]);
                let (f, ft) = self.cost(&call.args[2]);
                (add(c, t.max(f)), tt.union(ft))
            }
            Expr::Call(call) => {
                let target = call.target.as_ref().map(|t| self.cost(t));
                let args: Vec<(u64, Ty<'s>)> = call.args.iter().map(|a| self.cost(a)).collect();
                let arg_sum = args.iter().fold(0u64, |s, (c, _)| add(s, *c));
                let target_cost = target.as_ref().map_or(0, |(c, _)| *c);
                let (own, ty) = self.call(&call.func_name, target.map(|(_, t)| t), &args);
                (add(add(own, arg_sum), target_cost), ty)
            }
            Expr::Unspecified => (0, Ty::Unknown),
        }
    }

    /// A call's own cost (without its target's and arguments') and its result.
    fn call(&self, name: &str, target: Option<Ty<'s>>, args: &[(u64, Ty<'s>)]) -> (u64, Ty<'s>) {
        let arg = |i: usize| args.get(i).map_or(Ty::Unknown, |(_, t)| t.clone());
        // The string a function works on: its target, or its first argument in the global form.
        let subject = || target.clone().unwrap_or_else(|| arg(0));
        match (name, target.is_some()) {
            ("_&&_" | "_||_", _) => (0, Ty::Scalar),
            ("_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_", _) => {
                let smaller = arg(0).size().min(arg(1).size());
                let smaller = match (&arg(0), &arg(1)) {
                    // Equality of IPs, CIDRs and other scalars costs 1.
                    (Ty::Scalar, _) | (_, Ty::Scalar) => 1,
                    _ => smaller,
                };
                (factor(smaller, STRING_TRAVERSAL), Ty::Scalar)
            }
            ("@in", _) => (arg(1).size(), Ty::Scalar),
            ("_+_", _) => match (arg(0), arg(1)) {
                (Ty::List(a, e), b) => (1, Ty::List(add(a, b.size()), e)),
                (a, b) if a.is_schema_type("array") => {
                    (1, Ty::List(add(a.size(), b.size()), Box::new(a.element())))
                }
                (a, b) if a.is_sequence() => {
                    let n = add(a.size(), b.size());
                    (factor(n, STRING_TRAVERSAL), Ty::Str(n))
                }
                _ => (1, Ty::Scalar),
            },
            ("_[_]", _) => (1, arg(0).element()),
            ("size", _) => (1, Ty::Scalar),
            ("matches", _) => {
                let (text, pattern) = match &target {
                    Some(t) => (t.clone(), arg(0)),
                    None => (arg(0), arg(1)),
                };
                let text = factor(add(text.size(), 1), STRING_TRAVERSAL);
                let pattern = factor(pattern.size(), REGEX_LENGTH);
                (text.saturating_mul(pattern), Ty::Scalar)
            }
            ("contains", true) => {
                let s = factor(subject().size(), STRING_TRAVERSAL);
                let sub = factor(arg(0).size(), STRING_TRAVERSAL);
                (s.saturating_mul(sub), Ty::Scalar)
            }
            ("startsWith" | "endsWith", true) => {
                (factor(arg(0).size(), STRING_TRAVERSAL), Ty::Scalar)
            }
            ("indexOf" | "lastIndexOf", true) => {
                let s = subject();
                if s.is_schema_type("array") || matches!(s, Ty::List(..)) {
                    let el = s.element();
                    let per = if el.is_sequence() {
                        add(1, factor(el.size(), STRING_TRAVERSAL))
                    } else {
                        1
                    };
                    (s.size().saturating_mul(per), Ty::Scalar)
                } else {
                    (factor(s.size(), STRING_TRAVERSAL), Ty::Scalar)
                }
            }
            ("substring" | "lowerAscii" | "upperAscii" | "trim", true) => {
                let n = subject().size();
                (factor(n, STRING_TRAVERSAL), Ty::Str(n))
            }
            ("replace" | "split", true) => {
                let n = subject().size();
                (factor(n, 2.0 * STRING_TRAVERSAL), Ty::Unknown)
            }
            // Parsing an IP or a CIDR is a traversal of its string; `cidr(…).ip()` is a field.
            ("isIP" | "isCIDR" | "cidr" | "ip", false) => {
                (factor(arg(0).size(), STRING_TRAVERSAL), Ty::Scalar)
            }
            ("ip", true) => (1, Ty::Scalar),
            (
                "masked"
                | "prefixLength"
                | "family"
                | "isUnspecified"
                | "isLoopback"
                | "isLinkLocalMulticast"
                | "isLinkLocalUnicast"
                | "isGlobalUnicast",
                true,
            ) => (1, Ty::Scalar),
            ("int" | "uint" | "double" | "bool" | "dyn" | "type" | "!_" | "-_", _)
            | ("@not_strictly_false", _) => (1, if name == "dyn" { arg(0) } else { Ty::Scalar }),
            _ => {
                // Unknown to this model: a call, plus reading every string or list it is given.
                let read = target
                    .iter()
                    .chain(args.iter().map(|(_, t)| t))
                    .filter(|t| t.is_sequence())
                    .fold(0u64, |s, t| add(s, factor(t.size(), STRING_TRAVERSAL)));
                (add(1, read), Ty::Unknown)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn string(max: Option<u64>) -> Value {
        match max {
            Some(m) => json!({"type": "string", "maxLength": m}),
            None => json!({"type": "string"}),
        }
    }

    fn cost_of(rule: &str, node: &Value) -> u64 {
        estimate(rule, node).unwrap()
    }

    #[test]
    fn a_regex_match_costs_the_string_times_the_pattern() {
        // ceil((63 + 1) × 0.1) = 7 for the string, ceil(10 × 0.25) = 3 for the pattern, and 1
        // for reading `self`.
        assert_eq!(
            cost_of("self.matches('^[a-z]+$x')", &string(Some(63))),
            7 * 3 + 1
        );
        // Unbounded: 3 MiB − 2 characters.
        let big = factor(MAX_REQUEST_BYTES - 1, STRING_TRAVERSAL) * 3 + 1;
        assert_eq!(cost_of("self.matches('^[a-z]+$x')", &string(None)), big);
    }

    #[test]
    fn logic_comparisons_and_presence() {
        let obj = json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "s": {"type": "string", "maxLength": 100}}});
        // has(): 1 + self (1); `self.a` 2, `== 1` 1 → 3; && adds nothing.
        assert_eq!(cost_of("has(self.a) && self.a == 1", &obj), 2 + 3);
        // String equality reads the shorter side: min(100, 3) × 0.1 → 1.
        assert_eq!(cost_of("self.s == 'abc'", &obj), 2 + 1);
        // A conditional costs its condition and the dearer branch.
        assert_eq!(
            cost_of("self.a > 0 ? self.s.matches('aaaa') : true", &obj),
            3 + (2 + factor(101, 0.1) * factor(4, REGEX_LENGTH))
        );
        // `in` a literal list walks it; the literal costs its creation.
        assert_eq!(cost_of("self.s in ['x', 'y']", &obj), 2 + LIST_CREATE + 2);
    }

    #[test]
    fn a_macro_costs_its_body_times_the_list_or_map() {
        let list = json!({"type": "array", "maxItems": 8, "items": string(Some(10))});
        // all(): the range (1), the accumulator's init (0) and result (1), and per item the
        // loop condition (@not_strictly_false(accu): 1 + 1) and step (accu && size(e) > 0: 1 + 1
        // + 1 + 1).
        assert_eq!(
            cost_of("self.all(e, size(e) > 0)", &list),
            1 + 1 + 8 * (2 + 4)
        );
        let unbounded = json!({"type": "array", "items": string(Some(10))});
        let n = (MAX_REQUEST_BYTES - 2) / 3;
        assert_eq!(
            cost_of("self.all(e, size(e) > 0)", &unbounded),
            1 + 1 + n * (2 + 4)
        );
        // A map's keys have no size: a match on each costs the pattern alone.
        let map = json!({"type": "object", "maxProperties": 4,
            "additionalProperties": string(Some(63))});
        assert_eq!(
            cost_of("self.all(k, k.matches('aaaa'))", &map),
            1 + 1 + 4 * (2 + (1 + 1 + 1))
        );
    }

    #[test]
    fn the_ip_library_is_a_traversal_and_its_accessors_are_nominal() {
        let s = string(Some(64));
        // isCIDR(self): 1 + ceil(6.4); cidr(self).ip().family() == 4: (1 + 7) + 1 + 1 + 1.
        assert_eq!(cost_of("isCIDR(self)", &s), 1 + 7);
        assert_eq!(cost_of("cidr(self).ip().family() == 4", &s), 8 + 1 + 1 + 1);
        // CIDR equality is nominal.
        assert_eq!(
            cost_of("cidr(self) == cidr(self).masked()", &s),
            8 + 8 + 1 + 1
        );
    }

    #[test]
    fn cardinality_multiplies_down_lists_and_maps() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"rules": {"type": "array", "maxItems": 64, "items": {
                "type": "object", "properties": {"values": {"type": "array", "maxItems": 16,
                    "items": {"type": "string", "maxLength": 63,
                        "x-kubernetes-validations": [{"rule": "self.matches('aaaa')"}]}}}}}}}}});
        let costs = rule_costs(&schema).unwrap();
        assert_eq!(costs.len(), 1);
        assert_eq!(costs[0].cardinality, 64 * 16);
        assert_eq!(costs[0].cost, 7 + 1);
        assert_eq!(
            costs[0].field,
            "spec.validation.openAPIV3Schema.properties[spec].properties[rules].items\
             .properties[values].items.x-kubernetes-validations[0].rule"
        );
        assert!(refusals(&schema).unwrap().is_empty());
    }

    #[test]
    fn a_rule_on_an_unbounded_string_in_unbounded_lists_is_refused_as_the_server_refuses_it() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"rules": {"type": "array", "items": {"type": "object",
            "properties": {"values": {"type": "array", "items": {"type": "string",
                "x-kubernetes-validations": [{"rule":
                    "self.matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$')"}]
            }}}}}}}}});
        let refused = refusals(&schema).unwrap();
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(refused[0]
            .0
            .ends_with("items.x-kubernetes-validations[0].rule"));
        assert!(refused[0]
            .1
            .contains("estimated rule cost exceeds budget by factor of more than 100x"));
        assert_eq!(refused[1].0, "spec.validation.openAPIV3Schema");
        assert!(refused[1].1.contains("total for entire OpenAPIv3 schema"));
    }

    #[test]
    fn the_factor_is_worded_as_the_server_words_it() {
        assert!(over_budget("x", 25, 10).contains("factor of 2.5x"));
        assert!(over_budget("x", 12, 10).contains("factor of 1.200000x"));
        assert!(over_budget("x", 2000, 10).contains("factor of more than 100x"));
    }

    #[test]
    fn an_unparsable_rule_is_named() {
        let schema = json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.a ==="}]});
        let e = rule_costs(&schema).unwrap_err();
        assert_eq!(
            e.field,
            "spec.validation.openAPIV3Schema.x-kubernetes-validations[0].rule"
        );
    }
}
