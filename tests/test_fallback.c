/* test_fallback.c -- the worker's fallback to the CPU on a real OpenCL device (a GPU where there is one, else PoCL): OpenCL errors, a card that gives other bits, a busy pool. */
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

TestSuite(fallback, .init = setup, .fini = teardown, .timeout = 300);

Test(fallback, opencl_errors_give_rows_to_the_cpu_and_retire_the_card) {
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
Test(fallback, a_card_retired_while_a_batch_is_planned_gives_every_row_to_the_cpu) {
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

Test(fallback, a_busy_pool_does_not_stop_a_product_half_done) {
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
Test(fallback, an_error_in_the_calibration_leaves_the_card_unused) {
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
 * and the log names the kernel, the product and the row.  Every round
 * gives other bits: through zero-copy buffers and copies on several queues
 * where the card has them (a hardware card), then on one. */
Test(fallback, a_card_whose_batches_give_other_bits_on_one_queue_is_not_used) {
  bml_worker *w = open_spoilt(7u);
  cr_expect_null(w, "a card whose batches gave other bits was used");
  cr_expect(strstr(logged, "NOT VERIFIED") != NULL, "%s", logged);
  cr_expect(strstr(logged, "the worker's batch with q1_0_mat_vec_l on 1 queue, copies: check.") != NULL, "%s", logged);
  cr_expect(strstr(logged, "differs (cpu 0x") != NULL, "%s", logged);
  bml_worker_close(w);
}

/* Other bits through zero-copy buffers (a card that shares the host's
 * memory, here PoCL; NVIDIA's driver) and the CPU's through copies: the
 * worker copies its activations and results, and every product is exact. */
Test(fallback, a_card_whose_zero_copy_batches_give_other_bits_copies_instead) {
  bml_worker *w = open_spoilt(0u);
  cr_assert_not_null(w, "%s", logged);
  json_t *j = status(w);
  const bool zero_copy = strcmp(json_string_value(json_object_get(j, "transfers")), "copies") != 0;
  json_decref(j);
  bml_worker_close(w);
  if (!zero_copy) cr_skip_test("this card is given copies from the start: the fall back needs zero-copy");
  w = open_spoilt(1u); /* the first round, through zero-copy buffers */
  cr_assert_not_null(w, "the card was refused though its batches through copies gave the CPU's bits: %s", logged);
  /* ", zero-copy: check.", or ", zero-copy results: check." where only the results were (a discrete card) */
  cr_expect(strstr(logged, ", zero-copy") != NULL && strstr(logged, "its activations and results are copied") != NULL,
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
Test(fallback, a_card_whose_batches_give_other_bits_on_several_queues_runs_on_one) {
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
Test(fallback, a_batch_survives_errors_resting_and_share_zero) {
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

Test(fallback, a_bad_product_refuses_the_whole_batch) {
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

Test(fallback, a_launch_failing_mid_batch_gives_every_row_to_the_cpu_and_the_next_batch_runs) {
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
