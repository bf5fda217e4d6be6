/* test_worker.c -- the worker on a real OpenCL device (a GPU where there is one, else PoCL): shares, releases, calls in and out of order, fork, the environment. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "logbuf.h"
#include "golden.h"
#include "poolgate.h"
#include "workertest.h"

TestSuite(worker, .init = setup, .fini = teardown, .timeout = 300);

static void shares_give_cpu_bits(const char *share) {
  bml_worker *w = open_worker(share);
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0); /* no rests: every product takes the share */
  static const size_t shapes[][2] = {{1, 128}, {67, 2688}, {301, 5120}, {1000, 1024}, {33, 4096}, {4096, 4096}};
  int products = 0;
  double want = strtod(share, NULL);
  for (size_t s = 0; s < BML_ARRAY_SIZE(shapes); s++)
    for (int shaped = 0; shaped < 2; shaped++) {
      matrix m = make(shapes[s][0], shapes[s][1], 100 + s * 2 + (unsigned)shaped, shaped);
      char name[32];
      snprintf(name, sizeof name, "m%zu.%d", s, shaped);
      for (int rep = 0; rep < 3; rep++, products++) expect_exact(w, &m, name);
      /* the card's part is the share's rows: the matrix went to the card with them */
      const size_t card = (size_t)((want > 0.95 ? 0.95 : want) * (double)shapes[s][0] + 0.5);
      cr_expect_eq(bml__worker_held_rows(w, name), card, "share %s, %zu rows: the card holds %zu, not %zu", share,
                   shapes[s][0], bml__worker_held_rows(w, name), card);
      unmake(&m);
    }
  json_t *j = status(w);
  cr_expect_eq(total_products(j), products, "status counters do not add up to %d products", products);
  cr_expect_float_eq(json_real_value(json_object_get(j, "share")), want > 0.95 ? 0.95 : want, 1e-12);
  if (want >= 0.3) cr_expect(field(j, "products_on_card") > 0, "the card took no product at share %s", share);
  if (want == 0.0) cr_expect_eq(field(j, "products_on_card"), 0);
  json_decref(j);
  bml_worker_close(w);
}

Test(worker, share_zero_gives_the_cpu_bits) { shares_give_cpu_bits("0.0"); }
Test(worker, share_three_tenths_gives_the_cpu_bits) { shares_give_cpu_bits("0.3"); }
Test(worker, share_0_95_gives_the_cpu_bits) { shares_give_cpu_bits("0.95"); }
Test(worker, share_above_range_is_clamped_to_0_95) { shares_give_cpu_bits("5"); }

Test(worker, release_frees_every_card_buffer_and_products_go_on) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix a = make(300, 1024, 1, false), b = make(129, 4096, 2, true);
  expect_exact(w, &a, "a");
  expect_exact(w, &b, "b");
  json_t *j = status(w);
  cr_expect(field(j, "allocated_bytes") > 0);
  /* the card's memory, which the held bytes are within */
  cr_expect(field(j, "card_memory_bytes") >= field(j, "allocated_bytes"), "card_memory_bytes %lld, allocated %lld",
            field(j, "card_memory_bytes"), field(j, "allocated_bytes"));
  json_decref(j);
  bml_worker_release(w);
  j = status(w);
  cr_expect_eq(field(j, "allocated_bytes"), 0, "release left card memory held");
  json_decref(j);
  expect_exact(w, &a, "a");
  expect_exact(w, &b, "b");
  j = status(w);
  cr_expect(field(j, "allocated_bytes") > 0, "products after release did not upload again");
  cr_expect_eq(field(j, "products_on_card"), 4);
  json_decref(j);
  unmake(&a), unmake(&b);
  bml_worker_close(w);
}

/* An engine that loads model after model, releasing between: the worker
 * forgets the released matrices instead of keeping (and scanning) every
 * name it was ever given. */
Test(worker, release_forgets_the_matrices) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0); /* never resting: every product on the card */
  for (int model = 0; model < 3; model++) {
    matrix m[5];
    for (int i = 0; i < 5; i++) m[i] = make(64, 256, (uint64_t)(10 * model + i), false);
    for (int i = 0; i < 5; i++) expect_exact(w, &m[i], "a model's matrix");
    json_t *j = status(w);
    cr_expect_eq(field(j, "matrices"), 5, "model %d: %lld matrices known", model, field(j, "matrices"));
    json_decref(j);
    bml_worker_release(w);
    j = status(w);
    cr_expect_eq(field(j, "matrices"), 0, "release kept %lld matrices", field(j, "matrices"));
    json_decref(j);
    for (int i = 0; i < 5; i++) unmake(&m[i]);
  }
  bml_worker_close(w);
}

