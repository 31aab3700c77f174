//! The forwarder's configuration: a TOML file (see `docs/forwarder-interface.md`), overridden
//! by command-line flags, validated into a [`Config`], and turned into DPDK EAL arguments.
//!
//! Every error names the field and what is accepted ("uplink.address: \"fd00::zz\" is not an
//! IPv6 address"). Unknown keys are refused, so a typo never silently falls back to a default.

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pipeline::UplinkHosts;

/// How the EAL gets its memory (`[eal] memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Memory {
    /// Huge pages through a hugetlbfs mount, with DPDK's runtime files under the file prefix
    /// (production).
    Hugepages,
    /// Huge pages without hugetlbfs files or shared runtime files (`--in-memory`).
    InMemory,
    /// Ordinary 4 KiB pages (`--no-huge --no-shconf`): local runs, tests, CI. Slower, and no
    /// physical NIC can DMA into it.
    NoHuge,
}

impl Memory {
    /// The value as written in the configuration.
    pub const fn name(self) -> &'static str {
        match self {
            Memory::Hugepages => "hugepages",
            Memory::InMemory => "in-memory",
            Memory::NoHuge => "no-huge",
        }
    }

    fn parse(s: &str) -> Option<Memory> {
        [Memory::Hugepages, Memory::InMemory, Memory::NoHuge]
            .into_iter()
            .find(|m| m.name() == s)
    }
}

/// How workers poll (`[workers] polling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Polling {
    /// Never sleep: lowest latency, one CPU per worker at 100% (production).
    Busy,
    /// After spinning `spin_us` without packets (yielding the CPU to any other thread that
    /// wants it), sleep until one arrives: on the packet sockets of kernel-interface ports and
    /// the RX interrupts of DPDK ports whose driver has them (a NIC through vfio-pci, net_tap)
    /// (epoll, woken by the first frame, by commands such as a port added or removed, or after
    /// 100 ms), with a backoff from 10 µs to 1 ms when a DPDK port without RX interrupts (memif,
    /// af_packet, pcap) is polled too. For shared machines, tests, laptops.
    Adaptive,
}

impl Polling {
    /// The value as written in the configuration.
    pub const fn name(self) -> &'static str {
        match self {
            Polling::Busy => "busy",
            Polling::Adaptive => "adaptive",
        }
    }

    fn parse(s: &str) -> Option<Polling> {
        [Polling::Busy, Polling::Adaptive]
            .into_iter()
            .find(|m| m.name() == s)
    }
}

/// How pod interfaces become DPDK ports (`[pods] mechanism`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// lace's own AF_PACKET socket port with the virtio-net header (ADR 0013): frames move
    /// with one `recvmmsg`/`sendmmsg` per burst straight into and out of mbufs; large segments
    /// (the pod's TSO/GSO) arrive whole and are cut once, runs of TCP segments toward the pod
    /// leave as one large segment, partial checksums are completed; workers sleep on the
    /// sockets (epoll) when adaptive. No DPDK hot-plug: attaching is a few system calls.
    PacketSocket,
    /// `net_af_packet`: a PACKET_MMAP socket per queue on the host-side veth, fanned out over
    /// the workers' queues; works on any kernel and interface, but only with the pod's
    /// offloads off (2 KiB ring frames: a large segment arrives truncated) and without
    /// wake-ups (the driver has no receive interrupts).
    AfPacket,
    /// `net_af_xdp`: an XDP socket per queue; needs the interface to have one queue per worker
    /// (veth created with `numrxqueues`/`numtxqueues`) and a kernel with AF_XDP. DPDK 22.11
    /// cannot attach an interface again in the same process once it was detached (the XDP
    /// socket is refused): a pod re-plugged on the same interface stays `Failed` until restart.
    AfXdp,
}

impl Mechanism {
    /// The value as written in the configuration.
    pub const fn name(self) -> &'static str {
        match self {
            Mechanism::PacketSocket => "packet_socket",
            Mechanism::AfPacket => "af_packet",
            Mechanism::AfXdp => "af_xdp",
        }
    }

    fn parse(s: &str) -> Option<Mechanism> {
        [
            Mechanism::PacketSocket,
            Mechanism::AfPacket,
            Mechanism::AfXdp,
        ]
        .into_iter()
        .find(|m| m.name() == s)
    }
}

/// `[eal]`: how DPDK starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EalConfig {
    /// Where DPDK's memory comes from.
    pub memory: Memory,
    /// MiB of memory DPDK reserves at start (`-m`).
    pub memory_mb: u32,
    /// DPDK `--lcores` mapping; `None`: main lcore plus one per worker on the allowed CPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lcores: Option<String>,
    /// `--file-prefix`, unique per forwarder on a host.
    pub file_prefix: String,
    /// More EAL arguments, appended last.
    pub extra: Vec<String>,
}

/// `[uplink]`: the port to the underlay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UplinkConfig {
    /// vdev devargs (`net_…`), a PCI address, or the name of a kernel interface (attached with
    /// lace's own packet socket port, like pods: `ul0`).
    pub device: String,
    /// The node's underlay IPv6 address.
    pub address: Ipv6Addr,
    /// Underlay MTU.
    pub mtu: u16,
    /// RX queues (RSS); 0 = one per worker.
    pub queues: u16,
    /// The node's own addresses on external networks reached through the uplink
    /// (`[[uplink.external]]`, ADR 0054): the forwarder answers ARP / NDP and echo for them,
    /// and publishes them in its status region for control.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub external: Vec<ExternalEntry>,
    /// The link carries frames of up to 64 KiB between lace forwarders (`large_frames`, ADR
    /// 0055; a `net_memif` between two forwarders only): a pod's TCP segment crosses it whole, its
    /// checksum left partial, and a frame longer than the MTU arriving on it is taken as such a
    /// segment. Every node on the link sets it.
    pub large_frames: bool,
}

