//! A ClusterIP Service as a user feels it: TCP connect/request/response/close transactions per
//! second from a pod on one node to a ClusterIP whose one backend is a pod on the other node,
//! lace beside the kernel's own Service path measured in the same run (`lace-bench
//! --service-path`, root).
//!
//! Two shapes, one after the other, the same client and server in each:
//!
//! - **kernel**: [`crate::podpath`]'s kernel two-node shape (veth pods, the cross-node part
//!   SRv6 where the kernel has seg6, else VXLAN as Flannel programs it), plus on the client's
//!   node the nftables ruleset kube-proxy's nftables mode programs for the ClusterIP
//!   ([`kube_proxy_ruleset`]): DNAT in `nat-prerouting` through the `service-ips` map, the
//!   Service's chain and the endpoint's chain; conntrack reverses it on the replies.
//! - **lace**: the demo's two-node stack ([`crate::control`]'s stack, pods through lace-cni)
//!   with a Service manifest (ClusterIP [`CLUSTER_IP`], port 80 to the backend's
//!   [`BACKEND_PORT`]) whose selector picks the one pod on node b; the client pod on node a.
//!
//! The probe runs in this process: [`CONNECTIONS`] client threads enter the client pod's network
//! namespace and, for [`SECONDS`], each opens a TCP connection to `ClusterIP:80`, sends a
//! [`REQUEST`]-byte request, reads the [`RESPONSE`]-byte answer and the server's close, and
//! closes; as many server threads in the backend pod's namespace accept, read the request,
//! answer and close first (so no client port waits in TIME_WAIT). The figure is completed
//! transactions per second. The client pod's ephemeral port range is widened to 1024–65535 in
//! both shapes.
//!
//! Each shape then runs the same transactions straight to the backend pod's address (at
//! [`DIRECT_PORT`], `service.direct.*`): what the path between the pods costs without the Service. So the gap
//! splits in two, each measured in the same run: the pod path (`service.direct.crr_per_s` ÷
//! the kernel's) and the Service on top of it (`.vs_direct`: through the ClusterIP ÷ direct, in
//! each shape).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

use crate::control::{is_root, Outcome, Stack};
use crate::podpath::{counters, in_ns, reachable, Endpoints, KernelShape, Peer};
use crate::report::{Figure, Target};

/// Seconds of the timed run in each shape.
pub const SECONDS: u64 = 5;
/// Connections in flight at once (client threads, and server threads).
pub const CONNECTIONS: usize = 4;
/// Request bytes per transaction.
pub const REQUEST: usize = 64;
/// Response bytes per transaction.
pub const RESPONSE: usize = 128;
/// The Service's ClusterIP in both shapes.
pub const CLUSTER_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 30);
/// The Service's port.
pub const SERVICE_PORT: u16 = 80;
/// The backend pod's port (the Service's target port).
pub const BACKEND_PORT: u16 = 8080;
/// The backend pod's port for the direct run: another port than the Service's target, so no
/// connection of the direct run has the 4-tuple a translated connection of the first run left
/// behind (in TIME_WAIT on the server, in the flow tables).
pub const DIRECT_PORT: u16 = 8081;
/// The figure compared, for "not measured" lines.
pub const FIGURE: &str = "service.crr_per_s";

/// Targets of the Service-path figures (report-only).
pub fn targets() -> Vec<(String, Target)> {
    vec![(FIGURE.to_owned(), Target::RatioAtLeast(1.0))]
}

/// What one shape's run did.
#[derive(Debug, Clone)]
struct Crr {
    /// Transactions completed per second.
    per_s: f64,
    /// Transactions completed.
    done: u64,
    /// Transactions that failed (connect, send, receive or a short answer).
    failed: u64,
    /// The first failure, if any.
    first_error: Option<String>,
}