/* Another thread's short call (the status) may be inside when
 * bml_worker_mat_vec finishes: the product is finished all the same, never
 * left in flight (the hook makes three finishes meet such a call). */
Test(worker, mat_vec_finishes_its_product_when_a_finish_meets_another_call) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0); /* never resting: the card takes its rows */
  matrix m = make(256, 1024, 21, false);
  bml__worker_hooks h = {.busy_finishes = 3, .kernel = BML_KERNEL_COUNT};
  bml__worker_set_hooks(w, &h);
  memset(m.got, 0xff, m.rows * sizeof *m.got);
  cr_expect_eq(bml_worker_mat_vec(w, "m", m.w, m.rows, m.n, m.a, m.got), 0);
  cr_expect(bml__first_difference(m.want, m.got, m.rows) < 0, "the product differs");
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 1, "the card took no rows: the test proves nothing");
  json_decref(j);
  size_t card_rows;
  cr_expect_eq(bml_worker_begin(w, "m", m.w, m.rows, m.n, m.a, &card_rows), 0, "a product was left in flight");
  cr_expect_eq(bml_pool_q1_0_mat_vec(pool, m.w + card_rows * 8, m.rows - card_rows, m.n, m.a, m.got + card_rows), 0);
  cr_expect_eq(bml_worker_finish(w, m.got), 0);
  unmake(&m);
  bml_worker_close(w);
}

/* What another thread's calls meet while a bml_worker_mat_vec's product is
 * in flight (its CPU rows run outside the worker): that call is running, so
 * they are busy (BML_EBUSY), not out of order (BML_ESTATE), and a finish
 * does not take its product.  Before, begin, a batch and set_share said
 * BML_ESTATE, and a finish wrote the product's card rows into its own out
 * while the call that began it returned BML_ESTATE with none written. */
struct meanwhile {
  bml_worker *w;
  matrix *m;
  float other[64];
  int calls;
};

static void calls_meanwhile(void *ctx) {
  struct meanwhile *mw = ctx;
  matrix *m = mw->m;
  size_t card_rows = 0;
  bml_product p = {"other", m->w, 64, m->n, m->a, mw->other};
  mw->calls++;
  cr_expect_eq(bml_worker_begin(mw->w, "other", m->w, 64, m->n, m->a, &card_rows), BML_EBUSY, "begin");
  cr_expect_eq(bml_worker_mat_vec(mw->w, "other", m->w, 64, m->n, m->a, mw->other), BML_EBUSY, "mat_vec");
  cr_expect_eq(bml_worker_mat_vec_batch(mw->w, &p, 1), BML_EBUSY, "batch");
  cr_expect_eq(bml_worker_set_share(mw->w, 0.2), BML_EBUSY, "set_share");
  cr_expect_eq(bml_worker_finish(mw->w, mw->other), BML_EBUSY, "finish took the product of another call");
  /* what the header says runs meanwhile */
  char *text = NULL;
  cr_expect_eq(bml_worker_status_json(mw->w, &text), 0, "status");
  cr_expect(text && strstr(text, "\"busy\":true"), "status during the product: %s", text ? text : "(none)");
  free(text);
  cr_expect_eq(bml_worker_set_limit(mw->w, 1.0), 0, "set_limit");
}

Test(worker, another_threads_calls_meet_a_mat_vec_in_flight_as_busy) {
  bml_worker *w = open_worker("0.5");
  matrix m = make(256, 1024, 12, false);
  struct meanwhile mw = {.w = w, .m = &m};
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .in_mat_vec = calls_meanwhile, .in_mat_vec_ctx = &mw};
  bml__worker_set_hooks(w, &h);
  expect_exact(w, &m, "m"); /* the call that began it finishes it, every row */
  cr_expect_eq(mw.calls, 1);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 1, "the product was not split");
  json_decref(j);
  unmake(&m);
  bml_worker_close(w);
}

