/* products.c -- the pool's products: one Q1_0 mat-vec's rows, or many products' rows, in chunks dealt to the threads. */
#include "cpu/pool.h"
#include "cpu/pool_int.h"
#include "base/util.h"
#include "cpu/q1_0.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- chunks ------------------------------------------------------------------ */

/* Rows per chunk for rows of n weights, when a chunk should hold `weights`
 * weights: a whole number of CHUNK_ALIGN rows, at least one. */
static size_t chunk_rows(uint64_t weights, size_t n) {
  uint64_t rows = (weights + n - 1) / n;
  rows = (rows + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
  return rows > SIZE_MAX / 2 ? SIZE_MAX / 2 / CHUNK_ALIGN * CHUNK_ALIGN : (size_t)rows;
}

/* The weights a chunk should hold when `total` weights go to nthreads. */
static uint64_t chunk_weights(uint64_t total, int nthreads) {
  uint64_t share = total / ((uint64_t)nthreads * CHUNKS_PER_THREAD);
  return share > CHUNK_WEIGHTS ? share : CHUNK_WEIGHTS;
}

/* ---- dealing a job's chunks ------------------------------------------------ */

void bml__pool_deal(struct bml_pool *p, size_t chunks) {
  const size_t n = (size_t)p->nthreads, base = chunks / n, rem = chunks % n;
  size_t at = 0;
  for (size_t t = 0; t < n; t++) {
    atomic_store_explicit(&p->deal[t].next, at, memory_order_relaxed);
    at += base + (t < rem);
    p->deal[t].end = at;
  }
}

bool bml__pool_take(struct bml_pool *p, int self, int *tried, size_t *c) {
  const int n = p->nthreads;
  for (; *tried < n; ++*tried) {
    struct bml__deal_range *r = &p->deal[(self + *tried) % n];
    if (atomic_load_explicit(&r->next, memory_order_relaxed) >= r->end) continue;
    const size_t k = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
    if (k < r->end) {
      *c = k;
      return true;
    }
  }
  return false;
}

/* ---- the Q1_0 mat-vec job ------------------------------------------------ */

typedef struct {
  struct bml_pool *pool;
  const bml__q1_0_kernel *k;
  const bml_block_q1_0 *w;
  size_t rows, n, chunk; /* rows per chunk */
  const bml_block_q8_0 *a;
  const void *scratch;
  float *out;
} mat_vec_job;

/* Every thread takes chunks until none is left. */
static void mat_vec_chunks(void *ctx, int self, int nthreads) {
  (void)nthreads;
  mat_vec_job *j = ctx;
  const size_t nb = j->n / BML_Q1_0_BLOCK;
  int tried = 0;
  for (size_t c; bml__pool_take(j->pool, self, &tried, &c);) {
    const size_t r0 = c * j->chunk, r1 = j->rows - r0 < j->chunk ? j->rows : r0 + j->chunk;
    j->k->rows(j->w + r0 * nb, r1 - r0, j->n, j->a, j->scratch, j->out + r0);
  }
}

static int ensure_scratch(struct bml_pool *p, size_t need) {
  if (need <= p->scratch_size && p->scratch) return 0;
  void *s = bml__aligned_alloc(need);
  if (!s) return BML_ENOMEM;
  /* the new one in place before the old one goes: a fork() in between
   * leaves the child a pointer that is still allocated */
  void *old = p->scratch;
  p->scratch = s;
  p->scratch_size = need;
  bml__aligned_free(old);
  return 0;
}

int bml_pool_q1_0_mat_vec(bml_pool *p, const bml_block_q1_0 *w, size_t rows, size_t n,
                          const bml_block_q8_0 *a, float *out) {
  if (!p) return BML_EINVAL;
  int rc = bml__q1_0_check(w, rows, n, a, out);
  if (rc != 0 || rows == 0) return rc;
  if (atomic_flag_test_and_set_explicit(&p->driving, memory_order_acquire)) return BML_EBUSY;
  const size_t chunk = chunk_rows(chunk_weights((uint64_t)rows * n, p->nthreads), n);
  mat_vec_job j = {p, bml__q1_0_kernel_active(), w, rows, n, chunk, a, NULL, out};
  rc = ensure_scratch(p, j.k->prep_size(n));
  if (rc == 0) {
    j.k->prep(a, n, p->scratch);
    j.scratch = p->scratch;
    bml__pool_deal(p, (rows + chunk - 1) / chunk);
    bml__pool_job(p, mat_vec_chunks, &j);
  }
  atomic_flag_clear_explicit(&p->driving, memory_order_release);
  return rc;
}

/* ---- many products' rows in one run ------------------------------------------ */

/* A run of the pool costs microseconds to start and to end (a wake of the
 * helpers, a wait for the last): a model's token of 253 products whose CPU
 * part is a few rows each spent milliseconds in them.  Here the threads
 * take chunks of (piece, rows), numbered in order, in one run, each
 * preparing each activation it meets into a scratch of its own. */
typedef struct {
  const bml__q1_0_kernel *k;
  const bml__cpu_piece *pc;
  size_t count;
  uint64_t weights; /* a chunk's weights (chunk_rows of each piece's n) */
  size_t chunks;    /* of every piece */
  unsigned char *scratch;
  size_t stride; /* one thread's scratch */
  void (*tick)(void *ctx);
  void *tick_ctx;
  struct bml_pool *pool;
} many_job;

#define TICK_WEIGHTS BML__POOL_TICK_WEIGHTS

/* The rows of a step between two ticks, for rows of n weights. */
static size_t tick_rows(size_t n) { return TICK_WEIGHTS / n > 0 ? TICK_WEIGHTS / n : 1; }

static size_t piece_chunks(const many_job *j, const bml__cpu_piece *pc) {
  const size_t cr = chunk_rows(j->weights, pc->n);
  return (pc->rows + cr - 1) / cr;
}

/* One thread's walk through the chunks it takes (in increasing order, but
 * for one step back to the first range). */
typedef struct {
  size_t piece, first; /* the piece reached, and its first chunk's number */
  const bml_block_q8_0 *prepped;
  size_t prepped_n;
  uint64_t since; /* the calling thread: weights computed since its last tick */
} many_walk;

/* Rows [a, b) of piece i, prepared and ticked as the walk needs. */
static void many_rows(const many_job *j, many_walk *m, void *scratch, bool ticks, size_t a, size_t b) {
  const bml__cpu_piece *pc = &j->pc[m->piece];
  if (pc->a != m->prepped || pc->n != m->prepped_n) {
    j->k->prep(pc->a, pc->n, scratch);
    m->prepped = pc->a, m->prepped_n = pc->n;
  }
  /* the calling thread ticks before a step that would take it past
   * TICK_WEIGHTS weights since its last tick */
  const size_t step = ticks ? tick_rows(pc->n) : b - a;
  for (size_t r = a; r < b; r += step) {
    const size_t e = b - r < step ? b : r + step;
    if (ticks && m->since + (uint64_t)(e - r) * pc->n > TICK_WEIGHTS) j->tick(j->tick_ctx), m->since = 0;
    if (ticks) m->since += (uint64_t)(e - r) * pc->n;
    j->k->rows(pc->w + r * (pc->n / BML_Q1_0_BLOCK), e - r, pc->n, pc->a, scratch, pc->out + r);
  }
}

static void many_chunks(void *ctx, int self, int nthreads) {
  (void)nthreads;
  many_job *j = ctx;
  void *scratch = j->scratch + (size_t)self * j->stride;
  const bool ticks = self == 0 && j->tick;
  many_walk m = {0, 0, NULL, 0, 0};
  if (ticks) j->tick(j->tick_ctx); /* once first, even with nothing left to take */
  int tried = 0;
  for (size_t c; bml__pool_take(j->pool, self, &tried, &c);) {
    if (c < m.first) m.piece = 0, m.first = 0; /* past the last range, on to the first */
    for (size_t k; c >= m.first + (k = piece_chunks(j, &j->pc[m.piece]));) m.first += k, m.piece++;
    const bml__cpu_piece *pc = &j->pc[m.piece];
    const size_t cr = chunk_rows(j->weights, pc->n), r0 = (c - m.first) * cr;
    many_rows(j, &m, scratch, ticks, r0, pc->rows - r0 < cr ? pc->rows : r0 + cr);
  }
}

/* The pieces on the calling thread alone, a tick before each step. */
static int many_alone(const bml__cpu_piece *pc, size_t count, void (*tick)(void *ctx), void *tick_ctx) {
  for (size_t i = 0; i < count; i++) {
    const size_t step = tick ? tick_rows(pc[i].n) : pc[i].rows, nb = pc[i].n / BML_Q1_0_BLOCK;
    for (size_t a = 0; a < pc[i].rows; a += step) {
      const size_t rows = pc[i].rows - a < step ? pc[i].rows - a : step;
      if (tick) tick(tick_ctx);
      int rc = bml_q1_0_mat_vec(pc[i].w + a * nb, rows, pc[i].n, pc[i].a, pc[i].out + a);
      if (rc != 0) return rc;
    }
  }
  return 0;
}

int bml__pool_mat_vec_many(bml_pool *p, const bml__cpu_piece *pc, size_t count, void (*tick)(void *ctx),
                           void *tick_ctx, bool *alone) {
  if (alone) *alone = false;
  if (!p || (!pc && count)) return BML_EINVAL;
  many_job j = {.k = bml__q1_0_kernel_active(), .pc = pc, .count = count, .tick = tick, .tick_ctx = tick_ctx,
                .pool = p};
  size_t nmax = 0, nonempty = 0, last = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < count; i++) {
    int rc = bml__q1_0_check(pc[i].w, pc[i].rows, pc[i].n, pc[i].a, pc[i].out);
    if (rc != 0) return rc;
    total += (uint64_t)pc[i].rows * pc[i].n;
    if (pc[i].rows) nonempty++, last = i;
    if (pc[i].rows && pc[i].n > nmax) nmax = pc[i].n;
  }
  if (nonempty == 0) return 0;
  j.weights = chunk_weights(total, p->nthreads);
  for (size_t i = 0; i < count; i++) j.chunks += piece_chunks(&j, &pc[i]);
  int rc = BML_EBUSY;
  if (nonempty == 1 && !tick) /* one activation, prepared once for every thread */
    rc = bml_pool_q1_0_mat_vec(p, pc[last].w, pc[last].rows, pc[last].n, pc[last].a, pc[last].out);
  else if (!atomic_flag_test_and_set_explicit(&p->driving, memory_order_acquire)) {
    j.stride = (j.k->prep_size(nmax) + 63) / 64 * 64;
    rc = j.stride > SIZE_MAX / (size_t)p->nthreads ? BML_ENOMEM /* no such room: computed alone below */
                                                    : ensure_scratch(p, j.stride * (size_t)p->nthreads);
    if (rc == 0) {
      j.scratch = p->scratch;
      bml__pool_deal(p, j.chunks);
      bml__pool_job(p, many_chunks, &j);
    }
    atomic_flag_clear_explicit(&p->driving, memory_order_release);
  }
  if (rc != BML_EBUSY && rc != BML_ENOMEM) return rc;
  /* another thread drives the pool, or no room for the threads' scratch:
   * the calling thread computes them alone */
  if (alone) *alone = true;
  return many_alone(pc, count, tick, tick_ctx);
}
