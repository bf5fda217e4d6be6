/* bench_cpu.c -- `bankml-cl bench --cpu`: the pool on random matrices, warm and cache-flushed. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"
#include "bench.h"
#include "progress.h"

/* One shape's operands, its reference result and a result to fill. */
struct product {
  size_t rows, n;
  bml_block_q1_0 *w;
  bml_block_q8_0 *a;
  float *want, *got;
  size_t w_bytes, a_bytes, out_bytes;
};

static void product_free(struct product *p) {
  free(p->w);
  free(p->a);
  free(p->want);
  free(p->got);
  memset(p, 0, sizeof *p);
}

/* Allocates and fills one shape's operands and computes the reference with
 * bml_q1_0_mat_vec on this thread.  Returns 0 or a bankml-cl error, said on
 * stderr. */
static int product_init(struct product *p, const struct bench_shape *shape) {
  memset(p, 0, sizeof *p);
  p->rows = shape->rows;
  p->n = shape->n;
  size_t wblocks = p->n / BML_Q1_0_BLOCK; /* the sizes fit: --shape refuses any other (bench.c) */
  p->w_bytes = p->rows * wblocks * sizeof *p->w;
  p->a_bytes = p->n / BML_Q8_0_BLOCK * sizeof *p->a;
  p->out_bytes = p->rows * sizeof(float);
  p->w = malloc(p->w_bytes);
  p->a = malloc(p->a_bytes);
  p->want = malloc(p->out_bytes);
  p->got = malloc(p->out_bytes);
  int rc = BML_ENOMEM;
  if (!p->w || !p->a || !p->want || !p->got) goto fail;
  if ((rc = bench_random_operands(p->rows, p->n, p->w, p->a)) != 0) goto fail;
  if ((rc = bml_q1_0_mat_vec(p->w, p->rows, p->n, p->a, p->want)) != 0) goto fail;
  return 0;
fail:
  fprintf(stderr, "bankml-cl bench: %zux%zu (%.1f MB of weights): %s\n", p->rows, p->n,
          (double)p->w_bytes / 1e6, bml_strerror(rc));
  product_free(p);
  return rc;
}

/* One measurement in progress: a pool, a product, and (when flushing) how. */
struct timing {
  bml_pool *pool;
  struct product *p;
  struct cache_flusher *flush; /* NULL: a warm run */
  long gap_ms;                 /* an idle gap before each timed run (--gap); -1: none */
  bool exact;
};

/* One product on the pool, timed alone; its result is checked afterwards. */
static int timed_run(struct timing *t, double *ms) {
  struct product *p = t->p;
  memset(p->got, 0xa5, p->out_bytes); /* a product that writes nothing must not pass */
  if (t->flush) {
    const void *ptrs[] = {p->w, p->a};
    const size_t lens[] = {p->w_bytes, p->a_bytes};
    cache_flusher_evict(t->flush, ptrs, lens, 2);
  }
  double t0 = bench_now_ms();
  int rc = bml_pool_q1_0_mat_vec(t->pool, p->w, p->rows, p->n, p->a, p->got);
  *ms = bench_now_ms() - t0;
  if (rc != 0) {
    fprintf(stderr, "bankml-cl bench: %zux%zu on %d threads: %s\n", p->rows, p->n,
            bml_pool_threads(t->pool), bml_strerror(rc));
    return rc;
  }
  if (!bench_exact(p->got, p->want, p->out_bytes / sizeof(float))) t->exact = false;
  return 0;
}

