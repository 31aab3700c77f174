//! Requests → store operations: the REST paths, query parameters and content types of the
//! Kubernetes API, authentication, and the injected faults.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, ListAt, ListOptions, ResourceType, Target, WatchFilter};
use crate::Shared;

pub(crate) type Body = BoxBody<Bytes, Infallible>;

fn json_response(code: u16, v: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        "content-type",
        "application/json".parse().expect("static header"),
    );
    r
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.status())
}

/// Removes a watcher from the store when its response body is dropped (the client went away,
/// the timeout passed, or the server stopped).
struct WatchGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.shared.store().unwatch(self.id);
    }
}

struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Self(
            form_urlencoded::parse(q.unwrap_or_default().as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1"))
    }
}

/// A resource path, parsed.
struct ResourcePath {
    group: String,
    version: String,
    namespace: Option<String>,
    plural: String,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_path(path: &str) -> Option<ResourcePath> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => (String::new(), (*v).to_owned(), rest),
        ["apis", g, v, rest @ ..] => ((*g).to_owned(), (*v).to_owned(), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, plural, tail @ ..] => (Some((*ns).to_owned()), {
            let mut v = vec![*plural];
            v.extend_from_slice(tail);
            v
        }),
        other => (None, other.to_vec()),
    };
    let plural = (*rest.first()?).to_owned();
    if plural.is_empty() {
        return None;
    }
    Some(ResourcePath {
        group,
        version,
        namespace,
        plural,
        name: rest.get(1).map(|s| (*s).to_owned()),
        subresource: rest.get(2).map(|s| (*s).to_owned()),
    })
}

pub(crate) async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    // Faults first: a stalled server answers nothing until released.
    let mut stall = shared.stall.subscribe();
    let _ = stall.wait_for(|stalled| !*stalled).await;
    // `/api/v1/namespaces/{name}/status` is a namespace's (see `route`).
    let plural = parse_path(req.uri().path()).map(|p| match (&p.namespace, p.group.as_str()) {
        (Some(_), "") if p.plural == "status" || p.plural == "finalize" => "namespaces".into(),
        _ => p.plural,
    });
    shared.count(req.method(), plural.as_deref(), req.uri().query());
    if shared.take_failure() {
        return error_response(&ApiError::new(
            500,
            "InternalError",
            "Internal error occurred: injected by the fake API server",
        ));
    }
    let authorized = req
        .headers()
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        == Some(shared.token.as_str());
    if !authorized {
        return error_response(&ApiError::new(401, "Unauthorized", "Unauthorized"));
    }
    match route(&shared, req).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn route(shared: &Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let path = req.uri().path().to_owned();
    if let Some(r) = discovery(shared, &path) {
        return Ok(r);
    }
    if let Some(r) = openapi_v3(shared, &path) {
        return Ok(r);
    }
    let Some(p) = parse_path(&path) else {
        return Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    };
    // `/api/v1/namespaces/{name}[/status]` is the namespace itself.
    let p = match (&p.namespace, p.group.as_str()) {
        (Some(ns), "") if p.plural == "status" || p.plural == "finalize" => ResourcePath {
            group: String::new(),
            version: p.version,
            namespace: None,
            name: Some(ns.clone()),
            subresource: Some(p.plural),
            plural: "namespaces".into(),
        },
        _ => p,
    };
    let rt = shared.store().resolve(&p.group, &p.version, &p.plural)?;
    if !rt.namespaced && p.namespace.is_some() {
        return Err(ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ));
    }
    match (p.name, p.subresource) {
        (None, _) => collection(shared, req, &rt, &p.version, p.namespace.as_deref()).await,
        (Some(name), sub) => {
            let target = match sub.as_deref() {
                None => None,
                Some("status") if rt.status_subresource => Some("status"),
                Some(_) => {
                    return Err(ApiError::new(
                        404,
                        "NotFound",
                        "the server could not find the requested resource",
                    ))
                }
            };
            item(
                shared,
                req,
                &rt,
                &p.version,
                p.namespace.as_deref(),
                &name,
                target,
            )
            .await
        }
    }
}

async fn body_json(req: Request<Incoming>, yaml: bool) -> Result<Value, ApiError> {
    let bytes = req
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("cannot read the body: {e}")))?
        .to_bytes();
    if yaml {
        serde_yaml::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
    } else {
        serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type JSON): {e}"
            ))
        })
    }
}

