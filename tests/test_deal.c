/* test_deal.c -- a product's chunks dealt to the pool's threads: each thread its own range first, every chunk once. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/bml.h"
#include "cpu/pool.h"
#include "cpu/pool_int.h"

static bml_pool *open_pool(int threads) {
  bml_pool *p = NULL;
  cr_assert_eq(bml_pool_open(threads, &p), 0);
  return p;
}

/* Thread self takes every chunk it can, alone; want[] is the order. */
static void expect_takes(bml_pool *p, int self, const size_t *want, size_t count) {
  int tried = 0;
  size_t c, i = 0;
  for (; bml__pool_take(p, self, &tried, &c); i++) {
    cr_assert_lt(i, count, "thread %d took a chunk past the %zu dealt", self, count);
    cr_expect_eq(c, want[i], "thread %d's take %zu: chunk %zu, not %zu", self, i, c, want[i]);
  }
  cr_expect_eq(i, count, "thread %d took %zu chunks of %zu", self, i, count);
  cr_expect_not(bml__pool_take(p, self, &tried, &c), "a chunk after every range was empty");
}

/* Ten chunks on three threads: ranges 0-3, 4-6, 7-9.  A thread alone takes
 * its own range, then the next threads' in turn, back round to the first. */
Test(deal, a_thread_alone_takes_its_range_then_the_next_ones) {
  bml_pool *p = open_pool(3);
  static const size_t one[] = {4, 5, 6, 7, 8, 9, 0, 1, 2, 3}, two[] = {7, 8, 9, 0, 1, 2, 3, 4, 5, 6},
                      zero[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  bml__pool_deal(p, 10);
  expect_takes(p, 1, one, 10);
  bml__pool_deal(p, 10);
  expect_takes(p, 2, two, 10);
  bml__pool_deal(p, 10);
  expect_takes(p, 0, zero, 10);
  bml_pool_close(p);
}

/* Threads that take in turn each start in their own range; what a late
 * one finds is what the others left. */
Test(deal, threads_in_turn_start_in_their_own_ranges) {
  bml_pool *p = open_pool(3);
  bml__pool_deal(p, 10);
  int tried[3] = {0, 0, 0};
  size_t c;
  cr_assert(bml__pool_take(p, 2, &tried[2], &c));
  cr_expect_eq(c, 7);
  cr_assert(bml__pool_take(p, 0, &tried[0], &c));
  cr_expect_eq(c, 0);
  for (size_t want = 8; want <= 9; want++) {
    cr_assert(bml__pool_take(p, 2, &tried[2], &c));
    cr_expect_eq(c, want);
  }
  cr_assert(bml__pool_take(p, 2, &tried[2], &c)); /* its range empty: thread 0's next */
  cr_expect_eq(c, 1);
  static const size_t rest[] = {2, 3, 4, 5, 6}; /* thread 0 comes back: its own, then thread 1's */
  expect_takes(p, 0, rest, 5);
  cr_expect_not(bml__pool_take(p, 1, &tried[1], &c), "thread 1 found a chunk left");
  bml_pool_close(p);
}

/* Fewer chunks than threads: the last threads' ranges are empty and they
 * take the first ones'; no chunk at all gives nothing. */
Test(deal, fewer_chunks_than_threads) {
  bml_pool *p = open_pool(4);
  static const size_t two[] = {0, 1};
  bml__pool_deal(p, 2);
  expect_takes(p, 3, two, 2);
  bml__pool_deal(p, 0);
  expect_takes(p, 2, NULL, 0);
  bml_pool_close(p);
  p = open_pool(1);
  static const size_t three[] = {0, 1, 2};
  bml__pool_deal(p, 3);
  expect_takes(p, 0, three, 3);
  bml_pool_close(p);
}

enum { RACERS = 4, CHUNKS = 200000 };

typedef struct {
  bml_pool *p;
  int self;
  atomic_uchar *seen;
  atomic_int *start;
  size_t taken;
} racer;

static void *race(void *arg) {
  racer *r = arg;
  while (!atomic_load(r->start)) {
  }
  int tried = 0;
  for (size_t c; bml__pool_take(r->p, r->self, &tried, &c); r->taken++) {
    atomic_fetch_add(&r->seen[c], 1);
  }
  return NULL;
}

/* Threads taking at once: every chunk is given exactly once (which thread
 * begins where depends on when each runs: the test above says). */
Test(deal, threads_at_once_get_every_chunk_once) {
  bml_pool *p = open_pool(RACERS);
  atomic_uchar *seen = calloc(CHUNKS, sizeof *seen);
  cr_assert_not_null(seen);
  atomic_int start = 0;
  racer r[RACERS];
  pthread_t th[RACERS];
  bml__pool_deal(p, CHUNKS);
  for (int t = 0; t < RACERS; t++) {
    r[t] = (racer){p, t, seen, &start, 0};
    cr_assert_eq(pthread_create(&th[t], NULL, race, &r[t]), 0);
  }
  atomic_store(&start, 1);
  size_t total = 0;
  for (int t = 0; t < RACERS; t++) {
    pthread_join(th[t], NULL);
    total += r[t].taken;
  }
  cr_expect_eq(total, CHUNKS);
  for (size_t c = 0; c < CHUNKS; c++) cr_assert_eq(atomic_load(&seen[c]), 1, "chunk %zu given %d times", c, atomic_load(&seen[c]));
  free(seen);
  bml_pool_close(p);
}
