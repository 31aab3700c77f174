//! Builds lace-dpdk-sys: bindings to the system DPDK (22.11 LTS on Debian 12) and the C shim.
//!
//! * `pkg-config libdpdk` (the pkg-config crate) emits the link line. DPDK is linked as shared
//!   libraries, so the EAL loads Debian's PMDs from its plugin directory at `rte_eal_init`.
//!   `librte_net_ring` is linked by name as well: `rte_eth_from_rings` lives there and
//!   `pkg-config --libs libdpdk` lists no drivers. (It is the same file as the plugin, so the EAL
//!   does not load it twice.)
//! * Every flag of `pkg-config --cflags libdpdk` goes to both bindgen's clang and the C shim:
//!   DPDK's headers need `-include rte_config.h` and the `-march` DPDK was built with, which the
//!   pkg-config crate's `Library` drops (it keeps only `-I` and `-D`).
//! * `csrc/shim.c` gives DPDK's static-inline fast-path functions and per-thread macros a symbol.

use std::env;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

/// Functions the safe wrapper calls; everything else in the headers stays unbound.
const FUNCTIONS: &[&str] = &[
    // EAL, lcores, launch
    "rte_eal_init",
    "rte_eal_cleanup",
    "rte_eal_process_type",
    "rte_eal_has_hugepages",
    "rte_eal_get_runtime_dir",
    "rte_strerror",
    "rte_socket_id",
    "rte_socket_count",
    "rte_lcore_count",
    "rte_get_main_lcore",
    "rte_get_next_lcore",
    "rte_lcore_is_enabled",
    "rte_lcore_to_socket_id",
    "rte_eal_remote_launch",
    "rte_eal_mp_remote_launch",
    "rte_eal_wait_lcore",
    "rte_eal_mp_wait_lcore",
    "rte_eal_get_lcore_state",
    "rte_get_tsc_hz",
    // mempool and mbuf
    "rte_pktmbuf_pool_create",
    "rte_mempool_free",
    "rte_mempool_lookup",
    "rte_mempool_avail_count",
    "rte_mempool_in_use_count",
    "rte_pktmbuf_free_bulk",
    // ethdev
    "rte_eth_dev_configure",
    "rte_eth_dev_adjust_nb_rx_tx_desc",
    "rte_eth_rx_queue_setup",
    "rte_eth_tx_queue_setup",
    "rte_eth_dev_start",
    "rte_eth_dev_stop",
    "rte_eth_dev_close",
    "rte_eth_dev_info_get",
    "rte_eth_dev_socket_id",
    "rte_eth_dev_is_valid_port",
    "rte_eth_dev_count_avail",
    "rte_eth_find_next",
    "rte_eth_dev_get_port_by_name",
    "rte_eth_dev_get_name_by_port",
    "rte_eth_dev_rss_hash_conf_get",
    "rte_eth_dev_rss_hash_update",
    "rte_eth_stats_get",
    "rte_eth_stats_reset",
    "rte_eth_link_get",
    "rte_eth_link_get_nowait",
    "rte_eth_dev_set_link_up",
    "rte_eth_dev_set_link_down",
    "rte_eth_promiscuous_enable",
    "rte_eth_promiscuous_disable",
    "rte_eth_promiscuous_get",
    "rte_eth_macaddr_get",
    "rte_eth_dev_default_mac_addr_set",
    "rte_eth_dev_get_mtu",
    "rte_eth_dev_set_mtu",
    "rte_eth_dev_rx_intr_enable",
    "rte_eth_dev_rx_intr_disable",
    // hot-plug
    "rte_dev_probe",
    "rte_dev_remove",
    "rte_dev_name",
    "rte_eal_hotplug_add",
    "rte_eal_hotplug_remove",
    // rings and ring-backed ports
    "rte_ring_create",
    "rte_ring_free",
    "rte_ring_lookup",
    "rte_eth_from_rings",
    // rte_ether
    "rte_ether_format_addr",
    "rte_ether_unformat_addr",
    // LPM and exact-match tables (lace-benches measures lace's tables against these) and the
    // heap statistics that size them
    "rte_malloc_get_socket_stats",
    "rte_socket_id_by_idx",
    "rte_fib_create",
    "rte_fib_free",
    "rte_fib_add",
    "rte_fib_delete",
    "rte_fib_lookup_bulk",
    "rte_fib6_create",
    "rte_fib6_free",
    "rte_fib6_add",
    "rte_fib6_delete",
    "rte_fib6_lookup_bulk",
    "rte_hash_create",
    "rte_hash_free",
    "rte_hash_add_key_data",
    "rte_hash_lookup_bulk_data",
    "rte_hash_count",
    // shim.c
    "lace_.*",
];

