//! The API server's errors as `metav1.Status` objects.

use serde_json::{json, Value};

/// One cause of an `Invalid` or `Conflict` error (`details.causes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    pub(crate) reason: &'static str,
    pub(crate) field: String,
    pub(crate) message: String,
}

/// An error the API server answers with: HTTP code, `reason` and message, as kube-apiserver
/// words them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub(crate) struct ApiError {
    pub(crate) code: u16,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    /// `details.group`, `details.kind`, `details.name`.
    pub(crate) details: Option<Box<(String, String, String)>>,
    pub(crate) causes: Vec<Cause>,
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            causes: Vec::new(),
        }
    }

    pub(crate) fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details = Some(Box::new((group.into(), kind.into(), name.into())));
        self
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(plural, group)),
        )
        .with_details(group, plural, name)
    }

    pub(crate) fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(plural, group)),
        )
        .with_details(group, plural, name)
    }

    pub(crate) fn conflict(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                qualified(plural, group)
            ),
        )
        .with_details(group, plural, name)
    }

    pub(crate) fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub(crate) fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let list = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>();
        let what = if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        };
        let joined = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{what} \"{name}\" is invalid: {joined}"),
        )
        .with_details(group, kind, name);
        e.causes = causes;
        e
    }

    /// The `Status` object.
    pub(crate) fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((group, kind, name)) = self.details.as_deref() {
            let mut d = json!({"name": name, "kind": kind});
            if !group.is_empty() {
                d["group"] = json!(group);
            }
            if !self.causes.is_empty() {
                d["causes"] = Value::Array(
                    self.causes
                        .iter()
                        .map(
                            |c| json!({"reason": c.reason, "message": c.message, "field": c.field}),
                        )
                        .collect(),
                );
            }
            s["details"] = d;
        }
        s
    }
}

/// `networks.lace-cni.io`, `pods`.
pub(crate) fn qualified(plural: &str, group: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}
