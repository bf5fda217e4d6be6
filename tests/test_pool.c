/* test_pool.c -- the thread pool gives the single-thread bits for every thread count. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "logbuf.h"
#include "base/bml.h"
#include "base/hooks.h"
#include "golden.h"
#include "poolgate.h"
#include "base/util.h"
#include "cpu/q1_0.h"
#include "cpu/pool.h"
#include "cpu/pool_int.h"
#include "cpu/gen.h"

static golden_q1_case *cases;
static int ncases;

static void load(void) {
  ncases = golden_load_q1(&cases);
  cr_assert(ncases > 0, "cannot read the Q1_0 golden file from %s", golden_dir());
}

static void unload(void) { golden_free_q1(cases, ncases); }

TestSuite(pool, .init = load, .fini = unload);

static void golden_on_pool(int threads) {
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(threads, &p), 0);
  cr_assert_eq(bml_pool_threads(p), threads);
  for (int i = 0; i < ncases; i++) {
    float *out = malloc(cases[i].rows * sizeof *out);
    cr_assert_not_null(out);
    cr_assert_eq(bml_pool_q1_0_mat_vec(p, cases[i].w, cases[i].rows, cases[i].n, cases[i].a, out), 0);
    long r = golden_first_difference(cases[i].ref, out, cases[i].rows);
    cr_expect(r < 0, "%d threads: case %d (%ux%u): row %ld differs", threads, i, cases[i].rows,
              cases[i].n, r);
    free(out);
  }
  bml_pool_close(p);
}

Test(pool, golden_on_1_thread) { golden_on_pool(1); }
Test(pool, golden_on_2_threads) { golden_on_pool(2); }
Test(pool, golden_on_3_threads) { golden_on_pool(3); }
Test(pool, golden_on_7_threads) { golden_on_pool(7); }

Test(pool, many_products_back_to_back_equal_single_thread) {
  const size_t rows = 1000, n = 1024;
  product x = make_product(rows, n, 99);
  const bml_block_q1_0 *w = x.w;
  const bml_block_q8_0 *a = x.a;
  const float *want = x.want;
  float *got = x.got;
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(3, &p), 0);
  for (int it = 0; it < 200; it++) {
    size_t r = (size_t)(it * 37) % rows + 1; /* every kind of chunk boundary */
    memset(got, 0xff, rows * sizeof *got);
    cr_assert_eq(bml_pool_q1_0_mat_vec(p, w, r, n, a, got), 0);
    cr_assert(golden_first_difference(want, got, r) < 0, "iteration %d (%zu rows) differs", it, r);
    cr_assert_eq(golden_bits(got[r < rows ? r : 0]), r < rows ? 0xffffffffu : golden_bits(want[0]),
                 "row %zu past the product was written", r);
  }
  bml_pool_close(p);
  free_product(&x);
}

/* Records the thread count each tid saw. */
static void count_job(void *ctx, int tid, int nthreads) { ((int *)ctx)[tid] = nthreads; }

/* The worker's helpers (repack, copy out) and the application's products
 * may share a pool across threads: one drives it at a time, the other's
 * product is refused with BML_EBUSY and its helper runs on its own thread. */
Test(pool, one_thread_drives_at_a_time_helpers_run_alone_meanwhile, .timeout = 60) {
  const size_t rows = 64, n = 256;
  bml_block_q1_0 w[64 * 2];
  bml_block_q8_0 a[8];
  float out[64];
  uint64_t seed = 7;
  bml__gen_q1_0(&seed, w, rows, n, true);
  cr_assert_eq(bml__gen_q8_0(&seed, a, n, true), 0);
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(3, &p), 0);
  pool_gate *g = pool_gate_hold(p);
  cr_assert_not_null(g);
  int seen[3] = {0, 0, 0};
  bml__pool_run(p, count_job, seen);
  cr_expect(seen[0] == 1 && seen[1] == 0 && seen[2] == 0,
            "a helper while another thread drives: tids saw %d, %d, %d threads (want 1 on the caller alone)",
            seen[0], seen[1], seen[2]);
  memset(out, 0xff, sizeof out);
  cr_expect_eq(bml_pool_q1_0_mat_vec(p, w, rows, n, a, out), BML_EBUSY);
  cr_expect_eq(golden_bits(out[0]), 0xffffffffu, "a refused product wrote its results");
  pool_gate_release(g);
  bml__pool_run(p, count_job, seen); /* free again: every thread */
  cr_expect(seen[0] == 3 && seen[1] == 3 && seen[2] == 3, "tids saw %d, %d, %d threads (want 3 each)", seen[0],
            seen[1], seen[2]);
  float want[64];
  cr_assert_eq(bml_q1_0_mat_vec(w, rows, n, a, want), 0);
  cr_expect_eq(bml_pool_q1_0_mat_vec(p, w, rows, n, a, out), 0);
  cr_expect(golden_first_difference(want, out, rows) < 0, "the product after the hold differs");
  bml_pool_close(p);
}