/// The `net_memif` devargs of a large-frame link (ADR 0055): every frame in one buffer of 64 KiB,
/// 1,024 of them per ring (128 MiB of shared memory per queue pair). DPDK's memif driver
/// leaves the chain flag set on a descriptor it reuses as the first of a frame, so frames
/// spread over several buffers corrupt the ring.
pub const MEMIF_LARGE_FRAMES: &str = "bsize=65535,rsize=10";

/// One of the node's addresses on an external network, with its subnet's prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UplinkAddress {
    /// The address.
    pub addr: IpAddr,
    /// Its subnet's prefix length.
    pub prefix_len: u8,
}

impl std::fmt::Display for UplinkAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// One `[[uplink.external]]` entry: the node's addresses on an external network's subnet, the
/// 802.1Q VLAN they are on (none: untagged), and the interface name a Network's
/// `spec.uplinks[].interface` gives for it (none: an entry that only Networks naming no
/// interface use).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExternalEntry {
    /// `interface`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// `vlan` (1–4094).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<u16>,
    /// `addresses`.
    pub addresses: Vec<UplinkAddress>,
}

impl UplinkConfig {
    /// Every `[[uplink.external]]` address with its VLAN, as the pipeline's uplink hosts take
    /// them.
    pub fn external_addresses(&self) -> Vec<crate::pipeline::UplinkAddress> {
        self.external
            .iter()
            .flat_map(|e| {
                e.addresses
                    .iter()
                    .map(|a| (e.vlan.unwrap_or(0), a.addr, a.prefix_len))
            })
            .collect()
    }

    /// The `[[uplink.external]]` entries as the status region publishes them.
    pub fn external_uplinks(&self) -> Vec<lace_shared::status::ExternalUplink> {
        self.external
            .iter()
            .map(|e| lace_shared::status::ExternalUplink {
                interface: e.interface.clone().unwrap_or_default(),
                vlan: e.vlan.unwrap_or(0),
                addresses: e.addresses.iter().map(|a| (a.addr, a.prefix_len)).collect(),
            })
            .collect()
    }
}

impl Serialize for UplinkAddress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl UplinkConfig {
    /// Whether the device is a PCI address (allow-listed with `-a`) rather than a vdev.
    pub fn is_pci(&self) -> bool {
        is_pci_address(&self.device)
    }

    /// Whether the device is a kernel interface name (lace's packet socket port).
    pub fn is_kernel_interface(&self) -> bool {
        !self.is_pci() && !self.device.starts_with("net_")
    }
}

/// `[srv6]`: encapsulation settings. The outer source address is not here: lace-control
/// publishes it (the node's underlay address) with the precomputed encapsulations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Srv6Config {
    /// Outer hop limit.
    pub hop_limit: u8,
    /// Seed of the outer flow-label hash; `None`: random per process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_seed: Option<u64>,
}

/// `[workers]`: the poll-mode workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkersConfig {
    /// Workers (one lcore each).
    pub count: u16,
    /// Polling mode.
    pub polling: Polling,
    /// Microseconds an adaptive worker keeps polling after its last packet before it sleeps.
    pub spin_us: u32,
}

/// Default `[workers] spin_us`: [`super::worker::IDLE_SPIN`].
pub const DEFAULT_SPIN_US: u32 = super::worker::IDLE_SPIN.as_micros() as u32;
/// Largest `[workers] spin_us` (one second: beyond it, use `polling = "busy"`).
pub const MAX_SPIN_US: u32 = 1_000_000;

/// `[pods]`: pod ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodsConfig {
    /// How pod interfaces are attached.
    pub mechanism: Mechanism,
}

/// `[conntrack]`: the flow table of connection tracking (NetworkPolicy, Services, one-way
/// paths). Timeouts are seconds without packets per connection state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConntrackConfig {
    /// Connections the flow table holds (64 bytes each plus its index); NEW connections beyond
    /// it are dropped and counted (`flow-table-full`).
    pub max_flows: u32,
    /// TCP, handshake in progress.
    pub tcp_syn_s: u32,
    /// TCP, established.
    pub tcp_established_s: u32,
    /// TCP, one side closed.
    pub tcp_closing_s: u32,
    /// TCP, both sides closed.
    pub tcp_time_wait_s: u32,
    /// TCP, reset.
    pub tcp_close_s: u32,
    /// UDP and other protocols without a reply yet.
    pub udp_s: u32,
    /// UDP and other protocols with replies.
    pub udp_stream_s: u32,
    /// ICMP echo.
    pub icmp_s: u32,
}

impl ConntrackConfig {
    /// The pipeline's timeouts.
    pub fn timeouts(&self) -> crate::pipeline::CtTimeouts {
        crate::pipeline::CtTimeouts {
            tcp_syn: self.tcp_syn_s,
            tcp_established: self.tcp_established_s,
            tcp_closing: self.tcp_closing_s,
            tcp_time_wait: self.tcp_time_wait_s,
            tcp_close: self.tcp_close_s,
            udp: self.udp_s,
            udp_stream: self.udp_stream_s,
            icmp: self.icmp_s,
        }
    }
}

/// Default `[conntrack] max_flows`.
pub const DEFAULT_MAX_FLOWS: u32 = 262_144;

