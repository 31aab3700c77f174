//! `celExpression`: one CEL environment, compile-time checks, the resource as `object`, and the
//! optional-string result contract (seed: "Dynamic network names with CEL").
//!
//! The environment is the `cel` crate's standard library with optional values (`optional.of`,
//! `optional.none()`, `.?field`, `[?key]`) plus its `strings` extension (`substring`,
//! `replace`, `lowerAscii`, …), which the seed's example needs.
//!
//! What compile time rejects: syntax errors; identifiers other than `object` (and the
//! `optional` namespace, type names, and variables a macro such as `exists(c, …)` binds);
//! functions the environment lacks, methods on values of a type they do not take, and results
//! of a known type other than an optional string ([`super::celtype`]); an expression that does
//! not read `object` and does not evaluate, once, to an optional string. What only evaluation
//! can find (reported per evaluation, see [`CelEvalError`]): a field the resource lacks, a wrong
//! overload on a field's value, a field-derived result that is not an optional string.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::objects::OptionalValue;
use cel::{Context, Env, Program, Value};

/// The variable an expression sees the resource as.
pub const OBJECT: &str = "object";

/// Identifiers an expression may use besides [`OBJECT`]: the `optional` namespace and CEL's
/// type names (`type(x) == string`).
const ALLOWED_IDENTS: &[&str] = &[
    "optional",
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// Why an expression was rejected at compile time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CelCompileError {
    /// The parser's message (with line, column and a caret).
    Syntax(String),
    /// The expression names variables other than `object`.
    UndeclaredVariables(Vec<String>),
    /// The expression does not depend on `object` and does not evaluate to an optional string.
    ConstantResult(String),
    /// An unknown function, a method on the wrong type, or a result that cannot be an optional
    /// string.
    Type(super::celtype::TypeError),
}

impl fmt::Display for CelCompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CelCompileError::Syntax(m) => write!(f, "syntax error: {m}"),
            CelCompileError::UndeclaredVariables(v) => write!(
                f,
                "undeclared variable(s) {}; the resource is available as `object` only",
                v.join(", ")
            ),
            CelCompileError::ConstantResult(m) => write!(
                f,
                "the expression does not read `object` and {m}; return optional.of(<string>) or optional.none()"
            ),
            CelCompileError::Type(e) => write!(f, "{e}"),
        }
    }
}

/// Why one evaluation of a compiled expression produced no usable answer. The rule does not
/// match; evaluation goes on with the next rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CelEvalError {
    /// The interpreter failed (missing field, no such overload, index out of range, …).
    Execution(String),
    /// The result is not an optional (its CEL type is given).
    NotOptional(String),
    /// The result is an optional holding something other than a string (its CEL type).
    NotString(String),
}

impl fmt::Display for CelEvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CelEvalError::Execution(m) => write!(
                f,
                "evaluation failed: {m}; guard optional fields with has() or the .? operator"
            ),
            CelEvalError::NotOptional(t) => write!(
                f,
                "evaluated to a {t}, not an optional string; wrap the name in optional.of(...) and use optional.none() for no match"
            ),
            CelEvalError::NotString(t) => write!(
                f,
                "evaluated to an optional {t}, not an optional string; the network name must be a string"
            ),
        }
    }
}

/// The CEL environment binding expressions compile and run in: shared by every program.
#[derive(Clone)]
pub struct CelEnv {
    env: Arc<Env>,
}

impl fmt::Debug for CelEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CelEnv(stdlib + optional + strings)")
    }
}

impl Default for CelEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl CelEnv {
    /// The standard library with optionals and the `strings` extension.
    pub fn new() -> Self {
        let mut env = Env::stdlib();
        // Registering a library on a fresh standard environment cannot conflict; if a future
        // `cel` release made it so, expressions using `substring` would fail to evaluate and be
        // reported per evaluation, which is the worst this can cause.
        let _ = env.add_extension(cel::extensions::strings);
        CelEnv { env: Arc::new(env) }
    }

    /// Compiles and validates `source` (see the module docs for what is checked).
    pub fn compile(&self, source: &str) -> Result<Program, CelCompileError> {
        let program = self
            .env
            .compile(source)
            .map_err(|e| CelCompileError::Syntax(e.to_string()))?;
        let mut free = BTreeSet::new();
        free_identifiers(program.expression(), &mut Vec::new(), &mut free);
        let reads_object = free.remove(OBJECT);
        let undeclared: Vec<String> = free
            .into_iter()
            .filter(|name| !ALLOWED_IDENTS.contains(name))
            .map(str::to_owned)
            .collect();
        if !undeclared.is_empty() {
            return Err(CelCompileError::UndeclaredVariables(undeclared));
        }
        super::celtype::check(program.expression()).map_err(CelCompileError::Type)?;
        if !reads_object {
            // A constant expression: its one answer is known now, so check it now.
            let context = Context::with_env(Arc::clone(&self.env));
            if let Err(e) = result_of(program.execute(&context)) {
                return Err(CelCompileError::ConstantResult(match e {
                    CelEvalError::Execution(m) => format!("fails: {m}"),
                    CelEvalError::NotOptional(t) => format!("evaluates to a {t}"),
                    CelEvalError::NotString(t) => format!("evaluates to an optional {t}"),
                }));
            }
        }
        Ok(program)
    }