/* Products of several shapes and activations, some sharing one, as a
 * model's token gives them: the weights, activations and wanted results. */
#define MANY 23
typedef struct {
  bml_block_q1_0 *w[MANY];
  bml_block_q8_0 *a[3];
  float *want[MANY], *got[MANY];
  bml__cpu_piece pc[MANY];
} many_set;

static const size_t many_n[3] = {256, 1024, 384};

static void many_make(many_set *m) {
  uint64_t seed = 4242;
  for (int k = 0; k < 3; k++) {
    m->a[k] = malloc(many_n[k] / 32 * sizeof *m->a[k]);
    cr_assert_not_null(m->a[k]);
    cr_assert_eq(bml__gen_q8_0(&seed, m->a[k], many_n[k], k != 1), 0);
  }
  for (int i = 0; i < MANY; i++) {
    /* rows: none, one, past a chunk boundary, many; activations reused by neighbours */
    const size_t rows = i % 7 == 3 ? 0 : (size_t)(i * 53) % 300 + 1, n = many_n[i / 3 % 3];
    m->w[i] = malloc((rows ? rows : 1) * (n / 128) * sizeof *m->w[i]);
    m->want[i] = malloc((rows + 1) * sizeof(float));
    m->got[i] = malloc((rows + 1) * sizeof(float));
    cr_assert(m->w[i] && m->want[i] && m->got[i]);
    bml__gen_q1_0(&seed, m->w[i], rows, n, i % 2 == 0);
    cr_assert_eq(bml_q1_0_mat_vec(m->w[i], rows, n, m->a[i / 3 % 3], m->want[i]), 0);
    memset(m->got[i], 0xff, (rows + 1) * sizeof(float));
    m->pc[i] = (bml__cpu_piece){m->w[i], rows, n, m->a[i / 3 % 3], m->got[i]};
  }
}

static void many_check(const many_set *m, const char *what) {
  for (int i = 0; i < MANY; i++) {
    long r = golden_first_difference(m->want[i], m->got[i], m->pc[i].rows);
    cr_expect(r < 0, "%s: product %d (%zux%zu): row %ld differs", what, i, m->pc[i].rows, m->pc[i].n, r);
    cr_expect_eq(golden_bits(m->got[i][m->pc[i].rows]), 0xffffffffu, "%s: product %d: a row past it was written",
                 what, i);
  }
}

static void many_free(many_set *m) {
  for (int i = 0; i < MANY; i++) free(m->w[i]), free(m->want[i]), free(m->got[i]);
  for (int k = 0; k < 3; k++) free(m->a[k]);
}

typedef struct {
  pthread_t caller;
  int ticks, elsewhere;
} ticks;

static void count_tick(void *ctx) {
  ticks *t = ctx;
  t->ticks++;
  if (!pthread_equal(pthread_self(), t->caller)) t->elsewhere++;
}

/* A batch's CPU rows: many products in one run of the pool, the bits of
 * each product alone, for every thread count. */
Test(pool, many_products_in_one_run_give_each_products_bits) {
  for (int threads = 1; threads <= 7; threads += 2) {
    many_set m;
    many_make(&m);
    bml_pool *p = NULL;
    cr_assert_eq(bml_pool_open(threads, &p), 0);
    ticks t = {pthread_self(), 0, 0};
    bool alone = true;
    unsigned long runs = bml__pool_runs(p);
    cr_assert_eq(bml__pool_mat_vec_many(p, m.pc, MANY, count_tick, &t, &alone), 0);
    cr_expect(!alone, "%d threads: computed alone", threads);
    char what[32];
    snprintf(what, sizeof what, "%d threads", threads);
    many_check(&m, what);
    cr_expect_eq(bml__pool_runs(p) - runs, threads > 1 ? 1u : 0u, "%d threads: %lu runs of the pool (want %d)",
                 threads, bml__pool_runs(p) - runs, threads > 1);
    cr_expect(t.ticks >= 1 && t.ticks <= MANY, "%d threads: %d ticks", threads, t.ticks);
    cr_expect_eq(t.elsewhere, 0, "%d threads: %d ticks off the calling thread", threads, t.elsewhere);
    bml_pool_close(p);
    many_free(&m);
  }
}

/* The caller's tick, watching the results: how many rows were written
 * since the last tick (results start as 0xffffffff, which no product of
 * this data gives), and the most weights between two ticks. */
typedef struct {
  const bml__cpu_piece *pc;
  size_t count;
  pthread_t caller;
  int ticks, elsewhere;
  uint64_t done, most; /* weights written at the last tick; the most between two */
} tick_watch;

static uint64_t weights_written(const tick_watch *t) {
  uint64_t done = 0;
  for (size_t i = 0; i < t->count; i++)
    for (size_t r = 0; r < t->pc[i].rows; r++)
      if (golden_bits(t->pc[i].out[r]) != 0xffffffffu) done += t->pc[i].n;
  return done;
}