/// Types named directly (the functions above pull in the rest).
const TYPES: &[&str] = &[
    "rte_fib_conf",
    "rte_fib6_conf",
    "rte_hash_parameters",
    "rte_malloc_socket_stats",
    "rte_eth_conf",
    "rte_eth_dev_info",
    "rte_eth_rxconf",
    "rte_eth_txconf",
    "rte_eth_rss_conf",
    "rte_eth_stats",
    "rte_eth_link",
    "rte_ether_addr",
    "rte_mbuf",
    "rte_lcore_state_t",
    "rte_proc_type_t",
    "rte_rmt_call_main_t",
    "rte_eth_rx_mq_mode",
    "rte_eth_tx_mq_mode",
];

/// Object-like macros used as constants. `RTE_ETH_RSS_*` and `RTE_MEMPOOL_NAMESIZE` expand to
/// expressions cexpr cannot evaluate; `clang_macro_fallback` has clang evaluate them.
const VARS: &[&str] = &[
    "RTE_HASH_LOOKUP_BULK_MAX",
    "RTE_FIB_MAXDEPTH",
    "RTE_FIB6_MAXDEPTH",
    "RTE_FIB6_IPV6_ADDR_SIZE",
    "SOCKET_ID_ANY",
    "RTE_MAX_LCORE",
    "RTE_MAX_ETHPORTS",
    "RTE_MAX_QUEUES_PER_PORT",
    "RTE_MEMPOOL_NAMESIZE",
    "RTE_RING_NAMESIZE",
    "RTE_ETH_NAME_MAX_LEN",
    "RTE_DEV_NAME_MAX_LEN",
    "RTE_ETHER_ADDR_LEN",
    "RTE_ETHER_ADDR_FMT_SIZE",
    "RTE_ETHER_MTU",
    "RTE_MBUF_DEFAULT_BUF_SIZE",
    "RTE_MBUF_DEFAULT_DATAROOM",
    "RTE_PKTMBUF_HEADROOM",
    "RTE_ETH_RSS_IP",
    "RTE_ETH_RSS_TCP",
    "RTE_ETH_RSS_UDP",
    "RTE_ETH_RSS_PROTO_MASK",
    "RTE_ETH_LINK_UP",
    "RTE_ETH_LINK_DOWN",
    "RTE_ETH_LINK_FULL_DUPLEX",
    "RTE_ETH_LINK_AUTONEG",
    "RTE_ETH_SPEED_NUM_NONE",
    "RTE_ETH_SPEED_NUM_UNKNOWN",
    "RTE_MBUF_F_RX_RSS_HASH",
    "RTE_MBUF_F_TX_TCP_SEG",
    "RTE_MBUF_F_TX_UDP_SEG",
    "RTE_MBUF_F_RX_LRO",
    "RTE_MBUF_F_TX_TCP_CKSUM",
    "RTE_MBUF_F_TX_IP_CKSUM",
    "RTE_MBUF_F_TX_IPV4",
    "RTE_MBUF_F_TX_IPV6",
    "RTE_MBUF_F_TX_OUTER_IPV6",
    "RTE_MBUF_F_TX_TUNNEL_IPIP",
    "RTE_MBUF_F_TX_TUNNEL_IP",
    "RTE_MBUF_F_TX_TUNNEL_MASK",
    "RTE_ETH_TX_OFFLOAD_IPV4_CKSUM",
    "RTE_ETH_TX_OFFLOAD_TCP_CKSUM",
    "RTE_ETH_TX_OFFLOAD_TCP_TSO",
    "RTE_ETH_TX_OFFLOAD_IPIP_TNL_TSO",
    "RTE_ETH_TX_OFFLOAD_IP_TNL_TSO",
    "RING_F_SP_ENQ",
    "RING_F_SC_DEQ",
    "RING_F_EXACT_SZ",
    "SOCKET_ID_ANY",
    "LCORE_ID_ANY",
];