/// Runs `f` on a new thread in network namespace `ns` (`/var/run/netns/<ns>`): the sockets it
/// creates belong to that namespace.
fn in_netns<T, F>(ns: &str, f: F) -> JoinHandle<anyhow::Result<T>>
where
    T: Send + 'static,
    F: FnOnce() -> anyhow::Result<T> + Send + 'static,
{
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let netns = File::open(&path).with_context(|| format!("opening {path}"))?;
        // SAFETY: setns on a valid namespace fd moves only this thread.
        if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            bail!("setns({path}): {}", std::io::Error::last_os_error());
        }
        f()
    })
}

fn joined<T>(h: JoinHandle<anyhow::Result<T>>) -> anyhow::Result<T> {
    h.join()
        .unwrap_or_else(|_| Err(anyhow!("a CRR thread panicked")))
}

/// The backend: [`CONNECTIONS`] threads accepting on one listener in the server's namespace.
struct Server {
    listener: Arc<TcpListener>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<anyhow::Result<()>>>,
}

impl Server {
    fn start(ns: &str, port: u16) -> anyhow::Result<Server> {
        let listener = joined(in_netns(ns, move || {
            TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
                .context("binding the CRR server")
        }))?;
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..CONNECTIONS)
            .map(|_| {
                let (l, stop) = (listener.clone(), stop.clone());
                std::thread::spawn(move || loop {
                    match l.accept() {
                        Ok((s, _)) => {
                            // A connection the client gave up on is the client's failure to count.
                            let _ = answer(s);
                        }
                        Err(_) if stop.load(Ordering::Relaxed) => return Ok(()),
                        Err(e) => bail!("CRR server accept: {e}"),
                    }
                })
            })
            .collect();
        Ok(Server {
            listener,
            stop,
            threads,
        })
    }

    /// Wakes every accepting thread (shutdown of the listener) and joins them.
    fn stop(self) -> anyhow::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        // SAFETY: the listener's fd is open for as long as `self.listener` lives.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        for t in self.threads {
            joined(t)?;
        }
        Ok(())
    }
}

/// Reads the request, answers, closes.
fn answer(mut s: TcpStream) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let mut req = [0u8; REQUEST];
    s.read_exact(&mut req)?;
    s.write_all(&[b'r'; RESPONSE])
}

/// One transaction: connect, request, the whole answer, the server's close, close.
fn transaction(to: SocketAddr) -> std::io::Result<()> {
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(1))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    s.write_all(&[b'q'; REQUEST])?;
    let mut buf = [0u8; RESPONSE];
    s.read_exact(&mut buf)?;
    if s.read(&mut buf)? != 0 {
        return Err(std::io::Error::other(
            "the server sent more than its answer",
        ));
    }
    Ok(())
}

/// Widens the client namespace's ephemeral ports to 1024–65535.
fn wide_ports(ns: &str) -> anyhow::Result<()> {
    KernelShape::sysctl(ns, &["net.ipv4.ip_local_port_range=1024 65535"])
}

/// Serves on `server_port` in `ep.server`, waits (at most 20 s) until a transaction from `ep.client` to `to`
/// completes, then runs [`CONNECTIONS`] clients for [`SECONDS`].
fn crr(ep: &Endpoints, to: SocketAddr, server_port: u16) -> anyhow::Result<Crr> {
    wide_ports(&ep.client)?;
    let server = Server::start(&ep.server, server_port)?;
    let result = (|| {
        joined(in_netns(&ep.client, move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match transaction(to) {
                    Ok(()) => return Ok(()),
                    Err(e) if Instant::now() > deadline => {
                        bail!("no transaction to {to} completed within 20 s: {e}")
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }))?;
        let start = Instant::now();
        let end = start + Duration::from_secs(SECONDS);
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|_| {
                in_netns(&ep.client, move || {
                    let (mut done, mut failed, mut first_error) = (0u64, 0u64, None);
                    while Instant::now() < end {
                        match transaction(to) {
                            Ok(()) => done += 1,
                            Err(e) => {
                                failed += 1;
                                first_error.get_or_insert_with(|| e.to_string());
                            }
                        }
                    }
                    Ok((done, failed, first_error))
                })
            })
            .collect();
        let mut total = Crr {
            per_s: 0.0,
            done: 0,
            failed: 0,
            first_error: None,
        };
        for c in clients {
            let (done, failed, first_error) = joined(c)?;
            total.done += done;
            total.failed += failed;
            total.first_error = total.first_error.or(first_error);
        }
        total.per_s = total.done as f64 / start.elapsed().as_secs_f64();
        if total.done == 0 {
            bail!(
                "no transaction completed in {SECONDS} s: {}",
                total.first_error.as_deref().unwrap_or("no error seen")
            );
        }
        Ok(total)
    })();
    server.stop()?;
    result
}

