//! The compile-time type check of a `celExpression` (seed: expressions are "compiled and
//! validated once"): every function it calls exists in the binding environment (the `cel`
//! crate's standard library with optionals and its `strings` extension) in the form it is
//! called (a global `size(x)` or a method `x.size()`), a method called on a value of a known
//! type accepts that type, and the expression can evaluate to an optional string.
//!
//! The resource (`object`) is an unstructured map: its fields have no static type (`dyn`), so
//! only what the expression fixes itself is known — literals, what functions and operators
//! return, `optional.of(x)`. A result of a known type other than an optional string (a
//! `string`, a `bool`, an `optional<bool>`) is refused; a `dyn` result passes and is checked
//! per evaluation ([`super::cel::CelEvalError`]). This is deliberately no stronger than that:
//! it never refuses an expression that could be right for some resource.

use std::collections::BTreeMap;
use std::fmt;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};

/// What the check knows of a value's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CelType {
    /// Unknown until evaluation (a field of `object`).
    Dyn,
    /// `bool`.
    Bool,
    /// `int`.
    Int,
    /// `uint`.
    Uint,
    /// `double`.
    Double,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// `null_type`.
    Null,
    /// A list of elements of a type.
    List(Box<CelType>),
    /// A map.
    Map,
    /// An optional of a type.
    Optional(Box<CelType>),
    /// A type value (`type(x)`, `string`).
    Type,
    /// `google.protobuf.Timestamp`.
    Timestamp,
    /// `google.protobuf.Duration`.
    Duration,
}

impl fmt::Display for CelType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CelType::Dyn => f.write_str("dyn"),
            CelType::Bool => f.write_str("bool"),
            CelType::Int => f.write_str("int"),
            CelType::Uint => f.write_str("uint"),
            CelType::Double => f.write_str("double"),
            CelType::String => f.write_str("string"),
            CelType::Bytes => f.write_str("bytes"),
            CelType::Null => f.write_str("null"),
            CelType::List(t) => write!(f, "list({t})"),
            CelType::Map => f.write_str("map"),
            CelType::Optional(t) => write!(f, "optional({t})"),
            CelType::Type => f.write_str("type"),
            CelType::Timestamp => f.write_str("timestamp"),
            CelType::Duration => f.write_str("duration"),
        }
    }
}

/// Why the check refused an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeError {
    /// A function the environment does not have (in that form).
    UnknownFunction {
        /// The name as called.
        name: String,
        /// Whether it was called as a method (`x.name()`).
        method: bool,
    },
    /// A method called on a value whose type it does not take.
    NoOverload {
        /// The method.
        name: String,
        /// The receiver's type.
        receiver: CelType,
    },
    /// A result that can never be an optional string.
    WrongResult {
        /// The type the expression (or one of its branches) evaluates to.
        found: CelType,
    },
}

impl fmt::Display for TypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeError::UnknownFunction { name, method: true } => write!(
                f,
                "unknown method {name}(); binding expressions have CEL's standard library, \
                 optionals and the strings extension (substring, replace, lowerAscii, split, …)"
            ),
            TypeError::UnknownFunction {
                name,
                method: false,
            } => write!(
                f,
                "unknown function {name}(); binding expressions have CEL's standard library, \
                 optionals and the strings extension"
            ),
            TypeError::NoOverload { name, receiver } => {
                write!(f, "{name}() cannot be called on a {receiver}")
            }
            TypeError::WrongResult {
                found: found @ CelType::Optional(_),
            } => write!(
                f,
                "the expression evaluates to an {found}, not an optional string; the network \
                 name must be a string"
            ),
            TypeError::WrongResult { found } => write!(
                f,
                "the expression evaluates to a {found}, not an optional string; wrap the \
                 network name in optional.of(...) and use optional.none() for no match"
            ),
        }
    }
}

/// Checks `expr` (see the module docs). `object` is the only variable.
pub fn check(expr: &IdedExpr) -> Result<(), TypeError> {
    let mut vars = BTreeMap::new();
    vars.insert(super::cel::OBJECT.to_owned(), CelType::Map);
    let mut leaves = Vec::new();
    results(expr, &mut vars, &mut leaves)?;
    for found in leaves {
        match &found {
            CelType::Dyn => {}
            CelType::Optional(inner) if matches!(**inner, CelType::String | CelType::Dyn) => {}
            _ => return Err(TypeError::WrongResult { found }),
        }
    }
    Ok(())
}

type Vars = BTreeMap<String, CelType>;

/// The types `expr` can evaluate to: one per branch of its conditionals.
fn results(expr: &IdedExpr, vars: &mut Vars, out: &mut Vec<CelType>) -> Result<(), TypeError> {
    if let Expr::Call(call) = &expr.expr {
        if call.func_name == "_?_:_" && call.target.is_none() && call.args.len() == 3 {
            infer(&call.args[0], vars)?;
            results(&call.args[1], vars, out)?;
            return results(&call.args[2], vars, out);
        }
    }
    out.push(infer(expr, vars)?);
    Ok(())
}

