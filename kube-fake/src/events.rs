//! Validation of Events as kube-apiserver v1.36 does it (`ValidateEventCreate` and
//! `ValidateEventUpdate` of `pkg/apis/core/validation/events.go`): both API groups store one
//! internal Event, so an `events.k8s.io/v1` object is read through the same fields
//! (`regarding` is `involvedObject`, `note` is `message`, `deprecated*` are the legacy
//! timestamps and count, `reportingController` is `reportingComponent`).
//!
//! - Every Event (both groups, create and update): without `eventTime` (an "old" event) its
//!   namespace must match `involvedObject.namespace` (`default` or none for a cluster-scoped
//!   object); with one, a cluster-scoped object's Event lives in `default` or `kube-system`, and
//!   `reportingComponent`/`reportingController` (a qualified name), `reportingInstance` (≤ 128),
//!   `action` (≤ 128) and `reason` (≤ 128) are required, the message at most 1,024 characters.
//! - `events.k8s.io/v1` only: on create `eventTime` is required, `type` is `Normal` or
//!   `Warning`, the deprecated fields must be unset, a `series` has `count` ≥ 2 and a
//!   `lastObservedTime`; on update `regarding`, `reason`, `note`, `type` and the deprecated
//!   fields are immutable.

use serde_json::Value;

use crate::error::Cause;

const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

/// The fields validation reads, whichever group the object came through.
struct Internal<'a> {
    namespace: &'a str,
    involved_namespace: &'a str,
    event_time: bool,
    reporting_controller: &'a str,
    reporting_instance: &'a str,
    action: &'a str,
    reason: &'a str,
    message: &'a str,
}

fn s<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn set(o: &Value, ptr: &str) -> bool {
    o.pointer(ptr).is_some_and(|v| !v.is_null())
}

fn internal(o: &Value, v1: bool) -> Internal<'_> {
    if v1 {
        Internal {
            namespace: s(o, "/metadata/namespace"),
            involved_namespace: s(o, "/involvedObject/namespace"),
            event_time: set(o, "/eventTime"),
            reporting_controller: s(o, "/reportingComponent"),
            reporting_instance: s(o, "/reportingInstance"),
            action: s(o, "/action"),
            reason: s(o, "/reason"),
            message: s(o, "/message"),
        }
    } else {
        Internal {
            namespace: s(o, "/metadata/namespace"),
            involved_namespace: s(o, "/regarding/namespace"),
            event_time: set(o, "/eventTime"),
            reporting_controller: s(o, "/reportingController"),
            reporting_instance: s(o, "/reportingInstance"),
            action: s(o, "/action"),
            reason: s(o, "/reason"),
            message: s(o, "/note"),
        }
    }
}

/// A Kubernetes qualified name: `[prefix/]name`, the name at most 63 characters of
/// alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric; the prefix a DNS subdomain.
fn qualified_name(v: &str) -> bool {
    let (prefix, name) = match v.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, v),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    name_ok && prefix.is_none_or(super::store::dns_subdomain)
}

fn required(field: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired",
        field: field.into(),
        message: "Required value".into(),
    }
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: format!("Invalid value: \"{value}\": {detail}"),
    }
}

/// `legacyValidateEvent`: what every Event must satisfy.
fn legacy(e: &Internal<'_>, v1: bool, causes: &mut Vec<Cause>) {
    let controller_field = if v1 {
        "reportingComponent"
    } else {
        "reportingController"
    };
    let involved_field = if v1 {
        "involvedObject.namespace"
    } else {
        "regarding.namespace"
    };
    if !e.event_time {
        let ok = if e.involved_namespace.is_empty() {
            e.namespace.is_empty() || e.namespace == "default"
        } else {
            e.namespace == e.involved_namespace
        };
        if !ok {
            causes.push(invalid(
                involved_field,
                e.involved_namespace,
                "does not match event.namespace",
            ));
        }
        return;
    }
    if e.involved_namespace.is_empty() && e.namespace != "default" && e.namespace != "kube-system" {
        causes.push(invalid(
            involved_field,
            e.involved_namespace,
            "does not match event.namespace",
        ));
    }
    if e.reporting_controller.is_empty() {
        causes.push(required(controller_field));
    } else if !qualified_name(e.reporting_controller) {
        causes.push(invalid(
            controller_field,
            e.reporting_controller,
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start \
             and end with an alphanumeric character",
        ));
    }
    if e.reporting_instance.is_empty() {
        causes.push(required("reportingInstance"));
    }
    if e.reporting_instance.len() > REPORTING_INSTANCE_LIMIT {
        causes.push(invalid(
            "reportingInstance",
            "",
            &format!("can have at most {REPORTING_INSTANCE_LIMIT} characters"),
        ));
    }
    if e.action.is_empty() {
        causes.push(required("action"));
    }
    if e.action.len() > ACTION_LIMIT {
        causes.push(invalid(
            "action",
            "",
            &format!("can have at most {ACTION_LIMIT} characters"),
        ));
    }
    if e.reason.is_empty() {
        causes.push(required("reason"));
    }
    if e.reason.len() > REASON_LIMIT {
        causes.push(invalid(
            "reason",
            "",
            &format!("can have at most {REASON_LIMIT} characters"),
        ));
    }
    if e.message.len() > NOTE_LIMIT {
        causes.push(invalid(
            if v1 { "message" } else { "note" },
            "",
            &format!("can have at most {NOTE_LIMIT} characters"),
        ));
    }
}

