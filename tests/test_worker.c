/* test_worker.c -- the worker on a real OpenCL device (a GPU where there is one, else PoCL): every row exact, counters, limiter, faults. */
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
#include "base/hooks.h"
#include "card/card.h"
#include "share/plan.h"
#include "share/access.h"
#include "base/util.h"
#include "cpu/pool.h"
#include "cpu/gen.h"
#include "card/kernels.h"

static bml_pool *pool;

static void setup(void) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SHARE");
  unsetenv("BANKML_GPU_LIMIT");
  unsetenv("BANKML_VERIFY");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  bml__oracle_hooks h = {.quick = true}; /* the full oracle has its own tests */
  bml__oracle_set_hooks(&h);
  cr_assert_eq(bml_pool_open(2, &pool), 0);
}

static void teardown(void) {
  bml_pool_close(pool);
  bml__oracle_set_hooks(NULL);
}

TestSuite(worker, .init = setup, .fini = teardown, .timeout = 300);

static char logged[8192];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

/* A worker with share `share` (a string for BANKML_GPU_SHARE), or a skip
 * when there is no OpenCL device at all. */
static bml_worker *open_worker(const char *share) {
  if (share) setenv("BANKML_GPU_SHARE", share, 1);
  bml_worker *w = NULL;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  int rc = bml_worker_open(pool, &w);
  bml_log_set_sink(NULL, NULL);
  cr_assert_eq(rc, 0, "open: %s", bml_strerror(rc));
  /* no device at all is a skip; a card that failed its verification (or
   * any other reason for no worker) is a failure, not a missing device */
  if (!w && strstr(logged, "no usable GPU is selected"))
    cr_skip_test("no OpenCL device for a worker here (%s)", logged);
  cr_assert_not_null(w, "no worker, on a device that is there: %s", logged);
  return w;
}

typedef struct {
  size_t rows, n;
  bml_block_q1_0 *w;
  bml_block_q8_0 *a;
  float *want, *got;
} matrix;

static matrix make(size_t rows, size_t n, uint64_t seed, bool layer) {
  matrix m = {rows, n, malloc(rows * (n / 128) * sizeof(bml_block_q1_0)), malloc(n / 32 * sizeof(bml_block_q8_0)),
              malloc(rows * sizeof(float)), malloc(rows * sizeof(float))};
  cr_assert(m.w && m.a && m.want && m.got);
  bml__gen_q1_0(&seed, m.w, rows, n, layer);
  cr_assert_eq(bml__gen_q8_0(&seed, m.a, n, layer), 0);
  cr_assert_eq(bml_q1_0_mat_vec(m.w, rows, n, m.a, m.want), 0);
  return m;
}

static void unmake(matrix *m) {
  free(m->w), free(m->a), free(m->want), free(m->got);
}

/* A batch of products with their own weights and activations: product i
 * has rows + i % spread rows of n. */
typedef struct {
  size_t count;
  matrix m[64];
  bml_product p[64];
} batch;

static void make_batch(batch *b, size_t count, size_t rows, size_t spread, size_t n, uint64_t seed,
                       const char *name) {
  cr_assert(count <= BML_ARRAY_SIZE(b->m));
  b->count = count;
  for (size_t i = 0; i < count; i++) {
    b->m[i] = make(rows + i % spread, n, seed + i, i % 2);
    b->p[i] = (bml_product){name, b->m[i].w, b->m[i].rows, b->m[i].n, b->m[i].a, b->m[i].got};
  }
}

/* Runs the batch and checks every row of every product. */
static void expect_batch(bml_worker *w, batch *b) {
  for (size_t i = 0; i < b->count; i++) memset(b->m[i].got, 0xff, b->m[i].rows * sizeof(float));
  cr_assert_eq(bml_worker_mat_vec_batch(w, b->p, b->count), 0);
  for (size_t i = 0; i < b->count; i++) {
    long r = bml__first_difference(b->m[i].want, b->m[i].got, b->m[i].rows);
    cr_expect(r < 0, "product %zu: row %ld differs", i, r);
  }
}

static void unmake_batch(batch *b) {
  for (size_t i = 0; i < b->count; i++) unmake(&b->m[i]);
}

static void expect_exact(bml_worker *w, matrix *m, const char *name) {
  memset(m->got, 0xff, m->rows * sizeof(float));
  int rc = bml_worker_mat_vec(w, name, m->w, m->rows, m->n, m->a, m->got);
  cr_assert_eq(rc, 0, "%s: %s", name, bml_strerror(rc));
  long r = bml__first_difference(m->want, m->got, m->rows);
  cr_assert(r < 0, "%s %zux%zu: row %ld differs (cpu 0x%08x, worker 0x%08x)", name, m->rows, m->n, r,
            r < 0 ? 0 : bml__float_bits(m->want[r]), r < 0 ? 0 : bml__float_bits(m->got[r]));
}

static json_t *status(bml_worker *w) {
  char *text = NULL;
  cr_assert_eq(bml_worker_status_json(w, &text), 0);
  json_error_t e;
  json_t *j = json_loads(text, 0, &e);
  cr_assert_not_null(j, "status is not JSON: %s", text);
  free(text);
  return j;
}

static long long field(json_t *j, const char *name) {
  json_t *v = json_object_get(j, name);
  cr_assert(json_is_integer(v), "status has no integer %s", name);
  return json_integer_value(v);
}

static const char *const product_counters[] = {"products_on_card", "products_on_cpu_resting", "products_on_cpu_memory",
                                               "products_on_cpu_error", "products_on_cpu_decided", "products_on_cpu_share"};

static long long total_products(json_t *j) {
  long long sum = 0;
  for (size_t i = 0; i < BML_ARRAY_SIZE(product_counters); i++) sum += field(j, product_counters[i]);
  return sum;
}

static void shares_give_cpu_bits(const char *share) {
  bml_worker *w = open_worker(share);
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0); /* no rests: every product takes the share */
  static const size_t shapes[][2] = {{1, 128}, {67, 2688}, {301, 5120}, {1000, 1024}, {33, 4096}, {4096, 4096}};
  int products = 0;
  double want = strtod(share, NULL);
  for (size_t s = 0; s < BML_ARRAY_SIZE(shapes); s++)
    for (int layer = 0; layer < 2; layer++) {
      matrix m = make(shapes[s][0], shapes[s][1], 100 + s * 2 + (unsigned)layer, layer);
      char name[32];
      snprintf(name, sizeof name, "m%zu.%d", s, layer);
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

/* The card's share is its rate's part of both rates: a card three times
 * as fast as the CPU takes three quarters of the rows. */
Test(worker, the_calibrated_share_is_the_cards_part_of_both_rates) {
  cr_expect_float_eq(bml__calibrated_share(1e-3, 3e-3), 0.75, 1e-15);
  cr_expect_float_eq(bml__calibrated_share(4e-3, 1e-3), 0.2, 1e-15);
  cr_expect_float_eq(bml__calibrated_share(2e-3, 2e-3), 0.5, 1e-15);
}

Test(worker, calibrated_share_gives_the_cpu_bits_or_says_why_not) {
  bml_worker *w = NULL;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  cr_assert_eq(bml_worker_open(pool, &w), 0);
  bml_log_set_sink(NULL, NULL);
  if (!w && strstr(logged, "no usable GPU is selected")) cr_skip_test("no OpenCL device for a worker here (%s)", logged);
  if (!w) { /* the one other answer allowed: a share too small to use the card */
    cr_expect(strstr(logged, "GPU not used: ") && strstr(logged, "calibrated share") && strstr(logged, "below 0.02"),
              "no worker: %s", logged);
    cr_skip_test("the calibrated share is too small to use the card here (%s)", logged);
  }
  matrix m = make(513, 2048, 7, true);
  for (int i = 0; i < 20; i++) expect_exact(w, &m, "calibrated");
  json_t *j = status(w);
  double share = json_real_value(json_object_get(j, "share"));
  cr_expect(share >= 0.02 && share <= 1.0, "share %f", share);
  cr_expect_eq(total_products(j), 20);
  json_decref(j);
  unmake(&m);
  bml_worker_close(w);
}

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

/* Where the status says the products went, and that the card holds at
 * most max_allocated bytes. */
static void expect_placed(bml_worker *w, long long on_card, long long on_cpu_memory, long long max_allocated) {
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), on_card);
  cr_expect_eq(field(j, "products_on_cpu_memory"), on_cpu_memory);
  long long held = field(j, "allocated_bytes");
  cr_expect(held <= max_allocated, "allocated_bytes %lld, more than %lld", held, max_allocated);
  json_decref(j);
}