static void watch_tick(void *ctx) {
  tick_watch *t = ctx;
  t->ticks++;
  if (!pthread_equal(pthread_self(), t->caller)) t->elsewhere++;
  const uint64_t done = weights_written(t);
  if (done - t->done > t->most) t->most = done - t->done;
  t->done = done;
}

/* The caller watches the card while the pool works: its tick comes at
 * least every BML__POOL_TICK_WEIGHTS weights of the rows it computes, from
 * the first.  With the helpers held the caller computes every row, so the
 * rows written between two ticks are all its own. */
Test(pool, the_calling_thread_ticks_at_least_every_tick_weights_of_its_rows) {
  /* rows of 1024 (a tick's rows a whole chunk), 384 (not a divisor of
   * 2^18), and one of 2^19 (one row past a tick's weights) */
  static const size_t shape[][2] = {{4096, 1024}, {1000, 384}, {4096, 1024}, {3, 1u << 19}, {777, 384}};
  enum { NP = sizeof shape / sizeof shape[0] };
  product x[NP];
  bml__cpu_piece pc[NP];
  for (int i = 0; i < NP; i++) {
    x[i] = make_product(shape[i][0], shape[i][1], 50 + (uint64_t)i);
    pc[i] = (bml__cpu_piece){x[i].w, shape[i][0], shape[i][1], x[i].a, x[i].got};
  }
  for (int threads = 1; threads <= 3; threads++) {
    bml_pool *p = NULL;
    cr_assert_eq(bml_pool_open(threads, &p), 0);
    bml__pool_hold_helpers(p, true);
    for (size_t count = 1; count <= NP; count += NP - 1) { /* the first product alone, then all */
      for (size_t i = 0; i < count; i++) memset(x[i].got, 0xff, shape[i][0] * sizeof(float));
      tick_watch t = {pc, count, pthread_self(), 0, 0, 0, 0};
      cr_assert_eq(bml__pool_mat_vec_many(p, pc, count, watch_tick, &t, NULL), 0);
      const uint64_t total = weights_written(&t), after = total - t.done;
      for (size_t i = 0; i < count; i++)
        cr_expect(golden_first_difference(x[i].want, x[i].got, shape[i][0]) < 0, "%d threads: product %zu differs",
                  threads, i);
      cr_expect(t.ticks >= 1 && t.elsewhere == 0, "%d threads: %d ticks, %d elsewhere", threads, t.ticks, t.elsewhere);
      cr_expect_eq(t.done + after, total);
      /* a step is one row of 2^19 at most */
      cr_expect(t.most <= 1u << 19 && after <= 1u << 19, "%d threads, %zu products: %llu weights between two ticks, "
                "%llu after the last", threads, count, (unsigned long long)t.most, (unsigned long long)after);
      if (count == 1) /* rows of 1024 only: a tick at least every 2^18 of them */
        cr_expect(t.most <= BML__POOL_TICK_WEIGHTS && after <= BML__POOL_TICK_WEIGHTS && t.ticks >= 16,
                  "%d threads, one product: %d ticks, %llu weights between two", threads, t.ticks,
                  (unsigned long long)t.most);
    }
    bml__pool_hold_helpers(p, false);
    bml_pool_close(p);
  }
  for (int i = 0; i < NP; i++) free_product(&x[i]);
}

Test(pool, many_products_with_one_bad_compute_none) {
  many_set m;
  many_make(&m);
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(3, &p), 0);
  m.pc[MANY - 1].n = 200;
  cr_expect_eq(bml__pool_mat_vec_many(p, m.pc, MANY, NULL, NULL, NULL), BML_ESHAPE);
  for (int i = 0; i < MANY; i++)
    for (size_t r = 0; r <= m.pc[i].rows; r++)
      cr_assert_eq(golden_bits(m.got[i][r]), 0xffffffffu, "product %d row %zu was computed beside a bad one", i, r);
  m.pc[MANY - 1].n = many_n[(MANY - 1) / 3 % 3];
  m.pc[2].out = NULL;
  cr_expect_eq(bml__pool_mat_vec_many(p, m.pc, MANY, NULL, NULL, NULL), BML_EINVAL);
  cr_expect_eq(bml__pool_mat_vec_many(p, NULL, 1, NULL, NULL, NULL), BML_EINVAL);
  cr_expect_eq(bml__pool_mat_vec_many(p, NULL, 0, NULL, NULL, NULL), 0);
  cr_expect_eq(bml__pool_mat_vec_many(NULL, m.pc, 1, NULL, NULL, NULL), BML_EINVAL);
  bml_pool_close(p);
  /* an n whose two threads' scratch (two strides of 2n + n/8 bytes) wraps
   * past SIZE_MAX to 384 bytes: that was allocated and written past; now
   * there is no such room, and alone (one stride) neither: BML_ENOMEM.
   * Only where the CPU path prepares the activation (the portable ref
   * path needs no scratch, and would read the short buffers as the row
   * that n says) */
  if (bml__q1_0_kernel_active()->prep_size(128) > 0) {
    /* the result below both buffers (static data lies below the heap), or
     * the activation that n says would overlap it: BML_EINVAL */
    static float huge_out[1];
    cr_assert_eq(bml_pool_open(2, &p), 0);
    const bml__cpu_piece huge[2] = {m.pc[0], {m.pc[1].w, 1, (SIZE_MAX / 17 * 4 / 128 + 1) * 128, m.pc[1].a, huge_out}};
    cr_assert((uintptr_t)huge_out < (uintptr_t)m.pc[1].w && (uintptr_t)huge_out < (uintptr_t)m.pc[1].a);
    cr_expect_eq(bml__pool_mat_vec_many(p, huge, 2, NULL, NULL, NULL), BML_ENOMEM);
    bml_pool_close(p);
  }
  many_free(&m);
}

