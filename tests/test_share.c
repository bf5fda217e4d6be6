/* test_share.c -- the worker's shares on a real OpenCL device (a GPU where there is one, else PoCL): calibrated, learnt per shape and kind of batch, held matrices that move. */
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

TestSuite(share, .init = setup, .fini = teardown, .timeout = 300);

/* The card's share is its rate's part of both rates: a card three times
 * as fast as the CPU takes three quarters of the rows. */
Test(share, the_calibrated_share_is_the_cards_part_of_both_rates) {
  cr_expect_float_eq(bml__calibrated_share(1e-3, 3e-3), 0.75, 1e-15);
  cr_expect_float_eq(bml__calibrated_share(4e-3, 1e-3), 0.2, 1e-15);
  cr_expect_float_eq(bml__calibrated_share(2e-3, 2e-3), 0.5, 1e-15);
}

Test(share, calibrated_share_gives_the_cpu_bits_or_says_why_not) {
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
Test(share, one_matrix_twice_in_a_batch_is_exact_after_a_strike) {
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

Test(share, a_held_matrix_moves_for_a_lasting_or_a_very_far_split_and_ever_more_rarely) {
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

/* The CPU's time of a begin/finish product is the caller's, whatever it
 * did in between: it teaches no rate (a late finish once made the next
 * product wait out a rest as long as the delay, where the CPU takes ms). */
Test(share, a_late_finish_teaches_no_rate) {
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
Test(share, a_failed_move_keeps_the_history_of_moves) {
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

/* A group the limiter keeps on the CPU: its CPU work does not follow the
 * share, and the kind learns from the rest (counting it, the card finished
 * first at every batch and the learnt rate grew until the share was not a
 * number, and the status failed from then on: at the 249th). */
Test(share, a_batch_with_a_group_kept_on_the_cpu_learns_from_the_rest) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_set_share_calibrated(w, 0.5);
  batch b;
  make_batch(&b, 3, 100, 1, 1024, 91, "kept");
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .keep_card = true,
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
Test(share, the_kind_of_batch_in_use_is_remembered_past_64_others) {
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

Test(share, groups_past_the_kernels_offsets_run_on_the_cpu) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  batch b;
  make_batch(&b, 6, 100, 3, 1024, 81, "far");
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .keep_card = true,
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

Test(share, an_allocation_failure_leaves_that_matrix_on_the_cpu) {
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

Test(share, each_shape_is_decided_by_its_timings) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .keep_card = true}; /* a batch of one keeps its kind's share */
  bml__worker_set_hooks(w, &h);
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

/* The share of the one shape of `status`, and of its one kind of batch. */
static void learnt_shares(json_t *j, double *shape, double *kind) {
  json_t *shapes = json_object_get(j, "shapes"), *batches = json_object_get(j, "batches");
  cr_assert(json_is_array(shapes) && json_is_array(batches), "status has no shapes or batches");
  *shape = shape_field(j, 1024, "share");
  cr_assert_eq(json_array_size(batches), 1, "kinds of batches: %zu", json_array_size(batches));
  json_t *k = json_array_get(batches, 0);
  cr_expect_eq(json_integer_value(json_object_get(k, "products")), 8);
  *kind = json_real_value(json_object_get(k, "share"));
}

Test(share, each_shape_and_kind_of_batch_learns_its_share) {
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

Test(share, a_batch_with_groups_gives_the_cpu_bits) {
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
Test(share, a_split_batchs_cpu_rows_are_one_run_of_the_pool) {
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

/* A worker that learns, with b's matrices uploaded and b's kind new at
 * share 0.5 (the upload teaches nothing). */
static bml_worker *learning_batch(batch *b, size_t count, size_t rows, size_t spread, uint64_t seed, const char *name) {
  bml_worker *w = open_worker("0.5");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .keep_card = true}; /* the share's learning, not the CPU alone */
  bml__worker_set_hooks(w, &h);
  make_batch(b, count, rows, spread, 1024, seed, name);
  expect_batch(w, b);
  bml__worker_set_share_calibrated(w, 0.5);
  return w;
}

/* While another thread drives the pool the worker computes the CPU's rows
 * on the calling thread alone: exact, but no measure of the pool's rate,
 * so nothing is learnt from them (a rate a sixteenth of the pool's kept a
 * kind on the card alone for good). */
Test(share, rows_computed_alone_while_another_thread_drives_the_pool_teach_nothing) {
  batch b;
  bml_worker *w = learning_batch(&b, 6, 300, 5, 91, "alone");
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
  const double shape_share = shape_field(j, 512, "share");
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

/* The helpers of a pool asleep in the kernel (after about 1 ms idle), within 10 s. */
static bool helpers_asleep(bml_pool *p) { return pool_helpers_asleep(p, bml_pool_threads(p) - 1, 10000); }

static void empty_job(void *ctx, int tid, int nthreads) { (void)ctx, (void)tid, (void)nthreads; }
/* The hook between a product's begin and its CPU rows: a job that wakes
 * the helpers, and a wait until none sleeps.  A woken helper is awake for
 * a millisecond (it yields, then sleeps again), which a caller descheduled
 * on a busy host can miss: then another job wakes it again (a wait for
 * none asleep alone could last for ever). */
static void run_empty_job(void *ctx) {
  for (;;) {
    bml__pool_run(ctx, empty_job, NULL);
    const double t0 = bml__now();
    while (bml__pool_asleep(ctx) > 0 && bml__now() - t0 < 5e-3) sched_yield();
    if (bml__pool_asleep(ctx) == 0) return;
  }
}

/* A CPU part after an idle gap waits for the pool's helpers to wake: the
 * balance learns that wait apart from the CPU's rate (the pool's measured
 * wake-up) and predicts the next split with it, so a decode's split after
 * its gaps is not slower than the card alone (tests/test_limiter.c runs
 * the rule); where the helpers were awake, it expects none. */
Test(share, a_cpu_part_after_an_idle_gap_is_learnt_with_the_pools_wake_up) {
  batch b;
  bml_worker *w = learning_batch(&b, 5, 300, 4, 93, "gap");
  /* on a busy host a gap's wake-up may fall to a job before the CPU part
   * (a helper descheduled past the start), and the host's swings may send
   * the kind to the card alone (no CPU part): each submission is a new
   * kind's, at 0.5, and three of forty show it */
  int seen = 0, n = 0;
  double share = -1;
  for (; n < 40 && seen < 3; n++) {
    bml__worker_set_share_calibrated(w, 0.5);
    cr_assert(helpers_asleep(pool), "the pool's helper never slept");
    expect_batch(w, &b);
    json_t *j = status(w);
    const double wake = kind_field(j, 5, 1506, "cpu_wake_seconds"); /* 300 + i % 4 rows each */
    share = kind_share(j, 5, 1506);
    json_decref(j);
    cr_expect(wake >= 0.0 && wake < 1.0, "a wake-up of %g s", wake); /* the pool's median of its last ones */
    seen += wake > 0.0;
  }
  cr_expect_eq(seen, 3, "after idle gaps, %d of %d submissions expected a wake-up (the pool's: %g s; the share %g)",
               seen, n, bml__pool_wake_seconds(pool), share);
  /* a single product whose CPU part finds the helpers awake (a job just
   * run: they yield for a while before they sleep) expects none */
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .in_mat_vec = run_empty_job, .in_mat_vec_ctx = pool};
  bml__worker_set_hooks(w, &h);
  matrix m = make(512, 1024, 94, true);
  for (int i = 0; i < 8; i++) {
    cr_assert(helpers_asleep(pool), "the pool's helper never slept");
    expect_exact(w, &m, "awake");
  }
  json_t *j = status(w);
  const double shape_wake = shape_field(j, 512, "cpu_wake_seconds");
  json_decref(j);
  cr_expect_eq(shape_wake, 0.0, "the helpers awake: the shape expects a wake-up of %g s", shape_wake);
  unmake(&m);
  unmake_batch(&b);
  bml_worker_close(w);
}

/* A kind of batch tries the CPU alone once the CPU's rate says it would
 * beat the kind's last submission with the card (the hook's rate here, so
 * that the try does not hang on the host's noise), whole batches go to the
 * CPU, and every result stays the CPU's bits, on the CPU alone and with
 * the card.  Which side wins is timing (doc/WORKER.md; on PoCL, whose
 * threads take the pool's cores, `bench --split --model bonsai-1.7b`
 * shows it), so it is not asserted here. */
Test(share, a_kind_of_batch_tries_the_cpu_alone_and_keeps_the_bits) {
  bml_worker *w = open_worker("0.5"); /* not the open's calibration: a loaded host's measure can refuse PoCL */
  bml__worker_set_share_calibrated(w, 0.5);
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0); /* no rest sends a batch to the CPU untimed */
  bml__worker_hooks h = {.kernel = BML_KERNEL_COUNT, .cpu_rate = 1e15};
  bml__worker_set_hooks(w, &h);
  batch b;
  make_batch(&b, 4, 512, 1, 2048, 77, "alone");
  /* a loaded host's swings may move the matrices (a submission that
   * uploads is not timed): up to 40 batches */
  json_t *j = NULL;
  long long decided = 0;
  int n = 0;
  while (n < 40 && decided == 0) {
    expect_batch(w, &b), n++;
    json_decref(j);
    j = status(w);
    decided = field(j, "products_on_cpu_decided");
  }
  for (int i = 0; i < 4; i++) expect_batch(w, &b), n++; /* on the CPU alone or with the card: exact */
  json_decref(j);
  j = status(w);
  decided = field(j, "products_on_cpu_decided");
  cr_expect(decided >= 4 && decided % 4 == 0, "%lld products sent whole to the CPU in %d batches", decided, n);
  cr_expect_eq(total_products(j), 4 * n);
  json_t *kinds = json_object_get(j, "batches"), *k = json_array_get(kinds, 0);
  cr_assert(json_is_boolean(json_object_get(k, "cpu_alone")), "no cpu_alone in the status's batches");
  json_decref(j);
  unmake_batch(&b);
  bml_worker_close(w);
}

/* A worker on a software card (PoCL here, whose threads run on the pool's
 * CPUs) keeps the pool's helpers from waiting awake through the gaps of
 * its products' cadence, from its open to its close; closed, the pool
 * follows the cadence again. */
Test(share, a_worker_on_a_software_card_keeps_the_pools_wait_short) {
  bml_worker *w = open_worker("0.5");
  matrix m = make(512, 1024, 95, true);
  for (int i = 0; i < 5; i++) {
    usleep(30000);
    expect_exact(w, &m, "after a gap");
  }
  cr_expect_eq(bml__pool_wait_seconds(pool), 1e-3, "with the worker open, a wait of %g s", bml__pool_wait_seconds(pool));
  bml_worker_close(w);
  for (int i = 0; i < 4; i++) {
    usleep(30000);
    cr_assert_eq(bml_pool_q1_0_mat_vec(pool, m.w, m.rows, m.n, m.a, m.got), 0);
  }
  cr_expect(bml__pool_wait_seconds(pool) >= 1.5 * 30e-3, "closed, a wait of %g s", bml__pool_wait_seconds(pool));
  unmake(&m);
}
