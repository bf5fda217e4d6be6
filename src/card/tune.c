/* tune.c -- each card's kernel tunables and kernel choice: measured once, remembered per device and driver. */
#include "card/tune.h"

#include "base/log.h"
#include "base/util.h"
#include "cpu/gen.h"
#include "card/cache.h"
#include "card/card.h"
#include "card/kernels.h"
#include "card/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The candidates of q1_0_mat_vec_l (rows per work-group) and of
 * q1_0_mat_vec_lr (rows per slice, slices per work-item, lanes per
 * work-item: a work-item of two lanes reads a row's scales once for both).
 * The last of each (64 work-items a group) is tried only where none before
 * it fits a kernel's work-group limit (CL_KERNEL_WORK_GROUP_SIZE, below 128
 * on some small GPUs). */
static const size_t l_candidates[] = {16, 32, 64, 8};
static const size_t lr_candidates[][3] = {{32, 2, 1}, {32, 3, 1}, {32, 4, 1}, {16, 4, 1},
                                          {64, 2, 1}, {64, 2, 2}, {8, 4, 1}};

/* The measured products: few rows (where a work-item per row leaves a big
 * card idle) and many, both of a model's width, a few kernels back to back
 * so the launch cost is what it is in a pipeline. */
#define TUNE_N 4096
#define TUNE_FEW 4096
#define TUNE_MANY 32768
#define TUNE_BACK_TO_BACK 8
#define TUNE_RUNS 3

/* The test suite's quick measurement (tune.h): products a sixteenth as
 * big, timed once; the default shapes tried first and taken wherever they
 * fit, the other candidates tried only where they do not (the first that
 * fits taken).  So every process of the suite builds the same programs, and
 * few: a software device (PoCL) compiles each kernel of a new build at its
 * first launch, seconds each, and on a busy 2-core machine the times of
 * the candidates differ from run to run. */
typedef struct {
  size_t n, few, many;
  int back_to_back, runs;
} sizes;
static const sizes full_sizes = {TUNE_N, TUNE_FEW, TUNE_MANY, TUNE_BACK_TO_BACK, TUNE_RUNS};
static const sizes quick_sizes = {1024, 1024, 8192, 2, 1};

static bool tuning_off;
static int tuning_quick = -1; /* -1: BANKML_TEST_QUICK_TUNE says */

void bml__tune_quick(bool on) { tuning_quick = on; }

bool bml__tune_is_quick(void) {
  if (tuning_quick < 0) {
    const char *v = getenv("BANKML_TEST_QUICK_TUNE");
    tuning_quick = v && strcmp(v, "1") == 0;
  }
  return tuning_quick;
}

static const sizes *tune_sizes(void) { return bml__tune_is_quick() ? &quick_sizes : &full_sizes; }

const size_t (*bml__tune_lr_candidates(size_t *n))[3] {
  *n = BML_ARRAY_SIZE(lr_candidates);
  return lr_candidates;
}

void bml__tune_disable(bool off) { tuning_off = off; }

/* What the tuning decides. */
typedef struct {
  size_t lrows, lrrows, lrrpt, lrlpt, lr_from;
  double us_few, us_many;
} choice;

/* Before any measurement, or when it fails: shapes that did well on every
 * card measured, and _lr from 16384 rows. */
static const choice default_choice = {32, 32, 4, 1, 16384, 0, 0};

/* The candidate tried i-th, where the default is at index d: in the
 * quick measurement the default first and the others in their order after
 * it, each tried only while none fits (measure); else in their order. */
static size_t nth(bool quick, size_t i, size_t d) {
  if (!quick) return i;
  return i == 0 ? d : i <= d ? i - 1 : i;
}

/* The default's index among the candidates (it is always one of them). */
static size_t l_default(void) {
  size_t d = 0;
  while (l_candidates[d] != default_choice.lrows) d++;
  return d;
}
static size_t lr_default(void) {
  size_t d = 0;
  while (lr_candidates[d][0] != default_choice.lrrows || lr_candidates[d][1] != default_choice.lrrpt ||
         lr_candidates[d][2] != default_choice.lrlpt)
    d++;
  return d;
}