/* While another thread drives the pool the caller computes them alone. */
Test(pool, many_products_while_another_thread_drives_run_alone, .timeout = 60) {
  many_set m;
  many_make(&m);
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(3, &p), 0);
  pool_gate *g = pool_gate_hold(p);
  cr_assert_not_null(g);
  ticks t = {pthread_self(), 0, 0};
  unsigned long runs = bml__pool_runs(p);
  bool alone = false;
  cr_expect_eq(bml__pool_mat_vec_many(p, m.pc, MANY, count_tick, &t, &alone), 0);
  cr_expect(alone, "computed alone, and not said so");
  cr_expect_eq(bml__pool_runs(p), runs, "a run of the pool while another thread drives it");
  pool_gate_release(g);
  many_check(&m, "alone");
  cr_expect(t.ticks >= 1 && t.elsewhere == 0, "%d ticks, %d elsewhere", t.ticks, t.elsewhere);
  bml_pool_close(p);
  many_free(&m);
}

Test(pool, bad_arguments_are_refused) {
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(2, &p), 0);
  bml_block_q1_0 w[1] = {{0}};
  bml_block_q8_0 a[4] = {{0}};
  float out[1] = {7.0f};
  cr_expect_eq(bml_pool_q1_0_mat_vec(NULL, w, 1, 128, a, out), BML_EINVAL);
  cr_expect_eq(bml_pool_q1_0_mat_vec(p, NULL, 1, 128, a, out), BML_EINVAL);
  cr_expect_eq(bml_pool_q1_0_mat_vec(p, w, 1, 100, a, out), BML_ESHAPE);
  cr_expect_eq(bml_pool_q1_0_mat_vec(p, w, SIZE_MAX / 18 + 1, 128, a, out), BML_ESHAPE);
  cr_expect(out[0] == 7.0f);
  cr_expect_eq(bml_pool_open(2, NULL), BML_EINVAL);
  bml_pool *q = (bml_pool *)0x1;
  cr_expect_eq(bml_pool_open(BML_POOL_MAX_THREADS + 1, &q), BML_EINVAL);
  cr_expect_null(q, "a refused pool left *out set");
  bml_pool_close(p);
  bml_pool_close(NULL); /* NULL-safe */
}

Test(pool, results_over_their_own_inputs_are_refused) {
  const size_t rows = 64, n = 256, nb = n / 128;
  /* one buffer: the weights, the activation, then room for the results */
  const size_t wbytes = rows * nb * sizeof(bml_block_q1_0), abytes = n / 32 * sizeof(bml_block_q8_0);
  unsigned char *buf = aligned_alloc(64, (wbytes + abytes + rows * sizeof(float) + 63) / 64 * 64);
  cr_assert(buf);
  bml_block_q1_0 *w = (bml_block_q1_0 *)buf;
  bml_block_q8_0 *a = (bml_block_q8_0 *)(buf + wbytes);
  uint64_t seed = 5;
  bml__gen_q1_0(&seed, w, rows, n, true);
  cr_assert_eq(bml__gen_q8_0(&seed, a, n, true), 0);
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(2, &p), 0);
  float *over_a = (float *)(void *)a, *over_w = (float *)(void *)(buf + wbytes - 8); /* last 2 bytes of w, then a */
  float *inside_w = (float *)(void *)(buf + 64), *after = (float *)(void *)(buf + wbytes + abytes);
  const float *outs[] = {over_a, over_w, inside_w};
  for (size_t i = 0; i < 3; i++) {
    cr_expect_eq(bml_q1_0_mat_vec(w, rows, n, a, (float *)outs[i]), BML_EINVAL, "out %zu", i);
    cr_expect_eq(bml_pool_q1_0_mat_vec(p, w, rows, n, a, (float *)outs[i]), BML_EINVAL, "out %zu (pool)", i);
  }
  /* right after the activation: no overlap */
  float *want = malloc(rows * sizeof *want);
  cr_assert(want);
  cr_assert_eq(bml_q1_0_mat_vec(w, rows, n, a, want), 0);
  cr_expect_eq(bml_pool_q1_0_mat_vec(p, w, rows, n, a, after), 0);
  cr_expect(golden_first_difference(want, after, rows) < 0);
  /* results that end where the weights start */
  float *before = malloc(rows * sizeof *before + wbytes + abytes);
  cr_assert(before);
  memcpy((unsigned char *)before + rows * sizeof *before, buf, wbytes + abytes);
  const bml_block_q1_0 *w2 = (const bml_block_q1_0 *)(void *)((unsigned char *)before + rows * sizeof *before);
  const bml_block_q8_0 *a2 = (const bml_block_q8_0 *)(const void *)((const unsigned char *)w2 + wbytes);
  cr_expect_eq(bml_pool_q1_0_mat_vec(p, w2, rows, n, a2, before), 0);
  cr_expect(golden_first_difference(want, before, rows) < 0);
  cr_expect_eq(bml_pool_q1_0_mat_vec(p, w2, rows, n, a2, before + 1), BML_EINVAL, "one float into the weights");
  free(before);
  bml_pool_close(p);
  free(want);
  free(buf);
}