/// The one type two branches share, or `dyn`.
fn join(a: CelType, b: CelType) -> CelType {
    match (a, b) {
        (a, b) if a == b => a,
        (CelType::Optional(a), CelType::Optional(b)) => CelType::Optional(Box::new(join(*a, *b))),
        (CelType::List(a), CelType::List(b)) => CelType::List(Box::new(join(*a, *b))),
        _ => CelType::Dyn,
    }
}

fn literal(l: &LiteralValue) -> CelType {
    match l {
        LiteralValue::Boolean(_) => CelType::Bool,
        LiteralValue::Bytes(_) => CelType::Bytes,
        LiteralValue::Double(_) => CelType::Double,
        LiteralValue::Int(_) => CelType::Int,
        LiteralValue::Null => CelType::Null,
        LiteralValue::String(_) => CelType::String,
        LiteralValue::UInt(_) => CelType::Uint,
    }
}

fn infer(expr: &IdedExpr, vars: &mut Vars) -> Result<CelType, TypeError> {
    Ok(match &expr.expr {
        Expr::Unspecified => CelType::Dyn,
        Expr::Literal(l) => literal(l),
        Expr::Ident(name) => match vars.get(name) {
            Some(t) => t.clone(),
            // Type names (`string`, `int`, …); anything else was refused as undeclared.
            None => CelType::Type,
        },
        Expr::Select(s) => {
            infer(&s.operand, vars)?;
            if s.test {
                CelType::Bool
            } else {
                CelType::Dyn
            }
        }
        Expr::List(l) => {
            let mut element: Option<CelType> = None;
            for e in &l.elements {
                let t = infer(e, vars)?;
                element = Some(match element {
                    None => t,
                    Some(prev) => join(prev, t),
                });
            }
            CelType::List(Box::new(element.unwrap_or(CelType::Dyn)))
        }
        Expr::Map(m) => {
            entries(&m.entries, vars)?;
            CelType::Map
        }
        Expr::Struct(s) => {
            entries(&s.entries, vars)?;
            CelType::Dyn
        }
        Expr::Comprehension(c) => {
            let range = infer(&c.iter_range, vars)?;
            let init = infer(&c.accu_init, vars)?;
            let saved: Vec<(String, Option<CelType>)> = [&c.iter_var, &c.accu_var]
                .into_iter()
                .chain(c.iter_var2.as_ref())
                .map(|v| (v.clone(), vars.get(v).cloned()))
                .collect();
            let element = match range {
                CelType::List(t) => *t,
                _ => CelType::Dyn,
            };
            vars.insert(c.iter_var.clone(), element);
            if let Some(second) = &c.iter_var2 {
                vars.insert(second.clone(), CelType::Dyn);
            }
            vars.insert(c.accu_var.clone(), init);
            infer(&c.loop_cond, vars)?;
            infer(&c.loop_step, vars)?;
            let result = infer(&c.result, vars)?;
            for (v, old) in saved {
                match old {
                    Some(t) => vars.insert(v, t),
                    None => vars.remove(&v),
                };
            }
            result
        }
        Expr::Call(call) => {
            // `optional.of(x)` may come as a call on the namespace identifier.
            let (name, target) = match call.target.as_deref() {
                Some(IdedExpr {
                    expr: Expr::Ident(ns),
                    ..
                }) if (ns == "optional" || ns == "strings") && !vars.contains_key(ns) => {
                    (format!("{ns}.{}", call.func_name), None)
                }
                Some(t) => (call.func_name.clone(), Some(infer(t, vars)?)),
                None => (call.func_name.clone(), None),
            };
            if name == "_?_:_" && call.args.len() == 3 {
                infer(&call.args[0], vars)?;
                let a = infer(&call.args[1], vars)?;
                let b = infer(&call.args[2], vars)?;
                return Ok(join(a, b));
            }
            let args: Vec<CelType> = call
                .args
                .iter()
                .map(|a| infer(a, vars))
                .collect::<Result<_, _>>()?;
            match target {
                Some(t) => method(&name, t, &args)?,
                None => function(&name, &args)?,
            }
        }
    })
}

fn entries(entries: &[cel::common::ast::IdedEntryExpr], vars: &mut Vars) -> Result<(), TypeError> {
    for e in entries {
        match &e.expr {
            EntryExpr::StructField(f) => {
                infer(&f.value, vars)?;
            }
            EntryExpr::MapEntry(m) => {
                infer(&m.key, vars)?;
                infer(&m.value, vars)?;
            }
        }
    }
    Ok(())
}

fn numeric(t: &CelType) -> bool {
    matches!(t, CelType::Int | CelType::Uint | CelType::Double)
}

