/* SPDX-License-Identifier: Apache-2.0
 *
 * The DPDK API surface lace-benches binds with bindgen (see build.rs), plus the shim functions
 * in shim.c that re-export what DPDK only offers as macros or static-inline functions.
 */
#ifndef LACE_BENCHES_WRAPPER_H
#define LACE_BENCHES_WRAPPER_H

#include <stdint.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_memory.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>

/* rte_errno is a per-lcore thread-local behind a macro; bindgen cannot see it. */
int lace_rte_errno(void);

/* rte_hash_crc is static inline; rte_hash wants a function pointer of type rte_hash_function. */
uint32_t lace_rte_hash_crc(const void *key, uint32_t key_len, uint32_t init_val);

#endif