Test(worker, a_limit_too_small_for_a_matrix_sends_it_to_the_cpu) {
  bml_worker *w = open_worker("0.9");
  cr_assert_eq(bml_worker_set_limit(w, 0.05), 0);
  bml__worker_set_card_mem(w, 1 << 20); /* 1 MiB: 52 KiB within the limit */
  matrix small = make(16, 1024, 3, false), big = make(4096, 4096, 4, true);
  expect_exact(w, &big, "big");
  expect_placed(w, 0, 1, 52428);
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  expect_exact(w, &small, "small"); /* 16 rows fit */
  expect_placed(w, 1, 1, 1 << 20);
  unmake(&small), unmake(&big);
  bml_worker_close(w);
}

/* The limit counts the staging on the card too (the activations copied in,
 * the results out), as the status's allocated_bytes always did: a product
 * whose activation alone passes the limit runs on the CPU.  Before, only
 * the slabs were counted and this one ran on the card (102400 bytes held
 * under a limit of 52428). */
Test(worker, the_staging_counts_against_the_limit) {
  bml_worker *w = open_worker("0.9");
  cr_assert_eq(bml_worker_set_limit(w, 0.05), 0);
  bml__worker_set_card_mem(w, 1 << 20); /* 52428 bytes within the limit */
  matrix wide = make(2, 65536, 91, false), small = make(16, 1024, 92, true);
  expect_exact(w, &wide, "wide"); /* 20 KiB of matrix, 72 KiB of activation */
  expect_placed(w, 0, 1, 52428);
  expect_exact(w, &small, "small"); /* its matrix and staging fit */
  expect_placed(w, 1, 1, 52428);
  unmake(&wide), unmake(&small);
  bml_worker_close(w);
}

/* The staging planned is the staging reserved: a card whose memory is
 * exactly what a product holds takes it.  For n = 3584 the records and
 * activation are 64 + 4032 = 4096 bytes; counted as 4160 (the records'
 * rounding taken as 64 more), they needed a page more and the product
 * went to the CPU. */
Test(worker, a_card_with_exactly_the_room_a_product_needs_takes_it) {
  bml_worker *w = open_worker("0.9");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix m = make(16, 3584, 93, false);
  expect_exact(w, &m, "m");
  json_t *j = status(w);
  const long long need = field(j, "allocated_bytes");
  cr_expect_eq(field(j, "products_on_card"), 1);
  json_decref(j);
  bml_worker_release(w);
  bml__worker_set_card_mem(w, (uint64_t)need);
  expect_exact(w, &m, "m");
  expect_placed(w, 2, 0, need);
  unmake(&m);
  bml_worker_close(w);
}

/* On an integrated card (PoCL is one) a copied staging buffer is counted
 * twice: its buffer and its pinned host copy are both RAM; a zero-copy one
 * (the default there) is one buffer, counted once.  A 16x1024 product (an
 * exact slab of 2560 bytes, staging of a page in and a page out) does not
 * fit a card with room for one copy of the staging when it is copied, and
 * fits one with room for two; zero-copy, room for one is enough. */
Test(worker, an_integrated_cards_copied_staging_counts_twice_and_zero_copy_once) {
  bml_worker *w = open_worker("0.9");
  json_t *j = status(w);
  const bool integrated = json_is_true(json_object_get(j, "integrated"));
  json_decref(j);
  if (!integrated) cr_skip_test("the card is discrete: its staging counts once");
  cr_assert_eq(bml_worker_set_share(w, 1.0), 0);
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_set_transfers(w, 0, 0, -1);
  matrix m = make(16, 1024, 95, false);
  const uint64_t slab = 16 * 8 * 20, in = (64 + bml__card_act_bytes(1024) + 4095) / 4096 * 4096, out = 4096;
  bml__worker_set_card_mem(w, slab + in + out + 100);
  expect_exact(w, &m, "m");
  expect_placed(w, 0, 1, (long long)(slab + in + out + 100));
  bml__worker_set_card_mem(w, slab + 2 * (in + out));
  expect_exact(w, &m, "m");
  expect_placed(w, 1, 1, (long long)(slab + 2 * (in + out)));
  bml_worker_release(w);
  bml__worker_set_transfers(w, 1, 1, -1);
  bml__worker_set_card_mem(w, slab + in + out + 100);
  expect_exact(w, &m, "m");
  expect_placed(w, 2, 1, (long long)(slab + in + out + 100));
  unmake(&m);
  bml_worker_close(w);
}

Test(worker, a_resting_card_sends_products_to_the_cpu) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 0.05), 0); /* rest 19 times each dispatch */
  /* a CPU measured slow on a busy machine would make the rest worth
   * waiting out (the next test's case): the hook's never does */
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .cpu_rate = HUGE_VAL};
  bml__worker_set_hooks(w, &h);
  matrix m = make(2048, 4096, 5, true);
  for (int i = 0; i < 4; i++) expect_exact(w, &m, "m"); /* back to back: the card rests after the first */
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 1, "card products: %lld", field(j, "products_on_card"));
  cr_expect_eq(field(j, "products_on_cpu_resting"), 3);
  cr_expect_eq(field(j, "rests_waited"), 0);
  json_decref(j);
  unmake(&m);
  bml_worker_close(w);
}

Test(worker, a_rest_shorter_than_the_cpu_would_take_is_waited_out) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 0.5), 0); /* rest d after each dispatch of d */
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .cpu_rate = 1.0}; /* the CPU: one weight a second */
  bml__worker_set_hooks(w, &h);
  matrix m = make(2048, 4096, 5, true);
  double rests = 0; /* what was left of the rests when each product came */
  for (int i = 0; i < 4; i++) {
    double left = bml__worker_limiter(w)->rest_until - bml__now();
    rests += left > 0 ? left : 0;
    expect_exact(w, &m, "m"); /* back to back: each after the first meets a rest */
  }
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 4, "card products: %lld", field(j, "products_on_card"));
  cr_expect_eq(field(j, "products_on_cpu_resting"), 0);
  cr_expect_eq(field(j, "rests_waited"), 3);
  double rest = json_real_value(json_object_get(json_object_get(j, "seconds"), "rest"));
  cr_expect(rests > 0 && rest >= 0.9 * rests, "waited %g s for rests of %g s", rest, rests);
  json_decref(j);
  unmake(&m);
  bml_worker_close(w);
}

/* Batches of one product of m at a balance of `share` (learning held), and
 * the rows the card holds after each. */
static void held_after(bml_worker *w, matrix *m, double share, int count, const size_t *want) {
  bml__worker_set_share_calibrated(w, share);
  bml_product one = {"m", m->w, m->rows, m->n, m->a, m->got};
  for (int i = 0; i < count; i++) {
    cr_assert_eq(bml_worker_mat_vec_batch(w, &one, 1), 0);
    cr_assert_lt(bml__first_difference(m->want, m->got, m->rows), 0, "share %.2f, batch %d differs", share, i);
    cr_expect_eq(bml__worker_held_rows(w, "m"), want[i], "share %.2f, batch %d: the card holds %zu rows, not %zu",
                 share, i, bml__worker_held_rows(w, "m"), want[i]);
  }
}

/* One matrix twice in a batch, with two activations (two groups, one
 * entry), after a strike: the second group moved the matrix (fewer rows)
 * under the first, whose rows from the old split to the new were then
 * computed by no one, and the batch returned 0. */
Test(worker, one_matrix_twice_in_a_batch_is_exact_after_a_strike) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .hold_balance = true};
  bml__worker_set_hooks(w, &h);
  matrix m = make(1000, 1024, 21, true), m2 = make(1000, 1024, 22, true);
  memcpy(m2.w, m.w, 1000 * (1024 / 128) * sizeof *m.w); /* m's weights, another activation */
  cr_assert_eq(bml_q1_0_mat_vec(m2.w, 1000, 1024, m2.a, m2.want), 0);
  held_after(w, &m, 0.5, 1, (size_t[]){500});
  held_after(w, &m, 0.4, 1, (size_t[]){500}); /* a strike: 25 % */
  const bml_product two[2] = {{"m", m.w, 1000, 1024, m.a, m.got}, {"m", m.w, 1000, 1024, m2.a, m2.got}};
  for (int rep = 0; rep < 3; rep++) {
    memset(m.got, 0xff, 1000 * sizeof(float));
    memset(m2.got, 0xff, 1000 * sizeof(float));
    cr_assert_eq(bml_worker_mat_vec_batch(w, two, 2), 0);
    const long r1 = bml__first_difference(m.want, m.got, 1000), r2 = bml__first_difference(m2.want, m2.got, 1000);
    cr_expect(r1 < 0, "batch %d, product 0: row %ld differs (cpu 0x%08x, worker 0x%08x)", rep, r1,
              r1 < 0 ? 0 : bml__float_bits(m.want[r1]), r1 < 0 ? 0 : bml__float_bits(m.got[r1]));
    cr_expect(r2 < 0, "batch %d, product 1: row %ld differs", rep, r2);
  }
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 2 + 6, "the card did not take both products of each batch");
  json_decref(j);
  unmake(&m), unmake(&m2);
  bml_worker_close(w);
}

