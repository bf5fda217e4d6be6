/* worker.c -- a verified card and the CPU pool share each product: calibrated share, per-shape decision, limiter, faults. */
#include "worker.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Errors in a row that retire the card for the process. */
#define RETIRE_AFTER 3
/* The calibration product. */
#define CAL_ROWS 4096
#define CAL_N 4096
#define CAL_RUNS 3
#define MIN_SHARE 0.02

/* One matrix the worker has seen: known by (name, pointer, rows, n). */
typedef struct {
  char *name;
  const bml_block_q1_0 *ptr;
  size_t rows, n;
  size_t card_rows;       /* rows held on the card (0: none) */
  bml__card_matrix m;
  bool cpu_only;          /* an allocation failed: this matrix stays on the CPU */
} entry;

/* The product in flight between begin and finish. */
typedef struct {
  bool active;
  const bml_block_q1_0 *wts;
  const bml_block_q8_0 *act;
  size_t rows, n, card_rows;
  bml__shape *shape;
  bool timed;         /* counts as a calibration timing of its shape */
  bool card_failed;   /* an OpenCL error at enqueue: the CPU redoes the card's rows */
  double begin_time, dispatch_time;
} product;

typedef struct {
  uint64_t on_card, on_cpu_resting, on_cpu_memory, on_cpu_error, on_cpu_decided, on_cpu_share;
} counters;

struct bml_worker {
  bml_pool *pool;
  bml_devices *devices;
  size_t device;
  bml__card *card;
  bml__build build;
  bml__card_act act;
  double share;
  bool share_fixed;    /* BANKML_GPU_SHARE or bml_worker_set_share: no per-shape calibration */
  bml__limiter limiter;
  entry *entries;
  size_t nentries, cap;
  bml__shape *shapes;
  size_t nshapes, shapes_cap;
  float *stage;        /* the card's rows of the product in flight */
  size_t stage_cap;
  product cur;
  counters count;
  int errors_in_row;
  bool retired;
  atomic_flag driving;
  bml__worker_hooks hooks;
};

/* ---- "GPU not used", logged once per reason per process ------------------------ */

static atomic_flag logged_no_card = ATOMIC_FLAG_INIT, logged_unverified = ATOMIC_FLAG_INIT,
                   logged_share = ATOMIC_FLAG_INIT, logged_retired = ATOMIC_FLAG_INIT;

