/* SPDX-License-Identifier: Apache-2.0
 *
 * The DPDK 22.11 API surface lace-forwarder binds (build.rs runs bindgen over this header with
 * an allowlist), plus the out-of-line shims in shim.c for DPDK's macros and static-inline
 * fast-path functions, which have no symbol a Rust `extern` block could link to.
 */
#ifndef LACE_DPDK_WRAPPER_H
#define LACE_DPDK_WRAPPER_H

#include <stdint.h>

#include <rte_common.h>
#include <rte_config.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_net.h>
#include <rte_ring.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_interrupts.h>
#include <rte_log.h>
#include <rte_malloc.h>

/* ---- EAL: per-thread values behind macros ---- */

/* rte_errno is a per-thread variable behind a macro. */
int lace_rte_errno(void);
/* rte_lcore_id() reads a per-thread variable; LCORE_ID_ANY on non-EAL threads. */
unsigned int lace_rte_lcore_id(void);
/* rte_rdtsc() is inline assembly. */
uint64_t lace_rte_rdtsc(void);

/* ---- ethdev fast path (static inline over rte_eth_fp_ops) ---- */

uint16_t lace_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
			       uint16_t nb_pkts);
uint16_t lace_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
			       uint16_t nb_pkts);
/* Readies packets' offload metadata and headers for the device (rte_eth_tx_prepare): returns
 * how many from the front are ready; rte_errno says why the next one is not. */
uint16_t lace_rte_eth_tx_prepare(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
				 uint16_t nb_pkts);

/* ---- TX offload metadata as DPDK reads it ---- */

/* 0 when the mbuf's offload flags and lengths are consistent (rte_validate_tx_offload). */
int lace_rte_validate_tx_offload(const struct rte_mbuf *m);
/* Writes the pseudo-header checksums Intel-style NICs expect, at the offsets the mbuf's
 * lengths give (rte_net_intel_cksum_prepare, what their tx_prepare does). */
int lace_rte_net_intel_cksum_prepare(struct rte_mbuf *m);

/* ---- Rx queue interrupts (an adaptive worker's wake-up on a DPDK port) ---- */

/* Adds the interrupt of (port, queue) to the epoll set `epfd` (rte_eth_dev_rx_intr_ctl_q), or
 * returns a negative errno when the port has none (driver without Rx interrupts, or the port
 * configured without intr_conf.rxq). Asking an unsupporting port does not log. */
int lace_rx_intr_watch(uint16_t port_id, uint16_t queue_id, int epfd);
/* Removes what lace_rx_intr_watch added. */
int lace_rx_intr_unwatch(uint16_t port_id, uint16_t queue_id, int epfd);
/* Consumes the ready interrupts of `epfd` without waiting (rte_epoll_wait, which reads each
 * interrupt's counter as its kind needs); returns how many there were, or -1. */
int lace_rx_intr_drain(int epfd);

/* ---- mbuf (static inline) ---- */

struct rte_mbuf *lace_rte_pktmbuf_alloc(struct rte_mempool *mp);
int lace_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count);
void lace_rte_pktmbuf_free(struct rte_mbuf *m);
char *lace_rte_pktmbuf_mtod(struct rte_mbuf *m);
uint16_t lace_rte_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t lace_rte_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t lace_rte_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t lace_rte_pktmbuf_tailroom(const struct rte_mbuf *m);
char *lace_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
int lace_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
int lace_rte_pktmbuf_is_contiguous(const struct rte_mbuf *m);

/* ---- hash (static inline) ---- */

/* DPDK's CRC32-C hash, as a function pointer rte_hash_parameters can take. */
uint32_t lace_rte_hash_crc(const void *key, uint32_t key_len, uint32_t init_val);

/* ---- ring (static inline) ---- */

unsigned int lace_rte_ring_count(const struct rte_ring *r);
unsigned int lace_rte_ring_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n);

#endif
