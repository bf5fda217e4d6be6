/* pool.h -- the thread pool's internals: jobs, its wake-up (pool.c), products of many pieces in one run (products.c). */
#ifndef BML_POOL_H
#define BML_POOL_H

#include "base/bml.h"

/* Runs fn(ctx, tid, nthreads) once for each tid of 0 .. nthreads-1 (the
 * pool's size) and returns when all are done: tid 0 on the caller, each
 * other on whichever thread takes it first (a helper thread, or the caller
 * after its own when the helpers are late: never two at once on one
 * thread, but not always on distinct ones).  While another thread drives
 * the pool, fn(ctx, 0, 1) on the caller alone.  For work other than
 * products, such as copying a batch's results out: fn must do all of it
 * for any nthreads, and no tid may wait for another. */
void bml__pool_run(bml_pool *p, void (*fn)(void *ctx, int tid, int nthreads), void *ctx);
/* The pool's wake-up cost in seconds: the median of the last 15 delays
 * from the start of a job to the arrival of a helper thread that was
 * asleep in the kernel when it started (a job of a pool whose helpers
 * spin or yield has none); 0 before any, and for a pool of one thread.
 * While helpers are arriving, the caller computes the rows alone. */
double bml__pool_wake_seconds(const bml_pool *p);
/* The helper threads asleep in the kernel now (after about 1 ms idle): a
 * job started now waits about bml__pool_wake_seconds for them. */
int bml__pool_asleep(const bml_pool *p);
/* How long the helpers stay awake after a job now, in seconds: the wait
 * set (bml_pool_set_wait), else 1 ms or the cadence's (pool.c). */
double bml__pool_wait_seconds(const bml_pool *p);
/* While quiet (a count: true adds one, false takes one away), the helpers'
 * default wait is 1 ms whatever the cadence: a worker whose card's threads
 * run on the pool's CPUs (a software device) keeps them from waiting
 * awake beside that card's part. */
void bml__pool_quiet(bml_pool *p, bool quiet);
/* Jobs the pool has run on more than one thread (for tests). */
unsigned long bml__pool_runs(bml_pool *p);
/* Rows of one product for bml__pool_mat_vec_many: rows [0, rows) of w
 * against a, into out. */
typedef struct {
  const bml_block_q1_0 *w;
  size_t rows, n;
  const bml_block_q8_0 *a;
  float *out;
} bml__cpu_piece;
/* The calling thread's tick of bml__pool_mat_vec_many comes at least every
 * this many weights that it computes. */
#define BML__POOL_TICK_WEIGHTS (1u << 18)
/* The pieces' rows in one run of the pool, the threads taking chunks of
 * (piece, rows) dealt as a product's are (the same bits as a product
 * each: a row is always one thread's); tick(tick_ctx), when given, runs on
 * the calling thread only: once first, then before any step of its rows
 * that would take it past BML__POOL_TICK_WEIGHTS weights since the last
 * (a step: at most that many weights, or one row).  While another thread
 * drives the pool, or without the memory for every thread's scratch, the
 * calling thread computes them alone (the same bits: a submission never
 * stops half done with BML_EBUSY), ticking before each step, and says so
 * in *alone (may be NULL): its time is then no measure of the pool's.  0,
 * the error bml_q1_0_mat_vec gives a piece's arguments (before any is
 * computed) or BML_ENOMEM. */
int bml__pool_mat_vec_many(bml_pool *p, const bml__cpu_piece *pc, size_t count, void (*tick)(void *ctx),
                           void *tick_ctx, bool *alone);

#endif
