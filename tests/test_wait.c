/* test_wait.c -- the pool's helpers' wait between products: set, or by default following the caller's cadence. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "golden.h"
#include "poolgate.h"
#include "base/bml.h"
#include "cpu/pool.h"

/* count products of x, each after a sleep of gap_us: every one the single
 * thread's bits, each a job of the pool's threads. */
static void products_after_gaps(bml_pool *p, product *x, size_t rows, size_t n, int count, int gap_us) {
  for (int i = 0; i < count; i++) {
    usleep((useconds_t)gap_us);
    const unsigned long runs = bml__pool_runs(p);
    memset(x->got, 0xff, rows * sizeof(float));
    cr_assert_eq(bml_pool_q1_0_mat_vec(p, x->w, rows, n, x->a, x->got), 0);
    cr_assert(golden_first_difference(x->want, x->got, rows) < 0, "after a gap of %d us: differs", gap_us);
    cr_assert_eq(bml__pool_runs(p), runs + 1, "a product not run as a job of the pool's threads");
  }
}

/* By default the helpers' wait follows the caller's cadence: after two
 * gaps of 30 ms between products they stay awake 1.5 times the longest
 * (a decode's products after its gaps find them on their CPUs); a gap
 * past 250 ms takes the wait back to 1 ms (an idle engine costs no CPU);
 * a pool kept quiet (a worker on a software card), or whose wait is set,
 * keeps its wait.  The bits are the single thread's throughout. */
Test(pool_wait, the_helpers_default_wait_follows_the_callers_cadence, .timeout = 60) {
  const size_t rows = 1000, n = 1024;
  product x = make_product(rows, n, 43);
  bml_pool *p = NULL;
  unsetenv("BANKML_POOL_WAIT_MS");
  cr_assert_eq(bml_pool_open(2, &p), 0);
  cr_expect_eq(bml__pool_wait_seconds(p), 1e-3, "the wait at the open");
  products_after_gaps(p, &x, rows, n, 2, 30000); /* the first product's gap is none */
  cr_expect_eq(bml__pool_wait_seconds(p), 1e-3, "a wait after one gap: %g s", bml__pool_wait_seconds(p));
  products_after_gaps(p, &x, rows, n, 4, 30000);
  double w = bml__pool_wait_seconds(p);
  cr_expect(w >= 1.5 * 30e-3 && w <= 1.5 * 0.25, "after gaps of 30 ms, a wait of %g s", w);
  products_after_gaps(p, &x, rows, n, 1, 300000);
  cr_expect_eq(bml__pool_wait_seconds(p), 1e-3, "after a gap of 300 ms, a wait of %g s", bml__pool_wait_seconds(p));
  cr_expect(pool_helpers_asleep(p, 1, 2000), "the helper not asleep 2 s after a product that ended a cadence");
  bml__pool_quiet(p, true);
  products_after_gaps(p, &x, rows, n, 6, 30000);
  cr_expect_eq(bml__pool_wait_seconds(p), 1e-3, "kept quiet, a wait of %g s", bml__pool_wait_seconds(p));
  bml__pool_quiet(p, false);
  products_after_gaps(p, &x, rows, n, 3, 30000); /* two gaps after the last quiet product */
  w = bml__pool_wait_seconds(p);
  cr_expect(w >= 1.5 * 30e-3 && w <= 1.5 * 0.25, "no longer quiet, after gaps of 30 ms, a wait of %g s", w);
  cr_assert_eq(bml_pool_set_wait(p, 5), 0);
  products_after_gaps(p, &x, rows, n, 6, 30000);
  cr_expect_eq(bml__pool_wait_seconds(p), 5e-3, "a wait set to 5 ms: %g s", bml__pool_wait_seconds(p));
  bml_pool_close(p);
  /* BANKML_POOL_WAIT_MS sets it too */
  setenv("BANKML_POOL_WAIT_MS", "2", 1);
  cr_assert_eq(bml_pool_open(2, &p), 0);
  unsetenv("BANKML_POOL_WAIT_MS");
  products_after_gaps(p, &x, rows, n, 6, 30000);
  cr_expect_eq(bml__pool_wait_seconds(p), 2e-3, "BANKML_POOL_WAIT_MS=2: a wait of %g s", bml__pool_wait_seconds(p));
  bml_pool_close(p);
  free_product(&x);
}
