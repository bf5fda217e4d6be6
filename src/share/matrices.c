/* matrices.c -- what the worker holds on the card: its matrices (uploaded, moved, dropped), shapes, kinds of batch and staging. */
#include "base/log.h"
#include "base/util.h"
#include "card/card.h"
#include "card/kernels.h"
#include "card/slab.h"
#include "share/worker_int.h"

/* ---- matrices and shapes -------------------------------------------------------- */

/* What the limiter counts as held: the slabs and a submission's staging on
 * the card (activations in, results out). */
void bml__worker_sync_allocated(bml_worker *w) {
  w->limiter.allocated = (w->card ? bml__card_slab_bytes(w->card) : 0) + staging_bytes(w, &w->acts, w->acts.size) +
                         staging_bytes(w, &w->outs, w->outs.size) + w->token_bytes;
}

/* Sets how the activations go in and the results come back: zero-copy
 * (the kernels use host memory the host fills and reads) or copies; the
 * buffers of a mode left are freed (the next submission makes new ones). */
void bml__worker_set_buffers(bml_worker *w, bool acts_zero_copy, bool outs_zero_copy) {
  if (w->acts.zero_copy != acts_zero_copy) bml__card_buf_free(&w->acts), w->acts.zero_copy = acts_zero_copy;
  if (w->outs.zero_copy != outs_zero_copy) bml__card_buf_free(&w->outs), w->outs.zero_copy = outs_zero_copy;
  bml__worker_sync_allocated(w);
}

/* "zero-copy", "copies" or which of the two is zero-copy: how w's
 * activations and results reach the card and come back. */
const char *bml__worker_buffers_name(const bml_worker *w) {
  return w->acts.zero_copy && w->outs.zero_copy ? "zero-copy"
         : w->acts.zero_copy                    ? "zero-copy activations"
         : w->outs.zero_copy                    ? "zero-copy results"
                                                : "copies";
}

/* The bytes of a submission's staging in: its nrec records (rounded up to
 * 64 bytes) and act bytes of activations, as bml__worker_enqueue_groups lays it out. */
uint64_t bml__worker_staging_in_bytes(const bml_worker *w, uint64_t act, uint64_t nrec) {
  return (uses_records(w) ? (nrec * sizeof(bml__desc) + 63) / 64 * 64 : 0) + act;
}

/* The bytes the staging would grow by for a submission of in_bytes of
 * activations and records and out_rows results (bml__card_buf_reserve
 * replaces a buffer that is too small). */
uint64_t bml__worker_staging_growth(const bml_worker *w, uint64_t in_bytes, uint64_t out_rows) {
  const uint64_t a = bml__card_buf_size(in_bytes), o = bml__card_buf_size(out_rows * sizeof(float));
  return staging_bytes(w, &w->acts, a > w->acts.size ? a - w->acts.size : 0) +
         staging_bytes(w, &w->outs, o > w->outs.size ? o - w->outs.size : 0);
}

/* Frees the matrix's card buffers (to upload it again with another split:
 * its history of moves stays, even when that upload fails). */
static void drop_held(bml_worker *w, entry *e) {
  if (!e->m.nchunks) return;
  bml__card_matrix_free(w->card, &e->m);
  bml__worker_sync_allocated(w);
  memset(e->held, 0, e->nmembers * sizeof *e->held);
}

/* Frees them for good (a shape decided for the CPU, a release): a later
 * upload starts a fresh history. */
void bml__worker_drop_matrix(bml_worker *w, entry *e) {
  drop_held(w, e);
  e->hist = (bml__moves){0};
}

/* Frees e and what it owns (its card buffers are dropped before). */
void bml__worker_free_entry(entry *e) {
  for (size_t i = 0; i < e->nmembers; i++) free(e->members[i].name);
  free(e->members);
  free(e->held);
  free(e);
}

static bool entry_is(const entry *e, const bml_product *p, size_t count) {
  if (e->nmembers != count || e->n != p->n) return false;
  for (size_t i = 0; i < count; i++)
    if (e->members[i].ptr != p[i].wts || e->members[i].rows != p[i].rows || strcmp(e->members[i].name, p[i].name))
      return false;
  return true;
}

entry *bml__worker_new_entry(bml_worker *w, const bml_product *p, size_t count) {
  if (reserve((void **)&w->entries, &w->cap, w->nentries + 1, sizeof *w->entries)) return NULL;
  entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->n = p->n;
  e->members = calloc(count, sizeof *e->members);
  e->held = calloc(count, sizeof *e->held);
  bool ok = e->members && e->held;
  for (size_t i = 0; ok && i < count; i++) {
    e->members[i] = (member){strdup(p[i].name), p[i].wts, p[i].rows};
    ok = e->members[i].name != NULL;
    e->nmembers = i + 1;
  }
  if (!ok) {
    bml__worker_free_entry(e);
    return NULL;
  }
  w->entries[w->nentries++] = e;
  return e;
}

entry *bml__worker_known_entry(bml_worker *w, const bml_product *p, size_t count) {
  for (size_t i = 0; i < w->nentries; i++)
    if (entry_is(w->entries[i], p, count)) return w->entries[i];
  return NULL;
}

bml__shape *bml__worker_find_shape(bml_worker *w, size_t rows, size_t n) {
  for (size_t i = 0; i < w->nshapes; i++)
    if (w->shapes[i].rows == rows && w->shapes[i].n == n) return &w->shapes[i];
  if (reserve((void **)&w->shapes, &w->shapes_cap, w->nshapes + 1, sizeof *w->shapes)) return NULL;
  bml__shape *s = &w->shapes[w->nshapes++];
  memset(s, 0, sizeof *s);
  s->rows = rows, s->n = n;
  s->state = BML_SHAPE_WARMUP;
  bml__balance_init(&s->balance, w->share);
  return s;
}