/// The validated, effective configuration of one forwarder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Config {
    /// The table set's name (`lace-<name>.tables`, `.qsbr`, `.status`, `.flows`).
    pub name: String,
    /// Directory of the tables and the status region.
    pub tables_dir: PathBuf,
    /// EAL settings.
    pub eal: EalConfig,
    /// The uplink.
    pub uplink: UplinkConfig,
    /// SRv6 settings.
    pub srv6: Srv6Config,
    /// Workers.
    pub workers: WorkersConfig,
    /// Pod ports.
    pub pods: PodsConfig,
    /// Connection tracking.
    pub conntrack: ConntrackConfig,
}

/// Command-line values that replace the file's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--name`.
    pub name: Option<String>,
    /// `--tables-dir`.
    pub tables_dir: Option<PathBuf>,
    /// `--workers`.
    pub workers: Option<u16>,
    /// `--polling`.
    pub polling: Option<Polling>,
    /// `--memory`.
    pub memory: Option<Memory>,
    /// `--memory-mb`.
    pub memory_mb: Option<u32>,
    /// `--lcores`.
    pub lcores: Option<String>,
    /// `--uplink`.
    pub uplink: Option<String>,
    /// `--underlay-addr`.
    pub underlay_addr: Option<Ipv6Addr>,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("config {path}: cannot read it: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys or wrong types.
    #[error("config {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The TOML parser's message (it names the key and shows the line).
        message: String,
    },
    /// A value is out of range or malformed.
    #[error("{field}: {value:?} {why}")]
    Invalid {
        /// The field, as `section.key` (or the flag that set it).
        field: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        why: String,
    },
    /// A required value is missing.
    #[error("{field}: missing — {fix}")]
    Missing {
        /// The field, as `section.key`.
        field: &'static str,
        /// Where to set it.
        fix: &'static str,
    },
}