fn manager(req: &Request<Incoming>, q: &Query) -> String {
    q.get("fieldManager").map(String::from).unwrap_or_else(|| {
        req.headers()
            .get("user-agent")
            .and_then(|h| h.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_owned()
    })
}

fn filter(q: &Query, rt: &ResourceType, ns: Option<&str>) -> Result<WatchFilter, ApiError> {
    Ok(WatchFilter {
        namespace: ns.map(String::from),
        labels: LabelSelector::parse(q.get("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        fields: FieldSelector::parse(q.get("fieldSelector").unwrap_or_default(), &rt.kind)
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
    })
}

/// `fieldValidation` of a write: `Strict` refuses a body with fields the schema does not
/// declare (custom resources: the fake has no schemas of the built-in kinds); `Ignore` and
/// `Warn` (the default) prune them; anything else is refused, as the real server does.
fn field_validation(q: &Query, rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    match q.get("fieldValidation").unwrap_or("Warn") {
        "Ignore" | "Warn" | "" => Ok(()),
        "Strict" => {
            let unknown = crate::store::unknown_fields(rt, body);
            if unknown.is_empty() {
                return Ok(());
            }
            let list: Vec<String> = unknown
                .iter()
                .map(|f| format!("unknown field \"{}\"", f.trim_start_matches('.')))
                .collect();
            Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )))
        }
        other => Err(ApiError::bad_request(format!(
            "fieldValidation parameter unsupported: {other:?} (must be Ignore, Warn or Strict)"
        ))),
    }
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: \"{s}\"")))
}

