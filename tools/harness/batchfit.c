/* batchfit.c -- what a batch costs beside its products: K products of one
 * shape (each its own matrix and activation, as the bench's pipelined
 * products are) through bml_worker_mat_vec_batch, the card taking every
 * row, for K = 1, 2, 4, 8, 16, 24 and 32; the median of RUNS batches for
 * each K, twice round.  T(K) = a + b K splits the batch's fixed cost a
 * (its start and end) from the per-product cost b.  Every product of the
 * last run of each K is compared bit for bit with the pool's CPU result.
 * Not built, installed or distributed (README.md).
 *   batchfit ROWS N [RUNS]   (RUNS: 21, at most 101)
 * Exit status 0 only when every result compared is exact. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bankml-cl.h"
#include "bml.h"

#define MOST 32

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmpd(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: batchfit ROWS N [RUNS]\n");
    return 2;
  }
  const size_t rows = strtoul(argv[1], NULL, 10), n = strtoul(argv[2], NULL, 10);
  const int runs = argc > 3 ? atoi(argv[3]) : 21;
  if (rows == 0 || n == 0 || n % BML_Q1_0_BLOCK || runs < 1 || runs > 101) {
    fprintf(stderr, "batchfit: ROWS > 0, N a multiple of %d, RUNS 1 to 101\n", BML_Q1_0_BLOCK);
    return 2;
  }
  bml_pool *pool = NULL;
  bml_worker *w = NULL;
  int rc = bml_pool_open(0, &pool);
  if (rc == 0) rc = bml_worker_open(pool, &w);
  if (rc != 0 || !w) {
    fprintf(stderr, "batchfit: no card is used here: %s\n", rc ? bml_strerror(rc) : "the log above says why");
    return 1;
  }
  if ((rc = bml_worker_set_share(w, 1.0)) != 0 || (rc = bml_worker_set_limit(w, 1.0)) != 0) {
    fprintf(stderr, "batchfit: %s\n", bml_strerror(rc));
    return 1;
  }
  bml_block_q1_0 *wt[MOST];
  bml_block_q8_0 *act[MOST];
  float *out[MOST], *ref[MOST];
  bml_product p[MOST];
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < MOST; i++) {
    wt[i] = malloc(rows * (n / BML_Q1_0_BLOCK) * sizeof **wt);
    act[i] = malloc(n / BML_Q8_0_BLOCK * sizeof **act);
    out[i] = malloc(rows * sizeof **out);
    ref[i] = malloc(rows * sizeof **ref);
    if (!wt[i] || !act[i] || !out[i] || !ref[i]) {
      fprintf(stderr, "batchfit: %s\n", bml_strerror(BML_ENOMEM));
      return 1;
    }
    bml__gen_q1_0(&state, wt[i], rows, n, false);
    if (bml__gen_q8_0(&state, act[i], n, false) != 0 ||
        (rc = bml_pool_q1_0_mat_vec(pool, wt[i], rows, n, act[i], ref[i])) != 0) {
      fprintf(stderr, "batchfit: the reference: %s\n", bml_strerror(rc ? rc : BML_EINVAL));
      return 1;
    }
    p[i] = (bml_product){"batchfit", wt[i], rows, n, act[i], out[i]};
  }
  /* the matrices uploaded, the batches' kind learnt */
  for (int k = 0; rc == 0 && k < 3; k++) rc = bml_worker_mat_vec_batch(w, p, MOST);
  static const int ks[] = {1, 2, 4, 8, 16, 24, 32};
  size_t bad = 0;
  double t[101];
  for (int round = 0; rc == 0 && round < 2; round++) {
    for (size_t j = 0; rc == 0 && j < sizeof ks / sizeof *ks; j++) {
      const int k = ks[j];
      for (int r = 0; rc == 0 && r < runs; r++) {
        for (int i = 0; i < k; i++) memset(out[i], 0xa5, rows * sizeof **out);
        const double t0 = now_ms();
        rc = bml_worker_mat_vec_batch(w, p, (size_t)k);
        t[r] = now_ms() - t0;
      }
      if (rc != 0) break;
      size_t differ = 0;
      for (int i = 0; i < k; i++) differ += memcmp(out[i], ref[i], rows * sizeof **out) != 0;
      bad += differ;
      qsort(t, (size_t)runs, sizeof *t, cmpd);
      printf("%zux%zu K=%2d: median %.4f ms a batch, %.2f us a product (min %.4f ms), %s\n", rows, n, k,
             t[runs / 2], t[runs / 2] * 1e3 / k, t[0], differ ? "NOT EXACT" : "exact");
    }
  }
  if (rc != 0) fprintf(stderr, "batchfit: a batch: %s\n", bml_strerror(rc));
  bml_worker_close(w);
  bml_pool_close(pool);
  for (int i = 0; i < MOST; i++) free(wt[i]), free(act[i]), free(out[i]), free(ref[i]);
  return rc != 0 || bad ? 1 : 0;
}
