//! The `lace-control` command line: `run` (the daemon) and `status` (what a running or
//! stopped daemon last reported), parsed with clap and resolved into a [`RunConfig`].
//!
//! Guarantees: every value is checked before anything starts ([`RunConfig::from_args`]); a
//! bad one is a [`ConfigError`] naming the flag, the value and the fix, and the binary exits
//! with status 2. Defaults derived from other flags (state directory, state file, socket,
//! tables name) are resolved here, so the daemon never guesses.
//!
//! Control's own files (the status file, the attachment marks and, standalone, the IPAM state
//! file) live in one directory, [`NodePaths::state_dir`]: `--state-dir`, by default
//! `<manifests>/.lace` ([`STATE_SUBDIR`]) — standalone mode's place, unchanged — or, in
//! Kubernetes mode without `--manifests`, `/var/lib/lace/<node>` ([`DEFAULT_STATE_ROOT`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use ipnet::{IpNet, Ipv6Net};

use crate::ipam::IpamConfig;
use crate::service::ServiceCidr;

/// The directory under the manifests directory where control keeps its files (state, status,
/// attachment marks) unless `--state-dir` says otherwise. The standalone source reads the
/// manifests directory non-recursively, so nothing here is ever taken for a manifest.
pub const STATE_SUBDIR: &str = ".lace";

/// Where control keeps its files when there is no manifests directory (Kubernetes mode) and
/// no `--state-dir`: `<DEFAULT_STATE_ROOT>/<node>` (a hostPath in a DaemonSet, so the
/// attachment marks outlive the container).
pub const DEFAULT_STATE_ROOT: &str = "/var/lib/lace";

/// `lace-control`: lace's node control plane.
#[derive(Debug, Parser)]
#[command(name = "lace-control", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the control plane of one node: watch the manifests, keep the IPAM state, compile and
    /// publish the node's forwarding tables, answer lace-cni on a unix socket. Runs until
    /// SIGTERM or SIGINT.
    Run(Box<RunArgs>),
    /// Print what the node's control plane last reported: networks (id, type, subnets,
    /// conditions), policies (conditions), this node's endpoints and the forwarder's port states.
    Status(StatusArgs),
}

/// Flags shared by `run` and `status`.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// This node's name: the Kubernetes Node (with the `lace-cni.io/underlay` annotation) in
    /// the manifests or the API server.
    #[arg(long, value_name = "NAME")]
    pub node: String,
    /// The directory of YAML manifests (Networks, policies, Namespaces, Nodes, Pods, Services),
    /// watched for changes. Shared by every node's control on one machine. Required with
    /// `--source standalone`; not read with `--source kubernetes`.
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// The directory of control's own files: this node's status file
    /// (`status-<NODE>.yaml`), its attachment marks and, standalone, the default state file.
    /// Default: `<DIR>/.lace` of `--manifests`, else `/var/lib/lace/<NODE>`. Created if absent.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Standalone mode's IPAM state file, shared by every node's control that uses the same
    /// manifests (serialised by an exclusive lock on `<FILE>.lock`). Default:
    /// `<STATE_DIR>/state.json`. Kubernetes mode keeps allocations in the API server instead.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Directory of the shared-memory tables and the forwarder's status region. Default: the
    /// first hugetlbfs mount, else /dev/shm (as the forwarder's default).
    #[arg(long, value_name = "DIR")]
    pub tables_dir: Option<PathBuf>,
    /// Name of the table set (`lace-<NAME>.tables`), the forwarder's `name`. Default: the node.
    #[arg(long, value_name = "NAME")]
    pub tables_name: Option<String>,
}

