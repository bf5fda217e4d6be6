/* poolgate.h -- pool test helpers: a thread that drives a pool and holds it, for the tests of what
 * another thread's calls do meanwhile, a wait for its helpers to sleep, and a product's operands. */
#ifndef BML_TEST_POOLGATE_H
#define BML_TEST_POOLGATE_H

#include "base/bml.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pool_gate pool_gate;

/* Starts a thread that drives p with a job that holds it, and returns once
 * the pool is held; NULL when the thread could not start. */
pool_gate *pool_gate_hold(bml_pool *p);
/* Lets the pool go, joins the thread and frees the gate (NULL: nothing). */
void pool_gate_release(pool_gate *g);

/* A product's operands (layer-shaped), its single-thread results (want)
 * and room for another's (got). */
typedef struct {
  bml_block_q1_0 *w;
  bml_block_q8_0 *a;
  float *want, *got;
} product;

product make_product(size_t rows, size_t n, uint64_t seed);
void free_product(product *x);

/* Waits up to ms naps of a millisecond for `want` of p's helpers to be
 * asleep in the kernel; whether they are. */
bool pool_helpers_asleep(bml_pool *p, int want, int ms);

#endif
