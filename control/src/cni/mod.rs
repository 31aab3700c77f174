//! `lace-cni`, the CNI plugin (spec 1.1): ADD, DEL, CHECK, STATUS, GC and VERSION.
//!
//! The protocol side (environment, configuration on stdin, version negotiation, result and
//! error JSON on stdout, exit code) is `rscni-plugin`'s; this module is what each command does.
//! The plugin keeps no state of its own: `lace-control` owns the allocation of every
//! (container id, interface) and answers the same for a retried call ([`crate::proto`]).
//!
//! | command | what it does |
//! |---|---|
//! | ADD | `Allocate` → veth pair (host end in the node's namespace, pod end `CNI_IFNAME` in `CNI_NETNS`, see [`link`]) → `Attach` (waits until the forwarder reports the port up) → result |
//! | DEL | deletes `CNI_IFNAME` in `CNI_NETNS` when both exist, asks control for the host end (`Check`) and deletes it when it is still there, then `Release` |
//! | CHECK | `Check` → compares the pod end (MAC, MTU, up, addresses, routes) and the host end with the allocation |
//! | STATUS | `Status` |
//! | GC | `Gc` with `cni.dev/valid-attachments` |
//! | VERSION | 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0 |
//!
//! ADD and retries: the CNI spec requires an error when the container already has an interface
//! named `CNI_IFNAME`, so an ADD that finds one — made by an earlier ADD of the same container
//! or by someone else — fails with 102 (`AlreadyExists`, as [`crate::proto::ErrorCode`]
//! defines it) and leaves it, and the earlier ADD's allocation, untouched. A retried ADD whose
//! interface is gone (the pod's namespace lost it) gets the same allocation, makes the
//! interface again and attaches it; control gives the attachment a new endpoint id, so the
//! forwarder replaces the port bound to the vanished interface and traffic flows again.
//! When anything else fails after `Allocate`, ADD undoes what belongs to the attachment —
//! deletes the veth it made and sends `Release` — before it reports the error, so a failed ADD
//! leaks neither an interface nor addresses whether or not the runtime follows up with DEL;
//! kubelet's retry then starts clean. (`Release` is best effort there: if control is
//! unreachable, the runtime's DEL releases.)
//!
//! Error codes: control unreachable or too slow → 11 (try again later) for ADD, DEL, CHECK and
//! GC — kubelet retries DEL until it succeeds, so an attachment is never forgotten while control
//! is down; → 50 (plugin not available) for STATUS. Codes from control are passed on by meaning
//! ([`ErrorCode`]); a CHECK mismatch → 999 with every difference named. A variable the command
//! needs and the runtime did not set → 4, its name in the message ([`missing_variables`]).
//! Other parameter and configuration errors are the library's: 6 (stdin is not JSON), 7
//! (network configuration), 1 (version).

pub mod client;
pub mod config;
pub mod link;

use std::path::{Path, PathBuf};

use rscni_plugin::cni::{Cni, Plugin};
use rscni_plugin::error::Error;
use rscni_plugin::types::{Args, CNIResult, ErrorResult, Interface, IpConfig, Route};
use rscni_plugin::version::SpecVersion;

use crate::proto::{Allocation, Attachment, ErrorCode, Request, Response};
use client::{ClientError, ControlClient};
use config::{ConfigError, PluginConfig, PodArgs};
use link::{LinkError, PodLinkSpec, PodLinkState};

/// The CNI versions the plugin speaks.
pub const SUPPORTED_VERSIONS: [(u32, u32, u32); 5] =
    [(0, 3, 0), (0, 3, 1), (0, 4, 0), (1, 0, 0), (1, 1, 0)];