Test(worker, a_held_matrix_moves_for_a_lasting_or_a_very_far_split_and_ever_more_rarely) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .hold_balance = true};
  bml__worker_set_hooks(w, &h);
  matrix m = make(1000, 1024, 21, true);
  held_after(w, &m, 0.5, 1, (size_t[]){500});
  held_after(w, &m, 0.53, 3, (size_t[]){500, 500, 500}); /* 530 wanted: the CPU's part 6 % smaller */
  held_after(w, &m, 0.45, 3, (size_t[]){500, 500, 500}); /* 450: the card's part 11 % larger */
  held_after(w, &m, 0.6, 4, (size_t[]){500, 500, 600, 600}); /* 25 %: the third in a row moves it */
  held_after(w, &m, 0.85, 1, (size_t[]){850}); /* the CPU's 400 rows for 150: on the same way, at once */
  held_after(w, &m, 0.5, 1, (size_t[]){850});  /* 70 %: a strike */
  held_after(w, &m, 0.85, 1, (size_t[]){850}); /* a close wish between far ones: no strike stays */
  held_after(w, &m, 0.5, 2, (size_t[]){850, 850});
  held_after(w, &m, 0.85, 1, (size_t[]){850});
  /* the card's 850 rows for 200 are far, but a move back waits for 8
   * products since the last upload (the second move's), 5 so far */
  held_after(w, &m, 0.2, 3, (size_t[]){850, 850, 200});
  /* 0.96 is the card alone, far (the CPU's part to nothing); back again,
   * it waits for 16 */
  size_t want[16];
  for (int i = 0; i < 16; i++) want[i] = i < 15 ? 200 : 1000;
  held_after(w, &m, 0.96, 16, want);
  held_after(w, &m, 0.9, 1, (size_t[]){1000}); /* the card's part 11 % larger */
  unmake(&m);
  bml_worker_close(w);
}

static double cpu_rate(bml_worker *w) {
  json_t *j = status(w);
  json_t *v = json_object_get(j, "cpu_weights_per_second");
  cr_assert(json_is_real(v), "status has no cpu_weights_per_second");
  double r = json_real_value(v);
  json_decref(j);
  return r;
}

/* The CPU's time of a begin/finish product is the caller's, whatever it
 * did in between: it teaches no rate (a late finish once made the next
 * product wait out a rest as long as the delay, where the CPU takes ms). */
Test(worker, a_late_finish_teaches_no_rate) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix m = make(2048, 4096, 5, true);
  cr_expect_eq(cpu_rate(w), 0.0, "a fixed share: nothing measured at the open");
  expect_exact(w, &m, "m"); /* the worker's own: the CPU's rate measured */
  double rate = cpu_rate(w);
  cr_expect_gt(rate, 0.0, "the CPU's rows of bml_worker_mat_vec taught no rate");
  size_t card_rows, nb = m.n / BML_Q1_0_BLOCK;
  cr_assert_eq(bml_worker_begin(w, "m", m.w, m.rows, m.n, m.a, &card_rows), 0);
  struct timespec late = {0, 100000000};
  nanosleep(&late, NULL);
  cr_assert_eq(bml_pool_q1_0_mat_vec(pool, m.w + card_rows * nb, m.rows - card_rows, m.n, m.a, m.got + card_rows), 0);
  cr_assert_eq(bml_worker_finish(w, m.got), 0);
  cr_assert_lt(bml__first_difference(m.want, m.got, m.rows), 0);
  cr_expect_eq(cpu_rate(w), rate, "the late finish taught the CPU's rate %g (was %g)", cpu_rate(w), rate);
  unmake(&m);
  bml_worker_close(w);
}

/* A move whose upload fails keeps the matrix's history of moves: the move
 * back after it still waits (a failure once reset it, and the move back
 * came at once). */
Test(worker, a_failed_move_keeps_the_history_of_moves) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .hold_balance = true};
  bml__worker_set_hooks(w, &h);
  matrix m = make(1000, 1024, 22, true);
  held_after(w, &m, 0.5, 1, (size_t[]){500});
  held_after(w, &m, 0.85, 1, (size_t[]){850});               /* the first move, up */
  held_after(w, &m, 0.2, 4, (size_t[]){850, 850, 850, 200}); /* back, after 4 */
  h.break_uploads = 1;                                        /* the next upload fails */
  bml__worker_set_hooks(w, &h);
  held_after(w, &m, 0.05, 2, (size_t[]){0, 50}); /* down again at once: it fails, then it is uploaded */
  held_after(w, &m, 0.85, 1, (size_t[]){50});    /* back up waits (8 products) */
  unmake(&m);
  bml_worker_close(w);
}

/* A batch whose card part ends long before the CPU's: the CPU looks at the
 * card between products and sees it done, and the rest runs from then, as
 * long as the card's part took until then, so at the limit 0.5 it is over
 * before the CPU's part is.  It ran from the end of the CPU's part and as
 * long as the whole batch (a rest of about the batch's time).
 * The card (PoCL's threads) must be seen done in the first half of the
 * batch.  A machine busy enough to starve those threads that long leaves a
 * rest of its own (CI's distcheck, its suites side by side, failed here), so
 * the batch (50 ms here) is tried up to five times: the rule broken, every
 * try rests about as long as the batch, and the test fails. */
Test(worker, a_batch_whose_card_finished_first_rests_from_when_it_was_seen_done) {
  /* the CPU's part on one thread: a software card has the other core */
  bml_pool_close(pool);
  cr_assert_eq(bml_pool_open(1, &pool), 0);
  bml_worker *w = open_worker("0.05");
  cr_assert_eq(bml_worker_set_limit(w, 0.5), 0); /* a rest as long as the dispatch */
  cr_assert_eq(bml_worker_set_share(w, 0.02), 0); /* the card's part small, the CPU's long */
  static batch b;
  make_batch(&b, 64, 4096, 1, 4096, 61, "m");
  expect_batch(w, &b); /* the upload */
  enum { TRIES = 5 };
  double rests[TRIES], took[TRIES];
  int tries = 0;
  do {
    struct timespec pause = {0, 400 * 1000 * 1000};
    nanosleep(&pause, NULL); /* any rest is over */
    json_t *j = status(w);
    const long long before = field(j, "products_on_card");
    json_decref(j);
    const double t0 = bml__now();
    expect_batch(w, &b);
    took[tries] = bml__now() - t0;
    rests[tries] = bml__worker_limiter(w)->rest_until - bml__now();
    j = status(w);
    cr_assert_eq(field(j, "products_on_card") - before, 64, "the card took part in %lld of the 64 products",
                 field(j, "products_on_card") - before);
    json_decref(j);
  } while (rests[tries++] > 0.0 && tries < TRIES);
  cr_expect_leq(rests[tries - 1], 0.0,
                "in %d tries the card rested on after the batch where its part was 2 %% of it (the last: %.1f ms "
                "after %.1f ms, the first: %.1f after %.1f)",
                tries, rests[tries - 1] * 1e3, took[tries - 1] * 1e3, rests[0] * 1e3, took[0] * 1e3);
  unmake_batch(&b);
  bml_worker_close(w);
}