static void not_used(atomic_flag *once, const char *fmt, ...) BML_PRINTF(2, 3);
static void not_used(atomic_flag *once, const char *fmt, ...) {
  if (atomic_flag_test_and_set(once)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  bml__warn(BML_CAT_WORKER, "GPU not used: %s", msg);
}

/* ---- driving: one thread at a time ---------------------------------------------- */

static bool enter(bml_worker *w) { return !atomic_flag_test_and_set_explicit(&w->driving, memory_order_acquire); }
static void leave(bml_worker *w) { atomic_flag_clear_explicit(&w->driving, memory_order_release); }

/* ---- matrices and shapes -------------------------------------------------------- */

static void drop_matrix(bml_worker *w, entry *e) {
  if (!e->m.nchunks) return;
  bml__limiter_drop(&w->limiter, e->m.bytes);
  bml__card_matrix_free(&e->m);
  e->card_rows = 0;
}

static entry *find_entry(bml_worker *w, const char *name, const bml_block_q1_0 *ptr, size_t rows, size_t n) {
  for (size_t i = 0; i < w->nentries; i++) {
    entry *e = &w->entries[i];
    if (e->ptr == ptr && e->rows == rows && e->n == n && strcmp(e->name, name) == 0) return e;
  }
  if (w->nentries == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 64;
    entry *grown = realloc(w->entries, cap * sizeof *grown);
    if (!grown) return NULL;
    w->entries = grown;
    w->cap = cap;
  }
  entry *e = &w->entries[w->nentries];
  memset(e, 0, sizeof *e);
  if (!(e->name = strdup(name))) return NULL;
  e->ptr = ptr, e->rows = rows, e->n = n;
  w->nentries++;
  return e;
}

static bml__shape *find_shape(bml_worker *w, size_t rows, size_t n) {
  for (size_t i = 0; i < w->nshapes; i++)
    if (w->shapes[i].rows == rows && w->shapes[i].n == n) return &w->shapes[i];
  if (w->nshapes == w->shapes_cap) {
    size_t cap = w->shapes_cap ? 2 * w->shapes_cap : 16;
    bml__shape *grown = realloc(w->shapes, cap * sizeof *grown);
    if (!grown) return NULL;
    w->shapes = grown;
    w->shapes_cap = cap;
  }
  bml__shape *s = &w->shapes[w->nshapes++];
  memset(s, 0, sizeof *s);
  s->rows = rows, s->n = n;
  s->state = BML_SHAPE_WARMUP;
  return s;
}

/* A shape decided for the CPU frees its matrices' card buffers. */
static void shape_decided(bml_worker *w, const bml__shape *s) {
  bml__debug(BML_CAT_WORKER, "shape %zux%zu: %s (median split %.3f ms, cpu %.3f ms)", s->rows, s->n,
             bml__shape_state_name(s->state), bml__median(s->split, s->nsplit) * 1e3,
             bml__median(s->cpu, s->ncpu) * 1e3);
  if (s->state != BML_SHAPE_CPU) return;
  for (size_t i = 0; i < w->nentries; i++)
    if (w->entries[i].rows == s->rows && w->entries[i].n == s->n) drop_matrix(w, &w->entries[i]);
}

static size_t rows_for(const bml_worker *w, size_t rows) {
  size_t r = (size_t)(w->share * (double)rows + 0.5);
  return r > rows ? rows : r;
}

/* ---- the card's part of a product ----------------------------------------------- */

static void retire(bml_worker *w, int err) {
  w->retired = true;
  not_used(&logged_retired, "\"%s\" retired after %d OpenCL errors in a row (the last: %s (%d)); every "
           "product runs on the CPU", w->card->name, RETIRE_AFTER, bml_err_name(err), err);
  for (size_t i = 0; i < w->nentries; i++) drop_matrix(w, &w->entries[i]);
  clFinish(w->card->queue);
  bml__card_act_free(&w->act);
}

static void card_error(bml_worker *w, int err) {
  bml__debug(BML_CAT_WORKER, "card error %s (%d): the product's rows go to the CPU", bml_err_name(err), err);
  w->count.on_cpu_error++;
  if (++w->errors_in_row >= RETIRE_AFTER) retire(w, err);
}

/* Makes sure e holds the first card_rows rows on the card.  Returns 0, or
 * BML_ENOMEM when the limit or an allocation says no (the matrix then runs
 * on the CPU), or an OpenCL error. */
static int ensure_uploaded(bml_worker *w, entry *e, size_t card_rows) {
  if (e->cpu_only) return BML_ENOMEM;
  if (e->m.nchunks && e->card_rows == card_rows) return 0;
  drop_matrix(w, e);
  uint64_t bytes = bml__card_matrix_bytes(card_rows, e->n);
  if (!bml__limiter_fits(&w->limiter, bytes, w->limiter.integrated ? bml__mem_available() : 0)) return BML_ENOMEM;
  int rc = w->hooks.fail_uploads > 0 ? (w->hooks.fail_uploads--, CL_MEM_OBJECT_ALLOCATION_FAILURE)
                                     : bml__card_matrix_upload(w->card, e->ptr, card_rows, e->n, &e->m);
  if (rc == CL_MEM_OBJECT_ALLOCATION_FAILURE || rc == CL_OUT_OF_RESOURCES || rc == BML_ENOMEM) {
    bml__debug(BML_CAT_WORKER, "matrix \"%s\": allocation failed (%s): it runs on the CPU", e->name, bml_err_name(rc));
    e->cpu_only = true;
    return BML_ENOMEM;
  }
  if (rc != 0) return rc;
  e->card_rows = card_rows;
  bml__limiter_hold(&w->limiter, e->m.bytes);
  return 0;
}

static int grow_stage(bml_worker *w, size_t rows) {
  if (rows <= w->stage_cap) return 0;
  float *s = bml__aligned_alloc(rows * sizeof *s);
  if (!s) return BML_ENOMEM;
  bml__aligned_free(w->stage);
  w->stage = s;
  w->stage_cap = rows;
  return 0;
}

static int enqueue(bml_worker *w, const entry *e, const bml_block_q8_0 *act) {
  if (w->hooks.fail_enqueues > 0) {
    w->hooks.fail_enqueues--;
    return CL_OUT_OF_RESOURCES;
  }
  int rc = bml__card_act_write(w->card, &w->act, act, e->n);
  if (rc == 0) rc = bml__card_mat_vec_enqueue(w->card, &w->build, w->hooks.kernel, 0, &e->m, &w->act, w->stage);
  if (rc == 0) rc = clFlush(w->card->queue);
  return rc;
}

/* The card's share of the product, or 0 rows (with the reason counted). */
static size_t start_on_card(bml_worker *w, const char *name, size_t rows, size_t n, product *p) {
  size_t card_rows = rows_for(w, rows);
  if (w->retired) {
    w->count.on_cpu_error++;
    return 0;
  }
  bool wants = w->share_fixed || bml__shape_wants_card(p->shape);
  if (!wants) {
    w->count.on_cpu_decided++;
    p->timed = true; /* a CPU-alone timing of a shape in calibration */
    return 0;
  }
  if (card_rows == 0) {
    w->count.on_cpu_share++; /* the share rounds to no row */
    return 0;
  }
  if (bml__limiter_resting(&w->limiter, bml__now())) {
    w->count.on_cpu_resting++;
    return 0;
  }
  entry *e = find_entry(w, name, p->wts, rows, n);
  int rc = e ? ensure_uploaded(w, e, card_rows) : BML_ENOMEM;
  if (rc == BML_ENOMEM) {
    w->count.on_cpu_memory++;
    return 0;
  }
  if (rc == 0) rc = grow_stage(w, card_rows);
  p->dispatch_time = bml__now();
  if (rc == 0) rc = enqueue(w, e, p->act);
  if (rc != 0) {
    card_error(w, rc);
    return 0;
  }
  p->timed = true;
  return card_rows;
}

/* ---- the product ------------------------------------------------------------------ */

int bml_worker_begin(bml_worker *w, const char *name, const bml_block_q1_0 *wts, size_t rows, size_t n,
                     const bml_block_q8_0 *act, size_t *card_rows) {
  if (!w || !name || !card_rows) return BML_EINVAL;
  int rc = bml__q1_0_check(wts, n, act, card_rows);
  if (rc != 0) return rc;
  if (!enter(w)) return BML_EBUSY;
  if (w->cur.active) {
    leave(w);
    return BML_ESTATE;
  }
  product *p = &w->cur;
  memset(p, 0, sizeof *p);
  p->wts = wts, p->act = act, p->rows = rows, p->n = n;
  p->begin_time = bml__now();
  p->shape = find_shape(w, rows, n);
  if (!p->shape) {
    leave(w);
    return BML_ENOMEM;
  }
  p->card_rows = rows ? start_on_card(w, name, rows, n, p) : 0;
  p->active = true;
  *card_rows = p->card_rows;
  leave(w);
  return 0;
}

/* The card failed after the enqueue: its rows are computed on the pool. */
static int redo_on_cpu(bml_worker *w, const product *p, float *out) {
  return bml_pool_q1_0_mat_vec(w->pool, p->wts, p->card_rows, p->n, p->act, out);
}

static int complete(bml_worker *w, product *p, float *out) {
  int rc = 0;
  if (p->card_rows > 0) {
    int err = clFinish(w->card->queue);
    double end = bml__now();
    bml__limiter_dispatched(&w->limiter, p->dispatch_time, end);
    if (err != CL_SUCCESS) {
      card_error(w, err);
      p->timed = false;
      rc = redo_on_cpu(w, p, out);
    } else {
      memcpy(out, w->stage, p->card_rows * sizeof *out);
      w->count.on_card++;
      w->errors_in_row = 0;
    }
  }
  if (p->timed && !w->share_fixed && bml__shape_record(p->shape, p->card_rows > 0, bml__now() - p->begin_time))
    shape_decided(w, p->shape);
  return rc;
}

int bml_worker_finish(bml_worker *w, float *out) {
  if (!w || !out) return BML_EINVAL;
  if (!enter(w)) return BML_EBUSY;
  if (!w->cur.active) {
    leave(w);
    return BML_ESTATE;
  }
  int rc = complete(w, &w->cur, out);
  w->cur.active = false;
  leave(w);
  return rc;
}

int bml_worker_mat_vec(bml_worker *w, const char *name, const bml_block_q1_0 *wts, size_t rows, size_t n,
                       const bml_block_q8_0 *act, float *out) {
  if (!out) return BML_EINVAL;
  size_t card_rows = 0;
  int rc = bml_worker_begin(w, name, wts, rows, n, act, &card_rows);
  if (rc != 0) return rc;
  size_t nb = n / BML_Q1_0_BLOCK;
  int cpu = rows > card_rows ? bml_pool_q1_0_mat_vec(w->pool, wts + card_rows * nb, rows - card_rows, n, act,
                                                     out + card_rows)
                             : 0;
  rc = bml_worker_finish(w, out);
  return cpu ? cpu : rc;
}

/* ---- open: verify, calibrate -------------------------------------------------------- */

/* Best of CAL_RUNS of one CAL_ROWS x CAL_N product on the card and on the pool. */
static int calibrate(bml_worker *w, double *card_s, double *cpu_s) {
  const size_t rows = CAL_ROWS, n = CAL_N;
  bml_block_q1_0 *wts = malloc(rows * (n / BML_Q1_0_BLOCK) * sizeof *wts);
  bml_block_q8_0 *act = malloc(n / BML_Q8_0_BLOCK * sizeof *act);
  float *out = malloc(rows * sizeof *out);
  uint64_t seed = 0xca11b7a7e;
  bml__card_matrix m = {0};
  int rc = wts && act && out ? 0 : BML_ENOMEM;
  if (rc == 0) {
    bml__gen_q1_0(&seed, wts, rows, n, true);
    rc = bml__gen_q8_0(&seed, act, n, true);
  }
  if (rc == 0) rc = bml__card_matrix_upload(w->card, wts, rows, n, &m);
  *card_s = *cpu_s = 1e30;
  for (int i = 0; rc == 0 && i < CAL_RUNS; i++) {
    double t0 = bml__now();
    rc = bml__card_act_write(w->card, &w->act, act, n);
    if (rc == 0) rc = bml__card_mat_vec_enqueue(w->card, &w->build, w->hooks.kernel, 0, &m, &w->act, out);
    if (rc == 0) rc = clFinish(w->card->queue);
    double t1 = bml__now();
    if (rc == 0) rc = bml_pool_q1_0_mat_vec(w->pool, wts, rows, n, act, out);
    double t2 = bml__now();
    if (t1 - t0 < *card_s) *card_s = t1 - t0;
    if (t2 - t1 < *cpu_s) *cpu_s = t2 - t1;
  }
  bml__card_matrix_free(&m);
  free(wts), free(act), free(out);
  return rc;
}

/* The first failing check of the verification, for the log. */
typedef struct {
  char first[400];
} verify_note;

static void note_failure(void *ctx, const bml_verify_line *l) {
  verify_note *v = ctx;
  if (l->ok || v->first[0] || (strcmp(l->check, "fma probe") == 0 && strcmp(l->fma, "native") == 0)) return;
  if (l->first_bad >= 0)
    snprintf(v->first, sizeof v->first, "%s (fma: %s) %zux%zu %s: row %ld differs (cpu 0x%08x, card 0x%08x)",
             l->check, l->fma, l->rows, l->n, l->regime, l->first_bad, l->cpu_bits, l->card_bits);
  else
    snprintf(v->first, sizeof v->first, "%s: %.300s", l->check, l->detail ? l->detail : "failed");
}

static int settings(bml_worker *w, double *limit) {
  double share = -1.0;
  *limit = BML_LIMIT_DEFAULT;
  int rc = bml__env_gpu_share(&share);
  if (rc == 0) rc = bml__env_gpu_limit(limit);
  if (rc != 0) return rc;
  if (share >= 0.0) {
    w->share = share;
    w->share_fixed = true;
  }
  return 0;
}

static size_t first_selected(const bml_devices *d) {
  for (size_t i = 0; i < d->len; i++)
    if (d->dev[i].pub.selected) return i;
  return d->len;
}

/* Opens and verifies the first selected card; 0 with w->card NULL when none is used. */
static int open_card(bml_worker *w) {
  int rc = bml_devices_discover(NULL, &w->devices);
  if (rc != 0) return rc;
  w->device = first_selected(w->devices);
  if (w->device == w->devices->len) {
    not_used(&logged_no_card, "no usable GPU is selected (bankml-cl devices says why); everything runs on the CPU");
    return 0;
  }
  const bml__device *d = &w->devices->dev[w->device];
  verify_note note = {""};
  bml_verify_options o;
  bml_verify_options_init(&o);
  o.on_line = note_failure;
  o.ctx = &note;
  rc = bml__oracle_verify(d, w->device, &o, &w->card, &w->build);
  if (rc == BML_ENOMEM) return rc;
  if (rc != 0) {
    not_used(&logged_unverified, "\"%s\" NOT VERIFIED \u2014 %s", d->cl.name, note.first[0] ? note.first : bml_strerror(rc));
    w->card = NULL;
  }
  return 0;
}

static int decide_share(bml_worker *w) {
  if (w->share_fixed) return 0;
  double card_s, cpu_s;
  int rc = calibrate(w, &card_s, &cpu_s);
  if (rc != 0) return rc;
  w->share = cpu_s / (card_s + cpu_s); /* card rate / (card rate + CPU rate) */
  bml__debug(BML_CAT_WORKER, "calibration: card %.3f ms, CPU %.3f ms: share %.3f", card_s * 1e3, cpu_s * 1e3, w->share);
  if (w->share < MIN_SHARE) {
    not_used(&logged_share, "\"%s\": calibrated share %.3f is below %.2f (card %.3f ms, CPU %.3f ms for %dx%d)",
             w->card->name, w->share, MIN_SHARE, card_s * 1e3, cpu_s * 1e3, CAL_ROWS, CAL_N);
    return 1;
  }
  return 0;
}

int bml_worker_open(bml_pool *pool, bml_worker **out) {
  if (!pool || !out) return BML_EINVAL;
  *out = NULL;
  bml_worker *w = calloc(1, sizeof *w);
  if (!w) return BML_ENOMEM;
  w->pool = pool;
  atomic_flag_clear(&w->driving);
  w->hooks.kernel = BML_KERNEL_MAT_VEC8;
  double limit;
  int rc = settings(w, &limit);
  if (rc == 0) rc = open_card(w);
  if (rc == 0 && w->card) {
    bml__limiter_init(&w->limiter, limit, w->card->global_mem, w->card->host_unified);
    rc = decide_share(w);
  }
  if (rc != 0 || !w->card) {
    bml_worker_close(w);
    return rc > 0 ? 0 : rc; /* rc 1: a share too small, no worker */
  }
  bml__info(BML_CAT_WORKER, "GPU \"%s\": share %.3f%s, limit %.2f", w->card->name, w->share,
            w->share_fixed ? " (BANKML_GPU_SHARE)" : "", w->limiter.limit);
  *out = w;
  return 0;
}

/* ---- settings, status, release -------------------------------------------------------- */

int bml_worker_set_share(bml_worker *w, double share) {
  if (!w) return BML_EINVAL;
  if (!(share >= 0.0 && share <= 1.0)) return BML_ERANGE;
  if (!enter(w)) return BML_EBUSY;
  int rc = w->cur.active ? BML_ESTATE : 0;
  if (rc == 0) {
    w->share = share;
    w->share_fixed = true;
  }
  leave(w);
  return rc;
}

int bml_worker_set_limit(bml_worker *w, double limit) {
  if (!w) return BML_EINVAL;
  if (!(limit >= BML_LIMIT_MIN && limit <= 1.0)) return BML_ERANGE;
  if (!enter(w)) return BML_EBUSY;
  w->limiter.limit = limit;
  w->limiter.rest_until = 0;
  leave(w);
  return 0;
}

static size_t heap_bytes(const bml_worker *w) {
  size_t b = sizeof *w + w->cap * sizeof *w->entries + w->shapes_cap * sizeof *w->shapes +
             w->stage_cap * sizeof *w->stage + w->act.size;
  for (size_t i = 0; i < w->nentries; i++) b += strlen(w->entries[i].name) + 1;
  return b;
}

static json_t *status_json(const bml_worker *w) {
  json_int_t on_card = 0, on_cpu = 0, tuning = 0;
  for (size_t i = 0; i < w->nshapes; i++) {
    on_card += w->shapes[i].state == BML_SHAPE_CARD;
    on_cpu += w->shapes[i].state == BML_SHAPE_CPU;
    tuning += w->shapes[i].state == BML_SHAPE_WARMUP || w->shapes[i].state == BML_SHAPE_TUNING;
  }
  if (w->share_fixed) on_card = (json_int_t)w->nshapes, tuning = 0, on_cpu = 0;
  return json_pack(
      "{s:s, s:I, s:f, s:f, s:b, s:I, s:I, s:b, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s}",
      "card", w->card->name, "device", (json_int_t)w->device, "limit", w->limiter.limit, "share", w->share,
      "share_fixed", w->share_fixed, "allocated_bytes", (json_int_t)(w->limiter.allocated + w->act.size),
      "heap_bytes", (json_int_t)heap_bytes(w), "integrated", w->limiter.integrated, "busy", w->cur.active,
      "retired", w->retired, "products_on_card", (json_int_t)w->count.on_card, "products_on_cpu_resting",
      (json_int_t)w->count.on_cpu_resting, "products_on_cpu_memory", (json_int_t)w->count.on_cpu_memory,
      "products_on_cpu_error", (json_int_t)w->count.on_cpu_error, "products_on_cpu_decided",
      (json_int_t)w->count.on_cpu_decided, "products_on_cpu_share", (json_int_t)w->count.on_cpu_share,
      "shapes_on_card", on_card, "shapes_on_cpu", on_cpu, "shapes_tuning",
      tuning, "matrices", (json_int_t)w->nentries, "fma", w->build.emulated_fma ? "emulated" : "native");
}

int bml_worker_status_json(bml_worker *w, char **json) {
  if (!w || !json) return BML_EINVAL;
  *json = NULL;
  if (!enter(w)) return BML_EBUSY;
  json_t *o = status_json(w);
  leave(w);
  if (!o) return BML_ENOMEM;
  *json = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  return *json ? 0 : BML_ENOMEM;
}

static void release_all(bml_worker *w) {
  if (w->card) clFinish(w->card->queue); /* a product in flight keeps its staged rows */
  for (size_t i = 0; i < w->nentries; i++) {
    drop_matrix(w, &w->entries[i]);
    w->entries[i].cpu_only = false;
  }
  bml__card_act_free(&w->act);
}

void bml_worker_release(bml_worker *w) {
  if (!w) return;
  while (!enter(w)) bml__now(); /* another thread is inside a call: wait it out */
  release_all(w);
  leave(w);
}

void bml_worker_close(bml_worker *w) {
  if (!w) return;
  release_all(w);
  for (size_t i = 0; i < w->nentries; i++) free(w->entries[i].name);
  free(w->entries);
  free(w->shapes);
  bml__aligned_free(w->stage);
  bml__build_release(&w->build);
  bml__card_close(w->card);
  bml_devices_free(w->devices);
  free(w);
}

/* ---- test hooks -------------------------------------------------------------------------- */

void bml__worker_set_hooks(bml_worker *w, const bml__worker_hooks *h) { w->hooks = *h; }

void bml__worker_set_card_mem(bml_worker *w, uint64_t bytes) { w->limiter.card_mem = bytes; }

const bml__limiter *bml__worker_limiter(const bml_worker *w) { return &w->limiter; }

void bml__worker_set_share_calibrated(bml_worker *w, double share) {
  w->share = share;
  w->share_fixed = false;
}