/// Why a command failed; each becomes one CNI error result ([`CniFailure::into_cni`]).
#[derive(Debug, thiserror::Error)]
pub enum CniFailure {
    /// lace's keys of the configuration or `CNI_ARGS` are unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A parameter the command needs is missing.
    #[error("{0} is not set; the runtime must set it for this command")]
    MissingParameter(&'static str),
    /// GC without the list of valid attachments.
    #[error(
        "GC: the configuration has no \"cni.dev/valid-attachments\"; without it every \
         attachment would be released, so nothing was (the runtime must send the list, empty \
         when no attachment is valid)"
    )]
    NoValidAttachments,
    /// Control could not be asked.
    #[error(transparent)]
    Control(#[from] ClientError),
    /// Control answered with an error.
    #[error("lace-control refused {op}: {msg}")]
    Refused {
        /// The request's operation.
        op: &'static str,
        /// Control's code.
        code: ErrorCode,
        /// Control's message.
        msg: String,
        /// Control's details.
        details: String,
    },
    /// Control answered something that does not fit the request.
    #[error(
        "lace-control answered {op} with {got}; are lace-cni and lace-control of the same release?"
    )]
    Unexpected {
        /// The request's operation.
        op: &'static str,
        /// What came back.
        got: String,
    },
    /// Attach returned another allocation than Allocate.
    #[error("lace-control changed the allocation between Allocate and Attach ({0}); the interface was removed, retry the ADD")]
    AllocationChanged(String),
    /// Link work failed.
    #[error(transparent)]
    Link(#[from] LinkError),
}

impl CniFailure {
    /// The CNI error result for this failure. `status` selects STATUS's codes (50 instead of 11
    /// for an unreachable control).
    pub fn into_cni(self, status: bool) -> Error {
        let text = self.to_string();
        match self {
            // Code 4 with the variable in the message itself, not only in the details.
            CniFailure::MissingParameter(_) | CniFailure::Config(ConfigError::BadArgsEntry(_)) => {
                Error::Custom(4, text, String::new())
            }
            CniFailure::Config(_) | CniFailure::NoValidAttachments => {
                Error::InvalidNetworkConfig(text)
            }
            CniFailure::Control(ClientError::BadResponse { .. })
            | CniFailure::Unexpected { .. } => Error::Custom(
                ErrorCode::Internal.code(),
                "lace-control protocol error".into(),
                text,
            ),
            CniFailure::Control(_) if status => Error::PluginNotAvailable(text),
            CniFailure::Control(_) => Error::TryAgainLater(text),
            CniFailure::Refused {
                code,
                msg,
                details,
                op,
            } => {
                let full = if details.is_empty() {
                    format!("lace-control refused {op}: {msg}")
                } else {
                    format!("lace-control refused {op}: {msg}; {details}")
                };
                if status {
                    return Error::PluginNotAvailable(full);
                }
                match code {
                    ErrorCode::InvalidConfig => Error::InvalidNetworkConfig(full),
                    ErrorCode::InvalidArgs => Error::InvalidEnvValue(full),
                    ErrorCode::TryAgainLater => Error::TryAgainLater(full),
                    ErrorCode::AlreadyExists
                    | ErrorCode::Unbound
                    | ErrorCode::AddressesExhausted
                    | ErrorCode::Internal => Error::Custom(code.code(), msg, details),
                }
            }
            CniFailure::AllocationChanged(_) => Error::TryAgainLater(text),
            CniFailure::Link(LinkError::AlreadyExists { .. }) => Error::Custom(
                ErrorCode::AlreadyExists.code(),
                "interface already exists".into(),
                text,
            ),
            CniFailure::Link(LinkError::NetnsGone(_)) => Error::NotExist(text),
            CniFailure::Link(LinkError::Mismatch { .. }) => Error::Custom(
                ErrorCode::Internal.code(),
                "interface differs from its allocation".into(),
                text,
            ),
            CniFailure::Link(_) => Error::Custom(
                ErrorCode::Internal.code(),
                "pod interface setup failed".into(),
                text,
            ),
        }
    }
}

/// The plugin; [`run`] is the whole binary.
#[derive(Debug, Default)]
pub struct LacePlugin;

/// The variables the CNI spec requires for `command` (1.1, "Parameters") that `get` finds
/// unset or empty, as the error to answer with: code 4, the names in the message itself.
pub fn missing_variables(command: &str, get: impl Fn(&str) -> Option<String>) -> Option<Error> {
    let need: &[&str] = match command {
        "ADD" | "CHECK" => &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"],
        "DEL" => &["CNI_CONTAINERID", "CNI_IFNAME"],
        "GC" => &["CNI_PATH"],
        _ => &[],
    };
    let missing: Vec<&str> = need
        .iter()
        .copied()
        .filter(|v| get(v).is_none_or(|x| x.is_empty()))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let (names, verb) = match missing.as_slice() {
        [one] => ((*one).to_owned(), "is"),
        many => (many.join(", "), "are"),
    };
    Some(Error::Custom(
        4,
        format!("{names} {verb} not set; the runtime must set {names} for CNI_COMMAND={command}"),
        format!("the CNI spec requires {} for {command}", need.join(", ")),
    ))
}