async fn collection(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    rt: &ResourceType,
    version: &str,
    ns: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(req.uri().query());
    match *req.method() {
        Method::GET if q.flag("watch") => watch(shared, &q, rt, version, ns),
        Method::GET => {
            let rv = q.get("resourceVersion").filter(|s| !s.is_empty());
            let matching = q.get("resourceVersionMatch").filter(|s| !s.is_empty());
            let continue_token = q
                .get("continue")
                .filter(|s| !s.is_empty())
                .map(String::from);
            if continue_token.is_some() && rv.is_some_and(|r| r != "0") {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let at = match (rv, matching) {
                (None, None) => ListAt::Latest,
                (None, Some(_)) => {
                    return Err(ApiError::invalid(
                        "meta.k8s.io",
                        "ListOptions",
                        "",
                        vec![crate::error::Cause {
                            reason: "FieldValueForbidden",
                            field: "resourceVersionMatch".into(),
                            message: "Forbidden: resourceVersionMatch is forbidden unless \
                                      resourceVersion is provided"
                                .into(),
                        }],
                    ))
                }
                (Some(r), None | Some("NotOlderThan")) => ListAt::NotOlderThan(parse_rv(r)?),
                (Some(r), Some("Exact")) => {
                    let n = parse_rv(r)?;
                    if n == 0 {
                        return Err(ApiError::bad_request(
                            "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                        ));
                    }
                    ListAt::Exact(n)
                }
                (Some(_), Some(other)) => {
                    return Err(ApiError::bad_request(format!(
                        "resourceVersionMatch: Unsupported value: \"{other}\""
                    )))
                }
            };
            let limit = match q.get("limit") {
                None | Some("0") | Some("") => None,
                Some(l) => Some(
                    l.parse::<usize>()
                        .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
                ),
            };
            let opts = ListOptions {
                at,
                filter: filter(&q, rt, ns)?,
                limit,
                continue_token,
            };
            let list = shared.store().list(rt, version, &opts)?;
            Ok(json_response(200, &list))
        }
        Method::POST => {
            let Some(ns) = ns.or((!rt.namespaced).then_some("")) else {
                return Err(ApiError::new(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                ));
            };
            let m = manager(&req, &q);
            let body = body_json(req, false).await?;
            field_validation(&q, rt, &body)?;
            let created = shared.store().create(rt, version, Some(ns), body, &m)?;
            Ok(json_response(201, &created))
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
    }
}

fn watch(
    shared: &Arc<Shared>,
    q: &Query,
    rt: &ResourceType,
    version: &str,
    ns: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    if send_initial {
        let mut causes = Vec::new();
        if q.get("resourceVersionMatch") != Some("NotOlderThan") {
            causes.push(crate::error::Cause {
                reason: "FieldValueForbidden",
                field: "resourceVersionMatch".into(),
                message: "Forbidden: sendInitialEvents requires setting resourceVersionMatch to \
                          NotOlderThan"
                    .into(),
            });
        }
        if !bookmarks {
            causes.push(crate::error::Cause {
                reason: "FieldValueForbidden",
                field: "allowWatchBookmarks".into(),
                message:
                    "Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true"
                        .into(),
            });
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes));
        }
    }
    let from = match q
        .get("resourceVersion")
        .filter(|s| !s.is_empty() && *s != "0")
    {
        None => None,
        Some(r) => Some(parse_rv(r)?),
    };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let filter = filter(q, rt, ns)?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let id = shared
        .store()
        .watch(rt, version, filter, from, send_initial, bookmarks, tx)?;
    let guard = WatchGuard {
        shared: shared.clone(),
        id,
    };
    let deadline = tokio::time::Instant::now() + timeout;
    let stream = futures_util::stream::unfold((rx, guard), move |(mut rx, guard)| async move {
        tokio::select! {
            line = rx.recv() => line.map(|b| (Ok::<_, Infallible>(Frame::data(b)), (rx, guard))),
            () = tokio::time::sleep_until(deadline) => None,
        }
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        "content-type",
        "application/json".parse().expect("static header"),
    );
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
async fn item(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    rt: &ResourceType,
    version: &str,
    ns: Option<&str>,
    name: &str,
    sub: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(req.uri().query());
    let target = if sub == Some("status") {
        Target::Status
    } else {
        Target::Main
    };
    let m = manager(&req, &q);
    match req.method().clone() {
        Method::GET => Ok(json_response(
            200,
            &shared.store().get(rt, version, ns, name)?,
        )),
        Method::PUT => {
            let body = body_json(req, false).await?;
            field_validation(&q, rt, &body)?;
            let out = shared
                .store()
                .replace(rt, version, ns, name, body, target, &m)?;
            Ok(json_response(200, &out))
        }
        Method::PATCH => {
            let ct = req
                .headers()
                .get("content-type")
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default()
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            match ct.as_str() {
                "application/apply-patch+yaml" => {
                    let Some(manager) = q.get("fieldManager").map(String::from) else {
                        return Err(ApiError::invalid(
                            "meta.k8s.io",
                            "PatchOptions",
                            "",
                            vec![crate::error::Cause {
                                reason: "FieldValueRequired",
                                field: "fieldManager".into(),
                                message: "Required value: is required for apply patch".into(),
                            }],
                        ));
                    };
                    let force = q.flag("force");
                    let body = body_json(req, true).await?;
                    field_validation(&q, rt, &body)?;
                    let (out, created) = shared
                        .store()
                        .apply(rt, version, ns, name, body, target, &manager, force)?;
                    Ok(json_response(if created { 201 } else { 200 }, &out))
                }
                "application/merge-patch+json" => {
                    let patch = body_json(req, false).await?;
                    field_validation(&q, rt, &patch)?;
                    let out = shared
                        .store()
                        .merge_patch(rt, version, ns, name, &patch, target, &m)?;
                    Ok(json_response(200, &out))
                }
                "application/strategic-merge-patch+json" if rt.builtin => {
                    // Strategic merge differs from a merge patch only in how lists of
                    // built-in kinds merge; lace sends none.
                    let patch = body_json(req, false).await?;
                    let out = shared
                        .store()
                        .merge_patch(rt, version, ns, name, &patch, target, &m)?;
                    Ok(json_response(200, &out))
                }
                other => Err(ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/apply-patch+yaml (got {other:?})"),
                )),
            }
        }
        Method::DELETE => {
            if target == Target::Status {
                return Err(ApiError::new(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                ));
            }
            let bytes = req
                .into_body()
                .collect()
                .await
                .map_err(|e| ApiError::bad_request(format!("cannot read the body: {e}")))?
                .to_bytes();
            let body: Value = if bytes.is_empty() {
                json!({})
            } else {
                serde_json::from_slice(&bytes)
                    .map_err(|e| ApiError::bad_request(format!("bad DeleteOptions: {e}")))?
            };
            let opts = DeleteOptions {
                grace_period_seconds: q
                    .get("gracePeriodSeconds")
                    .and_then(|g| g.parse().ok())
                    .or_else(|| body["gracePeriodSeconds"].as_i64()),
                precondition_rv: body["preconditions"]["resourceVersion"]
                    .as_str()
                    .map(String::from),
                precondition_uid: body["preconditions"]["uid"].as_str().map(String::from),
            };
            let out = shared.store().delete(rt, version, ns, name, &opts)?;
            Ok(json_response(200, &out))
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
    }
}

/// OpenAPI v3 as far as kubectl reads it to learn whether the server validates fields
/// (`fieldValidation`) itself: `/openapi/v3` lists each group version, and each group
/// version's document has, per resource, its item path with a PATCH operation carrying
/// `x-kubernetes-group-version-kind` and the `fieldValidation` parameter. No schemas.
fn openapi_v3(shared: &Arc<Shared>, path: &str) -> Option<Response<Body>> {
    let rest = path.trim_matches('/').strip_prefix("openapi/v3")?;
    let store = shared.store();
    let gv_path = |group: &str, version: &str| {
        if group.is_empty() {
            format!("api/{version}")
        } else {
            format!("apis/{group}/{version}")
        }
    };
    let mut gvs = std::collections::BTreeMap::new();
    for t in store.types() {
        for v in &t.versions {
            gvs.entry(gv_path(&t.group, v))
                .or_insert_with(Vec::new)
                .push((t.clone(), v.clone()));
        }
    }
    let body = match rest.trim_start_matches('/') {
        "" => {
            let paths: serde_json::Map<String, Value> = gvs
                .keys()
                .map(|p| {
                    (
                        p.clone(),
                        json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", store.resource_version())}),
                    )
                })
                .collect();
            json!({"paths": paths})
        }
        gv => {
            let types = gvs.get(gv)?;
            let mut paths = serde_json::Map::new();
            for (t, v) in types {
                let item = if t.namespaced {
                    format!("/{gv}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
                } else {
                    format!("/{gv}/{}/{{name}}", t.plural)
                };
                paths.insert(
                    item,
                    json!({"patch": {
                        "x-kubernetes-group-version-kind": {"group": t.group, "version": v, "kind": t.kind},
                        "parameters": [
                            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                            {"name": "force", "in": "query", "schema": {"type": "boolean"}},
                        ],
                        "responses": {"200": {"description": "OK"}},
                    }}),
                );
            }
            json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": "v1.36.0"},
                "paths": paths,
                "components": {"schemas": {}},
            })
        }
    };
    Some(json_response(200, &body))
}

/// The legacy discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`) and
/// `/version`, for kubectl.
fn discovery(shared: &Arc<Shared>, path: &str) -> Option<Response<Body>> {
    let store = shared.store();
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let resources = |group: &str, version: &str| {
        let list: Vec<Value> = store
            .types()
            .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
            .flat_map(|t| {
                let mut out = vec![json!({
                    "name": t.plural,
                    "singularName": t.singular,
                    "namespaced": t.namespaced,
                    "kind": t.kind,
                    "shortNames": t.short_names,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                })];
                if t.status_subresource {
                    out.push(json!({
                        "name": format!("{}/status", t.plural),
                        "singularName": "",
                        "namespaced": t.namespaced,
                        "kind": t.kind,
                        "verbs": ["get", "patch", "update"],
                    }));
                }
                out
            })
            .collect();
        let gv = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list})
    };
    let body = match segs.as_slice() {
        ["version"] => json!({
            "major": "1", "minor": "36", "gitVersion": "v1.36.0-lace-kube-fake",
            "platform": "linux/amd64",
        }),
        ["api"] => json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}]}),
        ["api", v] => resources("", v),
        ["apis"] => {
            let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
            for t in store.types().filter(|t| !t.group.is_empty()) {
                let e = groups.entry(t.group.clone()).or_default();
                for v in &t.versions {
                    if !e.contains(v) {
                        e.push(v.clone());
                    }
                }
            }
            let list: Vec<Value> = groups
                .into_iter()
                .map(|(g, vs)| {
                    let versions: Vec<Value> = vs
                        .iter()
                        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                        .collect();
                    json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
                })
                .collect();
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list})
        }
        ["apis", g, v] => resources(g, v),
        _ => return None,
    };
    Some(json_response(200, &body))
}
