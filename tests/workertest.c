/* workertest.c -- what the suites of the worker share: its pool and open, matrices, batches and layers with their CPU answers, its status. */
#include "workertest.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "logbuf.h"
#include "base/hooks.h"
#include "card/oracle.h"
#include "card/tune.h"
#include "cpu/q1_0.h"
#include "cpu/gen.h"
#include "card/card.h"
#include "card/slab.h"
#include "card/program.h"
#include "card/kernels.h"

bml_pool *pool;

void setup(void) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SHARE");
  unsetenv("BANKML_GPU_LIMIT");
  unsetenv("BANKML_POOL_WAIT_MS"); /* the pool's wait follows its cadence (a test of the share reads it) */
  unsetenv("BANKML_VERIFY");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  bml__oracle_hooks h = {.quick = true}; /* the full oracle has its own tests */
  bml__oracle_set_hooks(&h);
  cr_assert_eq(bml_pool_open(2, &pool), 0);
}

void teardown(void) {
  bml_pool_close(pool);
  bml__oracle_set_hooks(NULL);
}

char logged[8192];
void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

/* A worker with share `share` (a string for BANKML_GPU_SHARE), or a skip
 * when there is no OpenCL device at all. */
bml_worker *open_worker(const char *share) {
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

matrix make(size_t rows, size_t n, uint64_t seed, bool layer_shaped) {
  matrix m = {rows, n, malloc(rows * (n / 128) * sizeof(bml_block_q1_0)), malloc(n / 32 * sizeof(bml_block_q8_0)),
              malloc(rows * sizeof(float)), malloc(rows * sizeof(float))};
  cr_assert(m.w && m.a && m.want && m.got);
  bml__gen_q1_0(&seed, m.w, rows, n, layer_shaped);
  cr_assert_eq(bml__gen_q8_0(&seed, m.a, n, layer_shaped), 0);
  cr_assert_eq(bml_q1_0_mat_vec(m.w, rows, n, m.a, m.want), 0);
  return m;
}

void unmake(matrix *m) {
  free(m->w), free(m->a), free(m->want), free(m->got);
}

void make_batch(batch *b, size_t count, size_t rows, size_t spread, size_t n, uint64_t seed,
                       const char *name) {
  cr_assert(count <= BML_ARRAY_SIZE(b->m));
  b->count = count;
  for (size_t i = 0; i < count; i++) {
    b->m[i] = make(rows + i % spread, n, seed + i, i % 2);
    b->p[i] = (bml_product){name, b->m[i].w, b->m[i].rows, b->m[i].n, b->m[i].a, b->m[i].got};
  }
}

/* Runs the batch and checks every row of every product. */
void expect_batch(bml_worker *w, batch *b) {
  for (size_t i = 0; i < b->count; i++) memset(b->m[i].got, 0xff, b->m[i].rows * sizeof(float));
  cr_assert_eq(bml_worker_mat_vec_batch(w, b->p, b->count), 0);
  for (size_t i = 0; i < b->count; i++) {
    long r = bml__first_difference(b->m[i].want, b->m[i].got, b->m[i].rows);
    cr_expect(r < 0, "product %zu: row %ld differs", i, r);
  }
}

void unmake_batch(batch *b) {
  for (size_t i = 0; i < b->count; i++) unmake(&b->m[i]);
}

void expect_exact(bml_worker *w, matrix *m, const char *name) {
  memset(m->got, 0xff, m->rows * sizeof(float));
  int rc = bml_worker_mat_vec(w, name, m->w, m->rows, m->n, m->a, m->got);
  cr_assert_eq(rc, 0, "%s: %s", name, bml_strerror(rc));
  long r = bml__first_difference(m->want, m->got, m->rows);
  cr_assert(r < 0, "%s %zux%zu: row %ld differs (cpu 0x%08x, worker 0x%08x)", name, m->rows, m->n, r,
            r < 0 ? 0 : bml__float_bits(m->want[r]), r < 0 ? 0 : bml__float_bits(m->got[r]));
}

json_t *status(bml_worker *w) {
  char *text = NULL;
  cr_assert_eq(bml_worker_status_json(w, &text), 0);
  json_error_t e;
  json_t *j = json_loads(text, 0, &e);
  cr_assert_not_null(j, "status is not JSON: %s", text);
  free(text);
  return j;
}

long long field(json_t *j, const char *name) {
  json_t *v = json_object_get(j, name);
  cr_assert(json_is_integer(v), "status has no integer %s", name);
  return json_integer_value(v);
}

const char *const product_counters[] = {"products_on_card", "products_on_cpu_resting", "products_on_cpu_memory",
                                               "products_on_cpu_error", "products_on_cpu_decided", "products_on_cpu_share"};

long long total_products(json_t *j) {
  long long sum = 0;
  for (size_t i = 0; i < BML_ARRAY_SIZE(product_counters); i++) sum += field(j, product_counters[i]);
  return sum;
}

double cpu_rate(bml_worker *w) {
  json_t *j = status(w);
  json_t *v = json_object_get(j, "cpu_weights_per_second");
  cr_assert(json_is_real(v), "status has no cpu_weights_per_second");
  double r = json_real_value(v);
  json_decref(j);
  return r;
}

/* A number of a kind of batch in the status (-1: no such kind), by its products and rows. */
double kind_field(json_t *j, long long products, long long rows, const char *key) {
  json_t *batches = json_object_get(j, "batches");
  cr_assert(json_is_array(batches), "status has no batches");
  for (size_t i = 0; i < json_array_size(batches); i++) {
    json_t *k = json_array_get(batches, i);
    if (json_integer_value(json_object_get(k, "products")) == products &&
        json_integer_value(json_object_get(k, "rows")) == rows)
      return json_real_value(json_object_get(k, key));
  }
  return -1;
}

double kind_share(json_t *j, long long products, long long rows) { return kind_field(j, products, rows, "share"); }

double shape_field(json_t *j, long long rows, const char *key) {
  json_t *shapes = json_object_get(j, "shapes");
  for (size_t i = 0; i < json_array_size(shapes); i++)
    if (json_integer_value(json_object_get(json_array_get(shapes, i), "rows")) == rows)
      return json_real_value(json_object_get(json_array_get(shapes, i), key));
  return -1;
}

void make_layer(layer *l, size_t hidden, uint64_t seed) {
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

void expect_layer(layer *l) {
  for (int i = 0; i < 8; i++) {
    long r = bml__first_difference(l->m[i].want, l->m[i].got, l->m[i].rows);
    cr_expect(r < 0, "%s: row %ld differs", l->p[i].name, r);
    memset(l->m[i].got, 0xff, l->m[i].rows * sizeof(float));
  }
}

void unmake_layer(layer *l) {
  for (int i = 0; i < 8; i++) unmake(&l->m[i]);
}

/* Three layers in one batch, on a worker whose card is too small for a
 * slab that doubles its matrix memory: one slab per matrix, so the 15
 * matrices (Q/K/V and gate/up fused) are 15 batched launches. */
bml_worker *many_slabs(layer *l, bml_product *p) {
  bml_worker *w = open_worker("1");
  cr_assert_eq(bml_worker_set_limit(w, 1.0), 0);
  bml__worker_set_card_mem(w, 32 << 20); /* under the 64 MiB of a doubling slab */
  for (int i = 0; i < 3; i++) {
    make_layer(&l[i], 256 + 128 * i, 60 + (uint64_t)i);
    memcpy(p + 8 * i, l[i].p, sizeof l[i].p);
  }
  return w;
}
