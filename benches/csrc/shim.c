/* SPDX-License-Identifier: Apache-2.0
 *
 * Out-of-line copies of DPDK macros and static-inline functions, so Rust can call them.
 * Compiled by build.rs with the same `pkg-config --cflags libdpdk` flags DPDK's headers expect.
 */
#include "wrapper.h"

int lace_rte_errno(void)
{
	return rte_errno;
}

uint32_t lace_rte_hash_crc(const void *key, uint32_t key_len, uint32_t init_val)
{
	return rte_hash_crc(key, key_len, init_val);
}