Test(worker, opencl_errors_give_rows_to_the_cpu_and_retire_the_card) {
  bml_worker *w = open_worker("0.6");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix m = make(300, 2048, 6, false);
  expect_exact(w, &m, "m");
  bml__worker_hooks h = {.fail_enqueues = 1, .kernel = BML_KERNEL_MAT_VEC8};
  bml__worker_set_hooks(w, &h);
  expect_exact(w, &m, "m");
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_cpu_error"), 1);
  cr_expect(json_is_false(json_object_get(j, "retired")));
  json_decref(j);
  expect_exact(w, &m, "m"); /* a good product resets the count */
  h.fail_enqueues = 3;
  bml__worker_set_hooks(w, &h);
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  for (int i = 0; i < 5; i++) expect_exact(w, &m, "m");
  bml_log_set_sink(NULL, NULL);
  j = status(w);
  cr_expect(json_is_true(json_object_get(j, "retired")), "three errors in a row did not retire the card");
  cr_expect_eq(field(j, "products_on_cpu_error"), 1 + 5);
  cr_expect_eq(field(j, "allocated_bytes"), 0, "a retired card holds no matrices");
  cr_expect(strstr(logged, "GPU not used: ") && strstr(logged, "retired"), "%s", logged);
  json_decref(j);
  bml_worker_close(w);
  /* retired for that worker: a worker opened later verifies the card
   * again and uses it, and its own retirement is said too */
  w = open_worker("0.6");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  expect_exact(w, &m, "m");
  j = status(w);
  cr_expect(json_is_false(json_object_get(j, "retired")));
  cr_expect_eq(field(j, "products_on_card"), 1);
  json_decref(j);
  bml__worker_hooks h3 = {.fail_enqueues = 3, .kernel = BML_KERNEL_MAT_VEC8};
  bml__worker_set_hooks(w, &h3);
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  for (int i = 0; i < 3; i++) expect_exact(w, &m, "m");
  bml_log_set_sink(NULL, NULL);
  cr_expect(strstr(logged, "retired after 3 OpenCL errors") != NULL, "the second retirement was not said: %s",
            logged);
  unmake(&m);
  bml_worker_close(w);
}

/* The third error in a row comes while a batch is planned, at its second
 * group's upload: the card retires, and the first group, planned on the
 * card a moment before, must go to the CPU too (its rows were computed by
 * no one, and the batch returned 0). */
Test(worker, a_card_retired_while_a_batch_is_planned_gives_every_row_to_the_cpu) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix a = make(64, 1024, 61, true), b = make(96, 1024, 62, false);
  expect_exact(w, &a, "a"); /* a is on the card */
  bml__worker_hooks h = {.fail_enqueues = 2, .kernel = BML_KERNEL_COUNT};
  bml__worker_set_hooks(w, &h);
  expect_exact(w, &a, "a");
  expect_exact(w, &a, "a"); /* two errors in a row */
  h = (bml__worker_hooks){.break_uploads = 1, .kernel = BML_KERNEL_COUNT};
  bml__worker_set_hooks(w, &h);
  bml_log_set_sink(capture, NULL);
  batch two = {.count = 2, .m = {a, b}};
  two.p[0] = (bml_product){"a", a.w, a.rows, a.n, a.a, a.got};
  two.p[1] = (bml_product){"b", b.w, b.rows, b.n, b.a, b.got};
  expect_batch(w, &two);
  bml_log_set_sink(NULL, NULL);
  json_t *j = status(w);
  cr_expect(json_is_true(json_object_get(j, "retired")), "the third error did not retire the card");
  cr_expect_eq(field(j, "products_on_card"), 1, "only the first product ran on the card");
  cr_expect_eq(field(j, "products_on_cpu_error"), 2 + 2);
  cr_expect_eq(field(j, "allocated_bytes"), 0, "a retired card holds nothing");
  json_decref(j);
  expect_exact(w, &a, "a"); /* and after it, the CPU */
  unmake(&a), unmake(&b);
  bml_worker_close(w);
}

/* Another thread drives the worker's pool (the application's own product
 * on it) while the worker runs: the worker's CPU rows run on the calling
 * thread, so every product is complete and exact.  Before, the pool's
 * BML_EBUSY came after the card's rows were enqueued, and the submission
 * returned it with half its rows written. */
typedef struct {
  matrix *m;
  atomic_bool stop;
  atomic_int products;
} pool_hog;

static void *hog_pool(void *arg) {
  pool_hog *h = arg;
  while (!atomic_load(&h->stop))
    if (bml_pool_q1_0_mat_vec(pool, h->m->w, h->m->rows, h->m->n, h->m->a, h->m->got) == 0)
      atomic_fetch_add(&h->products, 1);
  return NULL;
}

Test(worker, a_busy_pool_does_not_stop_a_product_half_done) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  matrix big = make(4096, 2048, 70, false);
  batch b;
  make_batch(&b, 3, 100, 3, 1024, 71, "busy");
  pool_hog h = {.m = &big};
  atomic_init(&h.stop, false);
  atomic_init(&h.products, 0);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, hog_pool, &h), 0);
  while (atomic_load(&h.products) == 0) sched_yield();
  for (int i = 0; i < 20; i++) {
    expect_batch(w, &b);
    expect_exact(w, &b.m[0], "busy0");
  }
  atomic_store(&h.stop, true);
  pthread_join(t, NULL);
  unmake_batch(&b), unmake(&big);
  bml_worker_close(w);
}

/* The kernels' records hold 32-bit offsets: a batch whose card activations
 * would end past them sends the groups that do not fit to the CPU (the
 * limit lowered to two groups' activations and records here). */
/* The share a kind of batch learnt (-1: no such kind), by its products and rows. */
static double kind_share(json_t *j, long long products, long long rows) {
  json_t *batches = json_object_get(j, "batches");
  cr_assert(json_is_array(batches), "status has no batches");
  for (size_t i = 0; i < json_array_size(batches); i++) {
    json_t *k = json_array_get(batches, i);
    if (json_integer_value(json_object_get(k, "products")) == products &&
        json_integer_value(json_object_get(k, "rows")) == rows)
      return json_real_value(json_object_get(k, "share"));
  }
  return -1;
}

/* A group the limiter keeps on the CPU: its CPU work does not follow the
 * share, and the kind learns from the rest (counting it, the card finished
 * first at every batch and the learnt rate grew until the share was not a
 * number, and the status failed from then on: at the 249th). */
Test(worker, a_batch_with_a_group_kept_on_the_cpu_learns_from_the_rest) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_set_share_calibrated(w, 0.5);
  batch b;
  make_batch(&b, 3, 100, 1, 1024, 91, "kept");
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT,
                         .offset_limit = 2 * (bml__card_act_bytes(1024) + sizeof(bml__desc)) + 64};
  bml__worker_set_hooks(w, &h);
  for (int i = 0; i < 300; i++) expect_batch(w, &b);
  json_t *j = status(w); /* asserts that the status is given */
  cr_expect_eq(field(j, "products_on_cpu_memory"), 300, "the third group fitted");
  double share = kind_share(j, 3, 300);
  cr_expect(share >= BML_SHARE_MIN && share <= 1.0, "the kind's share %g", share);
  json_decref(j);
  unmake_batch(&b);
  bml_worker_close(w);
}

/* The worker remembers the 64 kinds of batches used last. */
Test(worker, the_kind_of_batch_in_use_is_remembered_past_64_others) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_set_share_calibrated(w, 0.5);
  batch a, others;
  make_batch(&a, 1, 40, 1, 128, 200, "a");
  make_batch(&others, 64, 41, 64, 128, 300, "other"); /* 64 kinds: 41 to 104 rows */
  expect_batch(w, &a);
  for (size_t i = 0; i < 64; i++) {
    memset(others.m[i].got, 0xff, others.m[i].rows * sizeof(float));
    cr_assert_eq(bml_worker_mat_vec_batch(w, &others.p[i], 1), 0);
    cr_expect_lt(bml__first_difference(others.m[i].want, others.m[i].got, others.m[i].rows), 0);
    if (i % 8 == 3) expect_batch(w, &a); /* last at the 60th: the 64th other makes the 65th kind */
  }
  json_t *j = status(w);
  cr_expect_eq(json_array_size(json_object_get(j, "batches")), 64);
  cr_expect_neq(kind_share(j, 1, 40), -1, "the kind in use was forgotten");
  cr_expect_eq(kind_share(j, 1, 41), -1, "the least recently used kind was kept");
  json_decref(j);
  unmake_batch(&a), unmake_batch(&others);
  bml_worker_close(w);
}