/// Types bindgen must not lay out. The handles are only used behind pointers; their layouts
/// carry cache-line alignment, flexible arrays and per-lcore arrays nothing on the Rust side
/// reads, and keeping them opaque keeps the generated code (and its layout tests) small.
/// `rte_mbuf` stays transparent: the wrapper reads `buf_addr`/`data_off`/`data_len` inline.
const OPAQUE: &[&str] = &[
    "rte_fib",
    "rte_fib6",
    "rte_hash",
    "rte_rib",
    "rte_rib6",
    "rte_mempool",
    "rte_ring",
    "rte_device",
    "rte_eth_dev",
    "rte_mempool_cache",
    "rte_mempool_objhdr",
    "rte_mbuf_ext_shared_info",
];

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    let csrc = manifest_dir.join("csrc");
    println!("cargo:rerun-if-changed=build.rs");
    println!(
        "cargo:rerun-if-changed={}",
        csrc.join("wrapper.h").display()
    );
    println!("cargo:rerun-if-changed={}", csrc.join("shim.c").display());
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let dpdk = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .unwrap_or_else(|e| {
            panic!(
                "libdpdk not found by pkg-config ({e}); install DPDK 22.11 LTS \
                 (`apt install libdpdk-dev pkg-config`)"
            )
        });
    // rte_eth_from_rings: see the module docs.
    println!("cargo:rustc-link-lib=dylib=rte_net_ring");
    // Exposed to dependents as DEP_RTE_EAL_VERSION and to this crate as DPDK_VERSION.
    println!("cargo:version={}", dpdk.version);
    println!("cargo:rustc-env=LACE_DPDK_VERSION={}", dpdk.version);

    let cflags = dpdk_cflags();

    let mut shim = cc::Build::new();
    shim.file(csrc.join("shim.c"))
        .include(&csrc)
        .warnings(true)
        .flag_if_supported("-Wno-unused-parameter");
    for flag in &cflags {
        shim.flag(flag);
    }
    shim.compile("lace_dpdk_shim");

    let mut builder = bindgen::Builder::default()
        .header(csrc.join("wrapper.h").to_string_lossy())
        .clang_args(&cflags)
        .clang_arg(format!("-I{}", csrc.display()))
        .clang_macro_fallback()
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_default(true)
        .derive_debug(true)
        .generate_comments(false)
        .layout_tests(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for f in FUNCTIONS {
        builder = builder.allowlist_function(f);
    }
    for t in TYPES {
        builder = builder.allowlist_type(t);
    }
    for v in VARS {
        builder = builder.allowlist_var(v);
    }
    for o in OPAQUE {
        builder = builder.opaque_type(o);
    }
    builder = builder
        .raw_line(format!(
            "// Generated by lace-dpdk-sys/build.rs with bindgen {} from the DPDK {} headers that",
            BINDGEN_VERSION, dpdk.version
        ))
        .raw_line("// `pkg-config libdpdk` found. Do not edit. The equivalent command line:");
    for line in equivalent_command(&cflags) {
        builder = builder.raw_line(format!("//   {line}"));
    }

    let bindings = builder
        .generate()
        .unwrap_or_else(|e| panic!("bindgen over csrc/wrapper.h failed: {e}"));
    bindings
        .write_to_file(out_dir.join("dpdk_bindings.rs"))
        .expect("write dpdk_bindings.rs into OUT_DIR");
}

/// All of `pkg-config --cflags libdpdk`, split into arguments.
fn dpdk_cflags() -> Vec<String> {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_owned());
    let out = Command::new(&pkg_config)
        .args(["--cflags", "libdpdk"])
        .output()
        .unwrap_or_else(|e| panic!("running `{pkg_config} --cflags libdpdk` failed: {e}"));
    assert!(
        out.status.success(),
        "`{pkg_config} --cflags libdpdk` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("pkg-config prints UTF-8")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The bindgen release in [build-dependencies]; informational, for the generated header.
const BINDGEN_VERSION: &str = "0.72";

/// The bindgen CLI invocation that produces the same module, one option group per line (each
/// but the last ends in a shell line continuation), for the generated file's header.
fn equivalent_command(cflags: &[String]) -> Vec<String> {
    let mut lines = vec![
        "bindgen csrc/wrapper.h --clang-macro-fallback --default-enum-style consts".to_owned(),
        "--with-derive-default --no-doc-comments".to_owned(),
    ];
    let groups: [(&str, &[&str]); 4] = [
        ("--allowlist-function", FUNCTIONS),
        ("--allowlist-type", TYPES),
        ("--allowlist-var", VARS),
        ("--opaque-type", OPAQUE),
    ];
    for (option, names) in groups {
        for chunk in names.chunks(4) {
            let mut line = String::new();
            for name in chunk {
                let _ = write!(line, "{option} '{name}' ");
            }
            lines.push(line.trim_end().to_owned());
        }
    }
    lines.push(format!("-- -Icsrc {}", cflags.join(" ")));
    let last = lines.len() - 1;
    for line in &mut lines[..last] {
        line.push_str(" \\");
    }
    lines
}
