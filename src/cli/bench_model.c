/* bench_model.c -- `bankml-cl bench --model NAME`: a model's token of matrix products, in decode order, on the CPU, the card or both. */
#define _POSIX_C_SOURCE 200809L

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"
#include "bench.h"
#include "progress.h"

static const struct bench_model models[] = {
    /* name, hidden, intermediate, layers, query heads, key/value heads, head size, vocabulary */
    {"bonsai-8b", 4096, 12288, 36, 32, 8, 128, 151936},
    {"bonsai-1.7b", 2048, 6144, 28, 16, 8, 128, 151936},
};

const struct bench_model *bench_model_find(const char *name) {
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
    if (strcmp(models[i].name, name) == 0) return &models[i];
  return NULL;
}

const char *bench_model_names(void) { return "bonsai-8b, bonsai-1.7b"; }

/* A token: every matrix (its own weights, as a real model's are), the
 * activations (one per group: Q/K/V share one, gate/up another), the
 * products in decode order and the groups they form. */
struct token {
  const struct bench_model *m;
  size_t nproducts, ngroups;
  bml_product *p;
  size_t *group_first; /* ngroups + 1 */
  bml_block_q1_0 **w;  /* one per product */
  bml_block_q8_0 **a;  /* one per group */
  float **want;        /* the CPU's results, one per product */
  uint64_t weight_bytes, card_bytes;
  bml_token *tk;       /* the products as a decode's token (the worker's modes), its results kept */
  bool kept_exact;     /* the last round-trip token's results were the CPU's bits */
  double check_ms;     /* ... and the time their checks took (not the token's) */
};

static void token_free(struct token *t) {
  bml_token_close(t->tk);
  for (size_t i = 0; t->w && i < t->nproducts; i++) free(t->w[i]), free(t->want[i]), free(t->p[i].out);
  for (size_t i = 0; t->a && i < t->ngroups; i++) free(t->a[i]);
  free(t->w), free(t->want), free(t->a), free(t->p), free(t->group_first);
  memset(t, 0, sizeof *t);
}

/* The shapes of layer products k = 0..6 (Q, K, V, O, gate, up, down) and
 * the head (k = 7). */
static void shape_of(const struct bench_model *m, int k, size_t *rows, size_t *n) {
  const size_t q = m->q_heads * m->head_dim, kv = m->kv_heads * m->head_dim;
  const size_t r[8] = {q, kv, kv, m->hidden, m->intermediate, m->intermediate, m->hidden, m->vocab};
  const size_t c[8] = {m->hidden, m->hidden, m->hidden, q, m->hidden, m->hidden, m->intermediate, m->hidden};
  *rows = r[k], *n = c[k];
}

/* Which group product k of a layer is in: Q/K/V, O, gate/up, down. */
static const int group_of[8] = {0, 0, 0, 1, 2, 2, 3, 4};

static int add_product(struct token *t, int k, size_t layer) {
  static const char *const names[8] = {"q", "k", "v", "o", "gate", "up", "down", "head"};
  size_t i = t->nproducts, rows, n;
  shape_of(t->m, k, &rows, &n);
  bool first_of_group = k == 0 || group_of[k] != group_of[k - 1];
  if (first_of_group) {
    t->group_first[t->ngroups] = i;
    t->a[t->ngroups] = malloc(n / BML_Q8_0_BLOCK * sizeof(bml_block_q8_0));
    if (!t->a[t->ngroups]) return BML_ENOMEM;
    t->ngroups++;
  }
  t->w[i] = malloc(rows * (n / BML_Q1_0_BLOCK) * sizeof(bml_block_q1_0));
  t->want[i] = malloc(rows * sizeof(float));
  float *out = malloc(rows * sizeof(float));
  t->p[i] = (bml_product){names[k], t->w[i], rows, n, t->a[t->ngroups - 1], out};
  t->nproducts++;
  if (!t->w[i] || !t->want[i] || !out) return BML_ENOMEM;
  uint64_t variant = layer * 8 + (uint64_t)k;
  int rc = bench_random_operands_seeded(rows, n, variant, t->w[i], first_of_group ? t->a[t->ngroups - 1] : NULL);
  t->weight_bytes += rows * (n / BML_Q1_0_BLOCK) * sizeof(bml_block_q1_0);
  t->card_bytes += bench_card_bytes(rows, n);
  return rc;
}

