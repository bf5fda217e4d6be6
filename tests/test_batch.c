/* test_batch.c -- the worker's batches on the card (a GPU where there is one, else PoCL): queues, uploads, slabs, transfers and the check at open. */
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

TestSuite(batch, .init = setup, .fini = teardown, .timeout = 300);

/* A discrete card's upload path (writes, not a mapped buffer) through the
 * worker, forced on PoCL: a model layer as a batch and its products one by
 * one, every row exact, and on the card. */
Test(batch, the_discrete_cards_upload_path_gives_the_cpu_bits) {
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
Test(batch, several_queues_only_on_nvidias_driver_unless_asked) {
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

Test(batch, a_batch_on_one_queue_gives_the_cpu_bits) { batch_on_queues("1"); }

Test(batch, a_batch_spread_over_three_and_eight_queues_gives_the_cpu_bits) {
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

Test(batch, a_batch_of_many_new_matrices_keeps_every_group_valid) {
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

Test(batch, every_kernel_gives_the_cpu_bits_through_the_worker) {
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

Test(batch, a_batch_with_many_results_copies_them_out_on_the_pool_exactly) {
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

Test(batch, a_batch_with_many_activations_repacks_them_on_the_pool_exactly) {
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

Test(batch, a_batch_over_many_slabs_copies_in_by_prefixes_and_reads_back_each_launch_exactly) {
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
Test(batch, every_transfer_and_wait_gives_the_cpu_bits_and_survives_a_failure) {
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
