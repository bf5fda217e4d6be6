/* tripfit.c -- a decode's token, group by group, through each way the
 * worker can move its activations and results and wait for the card.
 * A model's token (bonsai-8b or bonsai-1.7b: per layer Q/K/V, O,
 * gate/up, down, then the head; each matrix its own) runs as a decode
 * runs it: a bml_worker_mat_vec_batch a group, each waiting for the card
 * (round trips), and as one batch (pipelined), with the card taking every
 * row, once for each transfer: copies or zero-copy activations and
 * results (bml__worker_set_transfers), with and without a polled wait.
 * Each prints the medians of RUNS tokens both ways, the cost of a group
 * beside its kernels ((round trips - pipelined) / groups) and where a
 * round-trip group's time goes (the worker's status); twice round, the
 * transfers in turn.  Every product of every timed token is compared bit
 * for bit with the CPU's result (bml__same_bits), and the worker's status
 * must say the card took every product.
 * Not built, installed or distributed (README.md).
 *   tripfit MODEL [RUNS]   (MODEL: bonsai-8b or bonsai-1.7b; RUNS: 21, at most 101)
 * Exit status 0 only when every result compared is exact and every
 * product ran on the card. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bankml-cl.h"
#include "base/hooks.h"
#include "base/bml.h"
#include "cpu/golden.h"
#include "share/access.h"
#include "cpu/gen.h"

#define RUNS_MOST 101

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int cmpd(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A model's shapes (as bench_model.c's), and its token. */
typedef struct {
  const char *name;
  size_t hidden, intermediate, layers, q, kv, vocab;
} model;

static const model models[] = {{"bonsai-8b", 4096, 12288, 36, 4096, 1024, 151936},
                               {"bonsai-1.7b", 2048, 6144, 28, 2048, 1024, 151936}};

typedef struct {
  bml_product *p;
  float **ref;
  size_t np, ngroups;
  size_t *first; /* ngroups + 1 */
} token;

/* Adds product k (q, k, v, o, gate, up, down, head) of a layer; a new
 * group (and activation) where k starts one. */
static int add(token *t, const model *m, int k, uint64_t *state) {
  static const char *const names[8] = {"q", "k", "v", "o", "gate", "up", "down", "head"};
  static const int group[8] = {0, 0, 0, 1, 2, 2, 3, 4};
  const size_t rows[8] = {m->q, m->kv, m->kv, m->hidden, m->intermediate, m->intermediate, m->hidden, m->vocab};
  const size_t cols[8] = {m->hidden, m->hidden, m->hidden, m->q, m->hidden, m->hidden, m->intermediate, m->hidden};
  const size_t r = rows[k], n = cols[k];
  const bool starts = k == 0 || group[k] != group[k - 1];
  bml_block_q8_0 *act = starts ? malloc(n / BML_Q8_0_BLOCK * sizeof *act) : (bml_block_q8_0 *)t->p[t->np - 1].act;
  bml_block_q1_0 *w = malloc(r * (n / BML_Q1_0_BLOCK) * sizeof *w);
  float *out = malloc(r * sizeof *out), *ref = malloc(r * sizeof *ref);
  if (!act || !w || !out || !ref) return BML_ENOMEM;
  if (starts) {
    t->first[t->ngroups++] = t->np;
    if (bml__gen_q8_0(state, act, n, true) != 0) return BML_ENOMEM;
  }
  bml__gen_q1_0(state, w, r, n, true);
  t->p[t->np] = (bml_product){names[k], w, r, n, act, out};
  t->ref[t->np++] = ref;
  return 0;
}

static int make_token(token *t, const model *m, bml_pool *pool) {
  const size_t most = m->layers * 7 + 1;
  t->p = calloc(most, sizeof *t->p);
  t->ref = calloc(most, sizeof *t->ref);
  t->first = calloc(most + 1, sizeof *t->first);
  if (!t->p || !t->ref || !t->first) return BML_ENOMEM;
  uint64_t state = 0x7219f17ull;
  int rc = 0;
  for (size_t l = 0; rc == 0 && l < m->layers; l++)
    for (int k = 0; rc == 0 && k < 7; k++) rc = add(t, m, k, &state);
  if (rc == 0) rc = add(t, m, 7, &state);
  t->first[t->ngroups] = t->np;
  for (size_t i = 0; rc == 0 && i < t->np; i++)
    rc = bml_pool_q1_0_mat_vec(pool, t->p[i].wts, t->p[i].rows, t->p[i].n, t->p[i].act, t->ref[i]);
  return rc;
}

