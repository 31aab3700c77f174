/* SPDX-License-Identifier: Apache-2.0
 *
 * Out-of-line copies of the DPDK macros and static-inline functions lace-forwarder calls.
 * Compiled by build.rs with every flag of `pkg-config --cflags libdpdk` (rte_config.h, -march),
 * so the inline bodies are the ones the installed DPDK was built with. Each wrapper only forwards:
 * preconditions are the DPDK function's own and are stated on the Rust side.
 */
#include "wrapper.h"

int lace_rte_errno(void)
{
	return rte_errno;
}

unsigned int lace_rte_lcore_id(void)
{
	return rte_lcore_id();
}

uint64_t lace_rte_rdtsc(void)
{
	return rte_rdtsc();
}

uint16_t lace_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **rx_pkts,
			       uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t lace_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
			       uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

uint16_t lace_rte_eth_tx_prepare(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **tx_pkts,
				 uint16_t nb_pkts)
{
	return rte_eth_tx_prepare(port_id, queue_id, tx_pkts, nb_pkts);
}

int lace_rte_validate_tx_offload(const struct rte_mbuf *m)
{
	return rte_validate_tx_offload(m);
}

int lace_rte_net_intel_cksum_prepare(struct rte_mbuf *m)
{
	return rte_net_intel_cksum_prepare(m);
}

struct rte_mbuf *lace_rte_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int lace_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void lace_rte_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

char *lace_rte_pktmbuf_mtod(struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, char *);
}

uint16_t lace_rte_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
}

uint32_t lace_rte_pktmbuf_pkt_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_pkt_len(m);
}

uint16_t lace_rte_pktmbuf_headroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_headroom(m);
}

uint16_t lace_rte_pktmbuf_tailroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_tailroom(m);
}

char *lace_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

int lace_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_trim(m, len);
}

int lace_rte_pktmbuf_is_contiguous(const struct rte_mbuf *m)
{
	return rte_pktmbuf_is_contiguous(m);
}

unsigned int lace_rte_ring_count(const struct rte_ring *r)
{
	return rte_ring_count(r);
}

unsigned int lace_rte_ring_dequeue_burst(struct rte_ring *r, void **obj_table, unsigned int n)
{
	return rte_ring_dequeue_burst(r, obj_table, n, NULL);
}

uint32_t lace_rte_hash_crc(const void *key, uint32_t key_len, uint32_t init_val)
{
	return rte_hash_crc(key, key_len, init_val);
}

int lace_rx_intr_watch(uint16_t port_id, uint16_t queue_id, int epfd)
{
	/* ethdev logs an error for a port without Rx interrupt vectors (memif, pcap, null, ...),
	 * which is a normal answer here: ask with its log type quiet. */
	int level = rte_log_get_level(rte_eth_dev_logtype);
	int fd;

	rte_log_set_level(rte_eth_dev_logtype, RTE_LOG_EMERG);
	fd = rte_eth_dev_rx_intr_ctl_q_get_fd(port_id, queue_id);
	if (level >= 0)
		rte_log_set_level(rte_eth_dev_logtype, (uint32_t)level);
	if (fd < 0)
		return fd;
	return rte_eth_dev_rx_intr_ctl_q(port_id, queue_id, epfd, RTE_INTR_EVENT_ADD, NULL);
}

int lace_rx_intr_unwatch(uint16_t port_id, uint16_t queue_id, int epfd)
{
	return rte_eth_dev_rx_intr_ctl_q(port_id, queue_id, epfd, RTE_INTR_EVENT_DEL, NULL);
}

int lace_rx_intr_drain(int epfd)
{
	struct rte_epoll_event events[16];
	int total = 0;
	int n;

	do {
		n = rte_epoll_wait(epfd, events, 16, 0);
		if (n < 0)
			return n;
		total += n;
	} while (n == 16);
	return total;
}
