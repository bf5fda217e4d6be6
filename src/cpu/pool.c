/* pool.c -- the CPU thread pool: the caller and persistent helper threads take a product's rows in chunks, each its own first. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include "cpu/pool.h"
#include "cpu/pool_int.h"
#include "base/bml.h"
#include "base/hooks.h"
#include "base/env.h"
#include "base/fork.h"
#include "base/log.h"
#include "base/util.h"
#include "cpu/q1_0.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* How a thread waits (for the next job, or the caller for the helpers
 * still inside one): pauses for SPIN_SECONDS (products come back to back),
 * then sched_yield()s until its wait has passed (a helper's between jobs:
 * bml_pool_set_wait, 1 ms unless set), so that a thread
 * sharing its CPU with the one it waits for lets that one run (on a CPU
 * of its own a yield returns at once), then sleeps in the kernel.  A blind
 * spin is what made the pool slower than one thread after an idle gap: a
 * helper put on the caller's CPU could not start while the caller spun for
 * it (512 pauses are 35 us on an AMD EPYC VM).  Tried: a helper off the
 * caller's CPU (sched_getcpu) pausing rather than yielding, so as to keep
 * a CPU that another process shares; no gain measured on the busy 2-vCPU
 * VM (three runs each, 2-thread medians 0.63-1.47x one thread's against
 * 0.56-1.45x), and a helper preempted inside a chunk makes the caller
 * wait.  Tried: a lazy wake, the caller waking sleeping helpers only once
 * its progress showed the job outlasting their measured wake-up; on that
 * VM a woken helper arrives when the caller is done (below), so it changed
 * nothing measurable (2 threads after 10-200 ms gaps 0.91-1.24x one
 * thread's median, against 0.90-1.22x without it).  Tried: helpers napping
 * 20-100 us between polls of seq instead of sleeping on it: there a nap
 * ends up to 4 ms late.  Tried: a helper woken on the caller's CPU moving
 * off it (sched_setaffinity), the caller yielding once for it: 0.79x one
 * thread after 40 ms gaps for 4096x4096, but 1.1-1.2x after 10 and 200 ms,
 * and 1.5-1.75x for 2048x2048.
 *
 * Why a helper that slept cannot help on such a VM: the guest's scheduler
 * puts a woken thread on the waker's CPU when the other vCPU is halted
 * (waking that one takes the host about 140 us: a futex wake of a thread
 * pinned there, measured), so the helper waits for the caller's CPU.  A
 * helper kept awake through the gap (bml_pool_set_wait) is already on its
 * own CPU: there 2 threads take 0.53-0.57x one thread's median for
 * 4096x4096 after 10-200 ms gaps (doc/PERFORMANCE.md). */
#define SPIN_SECONDS 3e-6
#define WAIT_MS 1 /* helpers, between jobs: bml_pool_set_wait's default, outside a cadence */
/* The default wait follows the driving thread's cadence: where each of the
 * last CADENCE_GAPS gaps between its jobs (one's end to the next's start;
 * at least CADENCE_FROM of them noted since the pool opened or was last
 * quiet) was at most CADENCE_MOST_S, the helpers stay awake CADENCE_SLACK times
 * the longest of them, so that a decode's products after its gaps
 * (attention, sampling, the card's turn) find them on their CPUs, not
 * asleep on CPUs in idle states (on the host of an NVIDIA H200, 16
 * threads' p90 over one thread's median after 40 and 200 ms gaps: 0.30
 * and 0.25 asleep, 0.11 and 0.10 awake; doc/PERFORMANCE.md).  Awake, a
 * helper yields to any thread that wants its CPU.  Once the products
 * stop, the helpers sleep within CADENCE_SLACK * CADENCE_MOST_S: an idle
 * engine costs no CPU.  A wait that is set (bml_pool_set_wait,
 * BANKML_POOL_WAIT_MS) is kept instead. */
#define CADENCE_FROM 2
#define CADENCE_MOST_S 0.25
#define CADENCE_SLACK 1.5
#define CALLER_YIELD_SECONDS 100e-6 /* the caller, for helpers inside their last chunk */

/* The job's state word: OPEN while threads may join; below it, the helper
 * threads inside the job. */
#define OPEN 0x80000000u


/* ---- sleeping on a word ---------------------------------------------------- */

/* Returns when *w may differ from seen (at once if it does already;
 * spuriously at times).  The waker changes *w first, then calls word_wake. */