/* The model's layers, two in the test suite's quick bench (bench.h): the
 * same shapes and groups, each layer's products alike. */
static size_t model_layers(const struct bench_model *m) { return bench_test_quick() && m->layers > 2 ? 2 : m->layers; }

static int token_init(struct token *t, const struct bench_model *m) {
  memset(t, 0, sizeof *t);
  t->m = m;
  const size_t layers = model_layers(m), max = layers * 7 + 1;
  t->p = calloc(max, sizeof *t->p);
  t->w = calloc(max, sizeof *t->w);
  t->want = calloc(max, sizeof *t->want);
  t->a = calloc(max, sizeof *t->a);
  t->group_first = calloc(max + 1, sizeof *t->group_first);
  int rc = t->p && t->w && t->want && t->a && t->group_first ? 0 : BML_ENOMEM;
  for (size_t layer = 0; rc == 0 && layer < layers; layer++)
    for (int k = 0; rc == 0 && k < 7; k++) rc = add_product(t, k, layer);
  if (rc == 0) rc = add_product(t, 7, layers);
  if (rc == 0) t->group_first[t->ngroups] = t->nproducts;
  if (rc != 0) {
    fprintf(stderr, "bankml-cl bench --model %s: %s\n", m->name, bml_strerror(rc));
    token_free(t);
  }
  return rc;
}

/* The reference bits of every product, once: the single-thread kernel, as
 * for the shapes (not the pool, which the CPU mode times against it). */
static int token_reference(struct token *t) {
  for (size_t i = 0; i < t->nproducts; i++) {
    const bml_product *p = &t->p[i];
    int rc = bml_q1_0_mat_vec(p->wts, p->rows, p->n, p->act, t->want[i]);
    if (rc != 0) return rc;
  }
  return 0;
}

static bool token_exact(const struct token *t) {
  for (size_t i = 0; i < t->nproducts; i++)
    if (!bench_exact(t->p[i].out, t->want[i], t->p[i].rows)) return false;
  return true;
}

/* The products as a decode's token whose results it keeps (no out). */
static int token_open(struct token *t, bml_worker *w) {
  bml_product *kept = malloc(t->nproducts * sizeof *kept);
  if (!kept) return BML_ENOMEM;
  for (size_t i = 0; i < t->nproducts; i++) kept[i] = t->p[i], kept[i].out = NULL;
  int rc = bml_worker_token_open(w, kept, t->nproducts, &t->tk);
  free(kept); /* the token keeps its own copy */
  return rc;
}

/* One token on the CPU alone: each product on the pool. */
static int run_cpu(struct token *t, bml_pool *pool, bml_worker *w, bool round_trips) {
  (void)w, (void)round_trips;
  for (size_t i = 0; i < t->nproducts; i++) {
    const bml_product *p = &t->p[i];
    int rc = bml_pool_q1_0_mat_vec(pool, p->wts, p->rows, p->n, p->act, p->out);
    if (rc != 0) return rc;
  }
  return 0;
}

/* One token through the worker: one batch (pipelined), or its groups one
 * at a time, each returned before the next is asked for (as an engine
 * whose CPU work between the groups needs their results), through a
 * decode's token (bml_token_run) that keeps its results where the card
 * wrote them (bml_token_out): each group's are compared with the CPU's
 * before the next group runs, timed apart (the engine's work, as its own
 * reading of them is). */
static int run_worker(struct token *t, bml_pool *pool, bml_worker *w, bool round_trips) {
  (void)pool;
  if (!round_trips) return bml_worker_mat_vec_batch(w, t->p, t->nproducts);
  t->kept_exact = true;
  for (size_t g = 0; g < bml_token_groups(t->tk); g++) {
    int rc = bml_token_run(t->tk, g);
    if (rc != 0) return rc;
    const double t0 = bench_now_ms();
    for (size_t i = bml_token_group_first(t->tk, g); i < bml_token_group_first(t->tk, g + 1); i++) {
      const float *r = bml_token_out(t->tk, i);
      t->kept_exact = t->kept_exact && r && bench_exact(r, t->want[i], t->p[i].rows);
    }
    t->check_ms += bench_now_ms() - t0;
  }
  return 0;
}

typedef int (*token_fn)(struct token *t, bml_pool *pool, bml_worker *w, bool round_trips);