Test(worker, out_of_order_calls_are_refused) {
  bml_worker *w = open_worker("0.5");
  matrix m = make(64, 1024, 11, false);
  size_t card_rows;
  cr_expect_eq(bml_worker_finish(w, m.got), BML_ESTATE, "finish without begin");
  cr_assert_eq(bml_worker_begin(w, "m", m.w, m.rows, m.n, m.a, &card_rows), 0);
  cr_expect_eq(bml_worker_begin(w, "m", m.w, m.rows, m.n, m.a, &card_rows), BML_ESTATE, "two products in flight");
  cr_expect_eq(bml_worker_set_share(w, 0.2), BML_ESTATE);
  cr_assert_eq(bml_pool_q1_0_mat_vec(pool, m.w + card_rows * 8, m.rows - card_rows, m.n, m.a, m.got + card_rows), 0);
  cr_assert_eq(bml_worker_finish(w, m.got), 0);
  cr_expect(bml__first_difference(m.want, m.got, m.rows) < 0, "begin/finish by hand");
  cr_expect_eq(bml_worker_begin(w, "m", m.w, m.rows, 100, m.a, &card_rows), BML_ESHAPE);
  cr_expect_eq(bml_worker_begin(w, "m", m.w, SIZE_MAX / 16, 128, m.a, &card_rows), BML_ESHAPE,
               "rows whose weights could not be in memory");
  /* rows that could be in memory, but not on this card: refused at once (the
   * card's memory was once summed chunk by chunk, 2^60 of them), none on it */
  cr_assert_eq(bml_worker_set_share(w, 0.95), 0);
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  card_rows = 1;
  cr_assert_eq(bml_worker_begin(w, "huge", m.w, SIZE_MAX / 32, 128, m.a, &card_rows), 0);
  cr_expect_eq(card_rows, 0, "the card took %zu of the rows", card_rows);
  /* its results (2^59 floats) cannot lie beside its weights: finish says
   * so and keeps the product, which close then drops */
  cr_expect_eq(bml_worker_finish(w, m.got), BML_EINVAL);
  cr_expect_eq(bml_worker_begin(w, "m", m.w, m.rows, m.n, m.a, &card_rows), BML_ESTATE, "the product was dropped");
  cr_expect_eq(bml_worker_begin(w, NULL, m.w, m.rows, m.n, m.a, &card_rows), BML_EINVAL);
  cr_expect_eq(bml_worker_mat_vec(w, "m", m.w, m.rows, m.n, m.a, NULL), BML_EINVAL);
  cr_expect_eq(bml_worker_set_share(w, 1.5), BML_ERANGE);
  cr_expect_eq(bml_worker_set_limit(w, 0.01), BML_ERANGE);
  cr_expect_eq(bml_worker_open(NULL, &w), BML_EINVAL);
  unmake(&m);
  bml_worker_close(w);
  bml_worker_close(NULL);
  bml_worker_release(NULL);
}

/* Results over a product's own weights or activation are refused before
 * anything runs, by each call that takes them. */
Test(worker, results_over_their_own_inputs_are_refused) {
  bml_worker *w = open_worker("0.5");
  matrix m = make(64, 1024, 21, false);
  float *over_a = (float *)(void *)m.a, *over_w = (float *)(void *)(m.w + 3);
  cr_expect_eq(bml_worker_mat_vec(w, "m", m.w, m.rows, m.n, m.a, over_a), BML_EINVAL);
  cr_expect_eq(bml_worker_mat_vec(w, "m", m.w, m.rows, m.n, m.a, over_w), BML_EINVAL);
  matrix other = make(64, 1024, 22, true);
  bml_product p[2] = {{"other", other.w, other.rows, other.n, other.a, other.got}, {"m", m.w, m.rows, m.n, m.a, over_a}};
  memset(other.got, 0xff, other.rows * sizeof(float));
  cr_expect_eq(bml_worker_mat_vec_batch(w, p, 2), BML_EINVAL);
  cr_expect_eq(golden_bits(other.got[0]), 0xffffffffu, "a batch with a bad product computed another");
  size_t card_rows = 0;
  cr_assert_eq(bml_worker_begin(w, "m", m.w, m.rows, m.n, m.a, &card_rows), 0);
  cr_assert(card_rows > 0, "the card took none of the rows");
  cr_expect_eq(bml_worker_finish(w, over_a), BML_EINVAL, "finish into the activation");
  cr_assert_eq(bml_pool_q1_0_mat_vec(pool, m.w + card_rows * 8, m.rows - card_rows, m.n, m.a, m.got + card_rows), 0);
  cr_assert_eq(bml_worker_finish(w, m.got), 0, "the product stayed in flight");
  cr_expect(bml__first_difference(m.want, m.got, m.rows) < 0);
  expect_exact(w, &m, "m");
  unmake(&other);
  unmake(&m);
  bml_worker_close(w);
}