/* A child of fork() has the pool's memory and none of its threads: the
 * child's products run on its calling thread, with the same bits, and its
 * close returns (the threads were spinning or waiting in the parent). */
Test(pool, a_child_of_fork_computes_alone_and_closes, .timeout = 120) {
  const size_t rows = 777, n = 1024;
  product x = make_product(rows, n, 17);
  const bml_block_q1_0 *w = x.w;
  const bml_block_q8_0 *a = x.a;
  const float *want = x.want;
  float *got = x.got;
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(4, &p), 0);
  cr_assert_eq(bml_pool_q1_0_mat_vec(p, w, rows, n, a, got), 0); /* the threads have worked */
  for (int sleeping = 0; sleeping < 2; sleeping++) {
    if (sleeping) usleep(50000); /* past the spin: the threads wait on the condition variable */
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
      alarm(30); /* a hang ends as SIGALRM */
      memset(got, 0xff, rows * sizeof *got);
      int rc = bml_pool_q1_0_mat_vec(p, w, rows, n, a, got);
      bool same = rc == 0 && golden_first_difference(want, got, rows) < 0;
      bml_pool_close(p);
      _exit(same ? 0 : 1);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child (%s) %s %d",
              sleeping ? "threads asleep" : "threads spinning", WIFSIGNALED(status) ? "died of signal" : "exited",
              WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  }
  /* the parent's pool is whole */
  memset(got, 0xff, rows * sizeof *got);
  cr_assert_eq(bml_pool_q1_0_mat_vec(p, w, rows, n, a, got), 0);
  cr_expect(golden_first_difference(want, got, rows) < 0);
  bml_pool_close(p);
  free_product(&x);
}

/* Another thread inside a product when the process forks: that thread and
 * its product are not in the child, whose copy of the pool is one of a
 * single thread, free (it was busy there for ever: BML_EBUSY). */
struct busy_pool {
  bml_pool *p;
  const bml_block_q1_0 *w;
  const bml_block_q8_0 *a;
  size_t rows, n;
  atomic_bool stop;
};
static void *keep_busy(void *arg) {
  struct busy_pool *b = arg;
  float *out = malloc(b->rows * sizeof *out);
  while (out && !atomic_load(&b->stop)) bml_pool_q1_0_mat_vec(b->p, b->w, b->rows, b->n, b->a, out);
  free(out);
  return NULL;
}

Test(pool, a_fork_while_another_thread_computes_leaves_the_child_a_pool, .timeout = 120) {
  const size_t rows = 2048, n = 2048;
  product x = make_product(rows, n, 19);
  const bml_block_q1_0 *w = x.w;
  const bml_block_q8_0 *a = x.a;
  const float *want = x.want;
  float *got = x.got;
  struct busy_pool b = {.w = w, .a = a, .rows = rows, .n = n};
  cr_assert_eq(bml_pool_open(3, &b.p), 0);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, keep_busy, &b), 0);
  int bad = 0;
  for (int round = 0; round < 5; round++) {
    usleep(2000);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
      alarm(30);
      memset(got, 0xff, rows * sizeof *got);
      int rc = bml_pool_q1_0_mat_vec(b.p, w, rows, n, a, got);
      int code = rc == BML_EBUSY ? 2 : rc != 0 ? 3 : golden_first_difference(want, got, rows) >= 0 ? 4
                 : bml_pool_threads(b.p) != 1 ? 5 : 0;
      bml_pool_close(b.p);
      _exit(code);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      bad++;
      cr_log_error("round %d: the child %s %d (2: busy, 3: an error, 4: other bits, 5: threads)", round,
                   WIFSIGNALED(status) ? "died of signal" : "exited",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    }
  }
  atomic_store(&b.stop, true);
  pthread_join(t, NULL);
  cr_expect_eq(bad, 0, "%d of 5 children could not use the pool", bad);
  bml_pool_close(b.p);
  free_product(&x);
}

