/* batchfit.c -- what a batch costs beside its products: K products of one
 * shape (each its own matrix and activation, as the bench's pipelined
 * products are) through bml_worker_mat_vec_batch, the card taking every
 * row, for K = 1, 2, 4, 8, 16, 24 and 32; the median of RUNS batches for
 * each K, twice round.  T(K) = a + b K splits the batch's fixed cost a
 * (its start and end) from the per-product cost b.  Every product of the
 * last run of each K is compared bit for bit with the pool's CPU result
 * (bml__same_bits), and the worker's status must say that the card took
 * every product (none sent to the CPU by an error, the card's memory or a
 * rest): else the times would not be the card's.
 * Not built, installed or distributed (README.md).
 *   batchfit ROWS N [RUNS]   (RUNS: 21, at most 101)
 * Exit status 0 only when every result compared is exact and every
 * product ran on the card.
 * BATCHFIT_K=K runs that K alone, once round; BATCHFIT_MARKS=1 prints each
 * batch's call and return (CLOCK_MONOTONIC, µs: cltrace.c's clock) to
 * stderr, to set a trace's commands against their batch. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bankml-cl.h"
#include "base/bml.h"
#include "cpu/golden.h"
#include "cpu/gen.h"

#define MOST 32

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The worker's counts of products: on the card, then sent to the CPU by
 * an error, by the card's memory and by a rest.  0, or -1 where the
 * status cannot be read. */
#define COUNTS 4
static int counts(bml_worker *w, long long c[COUNTS]) {
  static const char *const keys[COUNTS] = {"products_on_card", "products_on_cpu_error", "products_on_cpu_memory",
                                           "products_on_cpu_resting"};
  char *status = NULL;
  if (bml_worker_status_json(w, &status) != 0) return -1;
  json_t *j = json_loads(status, 0, NULL);
  free(status);
  int rc = j ? 0 : -1;
  for (int i = 0; rc == 0 && i < COUNTS; i++) {
    json_t *v = json_object_get(j, keys[i]);
    if (json_is_integer(v)) c[i] = (long long)json_integer_value(v);
    else rc = -1;
  }
  json_decref(j);
  return rc;
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
  const char *only = getenv("BATCHFIT_K");
  char *end = NULL;
  const long asked = only ? strtol(only, &end, 10) : 0;
  if (only && (end == only || *end != '\0' || asked < 1 || asked > MOST)) {
    fprintf(stderr, "batchfit: BATCHFIT_K=\"%s\": a whole number, 1 to %d\n", only, MOST);
    return 2;
  }
  const int one[] = {(int)asked};
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
  static const int all[] = {1, 2, 4, 8, 16, 24, 32};
  const int *ks = only ? one : all;
  const size_t nks = only ? 1 : sizeof all / sizeof *all;
  const bool marks = getenv("BATCHFIT_MARKS") != NULL;
  size_t bad = 0, off_card = 0;
  double t[101];
  for (int round = 0; rc == 0 && round < (only ? 1 : 2); round++) {
    for (size_t j = 0; rc == 0 && j < nks; j++) {
      const int k = ks[j];
      long long before[COUNTS], after[COUNTS];
      if (counts(w, before) != 0) {
        fprintf(stderr, "batchfit: the worker's status cannot be read\n");
        return 1;
      }
      for (int r = 0; rc == 0 && r < runs; r++) {
        for (int i = 0; i < k; i++) memset(out[i], 0xa5, rows * sizeof **out);
        const double t0 = now_ms();
        rc = bml_worker_mat_vec_batch(w, p, (size_t)k);
        t[r] = now_ms() - t0;
        if (marks) fprintf(stderr, "batch %d %.1f %.1f\n", k, t0 * 1e3, (t0 + t[r]) * 1e3);
      }
      if (rc != 0) break;
      if (counts(w, after) != 0) {
        fprintf(stderr, "batchfit: the worker's status cannot be read\n");
        return 1;
      }
      const bool all_on_card = after[0] - before[0] == (long long)runs * k && after[1] == before[1] &&
                               after[2] == before[2] && after[3] == before[3];
      off_card += !all_on_card;
      size_t differ = 0;
      for (int i = 0; i < k; i++) {
        size_t r = 0;
        while (r < rows && bml__same_bits(out[i][r], ref[i][r])) r++;
        differ += r < rows;
      }
      bad += differ;
      qsort(t, (size_t)runs, sizeof *t, cmpd);
      printf("%zux%zu K=%2d: median %.4f ms a batch, %.2f us a product (min %.4f ms)%s, %s\n", rows, n, k,
             t[runs / 2], t[runs / 2] * 1e3 / k, t[0],
             all_on_card ? "" : " (NOT ALL ON THE CARD: the worker sent products to the CPU)",
             differ ? "NOT EXACT" : "exact");
    }
  }
  if (rc != 0) fprintf(stderr, "batchfit: a batch: %s\n", bml_strerror(rc));
  bml_worker_close(w);
  bml_pool_close(pool);
  for (int i = 0; i < MOST; i++) free(wt[i]), free(act[i]), free(out[i]), free(ref[i]);
  return rc != 0 || bad || off_card ? 1 : 0;
}
