/* bench_cpu.c -- `bankml-cl bench --cpu`: the pool on random matrices, warm and cache-flushed. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bankml-cl.h"
#include "bench.h"

/* One shape's operands, its reference result and a result to fill. */
struct product {
  size_t rows, n;
  bml_block_q1_0 *w;
  bml_block_q8_0 *a;
  float *want, *got;
  size_t w_bytes, a_bytes, out_bytes;
};

/* Marsaglia's xorshift64: the command's own data, the same on every run.
 * Speed does not depend on the values; only their plausibility matters. */
static uint64_t xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* A half-precision scale of either sign, 2^-7 <= |d| < 2^-2: the range of
 * a trained layer's block scales, written as binary16 bits directly. */
static uint16_t random_scale(uint64_t *s) {
  uint64_t r = xorshift64(s);
  unsigned exponent = 8 + (unsigned)(r % 5); /* biased: 2^(8-15) .. 2^(12-15) */
  return (uint16_t)(((r >> 16) & 1) << 15 | exponent << 10 | ((r >> 20) & 0x3ff));
}

static void fill_weights(uint64_t *s, bml_block_q1_0 *w, size_t nblocks) {
  for (size_t i = 0; i < nblocks; i++) {
    w[i].d = random_scale(s);
    uint64_t bits[2] = {xorshift64(s), xorshift64(s)};
    memcpy(w[i].qs, bits, sizeof w[i].qs);
  }
}

/* Activations as an engine makes them: random floats in [-1, 1), quantized. */
static int fill_activation(uint64_t *s, bml_block_q8_0 *a, size_t n) {
  float *x = malloc(n * sizeof *x);
  if (!x) return BML_ENOMEM;
  for (size_t i = 0; i < n; i++) x[i] = (float)((double)(xorshift64(s) >> 11) * 0x1p-52 - 1.0);
  int rc = bml_q8_0_quantize(x, n, a);
  free(x);
  return rc;
}

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
  size_t wblocks = p->n / BML_Q1_0_BLOCK;
  if (p->rows > SIZE_MAX / sizeof *p->w / wblocks || p->rows > SIZE_MAX / sizeof(float)) {
    fprintf(stderr, "bankml-cl bench: %zux%zu: too large for this machine's address space\n",
            p->rows, p->n);
    return BML_ERANGE;
  }
  p->w_bytes = p->rows * wblocks * sizeof *p->w;
  p->a_bytes = p->n / BML_Q8_0_BLOCK * sizeof *p->a;
  p->out_bytes = p->rows * sizeof(float);
  p->w = malloc(p->w_bytes);
  p->a = malloc(p->a_bytes);
  p->want = malloc(p->out_bytes);
  p->got = malloc(p->out_bytes);
  int rc = BML_ENOMEM;
  if (!p->w || !p->a || !p->want || !p->got) goto fail;
  uint64_t seed = 0x9e3779b97f4a7c15u ^ ((uint64_t)p->rows << 32) ^ (uint64_t)p->n;
  fill_weights(&seed, p->w, p->rows * wblocks);
  if ((rc = fill_activation(&seed, p->a, p->n)) != 0) goto fail;
  if ((rc = bml_q1_0_mat_vec(p->w, p->rows, p->n, p->a, p->want)) != 0) goto fail;
  return 0;
fail:
  fprintf(stderr, "bankml-cl bench: %zux%zu (%.1f MB of weights): %s\n", p->rows, p->n,
          (double)p->w_bytes / 1e6, bml_strerror(rc));
  product_free(p);
  return rc;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One measurement in progress: a pool, a product, and (when flushing) how. */
struct timing {
  bml_pool *pool;
  struct product *p;
  struct cache_flusher *flush; /* NULL: a warm run */
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
  double t0 = now_ms();
  int rc = bml_pool_q1_0_mat_vec(t->pool, p->w, p->rows, p->n, p->a, p->got);
  *ms = now_ms() - t0;
  if (rc != 0) {
    fprintf(stderr, "bankml-cl bench: %zux%zu on %d threads: %s\n", p->rows, p->n,
            bml_pool_threads(t->pool), bml_strerror(rc));
    return rc;
  }
  if (memcmp(p->got, p->want, p->out_bytes) != 0) t->exact = false;
  return 0;
}

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Median and minimum of ms[0..n) (sorted in place) into row. */
static void summarize(double *ms, long n, struct bench_row *row) {
  qsort(ms, (size_t)n, sizeof *ms, compare_double);
  row->min_ms = ms[0];
  row->median_ms = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  row->gbps = row->median_ms > 0 ? (double)row->weight_bytes / (row->median_ms * 1e6) : 0;
}

/* cfg->runs timed products (after the warm-up, when warm) into one row. */
static int measure(const struct bench_config *cfg, struct timing *t, double *ms,
                   struct bench_report *rep) {
  t->exact = true;
  for (long i = 0; !t->flush && i < cfg->warmup; i++) {
    double ignored;
    int rc = timed_run(t, &ignored);
    if (rc != 0) return rc;
  }
  for (long i = 0; i < cfg->runs; i++) {
    int rc = timed_run(t, &ms[i]);
    if (rc != 0) return rc;
  }
  struct bench_row row = {
      .mode = "cpu",
      .rows = t->p->rows,
      .n = t->p->n,
      .threads = bml_pool_threads(t->pool),
      .cache = t->flush ? "flushed" : "warm",
      .weight_bytes = t->p->w_bytes,
      .exact = t->exact,
  };
  summarize(ms, cfg->runs, &row);
  bench_progress(cfg, "%zux%zu, %d threads, %s: median %.4f ms, min %.4f ms, %s", row.rows, row.n,
                 row.threads, row.cache, row.median_ms, row.min_ms,
                 row.exact ? "exact" : "NOT EXACT");
  int rc = bench_report_add(rep, &row);
  if (rc != 0) fprintf(stderr, "bankml-cl bench: cannot keep the results: %s\n", bml_strerror(rc));
  return rc;
}

/* Every thread count on one product: warm first, then cache-flushed. */
static int bench_product(const struct bench_config *cfg, struct product *p,
                         struct cache_flusher *flush, double *ms, struct bench_report *rep) {
  for (size_t i = 0; i < cfg->nthreads; i++) {
    struct timing t = {.p = p};
    int rc = bml_pool_open(cfg->threads[i], &t.pool);
    if (rc != 0) {
      fprintf(stderr, "bankml-cl bench: cannot open a pool of %d threads: %s\n", cfg->threads[i],
              bml_strerror(rc));
      return rc;
    }
    rc = measure(cfg, &t, ms, rep);
    t.flush = flush;
    if (rc == 0) rc = measure(cfg, &t, ms, rep);
    bml_pool_close(t.pool);
    if (rc != 0) return rc;
  }
  return 0;
}

int bench_cpu_run(const struct bench_config *cfg, struct bench_report *rep) {
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
    bench_progress(cfg, "%zux%zu: preparing %.1f MB of weights", cfg->shapes[i].rows,
                   cfg->shapes[i].n,
                   (double)cfg->shapes[i].rows * (double)(cfg->shapes[i].n / BML_Q1_0_BLOCK) *
                       sizeof(bml_block_q1_0) / 1e6);
    rc = product_init(&p, &cfg->shapes[i]);
    if (rc != 0) break;
    rc = bench_product(cfg, &p, flush, ms, rep);
    product_free(&p);
  }
  cache_flusher_close(flush);
  free(ms);
  return rc;
}
