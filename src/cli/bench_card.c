/* bench_card.c -- `bankml-cl bench --card` and `--split`: the worker on each shape, one product at a time and pipelined. */
#define _POSIX_C_SOURCE 200809L

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"
#include "bench.h"
#include "progress.h"

/* Products a pipelined measurement enqueues back to back before its wait. */
#define PIPELINE 32
/* The pipelined products each read a matrix of their own (PIPELINE
 * distinct matrices), as a model's products are distinct, where PIPELINE
 * of them take at most a quarter of the card's memory; fewer where they
 * would not (as many as that quarter holds, at least one).  (One matrix
 * for all, and as many as made 512 MiB, were tried before.)  Either way a launch could hold one matrix several times: the worker's
 * launches take a slab's records in order, cut every 256 MiB
 * (BML_RUN_BYTES), and a slab may hold one or two of the matrices (its
 * first slabs are one matrix's size), so the records of one launch read
 * the same rows at once and a card's L2 could serve part of what the GB/s
 * counts as read.  Where the card's memory is not known, 512 MiB. */
#define DISTINCT_SHARE 4                      /* a quarter of the card's memory */
#define DISTINCT_UNKNOWN ((uint64_t)512 << 20) /* the card's memory not known */

/* One shape's operands: PIPELINE activations (so pipelined products do not
 * share one and are not fused into a group), nw distinct matrices (product
 * i's is w[i % nw]) and their results. */
struct card_product {
  size_t rows, n, nw;
  bml_block_q1_0 *w[PIPELINE];
  bml_block_q8_0 *a[PIPELINE];
  float *want[PIPELINE], *got[PIPELINE];
  bml_product p[PIPELINE];
};

static void card_product_free(struct card_product *c) {
  for (int i = 0; i < PIPELINE; i++) free(c->w[i]), free(c->a[i]), free(c->want[i]), free(c->got[i]);
  memset(c, 0, sizeof *c);
}

static int card_product_init(struct card_product *c, const struct bench_shape *s, uint64_t card_memory) {
  memset(c, 0, sizeof *c);
  c->rows = s->rows, c->n = s->n;
  const uint64_t card = bench_card_bytes(s->rows, s->n);
  const uint64_t room = card_memory ? card_memory / DISTINCT_SHARE : DISTINCT_UNKNOWN;
  c->nw = card && room / card < PIPELINE ? (size_t)(room / card) : PIPELINE;
  if (c->nw < 1) c->nw = 1;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < PIPELINE; i++) {
    if (i < c->nw) c->w[i] = malloc(s->rows * (s->n / BML_Q1_0_BLOCK) * sizeof *c->w[i]);
    c->a[i] = malloc(s->n / BML_Q8_0_BLOCK * sizeof *c->a[i]);
    c->want[i] = malloc(s->rows * sizeof(float));
    c->got[i] = malloc(s->rows * sizeof(float));
    rc = c->w[i % c->nw] && c->a[i] && c->want[i] && c->got[i] ? 0 : BML_ENOMEM;
    if (rc == 0)
      rc = bench_random_operands_seeded(s->rows, s->n, (uint64_t)i, i < c->nw ? c->w[i] : NULL, c->a[i]);
    if (rc == 0) rc = bml_q1_0_mat_vec(c->w[i % c->nw], s->rows, s->n, c->a[i], c->want[i]);
    c->p[i] = (bml_product){"bench", c->w[i % c->nw], s->rows, s->n, c->a[i], c->got[i]};
  }
  if (rc != 0) {
    fprintf(stderr, "bankml-cl bench: %zux%zu: %s\n", s->rows, s->n, bml_strerror(rc));
    card_product_free(c);
  }
  return rc;
}

static bool results_exact(const struct card_product *c, int count) {
  for (int i = 0; i < count; i++)
    if (!bench_exact(c->got[i], c->want[i], c->rows)) return false;
  return true;
}

/* One timed run: `count` products as one batch, or one product through
 * bml_worker_mat_vec (its wait, a round trip; with the split, its shape's
 * calibration).  *ms is per product. */
static int timed(bml_worker *w, struct card_product *c, int count, double *ms) {
  for (int i = 0; i < count; i++) memset(c->got[i], 0xa5, c->rows * sizeof(float));
  const bml_product *p = c->p;
  double t0 = bench_now_ms();
  int rc = count == 1 ? bml_worker_mat_vec(w, p->name, p->wts, p->rows, p->n, p->act, p->out)
                      : bml_worker_mat_vec_batch(w, c->p, (size_t)count);
  *ms = (bench_now_ms() - t0) / count;
  if (rc != 0) fprintf(stderr, "bankml-cl bench: %zux%zu: %s\n", c->rows, c->n, bml_strerror(rc));
  return rc;
}

/* The shapes the worker is still calibrating (its status), or -1. */
static int shapes_tuning(bml_worker *w) {
  char *status = NULL;
  int n = -1;
  if (bml_worker_status_json(w, &status) == 0) {
    json_t *j = json_loads(status, 0, NULL);
    json_t *v = json_object_get(j, "shapes_tuning");
    if (json_is_integer(v)) n = (int)json_integer_value(v);
    json_decref(j);
  }
  free(status);
  return n;
}

/* The split mode's single products (bml_worker_mat_vec) are timed once
 * the worker has calibrated their shape (doc/WORKER.md: card and CPU-alone
 * trials, which the limiter's rests delay): single products until it has,
 * within bounds.  A batch follows its kind's learnt share, which the
 * warm-up runs teach, not the shape's decision. */
#define CALIBRATION_MS 2000.0 /* by time: the products the card's rests send to the CPU take none */