/// `lace-control run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Node, manifests, state and tables.
    #[command(flatten)]
    pub node: NodeArgs,
    /// The unix socket lace-cni connects to (mode 0660, parent directory created). Default:
    /// `/run/lace/<NODE>/control.sock`.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// MTU of the node's uplink; pods get this minus 40 (the outer IPv6 header).
    #[arg(long, value_name = "BYTES", default_value_t = 1500)]
    pub underlay_mtu: u16,
    /// The cluster's SRv6 locator pool; each node gets a /48 of it unless its Node carries
    /// `lace-cni.io/locator`. Must be the same for every node sharing a state file.
    #[arg(long, value_name = "PREFIX", default_value = "fc00::/32")]
    pub locator_pool: String,
    /// How long an Attach waits for the forwarder to report the pod's port up before
    /// answering "try again later".
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub attach_timeout_ms: u64,
    /// How long an ADD for a pod control has not observed yet (not in the manifests yet, not
    /// yet seen from the API) waits for it before answering "try again later" (below
    /// lace-cni's request timeout).
    #[arg(long, value_name = "MS", default_value_t = 3_000)]
    pub pod_wait_ms: u64,
    /// Where the objects come from: `standalone` reads the manifests directory; `kubernetes`
    /// watches an API server (no manifests needed).
    #[arg(long, value_enum, default_value_t = SourceKind::Standalone)]
    pub source: SourceKind,
    /// The kubeconfig for `--source kubernetes`. Default: `$KUBECONFIG` or `~/.kube/config`
    /// when there is one, else the in-cluster configuration (a pod's service account token and
    /// `KUBERNETES_SERVICE_HOST`/`_PORT`: what a DaemonSet gets).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// With `--source kubernetes`: the namespace of the ConfigMap `lace-ipam` in which
    /// earlier versions kept the allocation state (migrated to objects at start), the same
    /// for every node.
    #[arg(long, value_name = "NAMESPACE", default_value = "lace-system")]
    pub namespace: String,
    /// Give the node's own network stack an interface into its pods (ADR 0023): a veth pair
    /// `NAME` / `NAME-fw` in the host's namespace, with routes to this node's pods through
    /// it; the forwarder attaches `NAME-fw`. Needs CAP_NET_ADMIN. At most 12 characters.
    #[arg(long, value_name = "NAME")]
    pub host_interface: Option<String>,
    /// The network namespace the host interface lives in (a path such as
    /// `/var/run/netns/NAME`); default: control's own (the host's, on a node).
    #[arg(long, value_name = "PATH", requires = "host_interface")]
    pub host_netns: Option<PathBuf>,
    /// The cluster's service range: one IPv4 and/or one IPv6 prefix (repeated or
    /// comma-separated), the same as kube-apiserver's `--service-cluster-ip-range`. A Service
    /// with a ClusterIP outside it is not programmed (`Programmed=False`,
    /// `ClusterIPOutsideServiceCIDR`). Default: no range, no check.
    #[arg(long, value_name = "PREFIX", value_delimiter = ',')]
    pub service_cidr: Vec<String>,
    /// Serve Prometheus metrics (objects, endpoints, publications and their latency, CNI
    /// requests) at http://ADDR/metrics, e.g. 0.0.0.0:9412.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// `--source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceKind {
    /// The manifests directory.
    Standalone,
    /// A Kubernetes API server.
    Kubernetes,
}

/// Where `run` reads its objects, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceConfig {
    /// A manifests directory.
    Standalone {
        /// The directory ([`NodePaths::manifests`]).
        manifests: PathBuf,
    },
    /// An API server.
    Kubernetes(crate::source::kubernetes::KubernetesConfig),
}

/// `lace-control status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// Node, manifests, state and tables.
    #[command(flatten)]
    pub node: NodeArgs,
}