Test(worker, groups_past_the_kernels_offsets_run_on_the_cpu) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  batch b;
  make_batch(&b, 6, 100, 3, 1024, 81, "far");
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT,
                         .offset_limit = 2 * (bml__card_act_bytes(1024) + sizeof(bml__desc)) + 64};
  bml__worker_set_hooks(w, &h);
  expect_batch(w, &b);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 2, "two groups fit");
  cr_expect_eq(field(j, "products_on_cpu_memory"), 4);
  cr_expect_eq(field(j, "matrices"), 2, "the groups that do not fit were uploaded all the same");
  json_decref(j);
  h.offset_limit = 0; /* the default: all of them fit */
  bml__worker_set_hooks(w, &h);
  expect_batch(w, &b);
  j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 2 + 6);
  json_decref(j);
  unmake_batch(&b);
  bml_worker_close(w);
}

Test(worker, an_allocation_failure_leaves_that_matrix_on_the_cpu) {
  bml_worker *w = open_worker("0.6");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_hooks h = {.fail_uploads = 1, .kernel = BML_KERNEL_MAT_VEC8};
  bml__worker_set_hooks(w, &h);
  matrix a = make(200, 1024, 8, true), b = make(100, 1024, 9, true);
  expect_exact(w, &a, "a");
  expect_exact(w, &a, "a");
  expect_exact(w, &b, "b");
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_cpu_memory"), 2, "matrix a must stay on the CPU");
  cr_expect_eq(field(j, "products_on_card"), 1, "matrix b goes on the card");
  json_decref(j);
  unmake(&a), unmake(&b);
  bml_worker_close(w);
}

Test(worker, each_shape_is_decided_by_its_timings) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_set_share_calibrated(w, 0.5);
  matrix m = make(1024, 2048, 10, true);
  json_t *j = NULL;
  for (int i = 0; i < 40; i++) {
    expect_exact(w, &m, "m");
    if (j) json_decref(j);
    j = status(w);
    if (field(j, "shapes_tuning") == 0) break;
  }
  cr_expect_eq(field(j, "shapes_tuning"), 0, "the shape is still tuning");
  cr_expect_eq(field(j, "shapes_on_card") + field(j, "shapes_on_cpu"), 1);
  cr_expect_eq(field(j, "products_on_card"), BML_SHAPE_WARMUPS + 6, "the warm-ups and six timings on the card");
  cr_expect_eq(field(j, "products_on_cpu_decided"), 6, "six timings on the CPU alone");
  bool on_cpu = field(j, "shapes_on_cpu") == 1;
  json_decref(j);
  for (int i = 0; i < 3; i++) expect_exact(w, &m, "m");
  j = status(w);
  if (on_cpu) {
    cr_expect_eq(field(j, "products_on_cpu_decided"), 9, "a product of a shape decided for the CPU went to the card");
    cr_expect_eq(field(j, "matrix_bytes"), 0, "a shape decided for the CPU must free its matrices");
  } else
    cr_expect_eq(field(j, "products_on_card"), BML_SHAPE_WARMUPS + 9);
  long long on_card = field(j, "products_on_card");
  json_decref(j);
  /* a batch (of one, here) takes its kind's share whatever the shape's
   * decision, made with single products and their round trips */
  bml_product one = {"m", m.w, m.rows, m.n, m.a, m.got};
  for (int i = 0; i < 3; i++) {
    memset(m.got, 0xff, m.rows * sizeof(float));
    cr_assert_eq(bml_worker_mat_vec_batch(w, &one, 1), 0);
    cr_expect_lt(bml__first_difference(m.want, m.got, m.rows), 0, "a batch of one differs");
  }
  j = status(w);
  cr_expect_eq(field(j, "products_on_card"), on_card + 3, "a batch of one did not take its kind's share");
  cr_expect_eq(field(j, "shapes_tuning"), 0);
  json_decref(j);
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

/* A layer of a model as one batch: Q, K, V (one activation), O, gate and up
 * (one activation), down (n = 3 * hidden), then a head. */
typedef struct {
  matrix m[8];
  bml_product p[8];
} layer;

static void make_layer(layer *l, size_t hidden, uint64_t seed) {
  const size_t rows[8] = {hidden, hidden / 4, hidden / 4, hidden, 3 * hidden, 3 * hidden, hidden, 2 * hidden + 1};
  const size_t n[8] = {hidden, hidden, hidden, hidden, hidden, hidden, 3 * hidden, hidden};
  static const char *const names[8] = {"q", "k", "v", "o", "gate", "up", "down", "head"};
  for (int i = 0; i < 8; i++) l->m[i] = make(rows[i], n[i], seed + (uint64_t)i, i % 2 == 0);
  /* the group members share one activation: make them really the same */
  for (int i = 1; i < 3; i++) memcpy(l->m[i].a, l->m[0].a, hidden / 32 * sizeof(bml_block_q8_0));
  memcpy(l->m[5].a, l->m[4].a, hidden / 32 * sizeof(bml_block_q8_0));
  for (int i = 0; i < 8; i++) {
    cr_assert_eq(bml_q1_0_mat_vec(l->m[i].w, rows[i], n[i], l->m[i].a, l->m[i].want), 0);
    const bml_block_q8_0 *act = i == 1 || i == 2 ? l->m[0].a : i == 5 ? l->m[4].a : l->m[i].a;
    l->p[i] = (bml_product){names[i], l->m[i].w, rows[i], n[i], act, l->m[i].got};
    memset(l->m[i].got, 0xff, rows[i] * sizeof(float));
  }
}

static void expect_layer(layer *l) {
  for (int i = 0; i < 8; i++) {
    long r = bml__first_difference(l->m[i].want, l->m[i].got, l->m[i].rows);
    cr_expect(r < 0, "%s: row %ld differs", l->p[i].name, r);
    memset(l->m[i].got, 0xff, l->m[i].rows * sizeof(float));
  }
}

static void unmake_layer(layer *l) {
  for (int i = 0; i < 8; i++) unmake(&l->m[i]);
}

/* The share of the one shape of `status`, and of its one kind of batch. */
static void learnt_shares(json_t *j, double *shape, double *kind) {
  json_t *shapes = json_object_get(j, "shapes"), *batches = json_object_get(j, "batches");
  cr_assert(json_is_array(shapes) && json_is_array(batches), "status has no shapes or batches");
  *shape = *kind = -1;
  for (size_t i = 0; i < json_array_size(shapes); i++)
    if (json_integer_value(json_object_get(json_array_get(shapes, i), "rows")) == 1024)
      *shape = json_real_value(json_object_get(json_array_get(shapes, i), "share"));
  cr_assert_eq(json_array_size(batches), 1, "kinds of batches: %zu", json_array_size(batches));
  json_t *k = json_array_get(batches, 0);
  cr_expect_eq(json_integer_value(json_object_get(k, "products")), 8);
  *kind = json_real_value(json_object_get(k, "share"));
}

Test(worker, each_shape_and_kind_of_batch_learns_its_share) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_set_share_calibrated(w, 0.5);
  matrix m = make(1024, 2048, 12, true);
  layer l;
  make_layer(&l, 256, 60);
  for (int i = 0; i < 8; i++) {
    expect_exact(w, &m, "m");
    cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
    expect_layer(&l);
  }
  json_t *j = status(w);
  double shape, kind;
  learnt_shares(j, &shape, &kind);
  cr_expect(shape >= BML_SHARE_MIN && shape <= 1.0 && shape != 0.5, "the shape's share %f: nothing learnt", shape);
  cr_expect(kind >= BML_SHARE_MIN && kind <= 1.0 && kind != 0.5, "the batch's share %f: nothing learnt", kind);
  cr_expect_float_eq(json_real_value(json_object_get(j, "share")), 0.5, 1e-12, "the open's share stays");
  json_decref(j);
  /* a fixed share is the one every product takes */
  cr_assert_eq(bml_worker_set_share(w, 0.25), 0);
  cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
  expect_layer(&l);
  expect_exact(w, &m, "m");
  j = status(w);
  learnt_shares(j, &shape, &kind);
  cr_expect_eq(shape, 0.25);
  cr_expect_eq(kind, 0.25);
  json_decref(j);
  unmake_layer(&l);
  unmake(&m);
  bml_worker_close(w);
}

Test(worker, a_batch_with_groups_gives_the_cpu_bits) {
  bml_worker *w = open_worker("0.7");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  layer l;
  make_layer(&l, 512, 40);
  for (int rep = 0; rep < 3; rep++) {
    cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
    expect_layer(&l);
  }
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 24);
  cr_expect_eq(total_products(j), 24);
  cr_expect_eq(field(j, "matrices"), 5, "Q/K/V and gate/up are one entry each: 5 entries for 8 products");
  json_decref(j);
  unmake_layer(&l);
  bml_worker_close(w);
}