    /// A context in which `object` is `resource` (borrowed, converted once; see
    /// [`object_value`]).
    pub fn context<'v>(&self, resource: &'v serde_json::Value) -> Context<'v, 'v> {
        let mut context = Context::with_env(Arc::clone(&self.env));
        context.add_variable_as_val(OBJECT, object_value(resource));
        context
    }
}

/// Runs `program`: `Ok(None)` for an absent optional, `Ok(Some(name))` for a present one (the
/// name may be empty).
pub fn evaluate(
    program: &Program,
    context: &Context<'_, '_>,
) -> Result<Option<String>, CelEvalError> {
    result_of(program.execute(context))
}

fn result_of(result: cel::ResolveResult) -> Result<Option<String>, CelEvalError> {
    let value = result.map_err(|e| CelEvalError::Execution(e.to_string()))?;
    match &value {
        Value::Opaque(opaque) => match <&OptionalValue>::try_from(&value) {
            Ok(optional) => match optional.value() {
                None => Ok(None),
                Some(Value::String(name)) => Ok(Some(name.as_str().to_owned())),
                Some(other) => Err(CelEvalError::NotString(other.type_of().to_string())),
            },
            Err(_) => Err(CelEvalError::NotOptional(
                opaque.runtime_type_name().to_owned(),
            )),
        },
        other => Err(CelEvalError::NotOptional(other.type_of().to_string())),
    }
}

/// The resource as CEL sees it, borrowing its strings: JSON objects are maps with string keys,
/// arrays are lists, integers are `int` (or `uint` above `i64::MAX`) so `object.x + 1` works,
/// other numbers `double`.
pub fn object_value(json: &serde_json::Value) -> Box<dyn Val + '_> {
    use serde_json::Value as J;
    match json {
        J::Null => Box::new(CelNull),
        J::Bool(b) => Box::new(CelBool::from(*b)),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        J::String(s) => Box::new(CelString::from(s.as_str())),
        J::Array(items) => Box::new(CelList::from(
            items.iter().map(object_value).collect::<Vec<_>>(),
        )),
        J::Object(fields) => Box::new(CelMap::from(
            fields
                .iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), object_value(v)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

/// Identifiers `expr` reads that no enclosing comprehension binds. (`Program::references`
/// lists a macro's loop variables too, so it cannot tell `exists(c, c.x)` from a typo.)
fn free_identifiers<'e>(expr: &'e IdedExpr, bound: &mut Vec<&'e str>, out: &mut BTreeSet<&'e str>) {
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(&name.as_str()) {
                out.insert(name);
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                free_identifiers(target, bound, out);
            }
            for arg in &call.args {
                free_identifiers(arg, bound, out);
            }
        }
        Expr::Select(select) => free_identifiers(&select.operand, bound, out),
        Expr::List(list) => {
            for element in &list.elements {
                free_identifiers(element, bound, out);
            }
        }
        Expr::Map(map) => entries(&map.entries, bound, out),
        Expr::Struct(s) => entries(&s.entries, bound, out),
        Expr::Comprehension(c) => {
            free_identifiers(&c.iter_range, bound, out);
            free_identifiers(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(&c.iter_var);
            if let Some(second) = &c.iter_var2 {
                bound.push(second);
            }
            bound.push(&c.accu_var);
            free_identifiers(&c.loop_cond, bound, out);
            free_identifiers(&c.loop_step, bound, out);
            free_identifiers(&c.result, bound, out);
            bound.truncate(depth);
        }
    }
}

fn entries<'e>(
    entries: &'e [cel::common::ast::IdedEntryExpr],
    bound: &mut Vec<&'e str>,
    out: &mut BTreeSet<&'e str>,
) {
    for entry in entries {
        match &entry.expr {
            EntryExpr::StructField(field) => free_identifiers(&field.value, bound, out),
            EntryExpr::MapEntry(pair) => {
                free_identifiers(&pair.key, bound, out);
                free_identifiers(&pair.value, bound, out);
            }
        }
    }
}