/// A flag value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `--host-interface` is not a usable interface name.
    #[error(
        "--host-interface {value:?}: use 1-{} characters without '/', ':' or whitespace (the \
         forwarder's end is the name with -fw appended), e.g. lace-host",
        super::host::MAX_NAME
    )]
    HostInterface {
        /// The value given.
        value: String,
    },
    /// `--kubeconfig` without `--source kubernetes`.
    #[error(
        "--kubeconfig is only used with --source kubernetes; add --source kubernetes or drop it"
    )]
    KubeconfigWithoutKubernetes,
    /// `--node` is not a valid node name.
    #[error("--node {value:?}: {reason}; use the Node's metadata.name, e.g. node-a")]
    Node {
        /// The value.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// `--tables-name` is unusable.
    #[error("--tables-name {value:?}: {reason}; use letters, digits, '-', '_' or '.'")]
    TablesName {
        /// The value.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// Standalone mode without a manifests directory.
    #[error(
        "--manifests is required with --source standalone (the default); pass the directory \
         holding the YAML manifests, or use --source kubernetes"
    )]
    ManifestsRequired,
    /// `--state` in Kubernetes mode.
    #[error(
        "--state is standalone mode's IPAM state file; with --source kubernetes allocations \
         live in the API server (Claims, Allocations, Neighbors, NetworkEndpoints): drop --state (control's \
         own files go to --state-dir)"
    )]
    StateWithKubernetes,
    /// `--state-dir` exists but is not a directory.
    #[error("--state-dir {path}: not a directory; pass the directory for control's own files")]
    StateDir {
        /// The path.
        path: PathBuf,
    },
    /// The manifests directory is not a directory.
    #[error("--manifests {path}: {reason}; pass the directory holding the YAML manifests")]
    Manifests {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `--locator-pool` is not an IPv6 prefix that can hold /48 locators.
    #[error("--locator-pool {value:?}: {reason}; use an IPv6 prefix of /48 or shorter without host bits, e.g. fc00::/32")]
    LocatorPool {
        /// The value.
        value: String,
        /// Why.
        reason: String,
    },
    /// `--service-cidr` is not one prefix per family.
    #[error(
        "--service-cidr {value:?}: {reason}; give kube-apiserver's --service-cluster-ip-range: \
         one IPv4 and/or one IPv6 prefix without host bits, e.g. 10.96.0.0/12,fd96::/108"
    )]
    ServiceCidr {
        /// The value.
        value: String,
        /// Why.
        reason: String,
    },
    /// `--underlay-mtu` too small for pods.
    #[error("--underlay-mtu {value}: pods get MTU − 40, which must be at least 1280 (IPv6's minimum); use 1320 or more")]
    UnderlayMtu {
        /// The value.
        value: u16,
    },
    /// `--attach-timeout-ms` out of range.
    #[error("--attach-timeout-ms {value}: must be between 100 and 110000 (lace-cni's own limit is 110 s)")]
    AttachTimeout {
        /// The value.
        value: u64,
    },
    /// `--pod-wait-ms` out of range.
    #[error(
        "--pod-wait-ms {value}: must be at most 4000 (lace-cni gives a request 5 s by default)"
    )]
    PodWait {
        /// The value.
        value: u64,
    },
    /// `--socket` is unusable.
    #[error("--socket {path}: {reason}")]
    Socket {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
}

/// Where a node's files are, resolved (shared by `run` and `status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePaths {
    /// This node.
    pub node: String,
    /// The manifests directory (always there in standalone mode).
    pub manifests: Option<PathBuf>,
    /// The directory of control's own files (see the module docs).
    pub state_dir: PathBuf,
    /// Standalone mode's IPAM state file.
    pub state: PathBuf,
    /// The tables directory.
    pub tables_dir: PathBuf,
    /// The table set name.
    pub tables_name: String,
}

impl NodePaths {
    /// The lock file serialising every mutation of [`NodePaths::state`]: `<state>.lock`.
    pub fn lock_file(&self) -> PathBuf {
        let mut s = self.state.clone().into_os_string();
        s.push(".lock");
        PathBuf::from(s)
    }

    /// This node's status file: `<state dir>/status-<node>.yaml`.
    pub fn status_file(&self) -> PathBuf {
        self.state_dir.join(format!("status-{}.yaml", self.node))
    }

    /// This node's attachment marks (which leases have their interface plumbed):
    /// `attached-<node>.json` beside the state file (in the state directory unless `--state`
    /// puts the state file elsewhere).
    pub fn attached_file(&self) -> PathBuf {
        let dir = self
            .state
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        dir.join(format!("attached-{}.json", self.node))
    }

    /// Kubernetes mode's copy of this node's allocation objects and the deletions it owes the
    /// API server (ADR 0041): `<state dir>/cluster-<node>.json`.
    pub fn cluster_file(&self) -> PathBuf {
        self.state_dir.join(format!("cluster-{}.json", self.node))
    }

    /// The table set.
    pub fn tables(&self) -> lace_shared::tables::TablesConfig {
        let mut t = lace_shared::tables::TablesConfig::new(&self.tables_name);
        t.dir = self.tables_dir.clone();
        t
    }

    /// The forwarder's status region.
    pub fn forwarder_status(&self) -> PathBuf {
        lace_shared::status::status_path(&self.tables_dir, &self.tables_name)
    }

