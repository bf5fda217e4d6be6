/* workertest.h -- what the suites of the worker share: its pool and open, matrices, batches and layers with their CPU answers, its status. */
#ifndef BML_TEST_WORKERTEST_H
#define BML_TEST_WORKERTEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/hooks.h"
#include "card/card.h"
#include "share/plan.h"
#include "share/access.h"
#include "base/util.h"
#include "cpu/pool.h"
#include "cpu/gen.h"
#include "card/kernels.h"

extern bml_pool *pool;

/* Each suite's: the environment cleared but BANKML_GPU_SOFTWARE=1, the
 * quick oracle, a pool of two threads (pool); and its close. */
void setup(void);
void teardown(void);

/* What the worker logged, as the capture sink (bml_log_set_sink) writes it. */
extern char logged[8192];
void capture(void *ctx, bml_log_level level, const char *cat, const char *msg);

/* A worker with share `share` (a string for BANKML_GPU_SHARE), or a skip
 * when there is no OpenCL device at all. */
bml_worker *open_worker(const char *share);

typedef struct {
  size_t rows, n;
  bml_block_q1_0 *w;
  bml_block_q8_0 *a;
  float *want, *got;
} matrix;

matrix make(size_t rows, size_t n, uint64_t seed, bool layer_shaped);

void unmake(matrix *m);

/* A batch of products with their own weights and activations: product i
 * has rows + i % spread rows of n. */
typedef struct {
  size_t count;
  matrix m[64];
  bml_product p[64];
} batch;

void make_batch(batch *b, size_t count, size_t rows, size_t spread, size_t n, uint64_t seed, const char *name);

/* Runs the batch and checks every row of every product. */
void expect_batch(bml_worker *w, batch *b);

void unmake_batch(batch *b);

void expect_exact(bml_worker *w, matrix *m, const char *name);

json_t *status(bml_worker *w);

long long field(json_t *j, const char *name);

extern const char *const product_counters[];

long long total_products(json_t *j);

double cpu_rate(bml_worker *w);

/* A number of a kind of batch in the status (-1: no such kind), by its products and rows. */
double kind_field(json_t *j, long long products, long long rows, const char *key);
/* The share a kind of batch learnt (-1: no such kind). */
double kind_share(json_t *j, long long products, long long rows);
/* A number of the shape of `rows` rows in the status (-1: no such shape). */
double shape_field(json_t *j, long long rows, const char *key);

/* A layer of a model as one batch: Q, K, V (one activation), O, gate and up
 * (one activation), down (n = 3 * hidden), then a head. */
typedef struct {
  matrix m[8];
  bml_product p[8];
} layer;

void make_layer(layer *l, size_t hidden, uint64_t seed);

void expect_layer(layer *l);

void unmake_layer(layer *l);

/* Three layers in one batch, on a worker whose card is too small for a
 * slab that doubles its matrix memory: one slab per matrix, so the 15
 * matrices (Q/K/V and gate/up fused) are 15 batched launches. */
bml_worker *many_slabs(layer *l, bml_product *p);

#endif