const char *const bench_phase_names[BENCH_PHASES] = {"upload", "launch", "cpu", "wait", "download", "host"};

/* The worker's "seconds" for the phases but the host's (the status's
 * upload, launch, cpu, wait, copy_out), then its enqueue; all 0 without a
 * worker. */
#define WORKER_SECONDS (BENCH_PHASES)
static void worker_seconds(bml_worker *w, double sec[WORKER_SECONDS]) {
  static const char *const names[WORKER_SECONDS] = {"upload", "launch", "cpu", "wait", "copy_out", "enqueue"};
  char *status = NULL;
  memset(sec, 0, WORKER_SECONDS * sizeof *sec);
  if (!w || bml_worker_status_json(w, &status) != 0) return;
  json_t *j = json_loads(status, 0, NULL), *seconds = json_object_get(j, "seconds");
  for (int i = 0; i < WORKER_SECONDS; i++) sec[i] = json_real_value(json_object_get(seconds, names[i]));
  sec[1] += json_real_value(json_object_get(seconds, "flush")); /* the launches' flushes are theirs */
  json_decref(j);
  free(status);
}

/* Where a token's time went, mean µs a group: the worker's phases over the
 * runs (after - before, seconds), and the host's as the rest of the mean
 * token time (total_ms over the runs). */
static void group_phases(const double before[WORKER_SECONDS], const double after[WORKER_SECONDS], double total_ms,
                         long runs, size_t groups, double us[BENCH_PHASES]) {
  const double per = 1e6 / ((double)runs * (double)groups);
  double accounted = 0;
  for (int i = 0; i < BENCH_PHASES - 1; i++) {
    us[i] = (after[i] - before[i]) * per;
    accounted += us[i];
  }
  us[BENCH_PHASES - 1] = total_ms * 1e3 / ((double)runs * (double)groups) - accounted;
}

/* Warm-up tokens at most, beyond --warmup, for a split token to learn
 * where its groups run (about 27: 11 trials, 5 runs of each CPU group, 10
 * whole tokens; bml_token_learning). */
#define LEARNING_MOST 64

static int measure(const struct bench_config *cfg, struct token *t, bml_pool *pool, bml_worker *w,
                   token_fn fn, bool round_trips, const char *mode, struct bench_report *rep) {
  double *ms = calloc((size_t)cfg->runs, sizeof *ms);
  if (!ms) {
    fprintf(stderr, "bankml-cl bench --model %s (%s): %s\n", t->m->name, mode, bml_strerror(BML_ENOMEM));
    return BML_ENOMEM;
  }
  int rc = 0;
  bool exact = true;
  progress_step("%s %s's token", mode, t->m->name);
  /* the card's modes add one untimed run, the matrices' upload (bankml-cl(1)) */
  for (long i = 0; rc == 0 && i < cfg->warmup + (w ? 1 : 0); i++) rc = fn(t, pool, w, round_trips);
  /* a split token learns where its groups run: timed once it has settled */
  long learnt = 0;
  for (; rc == 0 && w && round_trips && bml_token_learning(t->tk) && learnt < LEARNING_MOST; learnt++)
    rc = fn(t, pool, w, round_trips);
  if (rc == 0 && learnt > 0)
    bench_progress(cfg, "%s %s: %ld more warm-up tokens while the token learnt where its groups run", mode, t->m->name,
                   learnt);
  if (rc == 0 && w && round_trips && bml_token_learning(t->tk))
    fprintf(stderr, "bankml-cl bench --model %s (%s): the token still learns where its groups run after %ld warm-up "
            "tokens; its times include the learning\n", t->m->name, mode, cfg->warmup + 1 + learnt);
  double before[WORKER_SECONDS], after[WORKER_SECONDS], total_ms = 0;
  worker_seconds(w, before);
  for (long i = 0; rc == 0 && i < cfg->runs; i++) {
    for (size_t k = 0; k < t->nproducts; k++) memset(t->p[k].out, 0xa5, t->p[k].rows * sizeof(float));
    double t0 = bench_now_ms();
    t->check_ms = 0;
    rc = fn(t, pool, w, round_trips);
    ms[i] = bench_now_ms() - t0 - t->check_ms;
    total_ms += ms[i];
    exact &= w && round_trips ? t->kept_exact : token_exact(t);
  }
  worker_seconds(w, after);
  struct bench_row row = {.mode = mode, .label = t->m->name, .products = t->nproducts,
                          .threads = w && strncmp(mode, "card", 4) == 0 ? 0 : bml_pool_threads(pool),
                          .cache = "warm", .weight_bytes = t->weight_bytes,
                          .card_bytes = w && strncmp(mode, "card", 4) == 0 ? t->card_bytes : 0, .exact = exact,
                          .groups = w && round_trips ? t->ngroups : 0, .pipelined = w && !round_trips,
                          .group_cost_us = NAN,
                          .token = !w || !round_trips ? NULL : bml_token_resident(t->tk) ? "resident" : "batches"};
  if (rc == 0) {
    bench_summarize(ms, cfg->runs, &row);
    bench_progress(cfg, "%s %s: %.3f ms per token, %s", mode, t->m->name, row.median_ms, exact ? "exact" : "NOT EXACT");
    if (row.groups) group_phases(before, after, total_ms, cfg->runs, row.groups, row.group_us);
    if (w)
      bench_progress(cfg, "%s %s: mean ms per token in the worker: enqueue %.3f, cpu %.3f, wait %.3f, copy out %.3f",
                     mode, t->m->name, (after[5] - before[5]) * 1e3 / (double)cfg->runs,
                     (after[2] - before[2]) * 1e3 / (double)cfg->runs, (after[3] - before[3]) * 1e3 / (double)cfg->runs,
                     (after[4] - before[4]) * 1e3 / (double)cfg->runs);
    rc = bench_report_add(rep, &row);
  } else {
    fprintf(stderr, "bankml-cl bench --model %s (%s): %s\n", t->m->name, mode, bml_strerror(rc));
  }
  free(ms);
  return rc;
}