/* Products whose results differ from the CPU's (and the outputs spoilt
 * for the next run). */
static size_t differ(const token *t) {
  size_t bad = 0;
  for (size_t i = 0; i < t->np; i++) {
    size_t r = 0;
    while (r < t->p[i].rows && bml__same_bits(t->p[i].out[r], t->ref[i][r])) r++;
    bad += r < t->p[i].rows;
    memset(t->p[i].out, 0xa5, t->p[i].rows * sizeof(float));
  }
  return bad;
}

static int run(bml_worker *w, const token *t, bool trips) {
  if (!trips) return bml_worker_mat_vec_batch(w, t->p, t->np);
  int rc = 0;
  for (size_t g = 0; rc == 0 && g < t->ngroups; g++)
    rc = bml_worker_mat_vec_batch(w, t->p + t->first[g], t->first[g + 1] - t->first[g]);
  return rc;
}

/* The worker's status: products on the card, and its seconds by phase. */
#define PHASES 7
static const char *const phase[PHASES] = {"plan", "upload", "launch", "flush", "wait", "copy_out", "cpu"};
static int status(bml_worker *w, long long *on_card, double sec[PHASES]) {
  char *text = NULL;
  if (bml_worker_status_json(w, &text) != 0) return -1;
  json_t *j = json_loads(text, 0, NULL);
  free(text);
  if (!j) return -1;
  *on_card = (long long)json_integer_value(json_object_get(j, "products_on_card"));
  for (int i = 0; i < PHASES; i++) sec[i] = json_real_value(json_object_get(json_object_get(j, "seconds"), phase[i]));
  json_decref(j);
  return 0;
}

typedef struct {
  const char *name;
  int acts, outs; /* 1: zero-copy, 0: copies */
  double spin;
} transfer;

static const transfer transfers[] = {
    {"copies, poll", 0, 0, 1e-3},
    {"zero-copy results", 0, 1, 1e-3},
    {"zero-copy results, no poll", 0, 1, 0},
};