    fn from_args(a: &NodeArgs) -> Result<NodePaths, ConfigError> {
        if let Err(reason) = crate::api::validate::dns_subdomain(&a.node) {
            return Err(ConfigError::Node {
                value: a.node.clone(),
                reason,
            });
        }
        if let Some(manifests) = &a.manifests {
            match std::fs::metadata(manifests) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(ConfigError::Manifests {
                        path: manifests.clone(),
                        reason: "not a directory".into(),
                    })
                }
                Err(e) => {
                    return Err(ConfigError::Manifests {
                        path: manifests.clone(),
                        reason: e.to_string(),
                    })
                }
            }
        }
        let state_dir = match (&a.state_dir, &a.manifests) {
            (Some(d), _) => d.clone(),
            (None, Some(m)) => m.join(STATE_SUBDIR),
            (None, None) => Path::new(DEFAULT_STATE_ROOT).join(&a.node),
        };
        if std::fs::metadata(&state_dir).is_ok_and(|m| !m.is_dir()) {
            return Err(ConfigError::StateDir { path: state_dir });
        }
        let tables_name = a.tables_name.clone().unwrap_or_else(|| a.node.clone());
        check_tables_name(&tables_name)?;
        Ok(NodePaths {
            node: a.node.clone(),
            manifests: a.manifests.clone(),
            state: a
                .state
                .clone()
                .unwrap_or_else(|| state_dir.join("state.json")),
            state_dir,
            tables_dir: a
                .tables_dir
                .clone()
                .unwrap_or_else(lace_shared::tables::default_dir),
            tables_name,
        })
    }
}

fn check_tables_name(v: &str) -> Result<(), ConfigError> {
    let bad = |reason| {
        Err(ConfigError::TablesName {
            value: v.to_owned(),
            reason,
        })
    };
    if v.is_empty() {
        return bad("empty");
    }
    if v.len() > 200 {
        return bad("longer than 200 characters");
    }
    if !v
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return bad("has characters other than letters, digits, '-', '_' and '.'");
    }
    Ok(())
}

/// Everything `lace-control run` needs, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// Node and files.
    pub paths: NodePaths,
    /// The CNI socket.
    pub socket: PathBuf,
    /// The uplink MTU.
    pub underlay_mtu: u16,
    /// Locator pool and length.
    pub ipam: IpamConfig,
    /// The Attach wait.
    pub attach_timeout: Duration,
    /// How long an ADD waits for its pod to be observed.
    pub pod_wait: Duration,
    /// The source of the objects.
    pub source: SourceConfig,
    /// Kubernetes mode: the namespace of the allocation state.
    pub namespace: String,
    /// The host interface to keep, and its namespace (None: control's own).
    pub host_interface: Option<(String, Option<PathBuf>)>,
    /// The cluster's service range (None: no check).
    pub service_cidr: Option<ServiceCidr>,
    /// Where `/metrics` is served (None: not served).
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl RunConfig {
    /// Checks and resolves `run`'s flags.
    pub fn from_args(a: &RunArgs) -> Result<RunConfig, ConfigError> {
        let paths = NodePaths::from_args(&a.node)?;
        let pool: Ipv6Net = a.locator_pool.parse().map_err(|e: ipnet::AddrParseError| {
            ConfigError::LocatorPool {
                value: a.locator_pool.clone(),
                reason: e.to_string(),
            }
        })?;
        if pool.trunc() != pool {
            return Err(ConfigError::LocatorPool {
                value: a.locator_pool.clone(),
                reason: format!("host bits set (the prefix is {})", pool.trunc()),
            });
        }
        let locator_len = IpamConfig::default().locator_len;
        if pool.prefix_len() > locator_len {
            return Err(ConfigError::LocatorPool {
                value: a.locator_pool.clone(),
                reason: format!("longer than the /{locator_len} of one node's locator"),
            });
        }
        if a.underlay_mtu
            .saturating_sub(crate::compile::ENCAP_OVERHEAD)
            < 1280
        {
            return Err(ConfigError::UnderlayMtu {
                value: a.underlay_mtu,
            });
        }
        if !(100..=110_000).contains(&a.attach_timeout_ms) {
            return Err(ConfigError::AttachTimeout {
                value: a.attach_timeout_ms,
            });
        }
        if a.pod_wait_ms > 4_000 {
            return Err(ConfigError::PodWait {
                value: a.pod_wait_ms,
            });
        }
        let socket = a.socket.clone().unwrap_or_else(|| {
            Path::new("/run/lace")
                .join(&paths.node)
                .join("control.sock")
        });
        if socket.as_os_str().len() > 107 {
            return Err(ConfigError::Socket {
                path: socket,
                reason: "longer than the 107 bytes a unix socket path may have; use a shorter path",
            });
        }
        let source = match a.source {
            SourceKind::Standalone => {
                if a.kubeconfig.is_some() {
                    return Err(ConfigError::KubeconfigWithoutKubernetes);
                }
                let Some(manifests) = paths.manifests.clone() else {
                    return Err(ConfigError::ManifestsRequired);
                };
                SourceConfig::Standalone { manifests }
            }
            SourceKind::Kubernetes => {
                if a.node.state.is_some() {
                    return Err(ConfigError::StateWithKubernetes);
                }
                SourceConfig::Kubernetes(crate::source::kubernetes::KubernetesConfig {
                    kubeconfig: a.kubeconfig.clone(),
                    node: paths.node.clone(),
                })
            }
        };
        if let Some(name) = &a.host_interface {
            if name.len() > super::host::MAX_NAME || lace_shared::types::IfName::new(name).is_err()
            {
                return Err(ConfigError::HostInterface {
                    value: name.clone(),
                });
            }
        }
        if socket.file_name().is_none() {
            return Err(ConfigError::Socket {
                path: socket,
                reason:
                    "names no file; give the socket's file name, e.g. /run/lace/node-a/control.sock",
            });
        }
        Ok(RunConfig {
            paths,
            socket,
            underlay_mtu: a.underlay_mtu,
            ipam: IpamConfig {
                locator_pool: pool,
                locator_len,
            },
            attach_timeout: Duration::from_millis(a.attach_timeout_ms),
            pod_wait: Duration::from_millis(a.pod_wait_ms),
            source,
            namespace: a.namespace.clone(),
            host_interface: a.host_interface.clone().map(|n| (n, a.host_netns.clone())),
            service_cidr: service_cidr(&a.service_cidr)?,
            metrics_listen: a.metrics_listen,
        })
    }

    /// The compiler's settings.
    pub fn compile(&self) -> crate::compile::CompileConfig {
        crate::compile::CompileConfig {
            underlay_mtu: self.underlay_mtu,
            ..Default::default()
        }
    }
}