// The file as written: every key optional here, required ones checked after the flags are in.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    name: Option<String>,
    tables_dir: Option<PathBuf>,
    #[serde(default)]
    eal: FileEal,
    #[serde(default)]
    uplink: FileUplink,
    #[serde(default)]
    srv6: FileSrv6,
    #[serde(default)]
    workers: FileWorkers,
    #[serde(default)]
    pods: FilePods,
    #[serde(default)]
    conntrack: FileConntrack,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEal {
    memory: Option<String>,
    memory_mb: Option<u32>,
    lcores: Option<String>,
    file_prefix: Option<String>,
    extra: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileUplink {
    device: Option<String>,
    address: Option<String>,
    mtu: Option<u16>,
    queues: Option<u16>,
    large_frames: Option<bool>,
    #[serde(default)]
    external: Vec<FileExternal>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileExternal {
    interface: Option<String>,
    vlan: Option<u16>,
    addresses: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSrv6 {
    hop_limit: Option<u8>,
    flow_seed: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWorkers {
    count: Option<u16>,
    polling: Option<String>,
    spin_us: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePods {
    mechanism: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConntrack {
    max_flows: Option<u32>,
    tcp_syn_s: Option<u32>,
    tcp_established_s: Option<u32>,
    tcp_closing_s: Option<u32>,
    tcp_time_wait_s: Option<u32>,
    tcp_close_s: Option<u32>,
    udp_s: Option<u32>,
    udp_stream_s: Option<u32>,
    icmp_s: Option<u32>,
}

fn conntrack_config(f: &FileConntrack) -> Result<ConntrackConfig, ConfigError> {
    let d = crate::pipeline::CtTimeouts::default();
    let max_flows = f.max_flows.unwrap_or(DEFAULT_MAX_FLOWS);
    let (lo, hi) = (
        lace_shared::flow::MIN_CAPACITY,
        lace_shared::flow::MAX_CAPACITY,
    );
    if !(lo..=hi).contains(&max_flows) {
        return Err(ConfigError::Invalid {
            field: "conntrack.max_flows",
            value: max_flows.to_string(),
            why: format!("is out of range: use {lo}..={hi} connections"),
        });
    }
    let t = |field: &'static str, v: Option<u32>, default: u32| match v {
        Some(0) => Err(ConfigError::Invalid {
            field,
            value: "0".into(),
            why: "would expire every connection at once: use at least 1 second".into(),
        }),
        Some(v) => Ok(v),
        None => Ok(default),
    };
    Ok(ConntrackConfig {
        max_flows,
        tcp_syn_s: t("conntrack.tcp_syn_s", f.tcp_syn_s, d.tcp_syn)?,
        tcp_established_s: t(
            "conntrack.tcp_established_s",
            f.tcp_established_s,
            d.tcp_established,
        )?,
        tcp_closing_s: t("conntrack.tcp_closing_s", f.tcp_closing_s, d.tcp_closing)?,
        tcp_time_wait_s: t(
            "conntrack.tcp_time_wait_s",
            f.tcp_time_wait_s,
            d.tcp_time_wait,
        )?,
        tcp_close_s: t("conntrack.tcp_close_s", f.tcp_close_s, d.tcp_close)?,
        udp_s: t("conntrack.udp_s", f.udp_s, d.udp)?,
        udp_stream_s: t("conntrack.udp_stream_s", f.udp_stream_s, d.udp_stream)?,
        icmp_s: t("conntrack.icmp_s", f.icmp_s, d.icmp)?,
    })
}

/// Default `[eal] memory_mb`.
pub const DEFAULT_MEMORY_MB: u32 = 512;
/// Most workers a forwarder runs (one lcore each, plus the main lcore).
pub const MAX_WORKERS: u16 = 64;

impl Config {
    /// Reads `path` (if any), applies `overrides`, and validates the result.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let file = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?;
                Self::parse_file(p, &text)?
            }
            None => FileConfig::default(),
        };
        Self::build(file, overrides)
    }

    /// Parses configuration text (as [`Config::load`] does a file's), applies `overrides`,
    /// validates. `origin` names the text in errors.
    pub fn from_toml(
        origin: &Path,
        text: &str,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        Self::build(Self::parse_file(origin, text)?, overrides)
    }

    fn parse_file(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_owned(),
        })
    }

    fn build(f: FileConfig, o: &Overrides) -> Result<Config, ConfigError> {
        let name = o.name.clone().or(f.name).ok_or(ConfigError::Missing {
            field: "name",
            fix: "set `name = \"<node>\"` in the config file or pass --name",
        })?;
        check_name("name", &name)?;
        let tables_dir = o
            .tables_dir
            .clone()
            .or(f.tables_dir)
            .unwrap_or_else(lace_shared::tables::default_dir);

        let memory = match (o.memory, f.eal.memory) {
            (Some(m), _) => m,
            (None, Some(s)) => Memory::parse(&s).ok_or_else(|| ConfigError::Invalid {
                field: "eal.memory",
                value: s,
                why: "is not a memory mode: use \"hugepages\", \"in-memory\" or \"no-huge\""
                    .to_owned(),
            })?,
            (None, None) => Memory::Hugepages,
        };
        let memory_mb = o.memory_mb.or(f.eal.memory_mb).unwrap_or(DEFAULT_MEMORY_MB);
        if !(64..=1 << 20).contains(&memory_mb) {
            return Err(ConfigError::Invalid {
                field: "eal.memory_mb",
                value: memory_mb.to_string(),
                why: "is out of range: give 64 to 1048576 MiB".to_owned(),
            });
        }
        let lcores = o.lcores.clone().or(f.eal.lcores);
        if let Some(l) = &lcores {
            if l.trim().is_empty() || l.chars().any(char::is_whitespace) {
                return Err(ConfigError::Invalid {
                    field: "eal.lcores",
                    value: l.clone(),
                    why: "is not a DPDK --lcores list (e.g. \"0@0,1@2\" or \"0-2\")".to_owned(),
                });
            }
        }
        let file_prefix = f.eal.file_prefix.unwrap_or_else(|| format!("lace-{name}"));
        check_name("eal.file_prefix", &file_prefix)?;
        let extra = f.eal.extra.unwrap_or_default();

        let device = o
            .uplink
            .clone()
            .or(f.uplink.device)
            .ok_or(ConfigError::Missing {
                field: "uplink.device",
                fix: "set `device = \"net_…\"` (vdev devargs) or a PCI address under [uplink], \
                      or pass --uplink",
            })?;
        if !(is_pci_address(&device) || device.starts_with("net_") || is_iface_name(&device)) {
            return Err(ConfigError::Invalid {
                field: "uplink.device",
                value: device,
                why: "is neither a PCI address (0000:03:00.1), vdev devargs starting with \
                      \"net_\" (net_af_packet0,iface=eth1), nor a kernel interface name (eth1: \
                      1-15 characters, no '/', ':', ',', '=' or space)"
                    .to_owned(),
            });
        }
        let address = match (o.underlay_addr, f.uplink.address) {
            (Some(a), _) => a,
            (None, Some(s)) => parse_v6("uplink.address", &s)?,
            (None, None) => {
                return Err(ConfigError::Missing {
                    field: "uplink.address",
                    fix: "set `address = \"<underlay IPv6>\"` under [uplink] or pass \
                          --underlay-addr",
                })
            }
        };
        check_unicast("uplink.address", address)?;
        let mtu = f.uplink.mtu.unwrap_or(1500);
        if !(1280..=9216).contains(&mtu) {
            return Err(ConfigError::Invalid {
                field: "uplink.mtu",
                value: mtu.to_string(),
                why: "is out of range: the underlay is IPv6, give 1280 to 9216".to_owned(),
            });
        }
        let queues = f.uplink.queues.unwrap_or(0);
        if queues > MAX_WORKERS {
            return Err(ConfigError::Invalid {
                field: "uplink.queues",
                value: queues.to_string(),
                why: format!("is out of range: give 0 (one per worker) to {MAX_WORKERS}"),
            });
        }

        let external = external_entries(&f.uplink.external, address)?;
        let large_frames = f.uplink.large_frames.unwrap_or(false);
        if large_frames {
            check_large_frame_link(&device)?;
        }

        let hop_limit = f.srv6.hop_limit.unwrap_or(64);
        if hop_limit == 0 {
            return Err(ConfigError::Invalid {
                field: "srv6.hop_limit",
                value: "0".to_owned(),
                why: "is out of range: give 1 to 255".to_owned(),
            });
        }
        if let Some(seed) = f.srv6.flow_seed {
            if seed > i64::MAX as u64 {
                return Err(ConfigError::Invalid {
                    field: "srv6.flow_seed",
                    value: seed.to_string(),
                    why: "is out of range: TOML integers end at 2^63-1".to_owned(),
                });
            }
        }

        let count = o.workers.or(f.workers.count).unwrap_or(1);
        if !(1..=MAX_WORKERS).contains(&count) {
            return Err(ConfigError::Invalid {
                field: "workers.count",
                value: count.to_string(),
                why: format!("is out of range: give 1 to {MAX_WORKERS}"),
            });
        }
        let polling = match (o.polling, f.workers.polling) {
            (Some(p), _) => p,
            (None, Some(s)) => Polling::parse(&s).ok_or_else(|| ConfigError::Invalid {
                field: "workers.polling",
                value: s,
                why: "is not a polling mode: use \"busy\" or \"adaptive\"".to_owned(),
            })?,
            (None, None) => Polling::Adaptive,
        };
        let spin_us = f.workers.spin_us.unwrap_or(DEFAULT_SPIN_US);
        if spin_us > MAX_SPIN_US {
            return Err(ConfigError::Invalid {
                field: "workers.spin_us",
                value: spin_us.to_string(),
                why: format!(
                    "is out of range: give 0 to {MAX_SPIN_US} µs, or polling = \"busy\" to \
                     never sleep"
                ),
            });
        }
        let mechanism = match f.pods.mechanism {
            Some(s) => Mechanism::parse(&s).ok_or_else(|| ConfigError::Invalid {
                field: "pods.mechanism",
                value: s,
                why: "is not a pod-port mechanism: use \"packet_socket\", \"af_packet\" or \
                      \"af_xdp\""
                    .to_owned(),
            })?,
            None => Mechanism::PacketSocket,
        };

        let conntrack = conntrack_config(&f.conntrack)?;

        Ok(Config {
            name,
            tables_dir,
            eal: EalConfig {
                memory,
                memory_mb,
                lcores,
                file_prefix,
                extra,
            },
            uplink: UplinkConfig {
                device,
                address,
                mtu,
                queues,
                external,
                large_frames,
            },
            srv6: Srv6Config {
                hop_limit,
                flow_seed: f.srv6.flow_seed,
            },
            workers: WorkersConfig {
                count,
                polling,
                spin_us,
            },
            pods: PodsConfig { mechanism },
            conntrack,
        })
    }

    /// RX queues of the uplink: `uplink.queues`, or one per worker.
    pub fn uplink_rx_queues(&self) -> u16 {
        if self.uplink.queues == 0 {
            self.workers.count
        } else {
            self.uplink.queues
        }
    }

    /// The tables' location.
    pub fn tables(&self) -> lace_shared::tables::TablesConfig {
        let mut t = lace_shared::tables::TablesConfig::new(&self.name);
        t.dir = self.tables_dir.clone();
        t
    }

    /// The status region's path.
    pub fn status_path(&self) -> PathBuf {
        lace_shared::status::status_path(&self.tables_dir, &self.name)
    }

    /// The flow table's path (beside the status region).
    pub fn flows_path(&self) -> PathBuf {
        lace_shared::flow::flows_path(&self.tables_dir, &self.name)
    }

    /// The EAL arguments this configuration starts DPDK with, given the CPUs the process may
    /// run on (see [`allowed_cpus`]).
    pub fn eal_args(&self, cpus: &[u32]) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        match self.eal.memory {
            Memory::Hugepages => {}
            Memory::InMemory => a.push("--in-memory".to_owned()),
            // --in-memory needs hugepages in DPDK 22.11; --no-shconf keeps runtime files away.
            Memory::NoHuge => a.extend(["--no-huge".to_owned(), "--no-shconf".to_owned()]),
        }
        a.push("-m".to_owned());
        a.push(self.eal.memory_mb.to_string());
        a.push(format!("--file-prefix={}", self.eal.file_prefix));
        let lcores = self
            .eal
            .lcores
            .clone()
            .unwrap_or_else(|| default_lcores(self.workers.count, cpus));
        a.push(format!("--lcores={lcores}"));
        if self.uplink.is_pci() {
            a.push("-a".to_owned());
            a.push(self.uplink.device.clone());
        } else {
            a.push("--no-pci".to_owned());
        }
        a.push("--no-telemetry".to_owned());
        a.push("--log-level=lib.eal:notice".to_owned());
        a.extend(self.eal.extra.iter().cloned());
        a
    }
}