static void word_wait(struct bml_pool *p, atomic_uint *w, unsigned seen) {
#if defined(__linux__)
  (void)p;
  syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
#else
  pthread_mutex_lock(&p->mu);
  while (atomic_load(w) == seen) pthread_cond_wait(&p->cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
#endif
}

/* Wakes every thread in word_wait on w. */
static void word_wake(struct bml_pool *p, atomic_uint *w) {
#if defined(__linux__)
  (void)p;
  syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
  (void)w;
  pthread_mutex_lock(&p->mu);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
#endif
}

static void sleep_words_init(struct bml_pool *p) {
#if !defined(__linux__)
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
#else
  (void)p;
#endif
}

static void sleep_words_destroy(struct bml_pool *p) {
#if !defined(__linux__)
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
#else
  (void)p;
#endif
}

/* ---- the helpers ------------------------------------------------------------- */

/* In a child of fork() (fork.c): the pool has none of its helpers there, so
 * the copy becomes a pool of one thread, idle; its lock and condition
 * variable are made anew (the parent's threads may have held or waited on
 * them at the fork). */
static void pool_in_child(void *ctx) {
  struct bml_pool *p = ctx;
  p->nthreads = 1;
  atomic_store(&p->state, 0);
  atomic_store(&p->asleep, 0);
  atomic_store(&p->caller_asleep, 0);
  atomic_store(&p->stop, false);
  atomic_flag_clear(&p->driving);
  sleep_words_init(p);
}

typedef struct {
  struct bml_pool *pool;
  int self;
} helper_arg;

/* One wait in progress: pauses for SPIN_SECONDS, then yields until
 * yield_s from its start. */
typedef struct {
  unsigned rounds;
  bool yielding;
  double from, yield_s;
} backoff;

/* One step of a wait; true once it is time to sleep in the kernel. */
static bool backoff_step(backoff *b) {
  if (!b->yielding) {
    if (b->rounds++ % 8 != 0) { /* the clock every 8 pauses */
      cpu_relax();
      return false;
    }
    const double now = bml__now();
    if (b->from == 0) b->from = now;
    if (now - b->from < SPIN_SECONDS) {
      cpu_relax();
      return false;
    }
    b->yielding = true;
  }
  if (bml__now() - b->from >= b->yield_s) return true;
  sched_yield();
  return false;
}

/* Waits for a job after seen.  Returns the new sequence number; *slept
 * says whether the helper slept in the kernel. */
static unsigned wait_for_job(struct bml_pool *p, unsigned seen, bool *slept) {
  backoff b = {0, false, 0, 0};
  *slept = false;
  for (;;) {
    unsigned s = atomic_load_explicit(&p->seq, memory_order_acquire);
    if (s != seen) return s;
    b.yield_s = atomic_load_explicit(&p->wait_s, memory_order_relaxed); /* a new wait counts at once */
    if (!backoff_step(&b)) continue;
    atomic_fetch_add(&p->asleep, 1); /* then seq: the caller bumps seq, then reads asleep */
    if (atomic_load(&p->seq) == seen) word_wait(p, &p->seq, seen), *slept = true;
    atomic_fetch_sub(&p->asleep, 1);
  }
}

/* A helper that slept notes how long after job `job`'s start it arrived:
 * the pool's wake-up cost.  The start is read from its slot only while no
 * later job can have reused the slot. */
static void note_wake(struct bml_pool *p, unsigned job, double now) {
  double t0 = atomic_load(&p->started[job % STARTS]);
  if (atomic_load(&p->seq) - job >= STARTS - 1 || t0 <= 0 || now < t0) return;
  unsigned k = atomic_fetch_add_explicit(&p->wakes, 1, memory_order_relaxed);
  atomic_store_explicit(&p->wake[k % WAKE_SAMPLES], now - t0, memory_order_relaxed);
}

/* bml__pool_hold_helpers: a held helper waits here before it joins. */
static void wait_while_held(struct bml_pool *p) {
  for (unsigned h; (h = atomic_load(&p->held)) != 0 && !atomic_load(&p->stop);) word_wait(p, &p->held, h);
}

/* A helper joins the current job while it is open: it counts itself in. */
static bool join(struct bml_pool *p) {
  unsigned st = atomic_load_explicit(&p->state, memory_order_relaxed);
  while (st & OPEN)
    if (atomic_compare_exchange_weak_explicit(&p->state, &st, st + 1, memory_order_acquire, memory_order_relaxed))
      return true;
  return false;
}

/* ...and counts itself out; the last one out of a closed job wakes the
 * caller if it sleeps. */
static void leave(struct bml_pool *p) {
  if (atomic_fetch_sub(&p->state, 1) == 1 && atomic_load(&p->caller_asleep)) word_wake(p, &p->state);
}

static void *helper_main(void *arg) {
  helper_arg ha = *(helper_arg *)arg;
  free(arg);
  struct bml_pool *p = ha.pool;
  unsigned seen = 0;
  for (;;) {
    bool slept;
    unsigned s = wait_for_job(p, seen, &slept);
    if (atomic_load(&p->stop)) break;
    if (slept) note_wake(p, seen + 1, bml__now()); /* the job that woke it */
    seen = s;
    wait_while_held(p);
    if (join(p)) {
      p->fn(p->ctx, ha.self, p->nthreads);
      leave(p);
    }
  }
  return NULL;
}

/* ---- a job --------------------------------------------------------------------- */

/* The caller closes the job (no helper joins it any more) and waits for the
 * helpers inside it, each finishing the chunk it took. */
static void close_job(struct bml_pool *p) {
  if ((atomic_fetch_and(&p->state, ~OPEN) & ~OPEN) == 0) return;
  backoff b = {0, false, 0, CALLER_YIELD_SECONDS};
  for (;;) {
    unsigned st = atomic_load_explicit(&p->state, memory_order_acquire);
    if (st == 0) return;
    if (!backoff_step(&b)) continue;
    atomic_store(&p->caller_asleep, 1); /* then state: a helper leaves, then reads caller_asleep */
    if ((st = atomic_load(&p->state)) != 0) word_wait(p, &p->state, st);
    atomic_store(&p->caller_asleep, 0);
  }
}

/* The driving thread notes the gap before a job (now) and, unless the
 * wait is set, makes the helpers' wait after it follow the cadence. */
static void follow_cadence(struct bml_pool *p, double now) {
  if (p->last_end > 0) p->gaps[p->ngaps++ % CADENCE_GAPS] = now - p->last_end;
  if (atomic_load_explicit(&p->wait_set, memory_order_relaxed)) return;
  if (atomic_load_explicit(&p->quiet, memory_order_relaxed) > 0) p->ngaps = 0; /* anew when it ends */
  const unsigned have = p->ngaps < CADENCE_GAPS ? p->ngaps : CADENCE_GAPS;
  double most = 0;
  for (unsigned i = 0; i < have && have >= CADENCE_FROM; i++) {
    if (p->gaps[i] > CADENCE_MOST_S) {
      most = 0; /* one too long: no cadence */
      break;
    }
    if (p->gaps[i] > most) most = p->gaps[i];
  }
  const double wait = CADENCE_SLACK * most > WAIT_MS * 1e-3 ? CADENCE_SLACK * most : WAIT_MS * 1e-3;
  if (atomic_load_explicit(&p->wait_s, memory_order_relaxed) != wait)
    atomic_store_explicit(&p->wait_s, wait, memory_order_relaxed);
}

/* Runs fn(ctx, self, nthreads) on the calling thread (self 0) and on every
 * helper that joins before the caller's own call returns (self 1 ..
 * nthreads-1, each on one thread), and returns when all are done.  The job
 * must get all its work done however few threads join: fn takes its work
 * from shared counters. */
void bml__pool_job(struct bml_pool *p, job_fn fn, void *ctx) {
  if (p->nthreads == 1) {
    fn(ctx, 0, 1);
    return;
  }
  const double start = bml__now();
  follow_cadence(p, start);
  atomic_fetch_add_explicit(&p->runs, 1, memory_order_relaxed);
  p->fn = fn; /* no helper is inside a job, and none can join one: state is 0 */
  p->ctx = ctx;
  const unsigned s = atomic_load_explicit(&p->seq, memory_order_relaxed) + 1;
  atomic_store(&p->started[s % STARTS], start); /* before seq: note_wake reads them in turn */
  atomic_store_explicit(&p->state, OPEN, memory_order_release);
  atomic_store(&p->seq, s);
  if (atomic_load(&p->asleep) > 0) word_wake(p, &p->seq);
  fn(ctx, 0, p->nthreads);
  close_job(p);
  p->last_end = bml__now();
}

/* bml__pool_run's work: part 0 on the caller, the others to whoever takes
 * them first (the caller too, after its own). */
typedef struct {
  void (*fn)(void *ctx, int tid, int nthreads);
  void *ctx;
  int parts;
  atomic_int next;
} parts_job;

static void run_parts(void *ctx, int self, int nthreads) {
  (void)nthreads;
  parts_job *j = ctx;
  if (self == 0) j->fn(j->ctx, 0, j->parts);
  for (int t; (t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->parts;)
    j->fn(j->ctx, t, j->parts);
}

/* The worker's helpers drive the pool like a product does: while another
 * thread drives it (a product of the application's on the same pool), the
 * helper runs on the calling thread alone, which its work allows. */
void bml__pool_run(bml_pool *p, void (*fn)(void *ctx, int tid, int nthreads), void *ctx) {
  if (atomic_flag_test_and_set_explicit(&p->driving, memory_order_acquire)) {
    fn(ctx, 0, 1);
    return;
  }
  parts_job j = {fn, ctx, p->nthreads, 1};
  bml__pool_job(p, run_parts, &j);
  atomic_flag_clear_explicit(&p->driving, memory_order_release);
}

/* ---- opening and closing ------------------------------------------------------ */

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
     * more threads than those only wait for each other */
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

static void stop_helpers(struct bml_pool *p, int started) {
  atomic_store(&p->stop, true);
  atomic_fetch_add(&p->seq, 1);
  word_wake(p, &p->seq);
  word_wake(p, &p->held);
  for (int i = 0; i < started; i++) pthread_join(p->threads[i], NULL);
}

/* Helpers start with every signal blocked: signals belong to the
 * application's own threads. */
static int start_helpers(struct bml_pool *p, int *started) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = 0;
  for (*started = 0; *started < p->nthreads - 1; (*started)++) {
    helper_arg *ha = malloc(sizeof *ha);
    if (!ha) { rc = BML_ENOMEM; break; }
    ha->pool = p;
    ha->self = *started + 1;
    int err = pthread_create(&p->threads[*started], NULL, helper_main, ha);
    if (err != 0) {
      free(ha);
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
  sleep_words_destroy(p);
  bml__aligned_free(p->scratch);
  bml__aligned_free(p->deal);
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
  unsigned wait_ms = UINT_MAX; /* unchanged: BANKML_POOL_WAIT_MS unset */
  rc = bml__env_pool_wait_ms(&wait_ms);
  if (rc != 0) return rc;
  const bool wait_set = wait_ms != UINT_MAX;
  if (!wait_set) wait_ms = WAIT_MS;
  struct bml_pool *p = calloc(1, sizeof *p);
  if (!p) return BML_ENOMEM;
  p->nthreads = n;
  atomic_store(&p->wait_s, wait_ms * 1e-3);
  atomic_store(&p->wait_set, wait_set);
  atomic_flag_clear(&p->driving);
  p->threads = calloc((size_t)n, sizeof *p->threads);
  p->deal = bml__aligned_alloc((size_t)n * sizeof *p->deal);
  if (!p->threads || !p->deal) {
    bml__aligned_free(p->deal);
    free(p->threads);
    free(p);
    return BML_ENOMEM;
  }
  for (int t = 0; t < n; t++) atomic_init(&p->deal[t].next, 0), p->deal[t].end = 0;
  sleep_words_init(p);
  int started = 0;
  rc = start_helpers(p, &started);
  if (rc != 0) {
    stop_helpers(p, started);
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
  stop_helpers(p, p->nthreads - 1);
  free_pool(p);
}

int bml_pool_threads(const bml_pool *p) { return p ? p->nthreads : 0; }

int bml_pool_set_wait(bml_pool *p, unsigned ms) {
  if (!p || ms > BML_POOL_MAX_WAIT_MS) return BML_EINVAL;
  atomic_store(&p->wait_set, true);
  atomic_store(&p->wait_s, ms * 1e-3);
  return 0;
}

unsigned long bml__pool_runs(bml_pool *p) { return atomic_load_explicit(&p->runs, memory_order_relaxed); }

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

double bml__pool_wake_seconds(const bml_pool *p) {
  if (!p) return 0;
  struct bml_pool *q = (struct bml_pool *)p; /* atomic loads of a const object */
  unsigned n = atomic_load_explicit(&q->wakes, memory_order_relaxed);
  if (n > WAKE_SAMPLES) n = WAKE_SAMPLES;
  double s[WAKE_SAMPLES];
  for (unsigned i = 0; i < n; i++) s[i] = atomic_load_explicit(&q->wake[i], memory_order_relaxed);
  qsort(s, n, sizeof *s, compare_double);
  return n == 0 ? 0 : n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

double bml__pool_wait_seconds(const bml_pool *p) {
  return p ? atomic_load_explicit(&((struct bml_pool *)p)->wait_s, memory_order_relaxed) : 0;
}

void bml__pool_quiet(bml_pool *p, bool quiet) {
  if (p) atomic_fetch_add(&p->quiet, quiet ? 1 : -1);
}

int bml__pool_asleep(const bml_pool *p) {
  return p ? atomic_load_explicit(&((struct bml_pool *)p)->asleep, memory_order_relaxed) : 0;
}

void bml__pool_hold_helpers(bml_pool *p, bool hold) {
  atomic_store(&p->held, hold ? 1u : 0u);
  if (!hold) word_wake(p, &p->held);
}