/* A batch's CPU rows, a piece of every product, are one run of the pool:
 * a run a product cost a model's token milliseconds. */
Test(worker, a_split_batchs_cpu_rows_are_one_run_of_the_pool) {
  bml_worker *w = open_worker("0.6");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  batch b;
  make_batch(&b, 24, 200, 9, 512, 77, "split");
  expect_batch(w, &b); /* uploads the matrices */
  unsigned long runs = bml__pool_runs(pool);
  expect_batch(w, &b);
  cr_expect_eq(bml__pool_runs(pool) - runs, 1u, "%lu runs of the pool for one batch (want 1)",
               bml__pool_runs(pool) - runs);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 48, "every product shared with the card");
  json_decref(j);
  unmake_batch(&b);
  bml_worker_close(w);
}

/* While another thread drives the pool the worker computes the CPU's rows
 * on the calling thread alone: exact, but no measure of the pool's rate,
 * so nothing is learnt from them (a rate a sixteenth of the pool's kept a
 * kind on the card alone for good). */
Test(worker, rows_computed_alone_while_another_thread_drives_the_pool_teach_nothing) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  batch b;
  make_batch(&b, 6, 300, 5, 1024, 91, "alone");
  expect_batch(w, &b); /* uploads the matrices: teaches nothing */
  bml__worker_set_share_calibrated(w, 0.5);
  expect_batch(w, &b); /* a new kind, at 0.5 */
  bml__worker_set_share_calibrated(w, 0.5);
  json_t *j = status(w);
  const double rate = json_real_value(json_object_get(j, "cpu_weights_per_second"));
  json_decref(j);
  pool_gate *g = pool_gate_hold(pool);
  cr_assert_not_null(g);
  for (int i = 0; i < 5; i++) expect_batch(w, &b);
  j = status(w);
  cr_expect_eq(kind_share(j, 6, 1810), 0.5, "the kind learnt from rows computed alone");
  cr_expect_eq(json_real_value(json_object_get(j, "cpu_weights_per_second")), rate,
               "the CPU's rate learnt from rows computed alone");
  /* and a single product's shape: its balance and the CPU's rate */
  matrix m = make(512, 1024, 92, true);
  expect_exact(w, &m, "alone1");
  bml__worker_set_share_calibrated(w, 0.5);
  for (int i = 0; i < 5; i++) expect_exact(w, &m, "alone1");
  json_decref(j);
  j = status(w);
  json_t *shapes = json_object_get(j, "shapes");
  double shape_share = -1;
  for (size_t i = 0; i < json_array_size(shapes); i++)
    if (json_integer_value(json_object_get(json_array_get(shapes, i), "rows")) == 512)
      shape_share = json_real_value(json_object_get(json_array_get(shapes, i), "share"));
  cr_expect_eq(shape_share, 0.5, "the shape learnt from rows computed alone: %f", shape_share);
  cr_expect_eq(json_real_value(json_object_get(j, "cpu_weights_per_second")), rate,
               "the CPU's rate learnt from a single product's rows computed alone");
  json_decref(j);
  unmake(&m);
  pool_gate_release(g);
  expect_batch(w, &b); /* the pool is free again: it learns */
  j = status(w);
  cr_expect_neq(kind_share(j, 6, 1810), 0.5, "nothing learnt with the pool free");
  json_decref(j);
  unmake_batch(&b);
  bml_worker_close(w);
}

/* A discrete card's upload path (writes, not a mapped buffer) through the
 * worker, forced on PoCL: a model layer as a batch and its products one by
 * one, every row exact, and on the card. */
Test(worker, the_discrete_cards_upload_path_gives_the_cpu_bits) {
  const bml__oracle_hooks h = {.discrete = true, .quick = true};
  bml__oracle_set_hooks(&h);
  bml_worker *w = open_worker("0.7");
  bml__oracle_set_hooks(NULL);
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  layer l;
  make_layer(&l, 384, 44);
  for (int rep = 0; rep < 2; rep++) {
    cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
    expect_layer(&l);
  }
  for (int i = 0; i < 8; i++) expect_exact(w, &l.m[i], l.p[i].name);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 2 * 8 + 8);
  json_decref(j);
  unmake_layer(&l);
  bml_worker_close(w);
}

/* Several queues share buffers between queues, which only NVIDIA's driver
 * was checked at: other cards get one unless asked; PoCL always one. */
Test(worker, several_queues_only_on_nvidias_driver_unless_asked) {
  cr_expect_eq(bml__worker_queues(0, true, false), 4);
  cr_expect_eq(bml__worker_queues(0, false, false), 1);
  cr_expect_eq(bml__worker_queues(3, false, false), 3, "asked for");
  cr_expect_eq(bml__worker_queues(2, true, false), 2, "asked for");
  cr_expect_eq(bml__worker_queues(8, false, true), 1, "a software device");
  cr_expect_eq(bml__worker_queues(0, true, true), 1, "a software device");
}

/* A layer as a batch on a worker asked for `queues` queues, twice, every
 * row exact and on the card; false when the device is software (it runs
 * on one queue whatever is asked). */
static bool batch_on_queues(const char *queues) {
  layer l;
  make_layer(&l, 384, 33);
  setenv("BANKML_GPU_QUEUES", queues, 1);
  bml_worker *w = open_worker("0.8");
  unsetenv("BANKML_GPU_QUEUES");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  json_t *j = status(w);
  bool software = json_is_true(json_object_get(j, "software"));
  cr_expect_eq(field(j, "queues"), software ? 1 : atoi(queues));
  json_decref(j);
  for (int rep = 0; rep < 2; rep++) {
    cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
    expect_layer(&l);
  }
  j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 16, "queues %s: the card did not compute them all", queues);
  json_decref(j);
  bml_worker_close(w);
  unmake_layer(&l);
  return !software;
}

Test(worker, a_batch_on_one_queue_gives_the_cpu_bits) { batch_on_queues("1"); }

Test(worker, a_batch_spread_over_three_and_eight_queues_gives_the_cpu_bits) {
  if (!batch_on_queues("3"))
    cr_skip_test("a software device runs on one queue: three and eight need a hardware card");
  batch_on_queues("8");
}

/* The open runs a small model's batch through the worker's own batched
 * path (a launch per group, copies in by prefixes) with each batched
 * kernel, and says so under BANKML_DEBUG=worker (every time under
 * BANKML_VERIFY=always: else a remembered check is not run again). */
static void setup_debug(void) {
  setenv("BANKML_DEBUG", "worker", 1); /* read once, at the pool's open */
  setup();
  setenv("BANKML_VERIFY", "always", 1);
}

TestSuite(worker_debug, .init = setup_debug, .fini = teardown, .timeout = 300);

Test(worker_debug, the_open_checks_its_batches_on_the_card) {
  bml_worker *w = open_worker("0.5");
  cr_expect(strstr(logged, "the worker's batch with q1_0_mat_vec_l, 14 products in 8 launches") != NULL, "%s", logged);
  cr_expect(strstr(logged, "the worker's batch with q1_0_mat_vec_lr, 14 products in 8 launches") != NULL, "%s",
            logged);
  cr_expect(strstr(logged, "bit-exact") != NULL, "%s", logged);
  bml_worker_close(w);
}

/* A worker opened with the check's card results spoilt (bits: its rounds),
 * BANKML_GPU_QUEUES=3: NULL when the card is refused. */
static bml_worker *open_spoilt(unsigned spoil) {
  const bml__oracle_hooks h = {.quick = true, .spoil_batch_check = spoil};
  bml__oracle_set_hooks(&h);
  setenv("BANKML_GPU_QUEUES", "3", 1);
  setenv("BANKML_GPU_SHARE", "0.5", 1); /* no calibration (the card's rate does not matter here) */
  bml_worker *w = NULL;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  const int rc = bml_worker_open(pool, &w);
  bml_log_set_sink(NULL, NULL);
  unsetenv("BANKML_GPU_QUEUES");
  bml__oracle_set_hooks(NULL);
  cr_assert_eq(rc, 0, "open: %s", bml_strerror(rc));
  if (!w && strstr(logged, "no usable GPU is selected"))
    cr_skip_test("no OpenCL device for a worker here (%s)", logged);
  return w;
}

/* An OpenCL error in the open's calibration is the card's: no worker,
 * logged, as for any reason the card is not used (it came back as the
 * raw OpenCL error, which the header does not list). */
