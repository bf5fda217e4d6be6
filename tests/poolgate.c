/* poolgate.c -- pool test helpers: a thread that drives a pool and holds it until released; a wait for sleep; a product's operands. */
#include "poolgate.h"
#include "cpu/gen.h"
#include "cpu/pool.h"
#include "cpu/q1_0.h"

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

struct pool_gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool started, release;
  bml_pool *p;
  pthread_t thread;
};

/* The job: its caller (tid 0) holds the pool until released. */
static void hold(void *ctx, int tid, int nthreads) {
  (void)nthreads;
  pool_gate *g = ctx;
  if (tid != 0) return;
  pthread_mutex_lock(&g->mu);
  g->started = true;
  pthread_cond_broadcast(&g->cv);
  while (!g->release) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void *drive(void *arg) {
  pool_gate *g = arg;
  bml__pool_run(g->p, hold, g);
  return NULL;
}

pool_gate *pool_gate_hold(bml_pool *p) {
  pool_gate *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->p = p;
  if (pthread_create(&g->thread, NULL, drive, g) != 0) {
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
    return NULL;
  }
  pthread_mutex_lock(&g->mu);
  while (!g->started) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
  return g;
}

void pool_gate_release(pool_gate *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->release = true;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  pthread_join(g->thread, NULL);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

bool pool_helpers_asleep(bml_pool *p, int want, int ms) {
  for (int i = 0; i < ms && bml__pool_asleep(p) != want; i++) usleep(1000);
  return bml__pool_asleep(p) == want;
}

product make_product(size_t rows, size_t n, uint64_t seed) {
  product x = {malloc(rows * (n / 128) * sizeof *x.w), malloc(n / 32 * sizeof *x.a), malloc(rows * sizeof *x.want),
               malloc(rows * sizeof *x.got)};
  cr_assert(x.w && x.a && x.want && x.got);
  bml__gen_q1_0(&seed, x.w, rows, n, true);
  cr_assert_eq(bml__gen_q8_0(&seed, x.a, n, true), 0);
  cr_assert_eq(bml_q1_0_mat_vec(x.w, rows, n, x.a, x.want), 0);
  return x;
}

void free_product(product *x) { free(x->w), free(x->a), free(x->want), free(x->got); }