/// Main lcore 0 and workers 1..=n, on the allowed CPUs in order, wrapping when there are fewer
/// CPUs than lcores: `0@2,1@3,2@2`.
pub fn default_lcores(workers: u16, cpus: &[u32]) -> String {
    let cpus: &[u32] = if cpus.is_empty() { &[0] } else { cpus };
    (0..=usize::from(workers))
        .map(|l| format!("{l}@{}", cpus[l % cpus.len()]))
        .collect::<Vec<_>>()
        .join(",")
}

/// The CPUs this process may run on (its affinity mask, from `/proc/self/status`), ascending.
/// Empty when it cannot be read.
pub fn allowed_cpus() -> Vec<u32> {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(parse_cpu_list)
        })
        .unwrap_or_default()
}

/// Parses a kernel CPU list (`0-3,8,10-11`).
pub fn parse_cpu_list(list: &str) -> Vec<u32> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let mut ends = part.splitn(2, '-').map(|x| x.trim().parse::<u32>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), None) => cpus.push(a),
            (Some(Ok(a)), Some(Ok(b))) if a <= b => cpus.extend(a..=b),
            _ => {}
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// A Linux interface name: 1 to 15 bytes, none of `/ : , =` or whitespace (and not a PCI
/// address, which is checked first).
pub fn is_iface_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && !s.starts_with("net_")
        && !s
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '/' | ':' | ',' | '='))
}

/// `0000:03:00.1` or `03:00.1`.
pub fn is_pci_address(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split(':').collect();
    let (domain, bus, rest) = match parts.as_slice() {
        [d, b, r] => (Some(*d), *b, *r),
        [b, r] => (None, *b, *r),
        _ => return false,
    };
    let Some((dev, func)) = rest.split_once('.') else {
        return false;
    };
    domain.is_none_or(|d| hex(d, 4))
        && hex(bus, 2)
        && hex(dev, 2)
        && func.len() == 1
        && matches!(func.as_bytes()[0], b'0'..=b'7')
}

fn check_name(field: &'static str, s: &str) -> Result<(), ConfigError> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            field,
            value: s.to_owned(),
            why: "must be 1-64 characters of A-Z a-z 0-9 - _ . (it names files), not starting \
                  with '.'"
                .to_owned(),
        })
    }
}

fn parse_v6(field: &'static str, s: &str) -> Result<Ipv6Addr, ConfigError> {
    s.parse().map_err(|_| ConfigError::Invalid {
        field,
        value: s.to_owned(),
        why: "is not an IPv6 address (e.g. \"fd00::a\")".to_owned(),
    })
}