/* cfg->runs timed products (after the warm-up, when warm) into one row. */
static int measure(const struct bench_config *cfg, struct timing *t, double *ms,
                   struct bench_report *rep) {
  progress_step("cpu %zux%zu, %d thread%s, %s", t->p->rows, t->p->n, bml_pool_threads(t->pool),
                bml_pool_threads(t->pool) == 1 ? "" : "s", t->flush ? "flushed" : "warm");
  t->exact = true;
  for (long i = 0; !t->flush && i < cfg->warmup; i++) { /* after gaps too: the pool sees their cadence */
    if (t->gap_ms >= 0) bench_idle_gap(t->gap_ms);
    double ignored;
    int rc = timed_run(t, &ignored);
    if (rc != 0) return rc;
  }
  for (long i = 0; i < cfg->runs; i++) {
    if (t->gap_ms >= 0) bench_idle_gap(t->gap_ms);
    int rc = timed_run(t, &ms[i]);
    if (rc != 0) return rc;
  }
  struct bench_row row = {
      .mode = "cpu",
      .rows = t->p->rows,
      .n = t->p->n,
      .threads = bml_pool_threads(t->pool),
      .cache = t->flush ? "flushed" : "warm",
      .gapped = t->gap_ms >= 0,
      .gap_ms = t->gap_ms >= 0 ? t->gap_ms : 0,
      .weight_bytes = t->p->w_bytes,
      .exact = t->exact,
  };
  bench_summarize(ms, cfg->runs, &row);
  char gap[48] = "";
  if (row.gapped) snprintf(gap, sizeof gap, " after gaps of %ld ms", row.gap_ms);
  bench_progress(cfg, "%zux%zu, %d threads, %s%s: median %.4f ms, min %.4f ms, p90 %.4f ms, max %.4f ms, %s",
                 row.rows, row.n, row.threads, row.cache, gap, row.median_ms, row.min_ms, row.p90_ms, row.max_ms,
                 row.exact ? "exact" : "NOT EXACT");
  int rc = bench_report_add(rep, &row);
  if (rc != 0) fprintf(stderr, "bankml-cl bench: cannot keep the results: %s\n", bml_strerror(rc));
  return rc;
}

static int open_pool(int threads, bml_pool **pool) {
  int rc = bml_pool_open(threads, pool);
  if (rc != 0)
    fprintf(stderr, "bankml-cl bench: cannot open a pool of %d threads: %s\n", threads, bml_strerror(rc));
  return rc;
}

/* Every thread count on one product: warm first, then cache-flushed. */
static int bench_product(const struct bench_config *cfg, struct product *p,
                         struct cache_flusher *flush, double *ms, struct bench_report *rep) {
  for (size_t i = 0; i < cfg->nthreads; i++) {
    struct timing t = {.p = p, .gap_ms = -1};
    int rc = open_pool(cfg->threads[i], &t.pool);
    if (rc != 0) return rc;
    rc = measure(cfg, &t, ms, rep);
    t.flush = flush;
    if (rc == 0) rc = measure(cfg, &t, ms, rep);
    bml_pool_close(t.pool);
    if (rc != 0) return rc;
  }
  return 0;
}

/* --gap: for each gap, every thread count on one product (a pool of its
 * own, warmed up), each timed run after that long idle.  The thread counts
 * of one gap are timed one after the other, so that a ratio between them
 * sees the same load on the machine. */
static int bench_gaps(const struct bench_config *cfg, struct product *p, double *ms, struct bench_report *rep) {
  for (size_t g = 0; g < cfg->ngaps; g++)
    for (size_t i = 0; i < cfg->nthreads; i++) {
      struct timing t = {.p = p, .gap_ms = cfg->gaps[g]};
      int rc = open_pool(cfg->threads[i], &t.pool);
      if (rc != 0) return rc;
      rc = measure(cfg, &t, ms, rep);
      bml_pool_close(t.pool);
      if (rc != 0) return rc;
    }
  return 0;
}

int bench_cpu_run(const struct bench_config *cfg, struct bench_report *rep) {
  if (cfg->model) return bench_model_run(cfg, rep, "cpu");
  struct cache_flusher *flush = NULL;
  double *ms = malloc((size_t)cfg->runs * sizeof *ms);
  int rc = ms ? cache_flusher_open(&flush) : BML_ENOMEM;
  if (rc != 0) {
    fprintf(stderr, "bankml-cl bench: cannot allocate the timing buffers: %s\n", bml_strerror(rc));
    free(ms);
    return rc;
  }
  for (size_t i = 0; rc == 0 && i < cfg->nshapes; i++) {
    struct product p;
    progress_step("cpu %zux%zu: preparing the weights", cfg->shapes[i].rows, cfg->shapes[i].n);
    bench_progress(cfg, "%zux%zu: preparing %.1f MB of weights", cfg->shapes[i].rows,
                   cfg->shapes[i].n,
                   (double)cfg->shapes[i].rows * (double)(cfg->shapes[i].n / BML_Q1_0_BLOCK) *
                       sizeof(bml_block_q1_0) / 1e6);
    rc = product_init(&p, &cfg->shapes[i]);
    if (rc != 0) break;
    rc = cfg->ngaps ? bench_gaps(cfg, &p, ms, rep) : bench_product(cfg, &p, flush, ms, rep);
    product_free(&p);
  }
  cache_flusher_close(flush);
  free(ms);
  return rc;
}