/* The balance of this batch's kind (the least recently used makes room). */
bml__balance *bml__worker_find_kind(bml_worker *w, const bml_product *p, size_t count) {
  size_t rows = 0;
  double weights = 0;
  for (size_t i = 0; i < count; i++) rows += p[i].rows, weights += (double)p[i].rows * (double)p[i].n;
  const uint64_t now = w->time.submissions + 1;
  batch_kind *k = NULL;
  for (size_t i = 0; i < w->nkinds; i++) {
    batch_kind *x = &w->kinds[i];
    if (x->count == count && x->rows0 == p[0].rows && x->n0 == p[0].n && x->rows == rows && x->weights == weights)
      return x->used = now, &x->balance;
    if (!k || x->used < k->used) k = x;
  }
  if (w->nkinds < KINDS_MAX) k = &w->kinds[w->nkinds++];
  *k = (batch_kind){.count = count, .rows0 = p[0].rows, .n0 = p[0].n, .rows = rows, .weights = weights, .used = now};
  bml__balance_init(&k->balance, w->share);
  return &k->balance;
}

/* A shape decided for the CPU frees the card buffers of its matrices. */
void bml__worker_shape_decided(bml_worker *w, const bml__shape *s) {
  bml__debug(BML_CAT_WORKER, "shape %zux%zu: %s (median split %.3f ms, cpu %.3f ms)", s->rows, s->n,
             bml__shape_state_name(s->state), bml__median(s->split, s->nsplit) * 1e3,
             bml__median(s->cpu, s->ncpu) * 1e3);
  if (s->state != BML_SHAPE_CPU) return;
  for (size_t i = 0; i < w->nentries; i++) {
    entry *e = w->entries[i];
    if (e->nmembers == 1 && e->members[0].rows == s->rows && e->n == s->n) bml__worker_drop_matrix(w, e);
  }
}

/* ---- planning a submission ---------------------------------------------------------- */

/* Makes e hold want[i] card rows of each member, where the limit leaves
 * room for them and `stage` more bytes of staging.  Returns 0, or
 * BML_ENOMEM when the limit or an allocation says no (the entry then runs
 * on the CPU), or an OpenCL error. */
int bml__worker_ensure_uploaded(bml_worker *w, entry *e, const size_t *want, uint64_t stage) {
  if (e->cpu_only) return BML_ENOMEM;
  /* MemAvailable is read only where something would grow: a product whose
   * matrix and staging are held (a token's usual case) reads no file */
  const bool held = e->m.nchunks && memcmp(e->held, want, e->nmembers * sizeof *want) == 0;
  if (held && stage == 0) return 0;
  uint64_t avail = w->limiter.integrated ? bml__mem_available() : 0;
  if (held) return bml__limiter_fits(&w->limiter, stage, avail) ? 0 : BML_ENOMEM;
  size_t held_sum = 0; /* > 0: a move, whose direction the next one's cooldown needs */
  for (size_t i = 0; i < e->nmembers; i++) held_sum += e->held[i];
  const double t0 = bml__now(); /* a move's cost: the buffers freed, made again and filled */
  drop_held(w, e);
  bml__rows_part parts[16];
  size_t rows = 0, np = 0;
  for (size_t i = 0; i < e->nmembers && np < BML_ARRAY_SIZE(parts); i++)
    if (want[i]) parts[np++] = (bml__rows_part){e->members[i].ptr, want[i]}, rows += want[i];
  /* a slab that doubles the card's matrix memory where the limit allows,
   * else one of just what this matrix needs */
  bool exact = !bml__limiter_fits(&w->limiter, bml__card_matrix_growth(w->card, rows, e->n, false) + stage, avail);
  if (exact && !bml__limiter_fits(&w->limiter, bml__card_matrix_growth(w->card, rows, e->n, true) + stage, avail))
    return BML_ENOMEM;
  int rc = w->hooks.fail_uploads > 0    ? (w->hooks.fail_uploads--, CL_MEM_OBJECT_ALLOCATION_FAILURE)
           : w->hooks.break_uploads > 0 ? (w->hooks.break_uploads--, CL_INVALID_OPERATION)
                                        : bml__card_matrix_upload(w->card, parts, np, e->n, exact, &e->m);
  if (rc == CL_MEM_OBJECT_ALLOCATION_FAILURE || rc == CL_OUT_OF_RESOURCES || rc == BML_ENOMEM) {
    bml__debug(BML_CAT_WORKER, "\"%s\": allocation failed (%s): it runs on the CPU", e->members[0].name,
               bml_err_name(rc));
    e->cpu_only = true;
    return BML_ENOMEM;
  }
  if (rc != 0) return rc;
  e->hist.upload_s = bml__now() - t0;
  memcpy(e->held, want, e->nmembers * sizeof *want);
  bml__worker_sync_allocated(w);
  w->cur.uploaded = true;
  if (held_sum) {
    size_t sum = 0;
    for (size_t i = 0; i < e->nmembers; i++) sum += want[i];
    e->hist.moves++, e->hist.last_dir = sum > held_sum ? 1 : -1;
    bml__debug(BML_CAT_WORKER, "\"%s\" moved (%u moves): the card's rows %zu -> %zu", e->members[0].name, e->hist.moves,
               held_sum, sum);
  }
  e->hist.since_move = 0;
  return 0;
}