/// A device that may carry large frames (ADR 0055): a memif link between forwarders, with
/// buffers that hold a whole frame ([`MEMIF_LARGE_FRAMES`]). (A NIC would carry them with its
/// own TSO and LRO, which lace does not drive yet; a kernel interface's frames end at its MTU.)
fn check_large_frame_link(device: &str) -> Result<(), ConfigError> {
    let invalid = |why: String| ConfigError::Invalid {
        field: "uplink.large_frames",
        value: "true".to_owned(),
        why,
    };
    if !device.starts_with("net_memif") {
        return Err(invalid(format!(
            "needs a memif uplink between two forwarders (net_memif…), not {device:?}"
        )));
    }
    if !device.split(',').any(|a| a == "bsize=65535") {
        return Err(invalid(format!(
            "a memif link must hold every frame in one buffer: add {MEMIF_LARGE_FRAMES} to \
             uplink.device ({device:?})"
        )));
    }
    Ok(())
}

/// `[[uplink.external]]`: at most [`MAX_EXTERNAL_UPLINKS`] entries, each on a VLAN from 1 to
/// 4094 or untagged, each interface name (1 to [`EXTERNAL_NAME_LEN`] bytes, no whitespace) at
/// most once per VLAN, or unnamed; their addresses each `address/prefix-length`, unicast, not
/// the underlay address, none twice on one VLAN, at most [`UplinkHosts::MAX`] per address
/// family.
fn external_entries(
    entries: &[FileExternal],
    underlay: Ipv6Addr,
) -> Result<Vec<ExternalEntry>, ConfigError> {
    use lace_shared::status::{EXTERNAL_NAME_LEN, MAX_EXTERNAL_UPLINKS};
    if entries.len() > MAX_EXTERNAL_UPLINKS {
        return Err(ConfigError::Invalid {
            field: "uplink.external",
            value: format!("{} entries", entries.len()),
            why: format!("are too many: at most {MAX_EXTERNAL_UPLINKS}"),
        });
    }
    let mut out: Vec<ExternalEntry> = Vec::new();
    for e in entries {
        if let Some(vlan) = e.vlan.filter(|v| !(1..=4094).contains(v)) {
            return Err(ConfigError::Invalid {
                field: "uplink.external.vlan",
                value: vlan.to_string(),
                why: "is outside 1..=4094: use a VLAN id from 1 to 4094, or omit it for \
                      untagged traffic"
                    .into(),
            });
        }
        if let Some(name) = &e.interface {
            let why = if name.is_empty() || name.len() > EXTERNAL_NAME_LEN {
                Some(format!(
                    "must be 1 to {EXTERNAL_NAME_LEN} bytes (omit it for an unnamed entry)"
                ))
            } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                Some("must not contain whitespace".to_owned())
            } else if out
                .iter()
                .any(|o| o.interface.as_ref() == Some(name) && o.vlan == e.vlan)
            {
                Some(
                    "names two entries on one VLAN: give each interface one entry per VLAN \
                     with all its addresses there"
                        .into(),
                )
            } else {
                None
            };
            if let Some(why) = why {
                return Err(ConfigError::Invalid {
                    field: "uplink.external.interface",
                    value: name.clone(),
                    why,
                });
            }
        }
        out.push(ExternalEntry {
            interface: e.interface.clone(),
            vlan: e.vlan,
            addresses: Vec::new(),
        });
    }
    let addresses = external_addresses(entries, underlay)?;
    let mut next = addresses.into_iter();
    for (o, e) in out.iter_mut().zip(entries) {
        o.addresses = next.by_ref().take(e.addresses.len()).collect();
    }
    Ok(out)
}

/// Every `[[uplink.external]]` address, in order: each `address/prefix-length`, unicast, not the
/// underlay address, none twice on one VLAN, at most [`UplinkHosts::MAX`] per address family.
fn external_addresses(
    entries: &[FileExternal],
    underlay: Ipv6Addr,
) -> Result<Vec<UplinkAddress>, ConfigError> {
    const FIELD: &str = "uplink.external.addresses";
    let invalid = |value: &str, why: &str| ConfigError::Invalid {
        field: FIELD,
        value: value.to_owned(),
        why: why.to_owned(),
    };
    let mut out: Vec<UplinkAddress> = Vec::new();
    let mut vlans: Vec<u16> = Vec::new();
    let on = entries
        .iter()
        .flat_map(|e| e.addresses.iter().map(|a| (e.vlan.unwrap_or(0), a)));
    for (vlan, text) in on {
        let (a, len) = text.split_once('/').ok_or_else(|| {
            invalid(
                text,
                "needs its subnet's prefix length, e.g. \"192.0.2.10/24\" or \"2001:db8::10/64\"",
            )
        })?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| invalid(text, "is not an IPv4 or IPv6 address with a prefix length"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = len
            .parse::<u8>()
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| invalid(text, &format!("has a prefix length outside 0..={max}")))?;
        let unicast = match addr {
            IpAddr::V4(v4) => {
                !(v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast() || v4.is_loopback())
            }
            IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast() || v6.is_loopback()),
        };
        if !unicast {
            return Err(invalid(text, "must be a unicast address of this node"));
        }
        if addr == IpAddr::V6(underlay) {
            return Err(invalid(
                text,
                "is the underlay address (uplink.address): give the node's address on the \
                 external network",
            ));
        }
        if out
            .iter()
            .zip(&vlans)
            .any(|(o, &v)| o.addr == addr && v == vlan)
        {
            return Err(invalid(text, "is listed twice on one VLAN"));
        }
        out.push(UplinkAddress { addr, prefix_len });
        vlans.push(vlan);
    }
    let addrs: Vec<_> = out
        .iter()
        .zip(&vlans)
        .map(|(a, &v)| (v, a.addr, a.prefix_len))
        .collect();
    if UplinkHosts::new(&addrs).is_none() {
        return Err(ConfigError::Invalid {
            field: FIELD,
            value: format!("{} addresses", out.len()),
            why: format!(
                "are too many: at most {} per address family",
                UplinkHosts::MAX
            ),
        });
    }
    Ok(out)
}