/* The default pool has as many threads as the CPUs the process may run on
 * (taskset, a cpuset), not every online CPU. */
Test(pool, the_default_size_follows_the_affinity) {
  unsetenv("BANKML_THREADS");
  cpu_set_t set;
  cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
    if (CPU_ISSET(c, &set)) first = c;
  cr_assert(first >= 0);
  CPU_ZERO(&set);
  CPU_SET(first, &set);
  cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0); /* this test's own process */
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(0, &p), 0);
  cr_expect_eq(bml_pool_threads(p), 1, "one CPU allowed, %d threads", bml_pool_threads(p));
  bml_pool_close(p);
}

Test(pool, threads_from_environment) {
  bml_pool *p = NULL;
  setenv("BANKML_THREADS", "3", 1);
  cr_assert_eq(bml_pool_open(0, &p), 0);
  cr_expect_eq(bml_pool_threads(p), 3);
  bml_pool_close(p);
  unsetenv("BANKML_THREADS");
  cr_assert_eq(bml_pool_open(-1, &p), 0);
  cr_expect(bml_pool_threads(p) >= 1);
  bml_pool_close(p);
}

static char logged[4096];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

Test(pool, bad_thread_counts_in_environment_are_refused_by_name) {
  static const char *bad[] = {"abc", "0", "-2", "3x", " 4", "99999", "1025", "1.5", "0x10"};
  bml_log_set_sink(capture, NULL);
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++) {
    bml_pool *p = (bml_pool *)0x1;
    logged[0] = '\0';
    setenv("BANKML_THREADS", bad[i], 1);
    cr_expect_eq(bml_pool_open(0, &p), BML_EENV, "BANKML_THREADS=\"%s\" accepted", bad[i]);
    cr_expect_null(p, "out not cleared on error");
    cr_expect(strstr(logged, "BANKML_THREADS") != NULL, "message does not name the variable: %s", logged);
    cr_expect(strstr(logged, bad[i]) != NULL, "message does not name the value: %s", logged);
  }
  unsetenv("BANKML_THREADS");
  bml_log_set_sink(NULL, NULL);
}

/* ---- the distribution: chunks of rows from a shared counter -------------- */

/* Which thread ran each tid of a bml__pool_run, and how often; tid 0 waits
 * (up to 10 s) for tid wait_for to have run, which only a helper thread
 * can then do.  It runs on the pool's threads, where Criterion's asserts
 * must not be used (its reports from two threads at once mix): a tid out
 * of range is counted in `bad`. */
typedef struct {
  pthread_t thread[8];
  atomic_int times[8];
  atomic_int bad;
  int wait_for; /* 0: none */
} parts_seen;

static void record_part(void *ctx, int tid, int nthreads) {
  parts_seen *s = ctx;
  if (tid < 0 || tid >= nthreads || nthreads > 8) {
    atomic_fetch_add(&s->bad, 1);
    return;
  }
  s->thread[tid] = pthread_self();
  atomic_fetch_add(&s->times[tid], 1);
  for (double t0 = bml__now(); tid == 0 && s->wait_for && !atomic_load(&s->times[s->wait_for]);) {
    if (bml__now() - t0 > 10) break;
    sched_yield();
  }
}

/* A pool's products of rows 1 .. rows of x, each the single-thread bits,
 * no row past them written. */
static void products_of_every_length(bml_pool *p, product *x, size_t rows, size_t n, int count, int gap_us) {
  for (int it = 0; it < count; it++) {
    const size_t r = (size_t)it * 97 % rows + 1;
    if (gap_us && it % 4 == 0) usleep((useconds_t)gap_us);
    memset(x->got, 0xff, rows * sizeof(float));
    cr_assert_eq(bml_pool_q1_0_mat_vec(p, x->w, r, n, x->a, x->got), 0);
    cr_assert(golden_first_difference(x->want, x->got, r) < 0, "%d threads, %zu rows: differs", bml_pool_threads(p), r);
    if (r < rows) cr_assert_eq(golden_bits(x->got[r]), 0xffffffffu, "%zu rows: the row past them was written", r);
  }
}

/* Helper threads that never come (descheduled, or on a CPU that is busy)
 * leave every row to the caller, who computes them all: no product waits
 * for them.  Let go, they take part again. */