/// The ruleset kube-proxy's nftables mode programs for one ClusterIP Service with one
/// endpoint, cut to the chains on a pod's path to the ClusterIP (no NodePorts, no traffic the
/// node itself originates): `filter-prerouting` (new connections through the
/// LoadBalancerSourceRanges check, empty here), `filter-forward` (invalid conntrack state
/// dropped, new connections through the no-endpoint and ClusterIP-port checks),
/// `nat-prerouting` to `services`, the `service-ips` verdict map to the Service's chain
/// (masquerade mark for sources outside the cluster CIDR, then a `numgen` pick among its
/// endpoints), the endpoint's chain (hairpin mark, `dnat to`), and `nat-postrouting`'s
/// masquerading of marked packets. Chain names follow kube-proxy's
/// `service-<hash>-<namespace>/<name>/<protocol>/<port>`, with a fixed token for the hash.
fn kube_proxy_ruleset(backend: Ipv4Addr, cluster_cidr: &str) -> String {
    let svc = "service-CRRBENCH-team-blue/crr/tcp/";
    let ep = format!("endpoint-CRRBENCH-team-blue/crr/tcp/__{backend}/{BACKEND_PORT}");
    format!(
        "table ip kube-proxy {{
  comment \"rules for kube-proxy\"
  set cluster-ips {{ type ipv4_addr; elements = {{ {CLUSTER_IP} }} }}
  map firewall-ips {{ type ipv4_addr . inet_proto . inet_service : verdict; }}
  map no-endpoint-services {{ type ipv4_addr . inet_proto . inet_service : verdict; }}
  chain filter-prerouting {{
    type filter hook prerouting priority -110; policy accept;
    ct state new jump firewall-check
  }}
  chain firewall-check {{
    ip daddr . meta l4proto . th dport vmap @firewall-ips
  }}
  chain filter-forward {{
    type filter hook forward priority -10; policy accept;
    ct state invalid drop
    ct state new jump service-endpoints-check
    ct state new jump cluster-ips-check
  }}
  chain service-endpoints-check {{
    ip daddr . meta l4proto . th dport vmap @no-endpoint-services
  }}
  chain cluster-ips-check {{
    ip daddr @cluster-ips reject
  }}
  chain mark-for-masquerade {{
    meta mark set meta mark | 0x4000
  }}
  chain masquerading {{
    meta mark & 0x4000 == 0 return
    meta mark set meta mark ^ 0x4000
    masquerade fully-random
  }}
  chain nat-prerouting {{
    type nat hook prerouting priority -100; policy accept;
    jump services
  }}
  chain nat-postrouting {{
    type nat hook postrouting priority 100; policy accept;
    jump masquerading
  }}
  chain {ep} {{
    ip saddr {backend} jump mark-for-masquerade
    meta l4proto tcp dnat to {backend}:{BACKEND_PORT}
  }}
  chain {svc} {{
    ip daddr {CLUSTER_IP} tcp dport {SERVICE_PORT} ip saddr != {cluster_cidr} jump mark-for-masquerade
    numgen random mod 1 vmap {{ 0 : goto {ep} }}
  }}
  map service-ips {{
    type ipv4_addr . inet_proto . inet_service : verdict
    comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\"
    elements = {{ {CLUSTER_IP} . tcp . {SERVICE_PORT} : goto {svc} }}
  }}
  chain services {{
    ip daddr . meta l4proto . th dport vmap @service-ips
  }}
}}
"
    )
}