fn check_unicast(field: &'static str, a: Ipv6Addr) -> Result<(), ConfigError> {
    if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
        return Err(ConfigError::Invalid {
            field,
            value: a.to_string(),
            why: "must be a unicast address of this node (not ::, ::1 or multicast)".to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        name = "node-a"
        tables_dir = "/tmp/lace-test"
        [uplink]
        device = "net_null0"
        address = "fd00::a"
    "#;

    fn load(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(Path::new("test.toml"), text, &Overrides::default())
    }

    #[test]
    fn large_frames_only_on_a_memif_uplink_that_holds_them() {
        assert!(!load(MINIMAL).unwrap().uplink.large_frames);
        let memif = "net_memif0,role=server,id=0,socket=/run/ul.memif";
        let whole = format!("{memif},{MEMIF_LARGE_FRAMES}");
        let large = format!("{MINIMAL}large_frames = true\n");
        let on = |device: &str| load(&large.replace("net_null0", device));
        let c = on(&whole).unwrap();
        assert!(c.uplink.large_frames);
        let printed = toml::to_string(&c).unwrap();
        assert!(load(&printed).unwrap().uplink.large_frames, "{printed}");
        for (device, why) in [
            ("ul-a", "needs a memif uplink"),
            ("net_null0", "needs a memif uplink"),
            ("0000:03:00.1", "needs a memif uplink"),
            (memif, MEMIF_LARGE_FRAMES),
            (&format!("{memif},bsize=2048"), MEMIF_LARGE_FRAMES),
        ] {
            let e = on(device).unwrap_err().to_string();
            assert!(
                e.contains("uplink.large_frames") && e.contains(why),
                "{device}: {e}"
            );
        }
    }

    #[test]
    fn external_addresses_on_the_uplink() {
        let c = load(&format!(
            "{MINIMAL}\n[[uplink.external]]\naddresses = [\"192.0.2.10/24\", \"2001:db8::10/64\"]\n\
             [[uplink.external]]\naddresses = [\"198.51.100.7/25\"]\n\
             [[uplink.external]]\nvlan = 100\naddresses = [\"192.0.2.10/24\"]"
        ))
        .unwrap();
        let shown: Vec<String> = c
            .uplink
            .external_addresses()
            .iter()
            .map(|(v, a, l)| format!("{v} {a}/{l}"))
            .collect();
        // The same address on another VLAN is another host of the node's.
        assert_eq!(
            shown,
            [
                "0 192.0.2.10/24",
                "0 2001:db8::10/64",
                "0 198.51.100.7/25",
                "100 192.0.2.10/24"
            ]
        );
        // Each entry keeps its own addresses, and the status region gets them so.
        let published = c.uplink.external_uplinks();
        assert_eq!(published.len(), 3);
        assert_eq!(published[0].addresses.len(), 2);
        assert_eq!(published[1].interface, "");
        assert_eq!(
            published[1].addresses,
            [("198.51.100.7".parse().unwrap(), 25)]
        );
        assert_eq!((published[1].vlan, published[2].vlan), (0, 100));
        // The effective configuration `check` prints is read back the same.
        let printed = toml::to_string(&c).unwrap();
        assert_eq!(
            load(&printed).unwrap().uplink.external,
            c.uplink.external,
            "{printed}"
        );
        assert!(load(MINIMAL).unwrap().uplink.external.is_empty());
        let err = |addrs: &str| {
            load(&format!(
                "{MINIMAL}\n[[uplink.external]]\naddresses = [{addrs}]"
            ))
            .unwrap_err()
            .to_string()
        };
        for (addrs, why) in [
            ("\"192.0.2.10\"", "prefix length"),
            ("\"192.0.2.10/33\"", "outside 0..=32"),
            ("\"fd00::a/64\"", "underlay address"),
            ("\"224.0.0.1/4\"", "unicast"),
            ("\"192.0.2.10/24\", \"192.0.2.10/25\"", "twice on one VLAN"),
            ("\"eth0/24\"", "not an IPv4 or IPv6"),
        ] {
            let e = err(addrs);
            assert!(
                e.contains("uplink.external.addresses") && e.contains(why),
                "{e}"
            );
        }
        let nine: Vec<String> = (1..=9).map(|i| format!("\"192.0.2.{i}/24\"")).collect();
        assert!(err(&nine.join(", ")).contains("at most 8"));
        for vlan in [0, 4095] {
            let e = load(&format!(
                "{MINIMAL}\n[[uplink.external]]\nvlan = {vlan}\naddresses = [\"192.0.2.10/24\"]"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("uplink.external.vlan") && e.contains("outside 1..=4094"),
                "{e}"
            );
        }
    }

    #[test]
    fn external_entries_are_named_once() {
        let entry = |name: &str, addr: &str| {
            format!("[[uplink.external]]\ninterface = \"{name}\"\naddresses = [\"{addr}\"]\n")
        };
        let tagged = |name: &str, vlan: u16, addr: &str| {
            format!(
                "[[uplink.external]]\ninterface = \"{name}\"\nvlan = {vlan}\n\
                 addresses = [\"{addr}\"]\n"
            )
        };
        // One entry per interface and VLAN.
        let c = load(&format!(
            "{MINIMAL}\n{}{}{}",
            entry("eth1", "192.0.2.10/24"),
            entry("vf-3", "198.51.100.7/25"),
            tagged("eth1", 100, "192.0.2.10/24")
        ))
        .unwrap();
        let published = c.uplink.external_uplinks();
        assert_eq!(
            published
                .iter()
                .map(|e| (e.interface.as_str(), e.vlan))
                .collect::<Vec<_>>(),
            [("eth1", 0), ("vf-3", 0), ("eth1", 100)]
        );
        let printed = toml::to_string(&c).unwrap();
        assert_eq!(load(&printed).unwrap().uplink, c.uplink, "{printed}");
        for (entries, why) in [
            (
                entry("eth1", "192.0.2.10/24") + &entry("eth1", "192.0.2.11/24"),
                "names two entries on one VLAN",
            ),
            (
                tagged("eth1", 7, "192.0.2.10/24") + &tagged("eth1", 7, "192.0.2.11/24"),
                "names two entries on one VLAN",
            ),
            (entry("", "192.0.2.10/24"), "1 to 32 bytes"),
            (entry(&"e".repeat(33), "192.0.2.10/24"), "1 to 32 bytes"),
            (entry("eth 1", "192.0.2.10/24"), "whitespace"),
        ] {
            let e = load(&format!("{MINIMAL}\n{entries}"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("uplink.external.interface") && e.contains(why),
                "{e}"
            );
        }
        let many: String = (0..17)
            .map(|i| entry(&format!("e{i}"), &format!("192.0.2.{}/24", i + 1)))
            .collect();
        let e = load(&format!("{MINIMAL}\n{many}")).unwrap_err().to_string();
        assert!(e.contains("at most 16"), "{e}");
    }

    #[test]
    fn defaults_fill_the_minimal_file() {
        let c = load(MINIMAL).unwrap();
        assert_eq!(c.eal.memory, Memory::Hugepages);
        assert_eq!(c.eal.file_prefix, "lace-node-a");
        assert_eq!(c.srv6.hop_limit, 64);
        assert_eq!(c.workers.count, 1);
        assert_eq!(c.workers.polling, Polling::Adaptive);
        assert_eq!(c.workers.spin_us, DEFAULT_SPIN_US);
        assert_eq!(c.pods.mechanism, Mechanism::PacketSocket);
        assert_eq!(c.conntrack.max_flows, DEFAULT_MAX_FLOWS);
        assert_eq!(
            c.conntrack.timeouts(),
            crate::pipeline::CtTimeouts::default()
        );
        assert!(!c.uplink.is_kernel_interface());
        let k = load(&MINIMAL.replace("net_null0", "ul-a")).unwrap();
        assert!(k.uplink.is_kernel_interface());
        assert_eq!(c.uplink_rx_queues(), 1);
    }

    #[test]
    fn errors_name_the_field() {
        let e = load(&format!("{MINIMAL}\nbogus = 1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
        let e = load(&MINIMAL.replace("fd00::a", "fd00::zz"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("uplink.address") && e.contains("fd00::zz"),
            "{e}"
        );
        let e = load(&format!("{MINIMAL}\n[workers]\npolling = \"fast\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("workers.polling") && e.contains("busy"), "{e}");
        let e = load(&format!("{MINIMAL}\n[workers]\nspin_us = 2000000"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("workers.spin_us") && e.contains("busy"), "{e}");
        let c = load(&format!("{MINIMAL}\n[workers]\nspin_us = 0")).unwrap();
        assert_eq!(c.workers.spin_us, 0);
        let e = load(&MINIMAL.replace("net_null0", "eth0,x=1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("uplink.device"), "{e}");
        let e = load("[uplink]\ndevice = \"net_null0\"")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("name: missing"), "{e}");
        let e = load(&format!("{MINIMAL}\n[conntrack]\nmax_flows = 10"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("conntrack.max_flows") && e.contains("1024"),
            "{e}"
        );
        let e = load(&format!("{MINIMAL}\n[conntrack]\nudp_s = 0"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("conntrack.udp_s"), "{e}");
        let c = load(&format!(
            "{MINIMAL}\n[conntrack]\nmax_flows = 4096\ntcp_established_s = 3600"
        ))
        .unwrap();
        assert_eq!(c.conntrack.max_flows, 4096);
        assert_eq!(c.conntrack.timeouts().tcp_established, 3600);
        assert_eq!(c.conntrack.timeouts().udp, 30);
    }

    #[test]
    fn overrides_win() {
        let o = Overrides {
            workers: Some(3),
            polling: Some(Polling::Busy),
            memory: Some(Memory::NoHuge),
            uplink: Some("0000:03:00.1".to_owned()),
            ..Overrides::default()
        };
        let c = Config::from_toml(Path::new("t"), MINIMAL, &o).unwrap();
        assert_eq!(c.workers.count, 3);
        let args = c.eal_args(&[4, 5]);
        assert!(args.contains(&"--no-huge".to_owned()));
        assert!(args.contains(&"--lcores=0@4,1@5,2@4,3@5".to_owned()));
        assert!(args.windows(2).any(|w| w == ["-a", "0000:03:00.1"]));
        assert!(!args.contains(&"--no-pci".to_owned()));
    }

    #[test]
    fn pci_addresses_and_cpu_lists() {
        assert!(is_pci_address("0000:03:00.1"));
        assert!(is_pci_address("3b:00.0"));
        assert!(!is_pci_address("net_null0"));
        assert!(!is_pci_address("0000:03:00.8"));
        assert_eq!(parse_cpu_list("0-2,5, 7-7"), vec![0, 1, 2, 5, 7]);
    }
}