Test(pool, held_helpers_leave_every_row_and_part_to_the_caller, .timeout = 60) {
  const size_t rows = 1000, n = 1024;
  product x = make_product(rows, n, 31);
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(3, &p), 0);
  bml__pool_hold_helpers(p, true);
  products_of_every_length(p, &x, rows, n, 30, 0);
  parts_seen s = {.wait_for = 0};
  bml__pool_run(p, record_part, &s);
  cr_expect_eq(atomic_load(&s.bad), 0, "a tid out of range");
  for (int t = 0; t < 3; t++) {
    cr_expect_eq(atomic_load(&s.times[t]), 1, "tid %d ran %d times", t, atomic_load(&s.times[t]));
    cr_expect(pthread_equal(s.thread[t], pthread_self()), "tid %d ran on a held helper", t);
  }
  many_set m;
  many_make(&m);
  bool alone = true;
  cr_assert_eq(bml__pool_mat_vec_many(p, m.pc, MANY, NULL, NULL, &alone), 0);
  cr_expect(!alone, "a run of the pool said it was not");
  many_check(&m, "held helpers");
  many_free(&m);
  bml__pool_hold_helpers(p, false);
  parts_seen t = {.wait_for = 1};
  bml__pool_run(p, record_part, &t);
  cr_expect(atomic_load(&t.times[1]) == 1 && !pthread_equal(t.thread[1], pthread_self()),
            "let go, no helper took part 1 within 10 s");
  products_of_every_length(p, &x, rows, n, 30, 0);
  bml_pool_close(p);
  free_product(&x);
}

/* Rows that are no multiple of the chunk (nor of 16), on pools of several
 * sizes and rows of several widths: every row the single-thread bits, no
 * row past the product written. */
Test(pool, rows_not_a_multiple_of_the_chunk_give_the_bits, .timeout = 60) {
  static const size_t ns[] = {128, 4096};
  static const size_t lengths[] = {1, 15, 16, 17, 31, 33, 1023, 1025, 1040, 4097};
  for (size_t k = 0; k < 2; k++) {
    product x = make_product(4097, ns[k], 70 + k);
    for (int threads = 2; threads <= 5; threads += 3) {
      bml_pool *p = NULL;
      cr_assert_eq(bml_pool_open(threads, &p), 0);
      for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        const size_t r = lengths[i];
        memset(x.got, 0xff, 4097 * sizeof(float));
        cr_assert_eq(bml_pool_q1_0_mat_vec(p, x.w, r, ns[k], x.a, x.got), 0);
        cr_expect(golden_first_difference(x.want, x.got, r) < 0, "%d threads, %zux%zu differs", threads, r, ns[k]);
        if (r < 4097) cr_expect_eq(golden_bits(x.got[r]), 0xffffffffu, "%zux%zu: the row past it was written", r, ns[k]);
      }
      bml_pool_close(p);
    }
    free_product(&x);
  }
}

/* Four threads on one CPU (the OS puts them all there), with idle gaps
 * that let the helpers fall asleep: the bits, every tid of a run once, and
 * many products in one run. */
Test(pool, more_threads_than_cpus_give_the_bits_after_idle_gaps) {
  cpu_set_t set;
  cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
    if (CPU_ISSET(c, &set)) first = c;
  CPU_ZERO(&set);
  CPU_SET(first, &set);
  cr_assert_eq(sched_setaffinity(0, sizeof set, &set), 0); /* the helpers started below inherit it */
  const size_t rows = 4097, n = 1024;
  product x = make_product(rows, n, 41);
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(4, &p), 0);
  products_of_every_length(p, &x, rows, n, 60, 3000);
  for (int it = 0; it < 20; it++) {
    parts_seen s = {.wait_for = 0};
    if (it % 5 == 0) usleep(3000);
    bml__pool_run(p, record_part, &s);
    cr_expect_eq(atomic_load(&s.bad), 0, "run %d: a tid out of range", it);
    for (int t = 0; t < 4; t++) cr_expect_eq(atomic_load(&s.times[t]), 1, "run %d: tid %d ran %d times", it, t, atomic_load(&s.times[t]));
  }
  many_set m;
  many_make(&m);
  cr_assert_eq(bml__pool_mat_vec_many(p, m.pc, MANY, NULL, NULL, NULL), 0);
  many_check(&m, "4 threads on one CPU");
  many_free(&m);
  bml_pool_close(p);
  free_product(&x);
}

/* Whether `want` of the pool's helpers are asleep in the kernel within 10 s. */
static bool helpers_asleep(bml_pool *p, int want) { return pool_helpers_asleep(p, want, 10000); }

/* The wake-up cost: none before a helper has slept and been woken (and none
 * for one thread); then the median of the delays from a job's start to a
 * sleeping helper's arrival, which is within the job (tid 0 waits for the
 * helper to run tid 1). */