static void apply(bml__card *c, const choice *ch) {
  bml__card_set_tunables(c, ch->lrows, ch->lrrows, ch->lrrpt, ch->lrlpt);
  c->lr_from = ch->lr_from;
}

/* ---- the remembered choice (cache.c) -------------------------------------------- */

/* The layout of the tuning's entries: 2 since "never _lr" is -1 (1 wrote
 * 0 for both "always" and "never"; its entries are measured again); 3
 * since the shapes fit the emulated fma's build too (2's were checked
 * against the native build alone, and one that the emulated build does
 * not fit would refuse the card at every open: they are measured again); 4
 * since _lr's lanes per work-item ("lrlpt") are a tunable; 5 since the
 * table kernels build their tables and load their weights with fewer
 * instructions (the shapes' speeds moved: measured again); 6 since a
 * launch runs at most max_groups work-groups, each taking several groups
 * of rows (the same).  It is part of the key: an entry of another layout
 * is another key's. */
#define TUNE_LAYOUT 6

/* The key of this device's tuning: its layout, name, driver and
 * bankml-cl's version, and "measure": "quick" for the test suite's quick
 * measurement (never taken for a full one, nor a full one for it). */
static json_t *tune_key(const bml__cl_info *ci) {
  json_t *key = json_pack("{s:i, s:s, s:s, s:s}", "layout", TUNE_LAYOUT, "device", ci->name, "driver",
                          ci->driver_version, "bankml_cl_version", bml_version_string());
  if (key && bml__tune_is_quick() && json_object_set_new(key, "measure", json_string("quick")) != 0) {
    json_decref(key);
    key = NULL;
  }
  return key;
}

/* A whole number of the entry in [1, hi], or 0. */
static size_t field(json_t *e, const char *name, json_int_t hi) {
  json_int_t v = json_integer_value(json_object_get(e, name));
  return v >= 1 && v <= hi ? (size_t)v : 0;
}

/* Whether the tunables are among those measured (a hand-edited cache may
 * hold any number, and the kernels are only right for these). */
static bool candidate(const choice *c) {
  bool l = false, lr = false;
  for (size_t i = 0; i < BML_ARRAY_SIZE(l_candidates); i++) l |= c->lrows == l_candidates[i];
  for (size_t i = 0; i < BML_ARRAY_SIZE(lr_candidates); i++)
    lr |= c->lrrows == lr_candidates[i][0] && c->lrrpt == lr_candidates[i][1] && c->lrlpt == lr_candidates[i][2];
  return l && lr;
}

/* The remembered choice for this device, driver and version, if any. */
static bool load(const json_t *key, const bml__cl_info *ci, choice *ch) {
  json_t *e = bml__cache_find("tuning", key);
  if (!e) return false;
  choice c = {field(e, "lrows", 4096), field(e, "lrrows", 4096), field(e, "lrrpt", 4), field(e, "lrlpt", 4), 0, 0, 0};
  json_t *from = json_object_get(e, "lr_from_rows"); /* -1: never */
  json_int_t f = json_integer_value(from);
  c.lr_from = f < 0 ? SIZE_MAX : (size_t)f;
  const bool found = json_is_integer(from) && f >= -1 && candidate(&c);
  if (found)
    *ch = c;
  else
    bml__debug(BML_CAT_BUILD, "the remembered tuning of \"%s\" is not one this version writes: measured again",
               ci->name);
  json_decref(e);
  return found;
}

/* Remembers the choice; a failure to write only costs a measurement next
 * time (cache.c warns, once). */