/// `--service-cidr`'s values, checked (see [`RunArgs::service_cidr`]).
fn service_cidr(values: &[String]) -> Result<Option<ServiceCidr>, ConfigError> {
    let bad = |value: &str, reason: String| ConfigError::ServiceCidr {
        value: value.to_owned(),
        reason,
    };
    let mut cidr = ServiceCidr::default();
    for v in values {
        let p: IpNet = v
            .parse()
            .map_err(|e: ipnet::AddrParseError| bad(v, e.to_string()))?;
        if p.trunc() != p {
            return Err(bad(
                v,
                format!("host bits set (the prefix is {})", p.trunc()),
            ));
        }
        let taken = match p {
            IpNet::V4(p4) => cidr.v4.replace(p4).map(IpNet::V4),
            IpNet::V6(p6) => cidr.v6.replace(p6).map(IpNet::V6),
        };
        if let Some(first) = taken {
            let family = if first.addr().is_ipv4() { 4 } else { 6 };
            return Err(bad(
                v,
                format!("a second IPv{family} range (the first is {first})"),
            ));
        }
    }
    Ok((cidr != ServiceCidr::default()).then_some(cidr))
}

impl StatusArgs {
    /// Checks and resolves `status`'s flags.
    pub fn paths(&self) -> Result<NodePaths, ConfigError> {
        NodePaths::from_args(&self.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("lace-control").chain(args.iter().copied()))
    }

