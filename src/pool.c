/* pool.c -- the CPU thread pool: persistent workers that each compute one contiguous chunk of rows. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "bml.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* A worker spins this long for the next job (or the caller for the end of
 * one) before it sleeps: products arrive back to back during inference, and
 * a futex wake costs more than a short product. */
#define SPIN_SECONDS 200e-6

/* Rows per chunk boundary: 16 floats are one 64-byte line of output, so no
 * two threads write the same line. */
#define CHUNK_ALIGN 16

typedef void (*job_fn)(void *ctx, int tid, int nthreads);

struct bml_pool {
  int nthreads;
  pthread_t *threads; /* nthreads - 1 workers; the caller is thread 0 */
  pthread_mutex_t mu;
  pthread_cond_t work_cv;
  pthread_cond_t done_cv;
  atomic_uint gen;     /* bumped for each job */
  atomic_int pending;  /* workers still in the current job */
  atomic_bool stop;
  atomic_flag driving; /* one thread drives the pool at a time */
  job_fn fn;           /* the current job, written before gen is bumped */
  void *ctx;
  atomic_ulong runs;   /* jobs run on every thread (bml__pool_runs) */
  void *scratch;       /* activation scratch of the mat-vec jobs */
  size_t scratch_size;
  bml__fork_watch watch;
};

/* In a child of fork() (fork.c): the pool has none of its threads there,
 * so a job handed to them would never end, and another thread's product
 * (its driving flag, a job pending) never finishes.  The copy becomes a
 * pool of one thread, idle; its lock and condition variables are made
 * anew (the parent's threads may have held or waited on them at the fork). */
static void pool_in_child(void *ctx) {
  struct bml_pool *p = ctx;
  p->nthreads = 1;
  atomic_store(&p->pending, 0);
  atomic_store(&p->stop, false);
  atomic_flag_clear(&p->driving);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
}

typedef struct {
  struct bml_pool *pool;
  int tid;
} worker_arg;

static bool spin_until_changed(atomic_uint *v, unsigned seen) {
  double until = bml__now() + SPIN_SECONDS;
  for (unsigned i = 0;; i++) {
    if (atomic_load_explicit(v, memory_order_acquire) != seen) return true;
    if ((i & 63) == 63 && bml__now() > until) return false;
    cpu_relax();
  }
}

static unsigned wait_for_job(struct bml_pool *p, unsigned seen) {
  if (!spin_until_changed(&p->gen, seen)) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
      pthread_cond_wait(&p->work_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
  return atomic_load_explicit(&p->gen, memory_order_acquire);
}

static void finish_job(struct bml_pool *p) {
  if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
  }
}

static void *worker_main(void *arg) {
  worker_arg wa = *(worker_arg *)arg;
  free(arg);
  struct bml_pool *p = wa.pool;
  unsigned seen = 0;
  for (;;) {
    seen = wait_for_job(p, seen);
    if (atomic_load(&p->stop)) break;
    p->fn(p->ctx, wa.tid, p->nthreads);
    finish_job(p);
  }
  return NULL;
}

static void wait_for_workers(struct bml_pool *p) {
  double until = bml__now() + SPIN_SECONDS;
  for (unsigned i = 0; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; i++) {
    if ((i & 63) == 63 && bml__now() > until) {
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->pending) != 0) pthread_cond_wait(&p->done_cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
      return;
    }
    cpu_relax();
  }
}

/* Runs fn(ctx, tid, nthreads) on every thread of the pool, the caller as
 * tid 0, and returns when all are done. */
static void pool_run(struct bml_pool *p, job_fn fn, void *ctx) {
  if (p->nthreads == 1) {
    fn(ctx, 0, 1);
    return;
  }
  atomic_fetch_add_explicit(&p->runs, 1, memory_order_relaxed);
  p->fn = fn;
  p->ctx = ctx;
  atomic_store_explicit(&p->pending, p->nthreads - 1, memory_order_relaxed);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  fn(ctx, 0, p->nthreads);
  wait_for_workers(p);
}

/* The worker's helpers drive the pool like a product does: while another
 * thread drives it (a product of the application's on the same pool), the
 * helper runs on the calling thread alone, which its work allows. */
void bml__pool_run(bml_pool *p, void (*fn)(void *ctx, int tid, int nthreads), void *ctx) {
  if (atomic_flag_test_and_set_explicit(&p->driving, memory_order_acquire)) {
    fn(ctx, 0, 1);
    return;
  }
  pool_run(p, fn, ctx);
  atomic_flag_clear_explicit(&p->driving, memory_order_release);
}

static int resolve_threads(int threads, int *out) {
  if (threads > 0) {
    *out = threads;
    return 0;
  }
  int n = 0;
  int rc = bml__env_threads(&n);
  if (rc != 0) return rc;
  if (n <= 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
#if defined(__linux__)
    /* the CPUs this process may run on (taskset, a container's cpuset):
     * more threads than those spin against each other */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 &&
        (cpus <= 0 || CPU_COUNT(&set) < cpus))
      cpus = CPU_COUNT(&set);
#endif
    n = cpus > 0 ? (int)(cpus > BML_POOL_MAX_THREADS ? BML_POOL_MAX_THREADS : cpus) : 1;
  }
  *out = n;
  return 0;
}