/// Runs the plugin on this process's environment, stdin and stdout; returns the exit code.
pub fn run() -> i32 {
    let command = std::env::var("CNI_COMMAND").unwrap_or_default();
    if let Some(e) = missing_variables(&command, |v| std::env::var(v).ok()) {
        let result = ErrorResult::new(SpecVersion::new(1, 1, 0), &e);
        match serde_json::to_string(&result) {
            Ok(json) => println!("{json}"),
            Err(_) => println!("{{\"code\":4,\"msg\":{:?}}}", e.msg()),
        }
        eprintln!("lace-cni: {e}");
        return 1;
    }
    let versions = SUPPORTED_VERSIONS
        .iter()
        .map(|&(a, b, c)| SpecVersion::new(a, b, c))
        .collect();
    let plugin = Plugin::new(SpecVersion::new(1, 1, 0), versions).msg(concat!(
        "lace-cni ",
        env!("CARGO_PKG_VERSION"),
        ": lace's CNI plugin"
    ));
    match plugin.run(&LacePlugin) {
        Ok(()) => 0,
        Err(e) => {
            // The error result is already on stdout; stderr is for a person reading logs.
            eprintln!("lace-cni: {e}");
            1
        }
    }
}

/// One ADD/DEL/CHECK call's parameters.
struct Call {
    config: PluginConfig,
    attachment: Attachment,
    netns: Option<PathBuf>,
}

impl Call {
    fn from_args(args: &Args) -> Result<Call, CniFailure> {
        let config = PluginConfig::from_custom(&args.config().custom)?;
        let pod = PodArgs::parse(args.args())?;
        let container_id = args
            .container_id()
            .ok_or(CniFailure::MissingParameter("CNI_CONTAINERID"))?;
        let ifname = args
            .ifname()
            .ok_or(CniFailure::MissingParameter("CNI_IFNAME"))?;
        let netns = args.netns().cloned();
        Ok(Call {
            config,
            attachment: Attachment {
                container_id: container_id.as_ref().to_string(),
                ifname: ifname.as_ref().to_string(),
                pod_namespace: pod.namespace,
                pod_name: pod.name,
                pod_uid: pod.uid,
                netns: netns
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            },
            netns,
        })
    }

    fn client(&self) -> ControlClient {
        ControlClient::new(&self.config.control_socket, self.config.connect_timeout)
    }

    fn netns(&self) -> Result<&Path, CniFailure> {
        self.netns
            .as_deref()
            .ok_or(CniFailure::MissingParameter("CNI_NETNS"))
    }

    fn ifname(&self) -> &str {
        &self.attachment.ifname
    }
}

fn allocation(op: &'static str, r: Response) -> Result<Allocation, CniFailure> {
    match r {
        Response::Allocated(a) => Ok(a),
        Response::Error { code, msg, details } => Err(CniFailure::Refused {
            op,
            code,
            msg,
            details,
        }),
        Response::Ok => Err(CniFailure::Unexpected {
            op,
            got: "ok instead of an allocation".into(),
        }),
    }
}

fn done(op: &'static str, r: Response) -> Result<(), CniFailure> {
    match r {
        Response::Ok => Ok(()),
        Response::Error { code, msg, details } => Err(CniFailure::Refused {
            op,
            code,
            msg,
            details,
        }),
        Response::Allocated(_) => Err(CniFailure::Unexpected {
            op,
            got: "an allocation instead of ok".into(),
        }),
    }
}

