/* test_token.c -- a decode's token (bml_worker_token_open, bml_token_run): resident on the card where it can be, every row exact, and never other bits when it cannot. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "kernel_variants.h"
#include "logbuf.h"
#include "base/hooks.h"
#include "base/util.h"
#include "card/card.h"
#include "share/access.h"
#include "share/token.h"
#include "share/token_int.h"
#include "cpu/gen.h"

static bml_pool *pool;
static char logged[8192];

static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

static void setup(void) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_LIMIT");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  setenv("BANKML_GPU_SHARE", "1", 1); /* no calibration: the card takes every row */
  bml__oracle_hooks h = {.quick = true};
  bml__oracle_set_hooks(&h);
  cr_assert_eq(bml_pool_open(2, &pool), 0);
}

static void teardown(void) {
  bml_pool_close(pool);
  bml__oracle_set_hooks(NULL);
}

TestSuite(token, .init = setup, .fini = teardown, .timeout = 300);

/* The open says what its check of resident tokens found under
 * BANKML_DEBUG=worker (read once, at the pool's open). */
static void setup_debug(void) {
  setenv("BANKML_DEBUG", "worker", 1);
  setup();
}

TestSuite(token_debug, .init = setup_debug, .fini = teardown, .timeout = 300);

/* A worker, or a skip where there is no OpenCL device at all. */
static bml_worker *open_worker(void) {
  bml_worker *w = NULL;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  const int rc = bml_worker_open(pool, &w);
  bml_log_set_sink(NULL, NULL);
  cr_assert_eq(rc, 0, "open: %s", bml_strerror(rc));
  if (!w && strstr(logged, "no usable GPU is selected")) cr_skip_test("no OpenCL device for a worker here (%s)", logged);
  cr_assert_not_null(w, "no worker, on a device that is there: %s", logged);
  return w;
}

/* Two layers of a small model (Q/K/V, O, gate/up, down), then a head:
 * 15 products in 9 groups, each matrix its own, random and layer-shaped
 * data (-128 quants among them), the CPU's results in want. */
#define LAYERS 2
#define PRODUCTS (LAYERS * 7 + 1)
typedef struct {
  bml_product p[PRODUCTS];
  bml_block_q1_0 *w[PRODUCTS];
  bml_block_q8_0 *a[PRODUCTS];
  float *out[PRODUCTS], *want[PRODUCTS];
} model;

static void make_model(model *m, size_t hidden, uint64_t seed) {
  static const char *const names[8] = {"q", "k", "v", "o", "gate", "up", "down", "head"};
  const size_t rows[8] = {hidden, hidden / 4, hidden / 4, hidden, 3 * hidden, 3 * hidden, hidden, 4 * hidden + 16};
  const size_t cols[8] = {hidden, hidden, hidden, hidden, hidden, hidden, 3 * hidden, hidden};
  static const int group[8] = {0, 0, 0, 1, 2, 2, 3, 4};
  memset(m, 0, sizeof *m);
  for (size_t i = 0; i < PRODUCTS; i++) {
    const int k = i == PRODUCTS - 1 ? 7 : (int)(i % 7);
    const bool starts = k == 0 || group[k] != group[k - 1], shaped = (i / 7) % 2 == 1;
    m->w[i] = malloc(rows[k] * (cols[k] / BML_Q1_0_BLOCK) * sizeof(bml_block_q1_0));
    m->out[i] = malloc(rows[k] * sizeof(float));
    m->want[i] = malloc(rows[k] * sizeof(float));
    cr_assert(m->w[i] && m->out[i] && m->want[i]);
    if (starts) {
      m->a[i] = malloc(cols[k] / BML_Q8_0_BLOCK * sizeof(bml_block_q8_0));
      cr_assert_not_null(m->a[i]);
      cr_assert_eq(bml__gen_q8_0(&seed, m->a[i], cols[k], shaped), 0);
    }
    const bml_block_q8_0 *act = starts ? m->a[i] : m->p[i - 1].act;
    bml__gen_q1_0(&seed, m->w[i], rows[k], cols[k], shaped);
    m->p[i] = (bml_product){names[k], m->w[i], rows[k], cols[k], act, m->out[i]};
    cr_assert_eq(bml_q1_0_mat_vec(m->w[i], rows[k], cols[k], act, m->want[i]), 0);
    memset(m->out[i], 0xff, rows[k] * sizeof(float));
  }
}