/* In a child of fork() the card is the parent's: the child's products run
 * on the CPU with the same bits and without a call to the driver (whose
 * threads are not in the child: PoCL's wait would never end), release and
 * close return, and the parent's worker goes on with its card. */
/* Finishes the product begun on m (card_rows on the card): its CPU rows
 * here, then finish; 0 when every row is the CPU's. */
static int finish_begun(bml_worker *w, matrix *m, size_t card_rows) {
  memset(m->got, 0xff, m->rows * sizeof(float));
  if (bml_q1_0_mat_vec(m->w + card_rows * (m->n / 128), m->rows - card_rows, m->n, m->a, m->got + card_rows) != 0 ||
      bml_worker_finish(w, m->got) != 0)
    return 1;
  return bml__first_difference(m->want, m->got, m->rows) >= 0 ? 2 : 0;
}

static int child_of_fork(bml_worker *w, matrix *begun, size_t card_rows, matrix *m, batch *b) {
  alarm(60); /* a hang ends as SIGALRM */
  int rc = finish_begun(w, begun, card_rows); /* the parent's product, begun before the fork */
  if (rc != 0) return 1 + rc;
  memset(m->got, 0xff, m->rows * sizeof(float));
  if (bml_worker_mat_vec(w, "m", m->w, m->rows, m->n, m->a, m->got) != 0) return 4;
  if (bml__first_difference(m->want, m->got, m->rows) >= 0) return 5;
  for (size_t i = 0; i < b->count; i++) memset(b->m[i].got, 0xff, b->m[i].rows * sizeof(float));
  if (bml_worker_mat_vec_batch(w, b->p, b->count) != 0) return 6;
  for (size_t i = 0; i < b->count; i++)
    if (bml__first_difference(b->m[i].want, b->m[i].got, b->m[i].rows) >= 0) return 7;
  char *text = NULL;
  if (bml_worker_status_json(w, &text) != 0) return 8;
  bool retired = strstr(text, "\"retired\":true") != NULL;
  free(text);
  if (!retired) return 9;
  if (!strstr(logged, "child of fork()")) return 10;
  bml_worker_release(w);
  bml_worker_close(w);
  return 0;
}

/* In a child of fork() the card is the parent's: the child's products
 * (one the parent began before the fork among them) run on the CPU with
 * the same bits and without a call to the driver (whose threads are not
 * in the child: PoCL's wait would never end), release and close return,
 * and the parent's worker goes on with its card. */
Test(worker, a_child_of_fork_leaves_the_card_to_its_parent) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix m = make(300, 1024, 23, true);
  batch b;
  make_batch(&b, 6, 100, 3, 1024, 40, "b");
  expect_exact(w, &m, "m");
  expect_batch(w, &b);
  /* begun just before the fork, big enough for PoCL to be at work on it then */
  matrix big = make(4096, 4096, 24, false);
  size_t card_rows = 0;
  json_t *j = status(w);
  const long long on_card = field(j, "products_on_card");
  json_decref(j);
  cr_assert(on_card >= 7, "the card took %lld of 7 products", on_card); /* the begun one counts when it ends */
  fflush(NULL);
  cr_assert_eq(bml_worker_begin(w, "big", big.w, big.rows, big.n, big.a, &card_rows), 0);
  cr_assert(card_rows > 0, "the card took none of the begun product");
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    logged[0] = '\0';
    bml_log_set_sink(capture, NULL);
    _exit(child_of_fork(w, &big, card_rows, &m, &b));
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the child %s %d (exits: 2-3 the begun product failed or differed, 4-7 a product, 8-9 the status, 10 "
            "the log)", WIFSIGNALED(st) ? "died of signal" : "exited", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  cr_expect_eq(finish_begun(w, &big, card_rows), 0, "the parent's begun product");
  expect_exact(w, &m, "m");
  expect_batch(w, &b);
  j = status(w);
  cr_expect_eq(field(j, "products_on_card"), on_card + 8, "the parent's card after the fork");
  cr_expect(!json_is_true(json_object_get(j, "retired")));
  json_decref(j);
  unmake_batch(&b);
  unmake(&m);
  unmake(&big);
  bml_worker_close(w);
}