/// Operators and global functions.
fn function(name: &str, args: &[CelType]) -> Result<CelType, TypeError> {
    let first = args.first().cloned().unwrap_or(CelType::Dyn);
    Ok(match name {
        "_&&_"
        | "_||_"
        | "!_"
        | "@not_strictly_false"
        | "_==_"
        | "_!=_"
        | "_<_"
        | "_<=_"
        | "_>_"
        | "_>=_"
        | "@in"
        | "matches" => CelType::Bool,
        "_+_" => {
            let known = args.iter().find(|t| **t != CelType::Dyn).cloned();
            match known {
                Some(t @ (CelType::String | CelType::Bytes | CelType::List(_))) => t,
                Some(t) if numeric(&t) => t,
                _ => CelType::Dyn,
            }
        }
        "_-_" | "_*_" | "_/_" | "_%_" => match args.iter().find(|t| numeric(t)) {
            Some(t) => t.clone(),
            None => CelType::Dyn,
        },
        "-_" => {
            if numeric(&first) {
                first
            } else {
                CelType::Dyn
            }
        }
        "_[_]" => match first {
            CelType::List(t) => *t,
            _ => CelType::Dyn,
        },
        "_[?_]" | "_?._" => CelType::Optional(Box::new(CelType::Dyn)),
        "size" | "int" => CelType::Int,
        "uint" => CelType::Uint,
        "double" => CelType::Double,
        "string" | "strings.quote" => CelType::String,
        "bytes" => CelType::Bytes,
        "bool" => CelType::Bool,
        "dyn" => CelType::Dyn,
        "type" => CelType::Type,
        "duration" => CelType::Duration,
        "timestamp" => CelType::Timestamp,
        "optional.none" => CelType::Optional(Box::new(CelType::Dyn)),
        "optional.of" | "optional.ofNonZeroValue" => CelType::Optional(Box::new(first)),
        _ => {
            return Err(TypeError::UnknownFunction {
                name: name.to_owned(),
                method: false,
            })
        }
    })
}