int main(int argc, char **argv) {
  const model *m = NULL;
  for (size_t i = 0; argc > 1 && i < sizeof models / sizeof *models; i++)
    if (strcmp(argv[1], models[i].name) == 0) m = &models[i];
  const int runs = argc > 2 ? atoi(argv[2]) : 21;
  if (!m || runs < 1 || runs > RUNS_MOST) {
    fprintf(stderr, "usage: tripfit bonsai-8b|bonsai-1.7b [RUNS 1 to %d]\n", RUNS_MOST);
    return 2;
  }
  bml_pool *pool = NULL;
  bml_worker *w = NULL;
  int rc = bml_pool_open(0, &pool);
  if (rc == 0) rc = bml_worker_open(pool, &w);
  if (rc != 0 || !w) {
    fprintf(stderr, "tripfit: no card is used here: %s\n", rc ? bml_strerror(rc) : "the log above says why");
    return 1;
  }
  if ((rc = bml_worker_set_share(w, 1.0)) != 0 || (rc = bml_worker_set_limit(w, 1.0)) != 0) {
    fprintf(stderr, "tripfit: %s\n", bml_strerror(rc));
    return 1;
  }
  token t = {0};
  if ((rc = make_token(&t, m, pool)) != 0) {
    fprintf(stderr, "tripfit: the token: %s\n", bml_strerror(rc));
    return 1;
  }
  printf("%s: %zu products, %zu groups, %d runs each\n", m->name, t.np, t.ngroups, runs);
  size_t bad = 0, off_card = 0;
  double trip[RUNS_MOST], piped[RUNS_MOST];
  for (int round = 0; rc == 0 && round < 2; round++) {
    for (size_t k = 0; rc == 0 && k < sizeof transfers / sizeof *transfers; k++) {
      const transfer *x = &transfers[k];
      bml__worker_set_transfers(w, x->acts, x->outs, x->spin);
      for (int i = 0; rc == 0 && i < 2; i++) rc = run(w, &t, i == 1); /* the matrices uploaded, the buffers made */
      differ(&t);
      long long c0, c1;
      double s0[PHASES], s1[PHASES];
      if (rc != 0 || status(w, &c0, s0) != 0) break;
      for (int r = 0; rc == 0 && r < runs; r++) {
        double t0 = now_ms();
        rc = run(w, &t, true);
        trip[r] = now_ms() - t0;
        bad += differ(&t);
      }
      if (rc != 0 || status(w, &c1, s1) != 0) break;
      for (int r = 0; rc == 0 && r < runs; r++) {
        double t0 = now_ms();
        rc = run(w, &t, false);
        piped[r] = now_ms() - t0;
        bad += differ(&t);
      }
      long long c2;
      double s2[PHASES];
      if (rc != 0 || status(w, &c2, s2) != 0) break;
      const bool all = c2 - c0 == 2LL * runs * (long long)t.np;
      off_card += !all;
      qsort(trip, (size_t)runs, sizeof *trip, cmpd);
      qsort(piped, (size_t)runs, sizeof *piped, cmpd);
      const double per = 1e3 / ((double)runs * (double)t.ngroups);
      printf("%-22s round trips %.3f ms (min %.3f), pipelined %.3f ms (min %.3f), a group %.2f us beside its kernels%s\n",
             x->name, trip[runs / 2], trip[0], piped[runs / 2], piped[0],
             (trip[runs / 2] - piped[runs / 2]) * 1e3 / (double)t.ngroups, all ? "" : " (NOT ALL ON THE CARD)");
      printf("%-22s a group's mean us:", "");
      for (int i = 0; i < PHASES; i++) printf(" %s %.2f", phase[i], (s1[i] - s0[i]) * 1e3 * per);
      printf("\n");
    }
  }
  /* the same round trips through a decode's token (bml_token_run) */
  bml_token *tk = NULL;
  if (rc == 0) rc = bml_worker_token_open(w, t.p, t.np, &tk);
  for (int round = 0; rc == 0 && round < 2; round++) {
    for (int i = 0; rc == 0 && i < 3; i++)
      for (size_t g = 0; rc == 0 && g < bml_token_groups(tk); g++) rc = bml_token_run(tk, g);
    differ(&t);
    long long c0, c1;
    double s0[PHASES], s1[PHASES];
    if (rc != 0 || status(w, &c0, s0) != 0) break;
    for (int r = 0; rc == 0 && r < runs; r++) {
      double t0 = now_ms();
      for (size_t g = 0; rc == 0 && g < bml_token_groups(tk); g++) rc = bml_token_run(tk, g);
      trip[r] = now_ms() - t0;
      bad += differ(&t);
    }
    if (rc != 0 || status(w, &c1, s1) != 0) break;
    off_card += c1 - c0 != (long long)runs * (long long)t.np;
    qsort(trip, (size_t)runs, sizeof *trip, cmpd);
    printf("%-22s round trips %.3f ms (min %.3f), %.2f us a group%s\n", bml_token_resident(tk) ? "token, resident" :
           "token, as batches", trip[runs / 2], trip[0], trip[runs / 2] * 1e3 / (double)t.ngroups,
           c1 - c0 == (long long)runs * (long long)t.np ? "" : " (NOT ALL ON THE CARD)");
    const double per = 1e3 / ((double)runs * (double)t.ngroups);
    printf("%-22s a group's mean us:", "");
    for (int i = 0; i < PHASES; i++) printf(" %s %.2f", phase[i], (s1[i] - s0[i]) * 1e3 * per);
    printf("\n");
  }
  bml_token_close(tk);
  if (rc != 0) fprintf(stderr, "tripfit: %s\n", bml_strerror(rc));
  printf("%s\n", bad ? "NOT EXACT" : "every product of every timed token exact");
  bml_worker_close(w);
  bml_pool_close(pool);
  return rc != 0 || bad || off_card ? 1 : 0;
}