/// Loads `ruleset` with `nft -f -` in namespace `ns`.
fn nft(ns: &str, ruleset: &str) -> anyhow::Result<()> {
    let mut child = in_ns(ns)
        .args(["nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running nft (install nftables: .ci/install-deps)")?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("nft's stdin"))?
        .write_all(ruleset.as_bytes())?;
    let o = child.wait_with_output()?;
    if !o.status.success() {
        bail!(
            "nft -f in {ns} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

/// One shape's two runs: through the ClusterIP, then straight to the backend.
struct Runs {
    service: Crr,
    direct: Crr,
}

/// [`crr`] to the ClusterIP, then to the backend pod's own address at [`DIRECT_PORT`].
fn both(ep: &Endpoints) -> anyhow::Result<Runs> {
    let service = crr(
        ep,
        SocketAddr::from((CLUSTER_IP, SERVICE_PORT)),
        BACKEND_PORT,
    )?;
    let backend: Ipv4Addr = ep.server_ip.parse()?;
    let direct = crr(ep, SocketAddr::from((backend, DIRECT_PORT)), DIRECT_PORT)?;
    Ok(Runs { service, direct })
}

/// The kernel's shape with kube-proxy's rules on node a.
fn kernel(tag: &str, peer: Peer) -> anyhow::Result<Runs> {
    let k = KernelShape::build(tag, peer)
        .with_context(|| format!("building the kernel's {} shape", peer.name()))?;
    let ep = k.endpoints();
    reachable(&ep)?;
    let backend: Ipv4Addr = ep.server_ip.parse()?;
    nft(&k.ns("a"), &kube_proxy_ruleset(backend, "10.90.0.0/16"))?;
    both(&ep)
}

/// The Service and its backend pod, written beside the stack's pod manifests.
fn lace_manifests() -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: crr, namespace: team-blue, labels: {{tier: backend}}}}
spec:
  clusterIP: {CLUSTER_IP}
  selector: {{app: crr-server}}
  ports:
  - {{port: {SERVICE_PORT}, targetPort: {BACKEND_PORT}, protocol: TCP}}
---
apiVersion: v1
kind: Pod
metadata: {{name: crr-server, namespace: team-blue, labels: {{tier: backend, app: crr-server}}}}
spec:
  nodeName: node-b
  containers:
  - name: app
    image: registry.k8s.io/pause:3.10
"
    )
}

/// lace's shape, and the forwarders' counters afterwards.
fn lace() -> anyhow::Result<(Runs, Vec<String>)> {
    let mut stack = Stack::start()?;
    let r = (|| {
        std::fs::write(
            stack.manifests().join("bench-service.yaml"),
            lace_manifests(),
        )?;
        stack.launch(0, 0)?;
        let (server_ip, _) = stack.add("b", "crr-server")?;
        stack.add("a", "bench-resident")?;
        let ep = Endpoints {
            client: stack.pod_ns("bench-resident"),
            server: stack.pod_ns("crr-server"),
            server_ip,
        };
        reachable(&ep)?;
        let c = both(&ep)?;
        let mut notes = Vec::new();
        for n in ["a", "b"] {
            notes.push(counters(&stack, n, "service")?);
        }
        Ok((c, notes))
    })();
    r.map_err(|e: anyhow::Error| anyhow!("{e:#}; {}", stack.log_tails()))
}