int bench_model_run(const struct bench_config *cfg, struct bench_report *rep, const char *mode) {
  bml_pool *pool = NULL;
  bml_worker *w = NULL;
  bool on_cpu = strcmp(mode, "cpu") == 0;
  int rc = on_cpu ? bml_pool_open(bench_threads_largest(cfg), &pool)
                  : bench_worker_open(cfg, strcmp(mode, "card") == 0, &pool, &w, rep);
  if (rc != 0) return rc;
  struct token t;
  progress_step("building %s's matrices", cfg->model->name);
  bench_progress(cfg, "building %s's matrices", cfg->model->name);
  rc = token_init(&t, cfg->model);
  if (rc == 0 && (rc = token_reference(&t)) != 0)
    fprintf(stderr, "bankml-cl bench --model %s: the reference: %s\n", cfg->model->name, bml_strerror(rc));
  if (rc == 0 && w && (rc = token_open(&t, w)) != 0)
    fprintf(stderr, "bankml-cl bench --model %s: the token: %s\n", cfg->model->name, bml_strerror(rc));
  /* the rows keep these names: string constants, not buffers */
  bool card = strcmp(mode, "card") == 0;
  const char *piped = card ? "card-pipelined" : "split-pipelined";
  const char *trips = card ? "card-round-trips" : "split-round-trips";
  /* the split token's batches follow their kinds' learnt shares, which the
   * warm-up runs teach (single products' shape decisions play no part) */
  /* round trips first: a decode's token, the figure an engine gets; then
   * the token as one batch, the bound with no dependencies between groups */
  if (rc == 0 && on_cpu) rc = measure(cfg, &t, pool, NULL, run_cpu, false, "cpu", rep);
  const size_t at = rep->nrows;
  if (rc == 0 && !on_cpu) rc = measure(cfg, &t, pool, w, run_worker, true, trips, rep);
  if (rc == 0 && !on_cpu) rc = measure(cfg, &t, pool, w, run_worker, false, piped, rep);
  if (rc == 0 && !on_cpu) { /* the round trips' cost a group beside the kernels */
    struct bench_row *r = &rep->rows[at], *p = &rep->rows[at + 1];
    r->group_cost_us = (r->median_ms - p->median_ms) * 1e3 / (double)r->groups;
  }
  if (rc == 0 && w && cfg->verbose) {
    char *status = NULL;
    if (bml_worker_status_json(w, &status) == 0) fprintf(stderr, "bankml-cl bench: worker status: %s\n", status);
    free(status);
  }
  if (t.p) token_free(&t);
  bml_worker_close(w);
  bml_pool_close(pool);
  return rc;
}