static void stop_workers(struct bml_pool *p, int started) {
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  atomic_fetch_add(&p->gen, 1);
  pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < started; i++) pthread_join(p->threads[i], NULL);
}

/* Workers start with every signal blocked: signals belong to the
 * application's own threads. */
static int start_workers(struct bml_pool *p, int *started) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = 0;
  for (*started = 0; *started < p->nthreads - 1; (*started)++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) { rc = BML_ENOMEM; break; }
    wa->pool = p;
    wa->tid = *started + 1;
    int err = pthread_create(&p->threads[*started], NULL, worker_main, wa);
    if (err != 0) {
      free(wa);
      bml__error(BML_CAT_POOL, "pthread_create: %s (thread %d of %d)", strerror(err),
                 *started + 2, p->nthreads);
      rc = BML_ETHREAD;
      break;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

static void free_pool(struct bml_pool *p) {
  pthread_cond_destroy(&p->done_cv);
  pthread_cond_destroy(&p->work_cv);
  pthread_mutex_destroy(&p->mu);
  bml__aligned_free(p->scratch);
  free(p->threads);
  free(p);
}

int bml_pool_open(int threads, bml_pool **out) {
  if (!out) return BML_EINVAL;
  *out = NULL;
  bml__debug_load();
  int n;
  int rc = resolve_threads(threads, &n);
  if (rc != 0) return rc;
  if (n > BML_POOL_MAX_THREADS) {
    bml__error(BML_CAT_POOL, "a pool of %d threads asked for: at most %d", n, BML_POOL_MAX_THREADS);
    return BML_EINVAL;
  }
  struct bml_pool *p = calloc(1, sizeof *p);
  if (!p) return BML_ENOMEM;
  p->nthreads = n;
  atomic_flag_clear(&p->driving);
  p->threads = calloc((size_t)n, sizeof *p->threads);
  if (!p->threads) {
    free(p);
    return BML_ENOMEM;
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  int started = 0;
  rc = start_workers(p, &started);
  if (rc != 0) {
    stop_workers(p, started);
    free_pool(p);
    return rc;
  }
  bml__fork_watch_add(&p->watch, pool_in_child, p);
  bml__debug(BML_CAT_POOL, "pool of %d threads", n);
  *out = p;
  return 0;
}

void bml_pool_close(bml_pool *p) {
  if (!p) return;
  bml__fork_watch_remove(&p->watch);
  stop_workers(p, p->nthreads - 1);
  free_pool(p);
}

int bml_pool_threads(const bml_pool *p) { return p ? p->nthreads : 0; }

unsigned long bml__pool_runs(bml_pool *p) { return atomic_load_explicit(&p->runs, memory_order_relaxed); }

/* ---- the Q1_0 mat-vec job ------------------------------------------------ */

typedef struct {
  const bml__q1_0_kernel *k;
  const bml_block_q1_0 *w;
  size_t rows, n;
  const bml_block_q8_0 *a;
  const void *scratch;
  float *out;
} mat_vec_job;

/* Row `t` of `nthreads` chunk boundaries, on CHUNK_ALIGN rows. */
static size_t chunk_start(size_t rows, int t, int nthreads) {
  if (t >= nthreads) return rows;
  size_t units = (rows + CHUNK_ALIGN - 1) / CHUNK_ALIGN;
  size_t start = units * (size_t)t / (size_t)nthreads * CHUNK_ALIGN;
  return start < rows ? start : rows;
}

static void mat_vec_chunk(void *ctx, int tid, int nthreads) {
  const mat_vec_job *j = ctx;
  size_t r0 = chunk_start(j->rows, tid, nthreads);
  size_t r1 = chunk_start(j->rows, tid + 1, nthreads);
  if (r1 > r0)
    j->k->rows(j->w + r0 * (j->n / BML_Q1_0_BLOCK), r1 - r0, j->n, j->a, j->scratch, j->out + r0);
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
  mat_vec_job j = {bml__q1_0_kernel_active(), w, rows, n, a, NULL, out};
  rc = ensure_scratch(p, j.k->prep_size(n));
  if (rc == 0) {
    j.k->prep(a, n, p->scratch);
    j.scratch = p->scratch;
    pool_run(p, mat_vec_chunk, &j);
  }
  atomic_flag_clear_explicit(&p->driving, memory_order_release);
  return rc;
}

/* ---- many products' rows in one run ------------------------------------------ */

/* A run of the pool costs microseconds to start and to end (a wake of every
 * worker, a wait for the last): a model's token of 253 products whose CPU
 * part is a few rows each spent milliseconds in them.  Here the threads
 * share the pieces' weights evenly in one run, each a contiguous stretch of
 * the pieces in order (rows on CHUNK_ALIGN), preparing each activation it
 * meets into a scratch of its own. */
typedef struct {
  const bml__q1_0_kernel *k;
  const bml__cpu_piece *pc;
  size_t count;
  uint64_t total; /* the pieces' weights */
  unsigned char *scratch;
  size_t stride; /* one thread's scratch */
  void (*tick)(void *ctx);
  void *tick_ctx;
} many_job;

/* The calling thread looks at the caller's tick at least every this many
 * weights of its stretch (about 15 us of one thread's work). */
#define TICK_WEIGHTS (1u << 18)

/* The rows of a step between two ticks, for rows of n weights. */
static size_t tick_rows(size_t n) { return TICK_WEIGHTS / n > 0 ? TICK_WEIGHTS / n : 1; }

/* Where thread t's stretch starts: piece *i, row *r (t == nthreads: the end). */
static void many_start(const many_job *j, int t, int nthreads, size_t *i, size_t *r) {
  /* total * t / nthreads without overflow: the remainder's product is under 2^20 */
  const uint64_t q = j->total / (unsigned)nthreads, rem = j->total % (unsigned)nthreads;
  const uint64_t at = q * (unsigned)t + rem * (unsigned)t / (unsigned)nthreads;
  uint64_t before = 0;
  for (*i = 0; *i < j->count; (*i)++) {
    const uint64_t wts = (uint64_t)j->pc[*i].rows * j->pc[*i].n;
    if (at < before + wts) {
      *r = (size_t)((at - before) / j->pc[*i].n) / CHUNK_ALIGN * CHUNK_ALIGN;
      return;
    }
    before += wts;
  }
  *r = 0;
}

static void many_chunk(void *ctx, int tid, int nthreads) {
  const many_job *j = ctx;
  size_t i0, r0, i1, r1;
  many_start(j, tid, nthreads, &i0, &r0);
  many_start(j, tid + 1, nthreads, &i1, &r1);
  void *scratch = j->scratch + (size_t)tid * j->stride;
  const bml_block_q8_0 *prepped = NULL;
  size_t prepped_n = 0;
  const bool ticks = tid == 0 && j->tick;
  bool ticked = false;
  for (size_t i = i0; i <= i1 && i < j->count; i++) {
    const bml__cpu_piece *pc = &j->pc[i];
    const size_t from = i == i0 ? r0 : 0, to = i == i1 ? r1 : pc->rows;
    if (to <= from) continue;
    if (pc->a != prepped || pc->n != prepped_n) {
      j->k->prep(pc->a, pc->n, scratch);
      prepped = pc->a, prepped_n = pc->n;
    }
    /* the calling thread ticks between steps of its stretch */
    const size_t step = ticks ? tick_rows(pc->n) : to - from;
    for (size_t a = from; a < to; a += step) {
      const size_t b = to - a < step ? to : a + step;
      if (ticks) j->tick(j->tick_ctx), ticked = true;
      j->k->rows(pc->w + a * (pc->n / BML_Q1_0_BLOCK), b - a, pc->n, pc->a, scratch, pc->out + a);
    }
  }
  if (ticks && !ticked) j->tick(j->tick_ctx); /* a stretch of nothing still looks once */
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
  many_job j = {bml__q1_0_kernel_active(), pc, count, 0, NULL, 0, tick, tick_ctx};
  size_t nmax = 0, nonempty = 0, last = 0;
  for (size_t i = 0; i < count; i++) {
    int rc = bml__q1_0_check(pc[i].w, pc[i].rows, pc[i].n, pc[i].a, pc[i].out);
    if (rc != 0) return rc;
    j.total += (uint64_t)pc[i].rows * pc[i].n;
    if (pc[i].rows) nonempty++, last = i;
    if (pc[i].rows && pc[i].n > nmax) nmax = pc[i].n;
  }
  if (nonempty == 0) return 0;
  int rc = BML_EBUSY;
  if (nonempty == 1 && !tick) /* one activation, prepared once for every thread */
    rc = bml_pool_q1_0_mat_vec(p, pc[last].w, pc[last].rows, pc[last].n, pc[last].a, pc[last].out);
  else if (!atomic_flag_test_and_set_explicit(&p->driving, memory_order_acquire)) {
    j.stride = (j.k->prep_size(nmax) + 63) / 64 * 64;
    rc = j.stride > SIZE_MAX / (size_t)p->nthreads ? BML_ENOMEM /* no such room: computed alone below */
                                                    : ensure_scratch(p, j.stride * (size_t)p->nthreads);
    if (rc == 0) {
      j.scratch = p->scratch;
      pool_run(p, many_chunk, &j);
    }
    atomic_flag_clear_explicit(&p->driving, memory_order_release);
  }
  if (rc != BML_EBUSY && rc != BML_ENOMEM) return rc;
  /* another thread drives the pool, or no room for the threads' scratch:
   * the calling thread computes them alone */
  if (alone) *alone = true;
  return many_alone(pc, count, tick, tick_ctx);
}