static void save(const json_t *key, const choice *ch) {
  json_int_t from = ch->lr_from > (size_t)INT32_MAX ? -1 : (json_int_t)ch->lr_from; /* -1: never */
  bml__cache_store("tuning", key,
                   json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "lrows", (json_int_t)ch->lrows, "lrrows",
                             (json_int_t)ch->lrrows, "lrrpt", (json_int_t)ch->lrrpt, "lrlpt", (json_int_t)ch->lrlpt,
                             "lr_from_rows", from, "us_4096x4096", ch->us_few, "us_32768x4096", ch->us_many));
}

/* ---- the measurement ---------------------------------------------------------- */

typedef struct {
  bml__card_matrix few, many;
  bml__card_buf act, out;
  bool both; /* each candidate must fit the emulated fma's build too (below) */
} bench;

/* Microseconds per product of kernel k of build b on m: TUNE_BACK_TO_BACK
 * launches, one wait, best of TUNE_RUNS after a warm-up. */
static int time_kernel(bml__card *c, const bml__build *b, bml__kernel_id k, bench *t, const bml__card_matrix *m,
                       double *us) {
  const sizes *z = tune_sizes();
  int rc = 0;
  *us = 1e30;
  for (int run = 0; rc == 0 && run <= z->runs; run++) {
    double t0 = bml__now();
    for (int i = 0; rc == 0 && i < z->back_to_back; i++)
      rc = bml__card_mat_vec_enqueue(c, b, k, 0, m, &t->act, 0, &t->out, 0);
    if (rc == 0) rc = clFinish(c->queue);
    double per = (bml__now() - t0) * 1e6 / z->back_to_back;
    if (run > 0 && per < *us) *us = per;
  }
  return rc;
}

/* Whether a candidate's failure says only that its shape does not fit the
 * device (the work-group, or the resources a launch of it needs): the
 * tuning goes on without it. */
static bool does_not_fit(int rc) { return rc == CL_INVALID_WORK_GROUP_SIZE || rc == CL_OUT_OF_RESOURCES; }

/* Whether the emulated fma's build fits the card's current tunables: the
 * oracle builds it too (and the worker uses it where the native fma is not
 * exact), and its longer code may leave a kernel fewer work-items on a GPU
 * than the native build's.  Another failure is the oracle's to report. */
static bool emulated_fits(bml__card *c) {
  bml__build b;
  char *log = NULL;
  const int rc = bml__card_build(c, true, NULL, &b, &log);
  free(log);
  bml__build_release(&b);
  return !does_not_fit(rc);
}

/* Builds with the card's current tunables and times kernel k on both
 * matrices.  CL_INVALID_WORK_GROUP_SIZE: a kernel of the build does not fit
 * its work-groups on this device (src/card/program.c), or (t->both) the
 * emulated fma's build does not. */
static int time_candidate(bml__card *c, bml__kernel_id k, bench *t, double *few, double *many) {
  if (t->both && !emulated_fits(c)) return CL_INVALID_WORK_GROUP_SIZE;
  bml__build b;
  char *log = NULL;
  int rc = bml__card_build(c, false, NULL, &b, &log);
  free(log);
  if (rc != 0) return rc;
  rc = time_kernel(c, &b, k, t, &t->few, few);
  if (rc == 0) rc = time_kernel(c, &b, k, t, &t->many, many);
  bml__build_release(&b);
  return rc;
}

static int prepare(bml__card *c, bench *t) {
  const sizes *z = tune_sizes();
  const size_t nb = z->n / BML_Q1_0_BLOCK;
  bml_block_q1_0 *w = malloc(z->many * nb * sizeof *w);
  bml_block_q8_0 *act = malloc(z->n / BML_Q8_0_BLOCK * sizeof *act);
  uint64_t seed = 0x7475e;
  int rc = w && act ? 0 : BML_ENOMEM;
  if (rc == 0) {
    bml__gen_q1_0(&seed, w, z->many, z->n, true);
    rc = bml__gen_q8_0(&seed, act, z->n, true);
  }
  bml__rows_part few = {w, z->few}, many = {w, z->many};
  if (rc == 0) rc = bml__card_matrix_upload(c, &few, 1, z->n, false, &t->few);
  if (rc == 0) rc = bml__card_matrix_upload(c, &many, 1, z->n, false, &t->many);
  if (rc == 0) rc = bml__card_buf_reserve(c, &t->act, bml__card_act_bytes(z->n));
  if (rc == 0) rc = bml__card_buf_reserve(c, &t->out, z->many * sizeof(float));
  if (rc == 0) bml__card_act_repack(act, z->n, t->act.host);
  if (rc == 0) rc = bml__card_buf_write(c, &t->act, bml__card_act_bytes(z->n));
  free(w), free(act);
  return rc;
}