    fn run_config(extra: &[&str]) -> Result<RunConfig, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap().to_owned();
        let mut args = vec!["--manifests", d.as_str()];
        args.extend_from_slice(extra);
        run_config_of(&args)
    }

    /// `run --node node-a` with `args` only.
    fn run_config_of(args: &[&str]) -> Result<RunConfig, ConfigError> {
        let mut all = vec!["run", "--node", "node-a"];
        all.extend_from_slice(args);
        let Command::Run(r) = parse(&all).unwrap().command else {
            panic!("not run")
        };
        RunConfig::from_args(&r)
    }

    #[test]
    fn kubernetes_mode_needs_no_manifests_and_keeps_its_files_in_the_state_dir() {
        let k = run_config_of(&["--source", "kubernetes"]).unwrap();
        assert_eq!(k.paths.manifests, None);
        assert_eq!(k.paths.state_dir, PathBuf::from("/var/lib/lace/node-a"));
        assert_eq!(
            k.paths.status_file(),
            PathBuf::from("/var/lib/lace/node-a/status-node-a.yaml")
        );
        assert_eq!(
            k.paths.attached_file(),
            PathBuf::from("/var/lib/lace/node-a/attached-node-a.json")
        );
        // No kubeconfig: inferred at start ($KUBECONFIG, ~/.kube/config, else in-cluster).
        assert_eq!(
            k.source,
            SourceConfig::Kubernetes(crate::source::kubernetes::KubernetesConfig {
                kubeconfig: None,
                node: "node-a".into(),
            })
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("lace");
        let k =
            run_config_of(&["--source", "kubernetes", "--state-dir", d.to_str().unwrap()]).unwrap();
        assert_eq!(k.paths.status_file(), d.join("status-node-a.yaml"));
        assert_eq!(k.paths.attached_file(), d.join("attached-node-a.json"));
        // With --manifests, its .lace as in standalone mode.
        let k = run_config(&["--source", "kubernetes"]).unwrap();
        let m = k.paths.manifests.clone().unwrap();
        assert_eq!(k.paths.state_dir, m.join(".lace"));
        // The state is in the API: a state file is refused, not ignored.
        assert_eq!(
            run_config_of(&["--source", "kubernetes", "--state", "/tmp/s.json"]),
            Err(ConfigError::StateWithKubernetes)
        );
        // Standalone mode still needs its manifests.
        assert_eq!(run_config_of(&[]), Err(ConfigError::ManifestsRequired));
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(matches!(
            run_config_of(&[
                "--source",
                "kubernetes",
                "--state-dir",
                file.to_str().unwrap()
            ]),
            Err(ConfigError::StateDir { .. })
        ));
    }

    #[test]
    fn the_source_is_standalone_unless_kubernetes_is_asked_for() {
        let c = run_config(&[]).unwrap();
        assert_eq!(
            c.source,
            SourceConfig::Standalone {
                manifests: c.paths.manifests.clone().unwrap()
            }
        );
        let k = run_config(&["--source", "kubernetes", "--kubeconfig", "/etc/kc"]).unwrap();
        assert_eq!(
            k.source,
            SourceConfig::Kubernetes(crate::source::kubernetes::KubernetesConfig {
                kubeconfig: Some(PathBuf::from("/etc/kc")),
                node: "node-a".into(),
            })
        );
        assert_eq!(
            run_config(&["--kubeconfig", "/etc/kc"]),
            Err(ConfigError::KubeconfigWithoutKubernetes)
        );
    }

    #[test]
    fn defaults_derive_from_node_and_manifests() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let Command::Run(r) = parse(&["run", "--node", "node-a", "--manifests", d])
            .unwrap()
            .command
        else {
            panic!("not run")
        };
        let c = RunConfig::from_args(&r).unwrap();
        assert_eq!(c.paths.state_dir, dir.path().join(".lace"));
        assert_eq!(c.paths.state, dir.path().join(".lace/state.json"));
        assert_eq!(
            c.paths.lock_file(),
            dir.path().join(".lace/state.json.lock")
        );
        assert_eq!(
            c.paths.status_file(),
            dir.path().join(".lace/status-node-a.yaml")
        );
        assert_eq!(
            c.paths.attached_file(),
            dir.path().join(".lace/attached-node-a.json")
        );
        assert_eq!(c.socket, PathBuf::from("/run/lace/node-a/control.sock"));
        assert_eq!(c.paths.tables_name, "node-a");
        assert_eq!(c.underlay_mtu, 1500);
        assert_eq!(c.attach_timeout, Duration::from_secs(10));
        assert_eq!(c.pod_wait, Duration::from_secs(3));
        assert_eq!(c.ipam, IpamConfig::default());
        assert_eq!(c.compile().pod_mtu(), 1460);
        assert_eq!(c.service_cidr, None);
    }

    #[test]
    fn explicit_flags_override_defaults() {
        let c = run_config(&[
            "--state",
            "/tmp/x/state.json",
            "--socket",
            "/tmp/x/c.sock",
            "--tables-dir",
            "/dev/shm",
            "--tables-name",
            "lab-a",
            "--underlay-mtu",
            "9000",
            "--locator-pool",
            "fd99::/40",
            "--attach-timeout-ms",
            "500",
        ])
        .unwrap();
        assert_eq!(c.paths.state, PathBuf::from("/tmp/x/state.json"));
        assert_eq!(
            c.paths.attached_file(),
            PathBuf::from("/tmp/x/attached-node-a.json")
        );
        assert_eq!(c.socket, PathBuf::from("/tmp/x/c.sock"));
        assert_eq!(
            c.paths.tables().tables_path(),
            PathBuf::from("/dev/shm/lace-lab-a.tables")
        );
        assert_eq!(c.underlay_mtu, 9000);
        assert_eq!(c.ipam.locator_pool, "fd99::/40".parse::<Ipv6Net>().unwrap());
        assert_eq!(c.attach_timeout, Duration::from_millis(500));
    }

    #[test]
    fn the_service_cidr_is_one_prefix_per_family_repeated_or_comma_separated() {
        let want = ServiceCidr {
            v4: Some("10.96.0.0/12".parse().unwrap()),
            v6: Some("fd96::/108".parse().unwrap()),
        };
        let c = run_config(&["--service-cidr", "10.96.0.0/12,fd96::/108"]).unwrap();
        assert_eq!(c.service_cidr, Some(want));
        let c = run_config(&[
            "--service-cidr",
            "fd96::/108",
            "--service-cidr",
            "10.96.0.0/12",
        ])
        .unwrap();
        assert_eq!(c.service_cidr, Some(want));
        let c = run_config(&["--service-cidr", "fd96::/108"]).unwrap();
        assert_eq!(c.service_cidr.and_then(|s| s.v4), None);
    }

    #[test]
    fn bad_values_name_the_flag_and_the_fix() {
        let cases: [(&[&str], &str); 10] = [
            (&["--service-cidr", "10.96.0.1/12"], "--service-cidr"),
            (
                &["--service-cidr", "10.96.0.0/12,10.0.0.0/16"],
                "--service-cidr",
            ),
            (&["--service-cidr", "services"], "--service-cidr"),
            (&["--pod-wait-ms", "60000"], "--pod-wait-ms"),
            (&["--locator-pool", "fc00::1/32"], "--locator-pool"),
            (&["--locator-pool", "10.0.0.0/8"], "--locator-pool"),
            (&["--locator-pool", "fc00::/56"], "--locator-pool"),
            (&["--underlay-mtu", "1300"], "--underlay-mtu"),
            (&["--attach-timeout-ms", "0"], "--attach-timeout-ms"),
            (&["--tables-name", "a/b"], "--tables-name"),
        ];
        for (extra, flag) in cases {
            let e = run_config(extra).unwrap_err().to_string();
            assert!(e.starts_with(flag), "{extra:?}: {e}");
        }
        let long = format!("/tmp/{}/c.sock", "x".repeat(120));
        let e = run_config(&["--socket", &long]).unwrap_err();
        assert!(matches!(e, ConfigError::Socket { .. }), "{e}");
    }

    #[test]
    fn node_and_manifests_are_checked() {
        let Command::Run(r) = parse(&["run", "--node", "Node_A", "--manifests", "/"])
            .unwrap()
            .command
        else {
            panic!("not run")
        };
        assert!(matches!(
            RunConfig::from_args(&r),
            Err(ConfigError::Node { .. })
        ));
        let Command::Run(r) = parse(&["run", "--node", "a", "--manifests", "/nonexistent-lace"])
            .unwrap()
            .command
        else {
            panic!("not run")
        };
        assert!(matches!(
            RunConfig::from_args(&r),
            Err(ConfigError::Manifests { .. })
        ));
        assert!(
            parse(&["run", "--manifests", "/"]).is_err(),
            "--node is required"
        );
        let Command::Status(s) = parse(&["status", "--node", "a", "--manifests", "/nonexistent"])
            .unwrap()
            .command
        else {
            panic!("not status")
        };
        assert!(matches!(s.paths(), Err(ConfigError::Manifests { .. })));
    }
}