static int calibrate_shape(bml_worker *w, const bml_product *p) {
  double t0 = bench_now_ms();
  /* the shapes still calibrating before this one (the worker has not met
   * it yet): only this one's decision is waited for */
  const int others = shapes_tuning(w);
  int rc, i = 0, tuning = 0;
  do /* the worker meets the shape at its first product */
    rc = bml_worker_mat_vec(w, p->name, p->wts, p->rows, p->n, p->act, p->out);
  while (rc == 0 && (tuning = shapes_tuning(w)) > others && (++i, bench_now_ms() - t0 < CALIBRATION_MS));
  tuning -= others;
  if (rc != 0) fprintf(stderr, "bankml-cl bench: %zux%zu: %s\n", p->rows, p->n, bml_strerror(rc));
  if (rc == 0 && tuning > 0)
    fprintf(stderr, "bankml-cl bench: split %zux%zu: the worker is still calibrating this shape after %d products "
            "(%.0f ms); its figures include the calibration\n", p->rows, p->n, i, bench_now_ms() - t0);
  return rc;
}

/* cfg->runs timed runs of `count` products into one row; gap_ms >= 0: each
 * after an idle gap of that long (--gap), the warm-up too (the pool then
 * has the gaps' cadence, as a decode's has). */
static int measure(const struct bench_config *cfg, bml_worker *w, struct card_product *c, const char *mode,
                   int count, int threads, long gap_ms, struct bench_report *rep) {
  double *ms = calloc((size_t)cfg->runs, sizeof *ms), ignored;
  if (!ms) {
    fprintf(stderr, "bankml-cl bench: %s %zux%zu: %s\n", mode, c->rows, c->n, bml_strerror(BML_ENOMEM));
    return BML_ENOMEM;
  }
  int rc = 0;
  bool exact = true;
  progress_step("%s %zux%zu%s", mode, c->rows, c->n, gap_ms >= 0 ? ", after gaps" : "");
  if (threads != 0 && count == 1) rc = calibrate_shape(w, &c->p[0]); /* the split's single products */
  for (long i = 0; rc == 0 && i < cfg->warmup + 1; i++) { /* +1: the upload */
    if (gap_ms >= 0) bench_idle_gap(gap_ms);
    rc = timed(w, c, count, &ignored);
  }
  for (long i = 0; rc == 0 && i < cfg->runs; i++) {
    if (gap_ms >= 0) bench_idle_gap(gap_ms);
    rc = timed(w, c, count, &ms[i]);
    exact &= results_exact(c, count);
  }
  struct bench_row row = {.mode = mode, .rows = c->rows, .n = c->n, .threads = threads, .cache = "warm",
                          .weight_bytes = c->rows * (c->n / BML_Q1_0_BLOCK) * sizeof(bml_block_q1_0),
                          .card_bytes = threads == 0 ? bench_card_bytes(c->rows, c->n) : 0, /* the card alone */
                          .matrices = count == 1 ? 1 : c->nw, .exact = exact, .gapped = gap_ms >= 0,
                          .gap_ms = gap_ms >= 0 ? gap_ms : 0};
  if (rc == 0) {
    bench_summarize(ms, cfg->runs, &row);
    bench_progress(cfg, "%s %zux%zu%s: median %.4f ms per product (%zu matri%s), %s", mode, c->rows, c->n,
                   row.gapped ? " after gaps" : "", row.median_ms, row.matrices, row.matrices == 1 ? "x" : "ces",
                   exact ? "exact" : "NOT EXACT");
    rc = bench_report_add(rep, &row);
  }
  free(ms);
  return rc;
}

/* Every shape: one product at a time (each its own round trip), and
 * PIPELINE products as one batch; with --gap, one product at a time after
 * each gap instead (what a decode's product meets after its attention or
 * sampling: the pool's helpers asleep, the card idle). */
static int run_shapes(const struct bench_config *cfg, struct bench_report *rep, bool card_alone) {
  bml_pool *pool;
  bml_worker *w;
  int rc = bench_worker_open(cfg, card_alone, &pool, &w, rep);
  if (rc != 0) return rc;
  const char *single = card_alone ? "card" : "split", *piped = card_alone ? "card-pipelined" : "split-pipelined";
  int threads = card_alone ? 0 : bml_pool_threads(pool);
  for (size_t s = 0; rc == 0 && s < cfg->nshapes; s++) {
    struct card_product c;
    rc = card_product_init(&c, &cfg->shapes[s], rep->card_memory);
    for (size_t g = 0; rc == 0 && g < cfg->ngaps; g++) rc = measure(cfg, w, &c, single, 1, threads, cfg->gaps[g], rep);
    if (rc == 0 && cfg->ngaps == 0) rc = measure(cfg, w, &c, single, 1, threads, -1, rep);
    if (rc == 0 && cfg->ngaps == 0) rc = measure(cfg, w, &c, piped, PIPELINE, threads, -1, rep);
    card_product_free(&c);
    bml_worker_release(w); /* the next shape starts from an empty card */
  }
  if (rc == 0 && cfg->verbose) {
    char *status = NULL;
    if (bml_worker_status_json(w, &status) == 0) fprintf(stderr, "bankml-cl bench: worker status: %s\n", status);
    free(status);
  }
  bml_worker_close(w);
  bml_pool_close(pool);
  return rc;
}

int bench_card_run(const struct bench_config *cfg, struct bench_report *rep) {
  return cfg->model ? bench_model_run(cfg, rep, "card") : run_shapes(cfg, rep, true);
}

int bench_split_run(const struct bench_config *cfg, struct bench_report *rep) {
  return cfg->model ? bench_model_run(cfg, rep, "split") : run_shapes(cfg, rep, false);
}