static void free_model(model *m) {
  for (size_t i = 0; i < PRODUCTS; i++) free(m->w[i]), free(m->a[i]), free(m->out[i]), free(m->want[i]);
}

/* Every product's rows are the CPU's bits; the outputs spoilt for the next run. */
static void expect_exact(model *m, const char *when) {
  for (size_t i = 0; i < PRODUCTS; i++) {
    const long r = bml__first_difference(m->want[i], m->out[i], m->p[i].rows);
    cr_expect(r < 0, "%s: product %zu (%s) row %ld differs", when, i, m->p[i].name, r);
    memset(m->out[i], 0xff, m->p[i].rows * sizeof(float));
  }
}

static long long on_card(bml_worker *w) {
  char *text = NULL;
  cr_assert_eq(bml_worker_status_json(w, &text), 0);
  json_t *j = json_loads(text, 0, NULL);
  free(text);
  const long long n = json_integer_value(json_object_get(j, "products_on_card"));
  json_decref(j);
  return n;
}

/* Every other product's results kept by the token (its out NULL): read
 * through bml_token_out after its group's run (run_group), the others
 * written to their out. */
static void keep_some(model *m) {
  for (size_t i = 1; i < PRODUCTS; i += 2) m->p[i].out = NULL;
}

/* Runs group g of t on m's products; a kept result copied to m->out
 * (expect_exact compares it), none of another group's given. */
static void run_group(bml_token *t, model *m, size_t g) {
  cr_assert_eq(bml_token_run(t, g), 0, "group %zu", g);
  for (size_t i = 0; i < PRODUCTS; i++) {
    const float *r = bml_token_out(t, i);
    const bool in = i >= bml_token_group_first(t, g) && i < bml_token_group_first(t, g + 1);
    if (m->p[i].out || !in) {
      cr_expect_null(r, "group %zu: product %zu's results given (%s)", g, i, m->p[i].out ? "its own out" : "another group");
      continue;
    }
    cr_assert_not_null(r, "group %zu: product %zu's kept results", g, i);
    memcpy(m->out[i], r, m->p[i].rows * sizeof *r);
  }
}

static void run_all(bml_token *t, model *m) {
  for (size_t g = 0; g < bml_token_groups(t); g++) run_group(t, m, g);
}