Test(pool, the_wake_cost_is_a_sleeping_helpers_delay_into_a_job, .timeout = 60) {
  bml_pool *one = NULL, *p = NULL;
  cr_assert_eq(bml_pool_open(1, &one), 0);
  parts_seen s = {.wait_for = 0};
  bml__pool_run(one, record_part, &s);
  cr_expect(bml__pool_wake_seconds(one) == 0 && bml__pool_asleep(one) == 0);
  bml_pool_close(one);
  cr_expect(bml__pool_wake_seconds(NULL) == 0 && bml__pool_asleep(NULL) == 0);
  cr_assert_eq(bml_pool_open(2, &p), 0);
  cr_expect(bml__pool_wake_seconds(p) == 0, "a cost before any job: %g s", bml__pool_wake_seconds(p));
  double longest = 0;
  for (int round = 0; round < 3; round++) {
    cr_assert(helpers_asleep(p, 1), "round %d: the idle helper is not asleep after 10 s", round);
    parts_seen t = {.wait_for = 1};
    const double t0 = bml__now();
    bml__pool_run(p, record_part, &t);
    const double took = bml__now() - t0;
    longest = took > longest ? took : longest;
    cr_assert(atomic_load(&t.times[1]) == 1 && !pthread_equal(t.thread[1], pthread_self()),
              "round %d: the helper did not come within 10 s", round);
    const double wake = bml__pool_wake_seconds(p);
    cr_expect(wake > 0 && wake <= longest, "round %d: wake-up cost %g s, the jobs took up to %g s", round, wake,
              longest);
  }
  bml_pool_close(p);
}

/* Each thread of a bml__pool_job counts itself in, then stays (up to 10 s)
 * until all have come: a helper that is not woken keeps the job waiting. */
typedef struct {
  atomic_int in[8];
  atomic_int bad;
} selves_seen;

static void count_in(void *ctx, int self, int nthreads) {
  selves_seen *s = ctx;
  if (self < 0 || self >= nthreads || nthreads > 8) {
    atomic_fetch_add(&s->bad, 1);
    return;
  }
  atomic_fetch_add(&s->in[self], 1);
  for (double t0 = bml__now(); bml__now() - t0 < 10;) {
    int all = 1;
    for (int t = 0; t < nthreads; t++) all &= atomic_load(&s->in[t]) > 0;
    if (all) return;
    sched_yield();
  }
}

/* Every sleeping helper is woken for a job, and each comes once: a job
 * that waits for all of them ends (a wake that reached only some would
 * keep it to its 10 s, and the counts would say who never came). */
Test(pool, every_sleeping_helper_is_woken_for_a_job, .timeout = 60) {
  enum { THREADS = 7 };
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(THREADS, &p), 0);
  for (int round = 0; round < 3; round++) {
    cr_assert(helpers_asleep(p, THREADS - 1), "round %d: the idle helpers are not all asleep after 10 s", round);
    selves_seen s = {0};
    bml__pool_job(p, count_in, &s);
    cr_expect_eq(atomic_load(&s.bad), 0, "round %d: a thread out of range", round);
    for (int t = 0; t < THREADS; t++)
      cr_expect_eq(atomic_load(&s.in[t]), 1, "round %d: thread %d came %d times", round, t, atomic_load(&s.in[t]));
  }
  bml_pool_close(p);
}

/* bml_pool_set_wait: after a job a helper stays awake (yielding) for the
 * wait, then sleeps in the kernel; a change counts at once, for a helper
 * already waiting too; the bits are the single thread's whatever the
 * wait; a NULL pool and a wait past BML_POOL_MAX_WAIT_MS are refused. */
Test(pool, the_helpers_stay_awake_for_their_wait_then_sleep, .timeout = 60) {
  cr_expect_eq(bml_pool_set_wait(NULL, 1), BML_EINVAL);
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(2, &p), 0);
  cr_expect_eq(bml_pool_set_wait(p, BML_POOL_MAX_WAIT_MS + 1), BML_EINVAL);
  cr_assert(helpers_asleep(p, 1), "with the default wait the idle helper is not asleep after 10 s");
  product x = make_product(300, 1024, 41);
  cr_assert_eq(bml_pool_set_wait(p, BML_POOL_MAX_WAIT_MS), 0);
  parts_seen t = {.wait_for = 1}; /* a job the helper itself takes part in: it waits anew after it */
  bml__pool_run(p, record_part, &t);
  cr_assert(atomic_load(&t.times[1]) == 1 && !pthread_equal(t.thread[1], pthread_self()),
            "the helper did not come within 10 s");
  products_of_every_length(p, &x, 300, 1024, 8, 20000); /* gaps of 20 ms */
  usleep(200000);
  cr_expect_eq(bml__pool_asleep(p), 0, "the helper slept within 200 ms of a job, with a wait of 10 s");
  cr_assert_eq(bml_pool_set_wait(p, 0), 0); /* the helper is waiting, for 10 s: it sleeps at once */
  cr_expect(pool_helpers_asleep(p, 1, 2000), "a waiting helper not asleep 2 s after its wait became 0 (it had 10 s)");
  products_of_every_length(p, &x, 300, 1024, 8, 2000);
  bml_pool_close(p);
  free_product(&x);
}