/// The ADD result (CNI 1.1 "Success"): the host end, the pod end (index 1, in the sandbox),
/// its addresses with gateways, and the routes.
pub fn add_result(spec: &PodLinkSpec, host_mac: &[u8], netns: &Path) -> CNIResult {
    CNIResult {
        interfaces: vec![
            Interface {
                name: spec.host_interface.clone(),
                mac: link::format_mac(host_mac),
                mtu: Some(spec.mtu),
                sandbox: None,
                socket_path: None,
                pci_id: None,
            },
            Interface {
                name: spec.ifname.clone(),
                mac: link::format_mac(&spec.mac),
                mtu: Some(spec.mtu),
                sandbox: Some(netns.display().to_string()),
                socket_path: None,
                pci_id: None,
            },
        ],
        ips: spec
            .addresses
            .iter()
            .map(|(net, gw)| IpConfig {
                interface: Some(1),
                address: *net,
                gateway: Some(*gw),
            })
            .collect(),
        routes: spec
            .routes
            .iter()
            .map(|(dst, gw)| Route {
                dst: *dst,
                gw: Some(*gw),
                mtu: None,
                advmss: None,
                priority: None,
                table: None,
                scope: None,
            })
            .collect(),
        dns: None,
    }
}

impl LacePlugin {
    fn add_inner(&self, args: &Args) -> Result<CNIResult, CniFailure> {
        let call = Call::from_args(args)?;
        let netns = call.netns()?.to_path_buf();
        let client = call.client();
        let alloc = allocation(
            "Allocate",
            client.call(
                &Request::Allocate(call.attachment.clone()),
                call.config.request_timeout,
            )?,
        )?;
        let mut created: Option<PodLinkSpec> = None;
        let outcome = PodLinkSpec::from_allocation(&alloc, call.ifname())
            .map_err(CniFailure::from)
            .and_then(|spec| {
                let r = plumb_and_attach(&call, &client, &alloc, &spec, &netns, &mut created);
                r.map(|host_mac| add_result(&spec, &host_mac, &netns))
            });
        if let Err(e) = &outcome {
            // An interface that exists belongs to an earlier ADD (or someone else): its
            // allocation stays unless this ADD made it.
            let release =
                alloc.fresh || !matches!(e, CniFailure::Link(LinkError::AlreadyExists { .. }));
            undo_add(&call, &client, &netns, created.as_ref(), release);
        }
        outcome
    }

    fn del_inner(&self, args: &Args) -> Result<(), CniFailure> {
        let call = Call::from_args(args)?;
        let client = call.client();
        // The pod end first: it needs nothing from control, and takes the host end with it.
        if let Some(netns) = &call.netns {
            link::delete_pod_end(netns, call.ifname(), None)?;
        }
        // A host end whose pod end is elsewhere (CNI_NETNS not given) goes by its name.
        match client.call(
            &Request::Check(call.attachment.clone()),
            call.config.request_timeout,
        )? {
            Response::Allocated(a) if !a.host_interface.is_empty() => {
                link::delete_host_end(&a.host_interface)?;
            }
            // Control no longer knows the attachment: nothing to name, Release decides.
            _ => {}
        }
        done(
            "Release",
            client.call(
                &Request::Release(call.attachment.clone()),
                call.config.request_timeout,
            )?,
        )
    }

    fn check_inner(&self, args: &Args) -> Result<(), CniFailure> {
        let call = Call::from_args(args)?;
        let netns = call.netns()?;
        let alloc = allocation(
            "Check",
            call.client().call(
                &Request::Check(call.attachment.clone()),
                call.config.request_timeout,
            )?,
        )?;
        let spec = PodLinkSpec::from_allocation(&alloc, call.ifname())?;
        link::verify(&spec, netns)?;
        Ok(())
    }

    fn status_inner(&self, args: &Args) -> Result<(), CniFailure> {
        let config = PluginConfig::from_custom(&args.config().custom)?;
        let client = ControlClient::new(&config.control_socket, config.connect_timeout);
        done(
            "Status",
            client.call(&Request::Status, config.request_timeout)?,
        )
    }