static void release(bml__card *c, bench *t) {
  bml__card_matrix_free(c, &t->few);
  bml__card_matrix_free(c, &t->many);
  bml__card_buf_free(&t->act);
  bml__card_buf_free(&t->out);
}

/* Times kernel k with the tunables (lrows; lr: lrrows x lrrpt, lrlpt
 * lanes); 1 when the device cannot take k's own (fit_rows changed them: the
 * other kernel's, fitted down, are only its company in the build), else
 * time_candidate's. */
static int try_shape(bml__card *c, bml__kernel_id k, bench *t, size_t lrows, const size_t *lr, double *few,
                     double *many) {
  bml__card_set_tunables(c, lrows, lr[0], lr[1], lr[2]);
  const bool beyond = k == BML_KERNEL_MAT_VEC_L ? c->lrows != lrows
                                                : c->lrrows != lr[0] || c->lrrpt != lr[1] || c->lrlpt != lr[2];
  return beyond ? 1 : time_candidate(c, k, t, few, many);
}

/* The fastest q1_0_mat_vec_l and q1_0_mat_vec_lr candidates, and where each
 * wins.  A candidate that does not fit is passed over (a build holds every
 * kernel, so an _l candidate that fails may be failing on _lr's shape: it
 * is tried again beside the smallest _lr); CL_INVALID_WORK_GROUP_SIZE when
 * no candidate of a kernel fits. */
static int measure(bml__card *c, choice *best, bool both) {
  bench t = {.both = both};
  int rc = prepare(c, &t);
  double l_few = 1e30, l_many = 1e30, lr_few = 1e30, lr_many = 1e30;
  const size_t nl = BML_ARRAY_SIZE(l_candidates), nlr = BML_ARRAY_SIZE(lr_candidates);
  const size_t *lr_least = lr_candidates[nlr - 1];
  bool l_found = false, lr_found = false;
  const bool quick = bml__tune_is_quick();
  for (size_t i = 0; rc == 0 && i < nl && !(l_found && (quick || i == nl - 1)); i++) {
    double few, many;
    const size_t lr_best[3] = {best->lrrows, best->lrrpt, best->lrlpt}, lrows = l_candidates[nth(quick, i, l_default())];
    rc = try_shape(c, BML_KERNEL_MAT_VEC_L, &t, lrows, lr_best, &few, &many);
    if (rc == CL_INVALID_WORK_GROUP_SIZE) rc = try_shape(c, BML_KERNEL_MAT_VEC_L, &t, lrows, lr_least, &few, &many);
    if (rc == 1 || does_not_fit(rc)) {
      bml__debug(BML_CAT_BUILD, "tuning \"%s\": _l %zu does not fit (%d)", c->name, lrows, rc);
      rc = 0;
      continue;
    }
    bml__debug(BML_CAT_BUILD, "tuning \"%s\": _l %zu: %.1f / %.1f us", c->name, c->lrows, few, many);
    /* _l runs the products of fewer rows: judged on those */
    if (rc == 0 && few < l_few) l_few = few, l_many = many, best->lrows = c->lrows, l_found = true;
  }
  for (size_t i = 0; rc == 0 && i < nlr && !(lr_found && (quick || i == nlr - 1)); i++) {
    double few, many;
    const size_t *lr = lr_candidates[nth(quick, i, lr_default())];
    rc = try_shape(c, BML_KERNEL_MAT_VEC_LR, &t, l_found ? best->lrows : l_candidates[nl - 1], lr, &few, &many);
    if (rc == 1 || does_not_fit(rc)) {
      bml__debug(BML_CAT_BUILD, "tuning \"%s\": _lr %zux%zu, %zu lanes, does not fit (%d)", c->name, lr[0], lr[1],
                 lr[2], rc);
      rc = 0;
      continue;
    }
    bml__debug(BML_CAT_BUILD, "tuning \"%s\": _lr %zux%zu, %zu lanes: %.1f / %.1f us", c->name, c->lrrows, c->lrrpt,
               c->lrlpt, few, many);
    /* _lr runs the products of many rows: judged on those */
    if (rc == 0 && many < lr_many)
      lr_few = few, lr_many = many, best->lrrows = c->lrrows, best->lrrpt = c->lrrpt, best->lrlpt = c->lrlpt,
      lr_found = true;
  }
  if (rc == 0 && (!l_found || !lr_found)) rc = CL_INVALID_WORK_GROUP_SIZE;
  /* the kernel for a product: _lr where it won, by rows */
  const size_t middle = (tune_sizes()->few + tune_sizes()->many) / 2;
  best->lr_from = quick                ? middle /* both kernels in use */
                  : lr_few < l_few     ? 0
                  : lr_many < l_many   ? middle
                                       : SIZE_MAX;
  best->us_few = lr_few < l_few ? lr_few : l_few;
  best->us_many = lr_many < l_many ? lr_many : l_many;
  release(c, &t);
  return rc;
}