/* Another thread inside bml_worker_mat_vec at the fork: its call and its
 * product are not in the child, whose worker is free (it was busy there
 * for ever) and retired at once; and a worker opened in the child (whose
 * parent used OpenCL) gets no card, saying why, rather than hanging in the
 * driver. */
struct busy_worker {
  bml_worker *w;
  matrix *m;
  atomic_bool stop;
  atomic_int done;
};
static void *keep_worker_busy(void *arg) {
  struct busy_worker *b = arg;
  const matrix *m = b->m;
  float *out = malloc(m->rows * sizeof *out);
  for (unsigned i = 0; out && !atomic_load(&b->stop); i++) {
    int rc;
    if (i % 2) { /* begin, the CPU's rows, finish: a product of this thread between them */
      size_t card_rows = 0;
      rc = bml_worker_begin(b->w, "busy", m->w, m->rows, m->n, m->a, &card_rows);
      if (rc == 0) {
        bml_q1_0_mat_vec(m->w + card_rows * (m->n / 128), m->rows - card_rows, m->n, m->a, out + card_rows);
        while ((rc = bml_worker_finish(b->w, out)) == BML_EBUSY) sched_yield();
      }
    } else {
      rc = bml_worker_mat_vec(b->w, "busy", m->w, m->rows, m->n, m->a, out);
    }
    if (rc == 0) atomic_fetch_add(&b->done, 1);
  }
  free(out);
  return NULL;
}

/* 0: the child's worker is free and computes on the CPU; 1: another thread
 * was inside a call at the fork, and the copy stays busy (documented);
 * 2 and up: a fault. */
static int child_of_busy_fork(bml_worker *w, matrix *m) {
  alarm(60);
  char *text = NULL;
  int rc = bml_worker_status_json(w, &text);
  if (rc == BML_EBUSY) { /* torn: busy for good, and close still returns */
    memset(m->got, 0xff, m->rows * sizeof(float));
    if (bml_worker_mat_vec(w, "m", m->w, m->rows, m->n, m->a, m->got) != BML_EBUSY) return 2;
    bml_worker_close(w);
    return 1;
  }
  if (rc != 0) return 3;
  bool retired = strstr(text, "\"retired\":true") != NULL && strstr(text, "\"busy\":false") != NULL;
  free(text);
  if (!retired) return 4;
  memset(m->got, 0xff, m->rows * sizeof(float));
  rc = bml_worker_mat_vec(w, "m", m->w, m->rows, m->n, m->a, m->got);
  if (rc != 0) return rc == BML_ESTATE ? 5 : rc == BML_EBUSY ? 6 : 7;
  if (bml__first_difference(m->want, m->got, m->rows) >= 0) return 8;
  /* the driver is not called again here: no device is listed, and no worker has a card */
  bml_devices *l = NULL;
  if (bml_devices_discover(NULL, &l) != 0) return 9;
  bool said = false;
  for (size_t i = 0; i < bml_devices_note_count(l); i++)
    said |= strstr(bml_devices_note(l, i), "child of fork() of one that used OpenCL") != NULL;
  const size_t listed = bml_devices_count(l);
  bml_devices_free(l);
  if (!said || listed != 0) return 10;
  bml_worker *other = (bml_worker *)1;
  if (bml_worker_open(pool, &other) != 0 || other) return 11;
  bml_worker_close(w);
  return 0;
}