    fn gc_inner(&self, args: &Args) -> Result<(), CniFailure> {
        let config = PluginConfig::from_custom(&args.config().custom)?;
        let valid = args
            .config()
            .valid_attachments
            .as_ref()
            .ok_or(CniFailure::NoValidAttachments)?
            .iter()
            .map(|a| Attachment {
                container_id: a.container_id.clone(),
                ifname: a.ifname.clone(),
                pod_namespace: String::new(),
                pod_name: String::new(),
                pod_uid: String::new(),
                netns: String::new(),
            })
            .collect();
        let client = ControlClient::new(&config.control_socket, config.connect_timeout);
        done(
            "Gc",
            client.call(&Request::Gc { valid }, config.request_timeout)?,
        )
    }
}

/// ADD's steps after Allocate. Sets `created` once the veth exists (made now or found from an
/// earlier try), so a failure undoes it. Returns the host end's MAC.
fn plumb_and_attach(
    call: &Call,
    client: &ControlClient,
    alloc: &Allocation,
    spec: &PodLinkSpec,
    netns: &Path,
    created: &mut Option<PodLinkSpec>,
) -> Result<Vec<u8>, CniFailure> {
    match link::pod_link_state(netns, &spec.ifname)? {
        PodLinkState::Absent => {
            link::create_veth(spec, netns)?;
        }
        PodLinkState::Present { mac, veth } => {
            let found = if veth && mac == spec.mac {
                format!(
                    "the veth an earlier ADD of container {} made (MAC {}); the runtime must DEL \
                     before it ADDs again",
                    call.attachment.container_id,
                    link::format_mac(&mac)
                )
            } else {
                format!(
                    "{} with MAC {}, the allocation's is {}",
                    if veth { "a veth" } else { "not a veth" },
                    link::format_mac(&mac),
                    link::format_mac(&spec.mac)
                )
            };
            return Err(LinkError::AlreadyExists {
                ifname: spec.ifname.clone(),
                netns: netns.display().to_string(),
                found,
            }
            .into());
        }
    }
    *created = Some(spec.clone());
    let host_mac = link::configure_host_end(spec)?;
    link::configure_pod_end(spec, netns)?;
    let attached = allocation(
        "Attach",
        client.call(
            &Request::Attach(call.attachment.clone()),
            call.config.attach_timeout,
        )?,
    )?;
    if !alloc.same_interface(&attached) {
        return Err(CniFailure::AllocationChanged(format!(
            "Allocate gave {} {}, Attach {} {}",
            alloc.host_interface, alloc.mac, attached.host_interface, attached.mac
        )));
    }
    Ok(host_mac)
}

/// Undoes an ADD that failed after Allocate: deletes the veth this ADD made (never an interface
/// it found) and, with `release`, releases the allocation. Best effort: its own failures are
/// reported on stderr only, the ADD's error is the one that counts.
fn undo_add(
    call: &Call,
    client: &ControlClient,
    netns: &Path,
    created: Option<&PodLinkSpec>,
    release: bool,
) {
    if let Some(spec) = created {
        if let Err(e) = link::delete_host_end(&spec.host_interface) {
            eprintln!("lace-cni: undoing ADD: {e}");
        }
        if let Err(e) = link::delete_pod_end(netns, &spec.ifname, Some(spec.mac)) {
            eprintln!("lace-cni: undoing ADD: {e}");
        }
    }
    if !release {
        return;
    }
    match client.call(
        &Request::Release(call.attachment.clone()),
        call.config.request_timeout,
    ) {
        Ok(Response::Ok) => {}
        Ok(other) => eprintln!("lace-cni: undoing ADD: Release answered {other:?}"),
        Err(e) => eprintln!("lace-cni: undoing ADD: {e} (the runtime's DEL will release)"),
    }
}

impl Cni for LacePlugin {
    fn add(&self, args: Args) -> Result<CNIResult, Error> {
        self.add_inner(&args).map_err(|f| f.into_cni(false))
    }

    fn del(&self, args: Args) -> Result<(), Error> {
        self.del_inner(&args).map_err(|f| f.into_cni(false))
    }

    fn check(&self, args: Args) -> Result<(), Error> {
        self.check_inner(&args).map_err(|f| f.into_cni(false))
    }

    fn status(&self, args: Args) -> Result<(), Error> {
        self.status_inner(&args).map_err(|f| f.into_cni(true))
    }

    fn gc(&self, args: Args) -> Result<(), Error> {
        self.gc_inner(&args).map_err(|f| f.into_cni(false))
    }
}