fn series(o: &Value, causes: &mut Vec<Cause>) {
    if let Some(series) = o.get("series").filter(|v| !v.is_null()) {
        if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
            causes.push(invalid("series.count", "", "should be at least 2"));
        }
        if !set(series, "/lastObservedTime") {
            causes.push(required("series.lastObservedTime"));
        }
    }
}

/// The causes for refusing Event `o` of `group` (`""` or `events.k8s.io`); `old`: the stored
/// Event on an update.
pub(crate) fn validate(group: &str, o: &Value, old: Option<&Value>) -> Vec<Cause> {
    let v1 = group.is_empty();
    let mut causes = Vec::new();
    legacy(&internal(o, v1), v1, &mut causes);
    if v1 {
        return causes;
    }
    match old {
        None => {
            series(o, &mut causes);
            if !set(o, "/eventTime") {
                causes.push(required("eventTime"));
            }
            let ty = s(o, "/type");
            if ty != "Normal" && ty != "Warning" {
                causes.push(invalid("type", "", &format!("has invalid value: {ty}")));
            }
            for (field, ptr) in [
                ("deprecatedFirstTimestamp", "/deprecatedFirstTimestamp"),
                ("deprecatedLastTimestamp", "/deprecatedLastTimestamp"),
                ("deprecatedCount", "/deprecatedCount"),
                ("deprecatedSource", "/deprecatedSource"),
            ] {
                let unset = match o.pointer(ptr) {
                    None | Some(Value::Null) => true,
                    Some(Value::Number(n)) => n.as_i64() == Some(0),
                    Some(Value::Object(m)) => m.is_empty(),
                    Some(_) => false,
                };
                if !unset {
                    causes.push(invalid(field, "", "needs to be unset"));
                }
            }
        }
        Some(old) => {
            if o.get("series") != old.get("series") {
                series(o, &mut causes);
            }
            for field in [
                "regarding",
                "reason",
                "note",
                "type",
                "deprecatedSource",
                "deprecatedFirstTimestamp",
                "deprecatedLastTimestamp",
                "deprecatedCount",
            ] {
                if o.get(field) != old.get(field) {
                    causes.push(invalid(field, "", "field is immutable"));
                }
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(c: &[Cause]) -> Vec<&str> {
        c.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn core_events_old_and_new_style() {
        // An old-style Event of a cluster-scoped object lives in default.
        let old_style = json!({"metadata": {"namespace": "default"}, "involvedObject": {"kind": "Network", "name": "n"}, "reason": "R"});
        assert!(validate("", &old_style, None).is_empty());
        let elsewhere =
            json!({"metadata": {"namespace": "shop"}, "involvedObject": {"kind": "Network"}});
        assert_eq!(
            fields(&validate("", &elsewhere, None)),
            ["involvedObject.namespace"]
        );
        // With an eventTime the reporting fields are required.
        let new_style = json!({"metadata": {"namespace": "default"}, "eventTime": "2026-01-01T00:00:00.000000Z", "involvedObject": {}});
        assert_eq!(
            fields(&validate("", &new_style, None)),
            [
                "reportingComponent",
                "reportingInstance",
                "action",
                "reason"
            ]
        );
        let long = json!({"metadata": {"namespace": "kube-system"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingComponent": "lace control", "reportingInstance": "n", "action": "a", "reason": "r",
            "message": "x".repeat(1025)});
        assert_eq!(
            fields(&validate("", &long, None)),
            ["reportingComponent", "message"]
        );
    }

    #[test]
    fn events_k8s_io_is_strict_on_create_and_update() {
        let good = json!({"metadata": {"namespace": "default"}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "lace.example/control", "reportingInstance": "node-a", "action": "Valid",
            "reason": "Invalid", "note": "n", "type": "Warning", "regarding": {"kind": "Network", "name": "n"}});
        assert!(validate("events.k8s.io", &good, None).is_empty());
        let mut bad = good.clone();
        bad["type"] = "Error".into();
        bad["deprecatedCount"] = 3.into();
        bad["series"] = json!({"count": 1});
        bad.as_object_mut().unwrap().remove("eventTime");
        assert_eq!(
            fields(&validate("events.k8s.io", &bad, None)),
            [
                "series.count",
                "series.lastObservedTime",
                "eventTime",
                "type",
                "deprecatedCount"
            ]
        );
        let mut update = good.clone();
        update["series"] = json!({"count": 2, "lastObservedTime": "2026-01-01T00:00:01.000000Z"});
        assert!(validate("events.k8s.io", &update, Some(&good)).is_empty());
        update["note"] = "changed".into();
        assert_eq!(
            fields(&validate("events.k8s.io", &update, Some(&good))),
            ["note"]
        );
    }
}