Test(token, groups_are_the_products_that_share_an_activation) {
  bml_worker *w = open_worker();
  model m;
  make_model(&m, 256, 1);
  bml_token *t = NULL;
  cr_assert_eq(bml_worker_token_open(w, m.p, PRODUCTS, &t), 0);
  cr_assert_eq(bml_token_groups(t), LAYERS * 4 + 1);
  static const size_t first[] = {0, 3, 4, 6, 7, 10, 11, 13, 14, 15};
  for (size_t g = 0; g <= bml_token_groups(t); g++) cr_expect_eq(bml_token_group_first(t, g), first[g], "group %zu", g);
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

/* A token of m on w, run `tokens` times in order: every result the CPU's
 * bits, every product on the card, the token still resident. */
static bml_token *open_and_run(bml_worker *w, model *m, int tokens, const char *when) {
  bml_token *t = NULL;
  cr_assert_eq(bml_worker_token_open(w, m->p, PRODUCTS, &t), 0);
  const long long before = on_card(w);
  for (int token = 0; token < tokens; token++) {
    run_all(t, m);
    expect_exact(m, when);
  }
  cr_expect(bml_token_resident(t), "%s: the token left the card", when);
  cr_expect_eq(on_card(w) - before, tokens * PRODUCTS, "%s: products on the card", when);
  return t;
}

/* The open's check passes on the card (PoCL here): tokens run resident,
 * every group on the card, in order token after token, and out of order. */
Test(token_debug, a_resident_token_gives_the_cpu_bits_in_order_and_out_of_order) {
  bml_worker *w = open_worker();
  cr_expect(strstr(logged, "a decode's token resident on the card, ") != NULL, "%s", logged);
  model m;
  make_model(&m, 256, 2);
  keep_some(&m);
  bml_token *t = open_and_run(w, &m, 3, "in order");
  /* one launch a token: its first group, run in the launch before, needs
   * a new one; none gave up (a parked launch's given-up ticket once made
   * the next launch give up at once, and the one after it too on a card
   * that starts at once) */
  cr_expect_eq(bml__token_launches(t), 3, "launches for 3 tokens");
  /* backwards, and a group twice: new launches, the same bits */
  for (size_t g = bml_token_groups(t); g-- > 0;) run_group(t, &m, g);
  run_group(t, &m, 4);
  expect_exact(&m, "out of order");
  cr_expect(bml_token_resident(t));
  cr_expect_eq(bml__token_launches(t), 5, "launches after the group run twice");
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

/* Groups planned at one row a work-item (where a product's rows would
 * leave a card's work-groups idle; forced here, where PoCL runs one): the
 * same bits, every group resident, and the rows as planned. */
Test(token, groups_planned_at_one_row_a_work_item_keep_every_bit) {
  bml_worker *w = open_worker();
  for (int rows = 1; rows <= 2; rows++) {
    bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .token_rows = rows};
    bml__worker_set_hooks(w, &h);
    model m;
    make_model(&m, 256, 8 + (uint64_t)rows);
    keep_some(&m);
    bml_token *t = open_and_run(w, &m, 2, rows == 1 ? "one row a work-item" : "the card's rows a work-item");
    for (size_t g = 0; g < bml_token_groups(t); g++) {
      const size_t rpt = bml__token_rpt(t, g);
      if (rows == 1) cr_expect_eq(rpt, 1, "group %zu: %zu rows a work-item", g, rpt);
      else cr_expect_gt(rpt, 0, "group %zu not planned", g);
    }
    bml_token_close(t);
    free_model(&m);
  }
  bml_worker_close(w);
}

/* One row and one lane a work-item (groups of half the card's lr rows) on
 * a card of two lanes a work-item, forced here where PoCL runs one
 * work-group: the same bits, every group resident, planned so. */
Test(token, groups_planned_at_one_row_and_one_lane_a_work_item_keep_every_bit) {
  const bml__oracle_hooks oh = {.quick = true, .lr_shape = {64, 2, 2}};
  bml__oracle_set_hooks(&oh);
  bml_worker *w = open_worker();
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .token_rows = 3};
  bml__worker_set_hooks(w, &h);
  model m;
  make_model(&m, 256, 11);
  keep_some(&m);
  bml_token *t = open_and_run(w, &m, 2, "one row and one lane a work-item");
  for (size_t g = 0; g < bml_token_groups(t); g++) {
    cr_expect_eq(bml__token_plan(t, g), BML_TOKEN_ROWS_ONE_LANE, "group %zu", g);
    cr_expect_eq(bml__token_rpt(t, g), 1, "group %zu", g);
  }
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

/* NVIDIA's build written in C (tests/kernel_variants.h): the resident
 * kernel's requests for the next group's weights and scales made as reads
 * of the same bytes, every group resident, the same bits. */
Test(token, nvidias_build_written_in_c_keeps_every_bit_resident) {
  const bml__oracle_hooks oh = {.quick = true, .device_source = bml_test_nvidia_in_c,
                                .extra_options = BML_TEST_NVIDIA_IN_C_OPTIONS};
  bml__oracle_set_hooks(&oh);
  bml_worker *w = open_worker();
  model m;
  make_model(&m, 256, 13);
  keep_some(&m);
  bml_token *t = open_and_run(w, &m, 3, "NVIDIA's build in C");
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

/* The finest plan whose groups fit the resident kernel's work-groups:
 * bonsai-8b's shapes on a card of 132 (one lane where the card has two). */
Test(token, the_finest_plan_whose_groups_fit_the_work_groups) {
  cr_expect_eq(bml__token_rows_plan(4096, 32, 4, 1, 132), BML_TOKEN_ROWS_ONE, "O, down: 128 groups of 32 rows");
  cr_expect_eq(bml__token_rows_plan(4224, 32, 4, 1, 132), BML_TOKEN_ROWS_ONE, "132 groups of 32 rows");
  cr_expect_eq(bml__token_rows_plan(4225, 32, 4, 1, 132), BML_TOKEN_ROWS_CARD, "133 groups of 32 rows");
  cr_expect_eq(bml__token_rows_plan(6144, 32, 4, 1, 132), BML_TOKEN_ROWS_CARD, "Q/K/V: 192 groups of 32 rows");
  cr_expect_eq(bml__token_rows_plan(24576, 32, 4, 1, 132), BML_TOKEN_ROWS_CARD, "gate/up: 192 groups of 128 rows");
  cr_expect_eq(bml__token_rows_plan(4096, 32, 1, 1, 132), BML_TOKEN_ROWS_CARD, "already one row and one lane");
  cr_expect_eq(bml__token_rows_plan(256, 32, 4, 1, 1), BML_TOKEN_ROWS_CARD, "PoCL's one work-group");
  cr_expect_eq(bml__token_rows_plan(2048, 64, 2, 1, 132), BML_TOKEN_ROWS_ONE, "32 groups of 64 rows");
  /* the H200's shape, 64 x 2, two lanes a work-item */
  cr_expect_eq(bml__token_rows_plan(4096, 64, 2, 2, 132), BML_TOKEN_ROWS_ONE_LANE, "O, down: 128 groups of 32 rows");
  cr_expect_eq(bml__token_rows_plan(4224, 64, 2, 2, 132), BML_TOKEN_ROWS_ONE_LANE, "132 groups of 32 rows");
  cr_expect_eq(bml__token_rows_plan(4225, 64, 2, 2, 132), BML_TOKEN_ROWS_ONE, "67 groups of 64 rows");
  cr_expect_eq(bml__token_rows_plan(6144, 64, 2, 2, 132), BML_TOKEN_ROWS_ONE, "Q/K/V: 96 groups of 64 rows");
  cr_expect_eq(bml__token_rows_plan(24576, 64, 2, 2, 132), BML_TOKEN_ROWS_CARD, "gate/up: 192 groups of 128 rows");
  cr_expect_eq(bml__token_rows_plan(4096, 64, 1, 2, 132), BML_TOKEN_ROWS_ONE_LANE, "one row already, two lanes");
  cr_expect_eq(bml__token_rows_plan(8448, 64, 1, 2, 132), BML_TOKEN_ROWS_CARD, "264 groups of 32 rows, 132 of 64");
  cr_expect_eq(bml__token_rows_plan(256, 64, 2, 2, 1), BML_TOKEN_ROWS_CARD, "PoCL's one work-group");
  cr_expect_eq(bml__token_rows_plan(128, 8, 2, 2, 132), BML_TOKEN_ROWS_ONE, "no half slice under 8 rows");
}

/* The worker's own products between a token's groups (its kernel parked,
 * then launched again), and a release (its matrices uploaded again). */
Test(token, the_workers_own_products_and_a_release_between_groups_keep_every_bit) {
  bml_worker *w = open_worker();
  model m, other;
  make_model(&m, 256, 3);
  keep_some(&m);
  make_model(&other, 128, 4);
  bml_token *t = NULL;
  cr_assert_eq(bml_worker_token_open(w, m.p, PRODUCTS, &t), 0);
  for (size_t g = 0; g < bml_token_groups(t); g++) {
    run_group(t, &m, g);
    if (g == 2) cr_assert_eq(bml_worker_mat_vec_batch(w, other.p, PRODUCTS), 0);
    if (g == 5) bml_worker_release(w);
  }
  expect_exact(&m, "with products and a release between");
  expect_exact(&other, "the worker's batch");
  cr_expect(bml_token_resident(t));
  bml_token_close(t);
  free_model(&m), free_model(&other);
  bml_worker_close(w);
}

/* A kernel that gave up waiting between groups (its spins over, as after
 * an engine's pause) says so in its word: the next group's run reaps it
 * and launches again (no other run asks the driver first), one launch a
 * group, every bit the CPU's, the token resident. */
Test(token, a_kernel_that_gave_up_between_groups_is_launched_again) {
  bml_worker *w = open_worker();
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .token_spins = 1u << 24};
  bml__worker_set_hooks(w, &h);
  model m;
  make_model(&m, 256, 5);
  keep_some(&m);
  bml_token *t = NULL;
  cr_assert_eq(bml_worker_token_open(w, m.p, PRODUCTS, &t), 0);
  const size_t n = bml_token_groups(t);
  for (size_t g = 0; g < n; g++) {
    run_group(t, &m, g);
    const double t0 = bml__now();
    while (!bml__token_gave_up(t) && bml__now() - t0 < 10.0) sched_yield();
    cr_assert(bml__token_gave_up(t), "group %zu: the kernel still waits after its spins", g);
  }
  expect_exact(&m, "launched again");
  cr_expect_eq(bml__token_launches(t), n, "launches for %zu groups", n);
  cr_expect(bml_token_resident(t));
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

/* A card whose resident tokens gave other bits at the open's check: tokens
 * run as the worker's batches, exact, and the log says why. */
Test(token, a_card_whose_resident_token_gives_other_bits_runs_tokens_as_batches) {
  const bml__oracle_hooks h = {.quick = true, .spoil_token_check = true};
  bml__oracle_set_hooks(&h);
  bml_worker *w = open_worker();
  cr_expect(strstr(logged, "a decode's token resident on the card: check.0.q (512x512) row 0 differs (cpu 0x") != NULL,
            "%s", logged);
  model m;
  make_model(&m, 256, 5);
  keep_some(&m);
  bml_token *t = NULL;
  cr_assert_eq(bml_worker_token_open(w, m.p, PRODUCTS, &t), 0);
  cr_expect_not(bml_token_resident(t));
  run_all(t, &m);
  expect_exact(&m, "as batches");
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

Test(token, bad_arguments_are_refused_and_a_closed_worker_runs_nothing) {
  bml_worker *w = open_worker();
  model m;
  make_model(&m, 256, 6);
  bml_token *t = (bml_token *)0x1;
  cr_expect_eq(bml_worker_token_open(w, m.p, 0, &t), BML_EINVAL);
  cr_expect_null(t);
  cr_expect_eq(bml_worker_token_open(NULL, m.p, PRODUCTS, &t), BML_EINVAL);
  cr_expect_eq(bml_worker_token_open(w, m.p, PRODUCTS, NULL), BML_EINVAL);
  bml_product bad[2] = {m.p[0], m.p[1]};
  bad[1].n = 100; /* not whole blocks */
  cr_expect_eq(bml_worker_token_open(w, bad, 2, &t), BML_ESHAPE);
  bad[1] = m.p[1], bad[1].out = (float *)m.p[1].act; /* results over the activation */
  cr_expect_eq(bml_worker_token_open(w, bad, 2, &t), BML_EINVAL);
  bad[1] = m.p[1], bad[1].out = NULL, bad[1].n = 100; /* kept results: the shape is checked all the same */
  cr_expect_eq(bml_worker_token_open(w, bad, 2, &t), BML_ESHAPE);
  bad[1].n = m.p[1].n, bad[1].act = NULL;
  cr_expect_eq(bml_worker_token_open(w, bad, 2, &t), BML_EINVAL);
  cr_assert_eq(bml_worker_token_open(w, m.p, PRODUCTS, &t), 0);
  cr_expect_eq(bml_token_run(t, bml_token_groups(t)), BML_EINVAL);
  cr_expect_eq(bml_token_run(NULL, 0), BML_EINVAL);
  cr_assert_eq(bml_token_run(t, 0), 0);
  cr_expect_null(bml_token_out(NULL, 0));
  cr_expect_null(bml_token_out(t, 0), "a product with an out of its own");
  cr_expect_null(bml_token_out(t, PRODUCTS), "no such product");
  bml_worker_close(w); /* before the token: it runs nothing more */
  cr_expect_eq(bml_token_run(t, 1), BML_ESTATE);
  cr_expect_eq(bml_token_groups(NULL), 0);
  bml_token_close(t);
  bml_token_close(NULL);
  free_model(&m);
}

/* w's status, parsed. */
static json_t *status_of(bml_worker *w) {
  char *text = NULL;
  cr_assert_eq(bml_worker_status_json(w, &text), 0);
  json_t *j = json_loads(text, 0, NULL);
  free(text);
  cr_assert_not_null(j);
  return j;
}

static long long counter(bml_worker *w, const char *name) {
  json_t *j = status_of(w);
  const long long n = json_integer_value(json_object_get(j, name));
  json_decref(j);
  return n;
}

/* Whether w's card is a software device (its status's "software"). */
static bool software(bml_worker *w) {
  json_t *j = status_of(w);
  const bool sw = json_is_true(json_object_get(j, "software"));
  json_decref(j);
  return sw;
}

/* A worker whose groups learn where they run (the trials' times from h), and a resident token of a model. */
static bml_token *learning_token(bml_worker **w, bml__worker_hooks *h, model *m, uint64_t seed) {
  *w = open_worker();
  bml__worker_set_share_calibrated(*w, 0.5); /* not fixed (PoCL's calibration may not use the card at all) */
  cr_assert_eq(bml_worker_set_limit(*w, 1.0), 0);
  bml__worker_set_hooks(*w, h);
  make_model(m, 128, seed);
  keep_some(m);
  bml_token *t = NULL;
  cr_assert_eq(bml_worker_token_open(*w, m->p, PRODUCTS, &t), 0);
  cr_assert(bml_token_resident(t), "the card cannot keep a token here: the trials need it");
  return t;
}

/* A worker whose share is not fixed lets each group learn where it runs:
 * after its trials (5 each way after one untimed) the faster median wins.
 * The trials' times are set by a hook here (the decision, not the
 * machine's noise, is what is tested): a slow card sends every group to
 * the CPU, a fast one keeps every group on the card; every result exact
 * all along, the groups running resident and on the pool in turn. */
static void learn_where(double card_s, double cpu_s, bool card_wins) {
  bml_worker *w;
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .token_seconds = {card_s, cpu_s}};
  model m;
  bml_token *t = learning_token(&w, &h, &m, 7);
  for (int token = 0; token < 11; token++) {
    run_all(t, &m);
    expect_exact(&m, "while learning");
  }
  const long long cpu = counter(w, "products_on_cpu_decided"), card = counter(w, "products_on_card");
  run_all(t, &m);
  expect_exact(&m, "learnt");
  cr_expect_eq(counter(w, "products_on_cpu_decided") - cpu, card_wins ? 0 : PRODUCTS, "on the CPU");
  cr_expect_eq(counter(w, "products_on_card") - card, card_wins ? PRODUCTS : 0, "on the card");
  /* on a software device (PoCL here) the kernel waits for the next group
   * on one of the host's cores: a token whose groups run on the CPU parks
   * it; a card's kernel waits on the card, costing the host nothing, and
   * stays (it ends by itself after its spins) */
  if (card_wins || software(w))
    cr_expect_eq(bml__token_running(t), card_wins, "the kernel %s", card_wins ? "was parked" : "still waits on a core");
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

Test(token, a_token_on_a_slow_card_learns_the_cpu_for_every_group) { learn_where(2e-3, 1e-4, false); }

Test(token, a_token_on_a_fast_card_keeps_every_group_on_the_card) { learn_where(1e-5, 1e-4, true); }

/* A group decided for the CPU by its trials (back to back on a warm pool)
 * whose runs since are slower than the card's trials goes back to the
 * card: the CPU fast in the trials, then slow (the hook's times), every
 * group on the card after its next five runs, every result exact. */
Test(token, a_group_slower_on_the_cpu_than_its_trials_said_goes_back_to_the_card) {
  bml_worker *w;
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .token_seconds = {1e-4, 1e-5}};
  model m;
  bml_token *t = learning_token(&w, &h, &m, 12);
  for (int token = 0; token < 11; token++) run_all(t, &m);
  long long card = counter(w, "products_on_card");
  run_all(t, &m);
  expect_exact(&m, "decided for the CPU");
  cr_assert_eq(counter(w, "products_on_card") - card, 0, "the trials chose the CPU");
  h.token_seconds[1] = 1e-3; /* the CPU's runs since: slower than the card's trials */
  bml__worker_set_hooks(w, &h);
  for (int token = 0; token < 4; token++) run_all(t, &m);
  expect_exact(&m, "on the CPU, slower");
  card = counter(w, "products_on_card");
  run_all(t, &m);
  expect_exact(&m, "back on the card");
  cr_expect_eq(counter(w, "products_on_card") - card, PRODUCTS, "every group back on the card");
  cr_expect(bml__token_running(t), "the kernel runs the token again");
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

/* Once every group has settled, some on the CPU, whole tokens are timed
 * as decided and with every group on the card in turn (five each; the
 * hook sets their times): the faster stays for good, and the token then
 * says it has learnt.  The groups' own trials chose the CPU here. */
static void check_whole_tokens(double decided_s, double card_s, bool back_to_card) {
  bml_worker *w;
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .token_seconds = {1e-4, 1e-5},
                         .token_check_seconds = {decided_s, card_s}};
  model m;
  bml_token *t = learning_token(&w, &h, &m, 21);
  int tokens = 0;
  long long on_card_in_check = 0;
  for (; bml_token_learning(t) && tokens < 60; tokens++) {
    const long long card = counter(w, "products_on_card");
    run_all(t, &m);
    expect_exact(&m, "while learning");
    if (tokens >= 16) on_card_in_check += counter(w, "products_on_card") - card; /* the check's tokens */
  }
  /* 11 trials, 5 more runs of the CPU's groups, then 10 whole tokens */
  cr_expect_eq(tokens, 2 * TOKEN_TRIALS + 1 + TOKEN_TRIALS + 2 * TOKEN_CHECKS, "the token learnt in %d tokens", tokens);
  cr_expect_eq(on_card_in_check, TOKEN_CHECKS * PRODUCTS, "the check's tokens with every group on the card");
  const long long card = counter(w, "products_on_card");
  run_all(t, &m);
  expect_exact(&m, "learnt");
  cr_expect_eq(counter(w, "products_on_card") - card, back_to_card ? PRODUCTS : 0, "where the groups stayed");
  cr_expect_eq(bml_token_learning(t), 0);
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

Test(token, a_split_token_slower_as_a_whole_than_the_card_goes_back_to_the_card) {
  check_whole_tokens(1e-2, 1e-3, true);
}

Test(token, a_split_token_faster_as_a_whole_keeps_its_groups_on_the_cpu) { check_whole_tokens(1e-3, 1e-2, false); }

/* A token with every group decided for the card has nothing to check, and
 * a fixed share learns nothing: neither says it learns once settled. */
Test(token, a_token_of_the_card_alone_or_a_fixed_share_stops_learning) {
  bml_worker *w;
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .token_seconds = {1e-5, 1e-4}};
  model m;
  bml_token *t = learning_token(&w, &h, &m, 22);
  cr_expect_eq(bml_token_learning(t), 1, "a new token learns");
  int tokens = 0;
  for (; bml_token_learning(t) && tokens < 60; tokens++) run_all(t, &m);
  cr_expect_eq(tokens, 2 * TOKEN_TRIALS + 1, "every group on the card after its trials: learnt in %d tokens", tokens);
  cr_assert_eq(bml_worker_set_share(w, 1.0), 0);
  run_all(t, &m);
  expect_exact(&m, "a fixed share");
  cr_expect_eq(bml_token_learning(t), 0);
  cr_expect_eq(bml_token_learning(NULL), 0);
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}

/* A resident run that fails on the card (after its kernel was launched
 * and asked): that group and the token's later ones run as the worker's
 * batches, exactly; the kernel is parked, nothing leaks, and the card
 * stays the worker's. */
Test(token, a_failure_on_the_card_sends_the_token_to_batches_exactly) {
  bml_worker *w = open_worker();
  model m;
  make_model(&m, 256, 8);
  keep_some(&m);
  bml_token *t = NULL;
  cr_assert_eq(bml_worker_token_open(w, m.p, PRODUCTS, &t), 0);
  run_all(t, &m);
  cr_assert(bml_token_resident(t), "the card cannot keep a token here: nothing to fail");
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .fail_tokens = 1};
  bml__worker_set_hooks(w, &h);
  for (int token = 0; token < 2; token++) {
    run_all(t, &m);
    expect_exact(&m, "after a failure");
  }
  cr_expect_not(bml_token_resident(t));
  char *text = NULL;
  cr_assert_eq(bml_worker_status_json(w, &text), 0);
  cr_expect(strstr(text, "\"retired\":false") != NULL, "%s", text);
  free(text);
  bml_token_close(t);
  free_model(&m);
  bml_worker_close(w);
}
