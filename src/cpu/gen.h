/* gen.h -- deterministic data for the oracle and the tests (gen.c). */
#ifndef BML_GEN_H
#define BML_GEN_H

#include "base/bml.h"

uint64_t bml__xorshift64(uint64_t *state); /* x ^= x<<13; x ^= x>>7; x ^= x<<17 */
/* rows x n random weights: random-sign scales in [2^-10, 4) with the special
 * scales +0, -0, 0x0001 and 0x7bff among them; or, layer-shaped, 0.01..0.05. */
void bml__gen_q1_0(uint64_t *state, bml_block_q1_0 *w, size_t rows, size_t n, bool layer);
/* n activations: random quants with all -128 and all +127 blocks among them;
 * or, layer-shaped, gaussians scaled per block by 2^U(-8,8), quantized.
 * Returns 0 or BML_ENOMEM. */
int bml__gen_q8_0(uint64_t *state, bml_block_q8_0 *a, size_t n, bool layer);

#endif