/// Methods: what they return, and which receiver types they take.
fn method(name: &str, receiver: CelType, args: &[CelType]) -> Result<CelType, TypeError> {
    use CelType as T;
    let takes = |ok: &dyn Fn(&T) -> bool| ok(&receiver) || receiver == T::Dyn;
    let string = |t: &T| *t == T::String;
    let (accepted, result) = match name {
        "contains" | "startsWith" | "endsWith" | "matches" => (takes(&string), T::Bool),
        "charAt" | "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "reverse"
        | "format" => (takes(&string), T::String),
        "indexOf" | "lastIndexOf" => (takes(&string), T::Int),
        "split" => (takes(&string), T::List(Box::new(T::String))),
        "size" => (
            takes(&|t: &T| matches!(t, T::String | T::Bytes | T::List(_) | T::Map)),
            T::Int,
        ),
        "join" => (takes(&|t: &T| matches!(t, T::List(_))), T::String),
        "getDate" | "getDayOfMonth" | "getDayOfWeek" | "getDayOfYear" | "getFullYear"
        | "getMonth" => (takes(&|t: &T| *t == T::Timestamp), T::Int),
        "getHours" | "getMinutes" | "getSeconds" | "getMilliseconds" => (
            takes(&|t: &T| matches!(t, T::Timestamp | T::Duration)),
            T::Int,
        ),
        "hasValue" => (takes(&|t: &T| matches!(t, T::Optional(_))), T::Bool),
        "value" => match &receiver {
            T::Optional(inner) => (true, (**inner).clone()),
            other => (*other == T::Dyn, T::Dyn),
        },
        "or" => (
            takes(&|t: &T| matches!(t, T::Optional(_))),
            join(receiver.clone(), args.first().cloned().unwrap_or(T::Dyn)),
        ),
        "orValue" => match &receiver {
            T::Optional(inner) => (
                true,
                join((**inner).clone(), args.first().cloned().unwrap_or(T::Dyn)),
            ),
            other => (*other == T::Dyn, T::Dyn),
        },
        _ => {
            return Err(TypeError::UnknownFunction {
                name: name.to_owned(),
                method: true,
            })
        }
    };
    if !accepted {
        return Err(TypeError::NoOverload {
            name: name.to_owned(),
            receiver,
        });
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Every function and method the check knows exists in the binding environment, in that
    /// form, and returns a value of the type the check says.
    #[test]
    fn the_function_table_matches_the_environment() {
        let mut env = cel::Env::stdlib();
        env.add_extension(cel::extensions::strings).unwrap();
        let env = Arc::new(env);
        let ts = "timestamp('2020-01-01T10:20:30Z')";
        let cases: Vec<(String, CelType)> = [
            ("size('ab')", CelType::Int),
            ("'ab'.size()", CelType::Int),
            ("[1, 2].size()", CelType::Int),
            ("int('1')", CelType::Int),
            ("uint(1)", CelType::Uint),
            ("double(1)", CelType::Double),
            ("string(1)", CelType::String),
            ("bytes('a')", CelType::Bytes),
            ("bool('true')", CelType::Bool),
            ("type(1) == int", CelType::Bool),
            ("matches('a', 'a')", CelType::Bool),
            ("'ab'.matches('a')", CelType::Bool),
            ("'ab'.contains('a')", CelType::Bool),
            ("'ab'.startsWith('a')", CelType::Bool),
            ("'ab'.endsWith('b')", CelType::Bool),
            ("'ab'.charAt(1)", CelType::String),
            ("'Ab'.lowerAscii()", CelType::String),
            ("'ab'.upperAscii()", CelType::String),
            ("' a '.trim()", CelType::String),
            ("'ab'.replace('a', 'c')", CelType::String),
            ("'abc'.substring(1)", CelType::String),
            ("'abc'.substring(1, 2)", CelType::String),
            ("'ab'.reverse()", CelType::String),
            ("'%s'.format(['a'])", CelType::String),
            ("strings.quote('a')", CelType::String),
            ("'abc'.indexOf('b')", CelType::Int),
            ("'abcb'.lastIndexOf('b')", CelType::Int),
            ("'a,b'.split(',')", CelType::List(Box::new(CelType::String))),
            ("['a', 'b'].join('-')", CelType::String),
            ("'a' + 'b'", CelType::String),
            ("1 + 2", CelType::Int),
            (
                "optional.of('a')",
                CelType::Optional(Box::new(CelType::String)),
            ),
            (
                "optional.ofNonZeroValue('a')",
                CelType::Optional(Box::new(CelType::String)),
            ),
            ("optional.of(1).hasValue()", CelType::Bool),
            ("optional.of('a').value()", CelType::String),
            ("optional.of('a').orValue('b')", CelType::String),
            ("[1, 2].exists(x, x == 2)", CelType::Bool),
            (
                "[1, 2].map(x, x * 2)",
                CelType::List(Box::new(CelType::Dyn)),
            ),
        ]
        .into_iter()
        .map(|(e, t)| (e.to_owned(), t))
        .chain(
            [
                "getDate",
                "getDayOfMonth",
                "getDayOfWeek",
                "getDayOfYear",
                "getFullYear",
                "getHours",
                "getMilliseconds",
                "getMinutes",
                "getMonth",
                "getSeconds",
            ]
            .into_iter()
            .map(|m| (format!("{ts}.{m}()"), CelType::Int)),
        )
        .collect();
        for (source, want) in cases {
            let program = env.compile(&source).unwrap();
            let mut vars = Vars::new();
            let got = infer(program.expression(), &mut vars).unwrap();
            assert_eq!(got, want, "{source}");
            let context = cel::Context::with_env(Arc::clone(&env));
            assert!(
                program.execute(&context).is_ok(),
                "{source} does not evaluate"
            );
        }
    }

    #[test]
    fn unknown_functions_wrong_receivers_and_results_are_refused() {
        let env = cel::Env::stdlib();
        let check_of = |s: &str| check(env.compile(s).unwrap().expression());
        assert_eq!(
            check_of("object.metadata.name.frobnicate()"),
            Err(TypeError::UnknownFunction {
                name: "frobnicate".into(),
                method: true
            })
        );
        assert_eq!(
            check_of("optional.of(frob(object))"),
            Err(TypeError::UnknownFunction {
                name: "frob".into(),
                method: false
            })
        );
        assert_eq!(
            check_of("optional.of((1).startsWith('x'))"),
            Err(TypeError::NoOverload {
                name: "startsWith".into(),
                receiver: CelType::Int
            })
        );
        assert_eq!(
            check_of("object.metadata.name + '-net'"),
            Err(TypeError::WrongResult {
                found: CelType::String
            })
        );
        assert_eq!(
            check_of("object.metadata.namespace.startsWith('team-')"),
            Err(TypeError::WrongResult {
                found: CelType::Bool
            })
        );
        assert_eq!(
            check_of("has(object.x) ? optional.of('a') : 'b'"),
            Err(TypeError::WrongResult {
                found: CelType::String
            })
        );
        // What only the resource decides passes: it is checked per evaluation.
        for ok in [
            "object.metadata.name",
            "optional.of(object.spec.port)",
            "object.?metadata.?labels.?alt",
            "object.metadata.namespace.startsWith('team-') ? optional.of(object.metadata.namespace.substring(5)) : optional.none()",
            "[79, 80].exists(c, c == object.spec.port) ? optional.of('macro') : optional.none()",
        ] {
            assert_eq!(check_of(ok), Ok(()), "{ok}");
        }
    }
}