Test(worker, a_fork_while_another_thread_computes_leaves_the_child_a_worker_on_the_cpu) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix busy = make(2048, 2048, 25, false), m = make(256, 1024, 26, true);
  struct busy_worker b = {.w = w, .m = &busy};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, keep_worker_busy, &b), 0);
  while (atomic_load(&b.done) < 2) sched_yield();
  int bad = 0, torn = 0;
  for (int round = 0; round < 6; round++) {
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) _exit(child_of_busy_fork(w, &m));
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 1) torn++;
    else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      bad++;
      cr_log_error("round %d: the child %s %d (2 a torn copy not busy, 3-4 the status, 5 out of order, 6 busy, 7 an "
                   "error, 8 other bits, 9-10 the listing, 11 a new worker)", round,
                   WIFSIGNALED(st) ? "died of signal" : "exited", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
    usleep(3000);
  }
  atomic_store(&b.stop, true);
  pthread_join(t, NULL);
  cr_expect_eq(bad, 0, "%d of 6 children", bad);
  cr_log_info("%d of 6 children met another thread inside a call (busy for good)", torn);
  expect_exact(w, &m, "m"); /* the parent's worker goes on */
  unmake(&busy);
  unmake(&m);
  bml_worker_close(w);
}

/* finish refuses results over the product's inputs whatever the split
 * (with no card rows it once wrote none and checked none). */
Test(worker, finish_refuses_results_over_the_inputs_at_any_share) {
  bml_worker *w = open_worker("0.5");
  matrix m = make(64, 1024, 27, false);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(bml_worker_set_share(w, i ? 0.5 : 0.0), 0);
    size_t card_rows = 0;
    cr_assert_eq(bml_worker_begin(w, "m", m.w, m.rows, m.n, m.a, &card_rows), 0);
    cr_expect_eq(card_rows > 0, i == 1, "share %s: %zu card rows", i ? "0.5" : "0", card_rows);
    cr_expect_eq(bml_worker_finish(w, (float *)(void *)m.a), BML_EINVAL, "share %s", i ? "0.5" : "0");
    cr_assert_eq(bml_q1_0_mat_vec(m.w + card_rows * 8, m.rows - card_rows, m.n, m.a, m.got + card_rows), 0);
    cr_assert_eq(bml_worker_finish(w, m.got), 0);
    cr_expect(bml__first_difference(m.want, m.got, m.rows) < 0);
  }
  unmake(&m);
  bml_worker_close(w);
}

Test(worker, card_alone_gives_the_cpu_bits) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_share(w, 1.0), 0);
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix m = make(777, 3072, 12, true);
  expect_exact(w, &m, "alone");
  cr_expect_eq(bml__worker_held_rows(w, "alone"), 777, "the card took %zu of 777 rows",
               bml__worker_held_rows(w, "alone"));
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 1);
  json_decref(j);
  unmake(&m);
  bml_worker_close(w);
}

Test(worker, bad_environment_values_are_refused_by_name) {
  static const char *const vars[][2] = {{"BANKML_GPU_SHARE", "half"}, {"BANKML_GPU_LIMIT", "lots"},
                                        {"BANKML_GPU", "gpu0"},       {"BANKML_GPU_SOFTWARE", "on"},
                                        {"BANKML_GPU_QUEUES", "9"},   {"BANKML_GPU_QUEUES", "two"}};
  for (size_t i = 0; i < BML_ARRAY_SIZE(vars); i++) {
    setenv(vars[i][0], vars[i][1], 1);
    bml_worker *w = (bml_worker *)0x1;
    logged[0] = '\0';
    bml_log_set_sink(capture, NULL);
    cr_expect_eq(bml_worker_open(pool, &w), BML_EENV, "%s=%s accepted", vars[i][0], vars[i][1]);
    bml_log_set_sink(NULL, NULL);
    cr_expect_null(w);
    cr_expect(strstr(logged, vars[i][0]) && strstr(logged, vars[i][1]), "message does not name %s: %s", vars[i][0], logged);
    unsetenv(vars[i][0]);
  }
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
}

Test(worker, limit_from_the_environment_is_clamped) {
  setenv("BANKML_GPU_LIMIT", "3", 1);
  bml_worker *w = open_worker("0.5");
  json_t *j = status(w);
  cr_expect_float_eq(json_real_value(json_object_get(j, "limit")), 1.0, 1e-12);
  json_decref(j);
  bml_worker_close(w);
}

Test(worker, no_usable_card_is_no_worker_and_says_why) {
  setenv("BANKML_GPU", "off", 1);
  bml_worker *w = (bml_worker *)0x1;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  cr_expect_eq(bml_worker_open(pool, &w), 0);
  bml_log_set_sink(NULL, NULL);
  cr_expect_null(w);
  cr_expect(strstr(logged, "GPU not used: no usable GPU") != NULL, "%s", logged);
}