int bml__tune(bml__card *c, const bml__cl_info *ci) {
  choice ch = default_choice;
  json_t *key = tune_key(ci);
  bool cached = key && load(key, ci, &ch);
  if (cached)
    bml__debug(BML_CAT_BUILD, "tuning of \"%s\" remembered: _l %zu, _lr %zux%zu, %zu lanes, from %zu rows", c->name,
               ch.lrows, ch.lrrows, ch.lrrpt, ch.lrlpt, ch.lr_from);
  if (cached || tuning_off) {
    apply(c, &ch);
    json_decref(key);
    return 0;
  }
  int rc = measure(c, &ch, false);
  if (rc == 0) {
    /* the emulated fma's build must fit the shapes too: checked on the
     * choice (a build, which the oracle's then finds in a driver's cache),
     * and only where it does not on every candidate (twice the builds) */
    apply(c, &ch);
    if (!emulated_fits(c)) {
      bml__debug(BML_CAT_BUILD, "tuning \"%s\": the emulated fma's build does not fit _l %zu, _lr %zux%zu, %zu lanes: "
                 "measuring again with both builds", c->name, ch.lrows, ch.lrrows, ch.lrrpt, ch.lrlpt);
      ch = default_choice;
      rc = measure(c, &ch, true);
    }
  }
  if (rc != 0) ch = default_choice; /* a failed measurement is not fatal */
  apply(c, &ch);
  if (rc != 0) {
    json_decref(key);
    return rc;
  }
  const sizes *z = tune_sizes();
  bml__debug(BML_CAT_BUILD, "tuned \"%s\": _l %zu, _lr %zux%zu, %zu lanes, from %zu rows (%.1f us for %zux%zu, %.1f for %zux%zu)",
             c->name, ch.lrows, ch.lrrows, ch.lrrpt, ch.lrlpt, ch.lr_from, ch.us_few, z->few, z->n, ch.us_many,
             z->many, z->n);
  if (key) save(key, &ch);
  json_decref(key);
  return 0;
}

bml__kernel_id bml__tune_kernel_for(const bml__card *c, size_t rows) {
  return rows >= c->lr_from ? BML_KERNEL_MAT_VEC_LR : BML_KERNEL_MAT_VEC_L;
}