Test(worker, an_error_in_the_calibration_leaves_the_card_unused) {
  const bml__oracle_hooks h = {.quick = true, .fail_calibration = true};
  bml__oracle_set_hooks(&h);
  bml_worker *w = (bml_worker *)0x1;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  const int rc = bml_worker_open(pool, &w);
  bml_log_set_sink(NULL, NULL);
  bml__oracle_set_hooks(NULL);
  if (!w && strstr(logged, "no usable GPU is selected")) cr_skip_test("no OpenCL device for a worker here (%s)", logged);
  cr_expect_eq(rc, 0, "open: %d (%s)", rc, bml_err_name(rc));
  cr_expect_null(w);
  cr_expect(strstr(logged, "GPU not used: ") && strstr(logged, "the calibration's product failed on the card: "
                                                              "CL_OUT_OF_RESOURCES"),
            "%s", logged);
  bml_worker_close(w == (bml_worker *)0x1 ? NULL : w);
}

/* Other bits from the worker's batches on one queue: the card is not used,
 * and the log names the kernel, the product and the row. */
Test(worker, a_card_whose_batches_give_other_bits_on_one_queue_is_not_used) {
  bml_worker *w = open_spoilt(3u);
  cr_expect_null(w, "a card whose batches gave other bits was used");
  cr_expect(strstr(logged, "NOT VERIFIED") != NULL, "%s", logged);
  cr_expect(strstr(logged, "the worker's batch with q1_0_mat_vec_l on 1 queue, copies: check.") != NULL, "%s", logged);
  cr_expect(strstr(logged, "differs (cpu 0x") != NULL, "%s", logged);
  bml_worker_close(w);
}

/* Other bits through zero-copy buffers (a card that shares the host's
 * memory, here PoCL; NVIDIA's driver) and the CPU's through copies: the
 * worker copies its activations and results, and every product is exact. */
Test(worker, a_card_whose_zero_copy_batches_give_other_bits_copies_instead) {
  bml_worker *w = open_spoilt(0u);
  cr_assert_not_null(w, "%s", logged);
  json_t *j = status(w);
  const bool zero_copy = strcmp(json_string_value(json_object_get(j, "transfers")), "copies") != 0;
  json_decref(j);
  bml_worker_close(w);
  if (!zero_copy) cr_skip_test("this card is given copies from the start: the fall back needs zero-copy");
  w = open_spoilt(1u); /* the first round, through zero-copy buffers */
  cr_assert_not_null(w, "the card was refused though its batches through copies gave the CPU's bits: %s", logged);
  cr_expect(strstr(logged, ", zero-copy: check.") != NULL &&
                strstr(logged, "its activations and results are copied") != NULL,
            "%s", logged);
  j = status(w);
  cr_expect_str_eq(json_string_value(json_object_get(j, "transfers")), "copies");
  json_decref(j);
  layer l;
  make_layer(&l, 384, 35);
  cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
  expect_layer(&l);
  for (size_t i = 0; i < 8; i++) cr_assert_eq(bml_worker_mat_vec_batch(w, l.p + i, 1), 0);
  expect_layer(&l);
  unmake_layer(&l);
  bml_worker_close(w);
}

/* Other bits on several queues and the CPU's on one: the card runs on one
 * queue (a hardware card; a software device has one queue from the start,
 * and is refused as above). */
Test(worker, a_card_whose_batches_give_other_bits_on_several_queues_runs_on_one) {
  bml_worker *w = open_spoilt(0u);
  cr_assert_not_null(w, "%s", logged);
  json_t *j = status(w);
  const bool software = json_is_true(json_object_get(j, "software"));
  const bool copies = strcmp(json_string_value(json_object_get(j, "transfers")), "copies") == 0;
  json_decref(j);
  bml_worker_close(w);
  if (software) cr_skip_test("a software device runs on one queue: the fall back to one needs a hardware card");
  /* the rounds on several queues: through zero-copy buffers first, where
   * the card has them, then through copies */
  w = open_spoilt(copies ? 1u : 3u);
  cr_assert_not_null(w, "the card was refused though its batches on one queue gave the CPU's bits: %s", logged);
  cr_expect(strstr(logged, "on 3 queues, ") != NULL && strstr(logged, ": check.") != NULL &&
                strstr(logged, "it runs on one queue") != NULL,
            "%s",
            logged);
  j = status(w);
  cr_expect_eq(field(j, "queues"), 1);
  json_decref(j);
  layer l;
  make_layer(&l, 384, 35);
  cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
  expect_layer(&l);
  unmake_layer(&l);
  bml_worker_close(w);
}

/* The card rests for the third batch: the second's card part at the limit
 * 0.05 leaves a rest of 19 times it.  A layer of 2048 makes that rest
 * about a fifth of a second on PoCL (at 256 it was a few ms, and CI's
 * distcheck, its suites side by side, failed here), and a CPU that the hook makes
 * infinitely fast never waits a rest out. */
Test(worker, a_batch_survives_errors_resting_and_share_zero) {
  bml_worker *w = open_worker("0.5");
  layer l;
  make_layer(&l, 2048, 50);
  bml__worker_hooks h = {.fail_enqueues = 1, .kernel = BML_KERNEL_MAT_VEC_L, .cpu_rate = HUGE_VAL};
  bml__worker_set_hooks(w, &h);
  cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0); /* the error: all on the CPU */
  expect_layer(&l);
  cr_assert_eq(bml_worker_set_limit(w, 0.05), 0);
  cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0); /* on the card */
  expect_layer(&l);
  const double left = bml__worker_limiter(w)->rest_until - bml__now();
  cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0); /* the card rests */
  expect_layer(&l);
  cr_assert_eq(bml_worker_set_share(w, 0.0), 0);
  cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
  expect_layer(&l);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_cpu_error"), 8);
  cr_expect_eq(field(j, "products_on_card"), 8);
  cr_expect_eq(field(j, "products_on_cpu_resting"), 8, "the third batch came %.1f ms before the rest's end",
               left * 1e3);
  cr_expect_eq(field(j, "products_on_cpu_share"), 8);
  cr_expect_eq(field(j, "rests_waited"), 0);
  json_decref(j);
  unmake_layer(&l);
  bml_worker_close(w);
}

Test(worker, a_bad_product_refuses_the_whole_batch) {
  bml_worker *w = open_worker("0.5");
  layer l;
  make_layer(&l, 256, 60);
  l.p[3].n = 100;
  cr_expect_eq(bml_worker_mat_vec_batch(w, l.p, 8), BML_ESHAPE);
  l.p[3].n = 256;
  l.p[5].out = NULL;
  cr_expect_eq(bml_worker_mat_vec_batch(w, l.p, 8), BML_EINVAL);
  for (int i = 0; i < 5; i++) cr_expect_eq(bml__float_bits(l.m[i].got[0]), 0xffffffffu, "product %d was computed", i);
  cr_expect_eq(bml_worker_mat_vec_batch(w, NULL, 3), BML_EINVAL);
  cr_expect_eq(bml_worker_mat_vec_batch(w, l.p, 0), 0);
  unmake_layer(&l);
  bml_worker_close(w);
}

Test(worker, a_batch_of_many_new_matrices_keeps_every_group_valid) {
  /* Many entries are created while one submission is planned: the groups
   * planned first must still point at live entries (ASan watches). */
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  static batch b;
  make_batch(&b, 40, 16, 40, 256, 900, "many");
  for (int rep = 0; rep < 2; rep++) expect_batch(w, &b);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 2 * 40);
  cr_expect_eq(field(j, "matrices"), 40);
  json_decref(j);
  unmake_batch(&b);
  bml_worker_close(w);
}

Test(worker, every_kernel_gives_the_cpu_bits_through_the_worker) {
  static const bml__kernel_id kernels[] = {BML_KERNEL_MAT_VEC, BML_KERNEL_MAT_VEC8, BML_KERNEL_MAT_VEC_L,
                                           BML_KERNEL_MAT_VEC_LR};
  bml_worker *w = open_worker("0.8");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  layer l;
  make_layer(&l, 384, 70);
  for (size_t k = 0; k < BML_ARRAY_SIZE(kernels); k++) {
    bml__worker_hooks h = {.kernel = kernels[k]};
    bml__worker_set_hooks(w, &h);
    cr_assert_eq(bml_worker_mat_vec_batch(w, l.p, 8), 0);
    expect_layer(&l);
  }
  unmake_layer(&l);
  bml_worker_close(w);
}