/// The Service-path figures. Never fails: what cannot be measured is returned in
/// [`Outcome::not_measured`] with the reason.
pub fn figures() -> Outcome {
    let mut out = Outcome::default();
    if !is_root() {
        out.not_measured.push((
            FIGURE.to_owned(),
            "needs root (network namespaces, veth pairs, nftables, the forwarders); run \
             lace-bench as root"
                .to_owned(),
        ));
        return out;
    }
    if Command::new("nft")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        out.not_measured.push((
            FIGURE.to_owned(),
            "`nft` is not installed (nftables: .ci/install-deps)".to_owned(),
        ));
        return out;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let tag = std::process::id().to_string();
    let Some((peer, why)) = out.step(FIGURE, "probing the kernel for seg6", Peer::probe(&tag))
    else {
        return out;
    };
    let Some(kernel) = out.step(FIGURE, "kernel shape", kernel(&tag, peer)) else {
        return out;
    };
    let Some((lace, notes)) = out.step(FIGURE, "lace shape", lace()) else {
        return out;
    };
    let k = out.push(Figure::new(
        "service.kernel.crr_per_s",
        kernel.service.per_s,
        "transactions/s",
    ));
    out.push(Figure::versus(FIGURE, lace.service.per_s, &k));
    let kd = out.push(Figure::new(
        "service.direct.kernel.crr_per_s",
        kernel.direct.per_s,
        "transactions/s",
    ));
    let ld = out.push(Figure::versus(
        "service.direct.crr_per_s",
        lace.direct.per_s,
        &kd,
    ));
    out.push(Figure::versus(
        "service.kernel.crr_per_s.vs_direct",
        kernel.service.per_s,
        &kd,
    ));
    out.push(Figure::versus(
        "service.crr_per_s.vs_direct",
        lace.service.per_s,
        &ld,
    ));
    out.notes.push(format!(
        "service: the kernel's peer is {} ({why}) with kube-proxy's nftables-mode ruleset for \
         the ClusterIP on the client's node (DNAT in nat-prerouting, conntrack reversing it)",
        peer.name()
    ));
    out.notes.push(format!(
        "service: kernel shape then lace shape, back to back; pod on node a → ClusterIP \
         {CLUSTER_IP}:{SERVICE_PORT} → one backend pod on node b:{BACKEND_PORT}; {CONNECTIONS} \
         connections at a time for {SECONDS} s, each connect, {REQUEST} B request, {RESPONSE} B \
         response, server closes, client closes; load average at the start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    for (shape, c) in [
        ("kernel via the ClusterIP", &kernel.service),
        ("kernel direct", &kernel.direct),
        ("lace via the ClusterIP", &lace.service),
        ("lace direct", &lace.direct),
    ] {
        out.notes.push(format!(
            "service: {shape}: {} transactions, {} failed{}",
            c.done,
            c.failed,
            c.first_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        ));
    }
    out.notes.extend(notes);
    out
}

#[cfg(test)]
mod tests {
    use serde::Deserialize as _;

    use super::*;

    #[test]
    fn the_ruleset_dnats_the_cluster_ip_to_the_backend() {
        let r = kube_proxy_ruleset(Ipv4Addr::new(10, 90, 1, 2), "10.90.0.0/16");
        assert!(r.contains("10.96.0.30 . tcp . 80 : goto service-CRRBENCH-team-blue/crr/tcp/"));
        assert!(r.contains("dnat to 10.90.1.2:8080"));
        assert!(r.contains("ip saddr != 10.90.0.0/16 jump mark-for-masquerade"));
    }

    #[test]
    fn the_service_selects_only_the_backend_pod() {
        let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&lace_manifests())
            .map(serde_yaml::Value::deserialize)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(docs[0]["spec"]["selector"]["app"], "crr-server");
        assert_eq!(docs[0]["spec"]["clusterIP"], "10.96.0.30");
        assert_eq!(docs[1]["metadata"]["labels"]["app"], "crr-server");
        assert_eq!(docs[1]["spec"]["nodeName"], "node-b");
    }
}