Test(worker, a_batch_with_many_results_copies_them_out_on_the_pool_exactly) {
  /* 3 x 30001 card rows: more than the 64 Ki floats from which the copy of
   * the results is spread over the pool's threads, and not a multiple of
   * the thread count, so the slices cut products at odd rows. */
  bml_worker *w = open_worker("1");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  static batch b;
  make_batch(&b, 3, 30001, 1, 128, 1200, "tall");
  json_t *before = status(w);
  long long submissions = json_integer_value(json_object_get(json_object_get(before, "seconds"), "submissions"));
  json_decref(before);
  expect_batch(w, &b);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 3);
  json_t *sec = json_object_get(j, "seconds");
  cr_expect_eq(json_integer_value(json_object_get(sec, "submissions")), submissions + 1);
  static const char *const phases[] = {"enqueue", "cpu", "wait", "copy_out"};
  for (size_t i = 0; i < BML_ARRAY_SIZE(phases); i++) {
    json_t *v = json_object_get(sec, phases[i]);
    cr_expect(json_is_real(v) && json_real_value(v) >= 0, "seconds.%s missing or negative", phases[i]);
  }
  cr_expect(json_real_value(json_object_get(sec, "copy_out")) > 0, "no time spent copying results out");
  json_decref(j);
  unmake_batch(&b);
  bml_worker_close(w);
}

Test(worker, a_batch_with_many_activations_repacks_them_on_the_pool_exactly) {
  /* 36 products with their own activations of 8192: over the 256 KiB of
   * activations from which they are repacked on the pool's threads. */
  bml_worker *w = open_worker("1");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  static batch b;
  make_batch(&b, 36, 8, 5, 8192, 1300, "wide");
  expect_batch(w, &b);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 36);
  json_decref(j);
  unmake_batch(&b);
  bml_worker_close(w);
}

/* Three layers in one batch, on a worker whose card is too small for a
 * slab that doubles its matrix memory: one slab per matrix, so the 15
 * matrices (Q/K/V and gate/up fused) are 15 batched launches. */
static bml_worker *many_slabs(layer *l, bml_product *p) {
  bml_worker *w = open_worker("1");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_set_card_mem(w, 32 << 20); /* under the 64 MiB of a doubling slab */
  for (int i = 0; i < 3; i++) {
    make_layer(&l[i], 256 + 128 * i, 60 + (uint64_t)i);
    memcpy(p + 8 * i, l[i].p, sizeof l[i].p);
  }
  return w;
}

Test(worker, a_batch_over_many_slabs_copies_in_by_prefixes_and_reads_back_each_launch_exactly) {
  /* each launch copies in the activations it needs first and reads its
   * results back on its own */
  static layer l[3];
  bml_product p[24];
  bml_worker *w = many_slabs(l, p);
  json_t *before = status(w);
  long long launches0 = field(before, "launches");
  json_decref(before);
  for (int rep = 0; rep < 2; rep++) {
    cr_assert_eq(bml_worker_mat_vec_batch(w, p, 24), 0);
    for (int i = 0; i < 3; i++) expect_layer(&l[i]);
  }
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 48);
  cr_expect_eq(field(j, "matrices"), 15);
  long long per = (field(j, "launches") - launches0) / 2;
  cr_expect_eq(per, 15, "one batched launch per slab: %lld launches per batch, not 15", per);
  json_decref(j);
  /* The layers the other way round: the first slab's launch now needs the
   * last activation (every one is copied in before it), and the launches'
   * order of results is not the products' order. */
  bml_product r[24];
  for (int i = 0; i < 3; i++) memcpy(r + 8 * i, l[2 - i].p, sizeof l[0].p);
  cr_assert_eq(bml_worker_mat_vec_batch(w, r, 24), 0);
  for (int i = 0; i < 3; i++) expect_layer(&l[i]);
  j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 72);
  cr_expect_eq(field(j, "matrices"), 15, "the same matrices, in the same slabs");
  json_decref(j);
  for (int i = 0; i < 3; i++) unmake_layer(&l[i]);
  bml_worker_close(w);
}

Test(worker, a_launch_failing_mid_batch_gives_every_row_to_the_cpu_and_the_next_batch_runs) {
  /* The sixth of 15 launches fails after five launches, their copies in
   * and their reads were enqueued: the card is drained and every card row
   * is computed on the pool; the next batch runs on the card again. */
  static layer l[3];
  bml_product p[24];
  bml_worker *w = many_slabs(l, p);
  bml__worker_hooks h = {.fail_launch = 6, .kernel = BML_KERNEL_COUNT};
  bml__worker_set_hooks(w, &h);
  cr_assert_eq(bml_worker_mat_vec_batch(w, p, 24), 0);
  for (int i = 0; i < 3; i++) expect_layer(&l[i]);
  json_t *j = status(w);
  cr_expect_eq(field(j, "products_on_cpu_error"), 24);
  cr_expect_eq(field(j, "products_on_card"), 0);
  long long launches = field(j, "launches");
  json_decref(j);
  cr_assert_eq(bml_worker_mat_vec_batch(w, p, 24), 0); /* the hook fired once */
  for (int i = 0; i < 3; i++) expect_layer(&l[i]);
  j = status(w);
  cr_expect_eq(field(j, "products_on_card"), 24);
  cr_expect_eq(field(j, "launches") - launches, 15);
  cr_expect(json_is_false(json_object_get(j, "retired")));
  json_decref(j);
  for (int i = 0; i < 3; i++) unmake_layer(&l[i]);
  bml_worker_close(w);
}

/* The products of l's layers as a decode submits them: a batch a group
 * (the products next to each other that share an activation). */
static void run_groups(bml_worker *w, bml_product *p, size_t count) {
  for (size_t i = 0, j; i < count; i = j) {
    for (j = i + 1; j < count && p[j].act == p[i].act; j++) continue;
    cr_assert_eq(bml_worker_mat_vec_batch(w, p + i, j - i), 0, "group at product %zu", i);
  }
}

/* Every way the activations and results travel (copies, zero-copy, each
 * alone) and every way of waiting (a poll first or none) gives the CPU's
 * bits for a batch, a batch a group and single products; and a launch, an
 * enqueue or a wait that fails gives that submission's rows to the CPU,
 * exactly, and the next one runs on the card again. */
Test(worker, every_transfer_and_wait_gives_the_cpu_bits_and_survives_a_failure) {
  static layer l[3];
  bml_product p[24];
  bml_worker *w = many_slabs(l, p);
  for (int mode = 0; mode < 4; mode++) {
    bml__worker_set_transfers(w, mode & 1, (mode >> 1) & 1, mode == 3 ? 1e-3 : 0);
    cr_assert_eq(bml_worker_mat_vec_batch(w, p, 24), 0);
    for (int i = 0; i < 3; i++) expect_layer(&l[i]);
    run_groups(w, p, 24);
    for (int i = 0; i < 3; i++) expect_layer(&l[i]);
    for (int i = 0; i < 8; i++)
      cr_assert_eq(bml_worker_mat_vec(w, l[1].p[i].name, l[1].p[i].wts, l[1].p[i].rows, l[1].p[i].n, l[1].p[i].act,
                                      l[1].p[i].out),
                   0);
    expect_layer(&l[1]);
    static const char *const faults[] = {"launch", "enqueue", "wait"};
    for (int f = 0; f < 3; f++) {
      json_t *j = status(w);
      const long long errors = field(j, "products_on_cpu_error"), on_card = field(j, "products_on_card");
      json_decref(j);
      bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT};
      if (f == 0) h.fail_launch = 1;
      if (f == 1) h.fail_enqueues = 1;
      if (f == 2) h.fail_waits = 1;
      bml__worker_set_hooks(w, &h);
      run_groups(w, p, 3); /* q, k, v: one group, whose one submission fails */
      run_groups(w, p + 3, 21);
      for (int i = 0; i < 3; i++) expect_layer(&l[i]);
      j = status(w);
      cr_expect_eq(field(j, "products_on_cpu_error") - errors, 3, "mode %d, a failed %s", mode, faults[f]);
      cr_expect_eq(field(j, "products_on_card") - on_card, 21, "mode %d, after a failed %s", mode, faults[f]);
      cr_expect(json_is_false(json_object_get(j, "retired")));
      json_decref(j);
    }
  }
  for (int i = 0; i < 3; i++) unmake_layer(&l[i]);
  bml_worker_close(w);
}
