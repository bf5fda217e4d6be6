/* pool_int.h -- the pool's own state, shared by pool.c (its threads and jobs) and products.c (its products). */
#ifndef BML_POOL_INT_H
#define BML_POOL_INT_H

#include "base/bml.h"
#include "base/fork.h"

#include <pthread.h>
#include <stdatomic.h>

/* Rows per chunk boundary: 16 floats are one 64-byte line of output, so no
 * two threads write the same line. */
#define CHUNK_ALIGN 16
/* A chunk is at least CHUNK_WEIGHTS weights (one atomic increment of the
 * shared counter is nothing beside it), and at most a 1/CHUNKS_PER_THREAD
 * share of a thread's even part, so that threads that start late or are
 * descheduled leave little for the others at the end. */
#define CHUNK_WEIGHTS (1u << 17)
#define CHUNKS_PER_THREAD 32

/* One thread's range of a job's chunks (products.c): it takes them first,
 * then the others' (home ranges: its rows stay in its own cache from one
 * product to the next). */
struct bml__deal_range {
  _Alignas(64) atomic_size_t next; /* the next chunk to take */
  size_t end;
};

/* The wake-up costs kept for bml__pool_wake_seconds: the most recent ones. */
#define WAKE_SAMPLES 15
/* Job start times kept, by sequence number, for the helpers that arrive
 * after later jobs have started. */
#define STARTS 16

/* The gaps between jobs the helpers' default wait follows (pool.c). */
#define CADENCE_GAPS 4
typedef void (*job_fn)(void *ctx, int self, int nthreads);

struct bml_pool {
  int nthreads;
  pthread_t *threads; /* nthreads - 1 helpers; the caller is thread 0 */
  atomic_uint seq;    /* bumped for each job (and to stop) */
  atomic_uint state;  /* OPEN | helpers inside */
  atomic_int asleep;  /* helpers asleep in the kernel, waiting on seq */
  atomic_int caller_asleep; /* the caller asleep, waiting on state */
  atomic_uint held;   /* bml__pool_hold_helpers */
  atomic_bool stop;
  atomic_flag driving; /* one thread drives the pool at a time */
  job_fn fn;           /* the current job: written while no helper can join */
  void *ctx;
  _Atomic double started[STARTS]; /* job seq's start, in slot seq % STARTS */
  _Atomic double wake[WAKE_SAMPLES]; /* the last wake-up costs, a ring */
  atomic_uint wakes;                 /* samples ever taken */
  atomic_ulong runs;   /* jobs run on every thread (bml__pool_runs) */
  _Atomic double wait_s; /* a helper's wait between jobs before it sleeps (bml_pool_set_wait) */
  atomic_bool wait_set;  /* wait_s set (bml_pool_set_wait, BANKML_POOL_WAIT_MS): no cadence */
  atomic_int quiet;      /* bml__pool_quiet: above 0, no cadence either */
  double last_end;       /* the driving thread's: when its last job ended (0: none yet) */
  double gaps[CADENCE_GAPS]; /* ...the gaps before its last jobs, a ring */
  unsigned ngaps;            /* gaps ever noted */
  struct bml__deal_range *deal; /* nthreads of them: the products' chunks */
  void *scratch;       /* activation scratch of the mat-vec jobs */
  size_t scratch_size;
  bml__fork_watch watch;
#if !defined(__linux__)
  pthread_mutex_t mu; /* the sleeping words' lock and condition */
  pthread_cond_t cv;
#endif
};

/* A product's chunks, dealt to the threads (products.c).  bml__pool_deal
 * deals chunks 0 .. chunks-1 into the threads' ranges in order, thread t's
 * the t-th of nthreads nearly even ones; written before the job starts
 * (its start publishes them to the helpers).  bml__pool_take gives thread
 * self its next chunk in *c: its own range's next while any is left, then
 * the next threads' in turn (*tried, 0 at first: the ranges it found
 * empty); false once every range is empty.  Every chunk is given once; a
 * late thread takes fewer; a thread that takes the same rows product after
 * product finds them in its own cache. */
void bml__pool_deal(struct bml_pool *p, size_t chunks);
bool bml__pool_take(struct bml_pool *p, int self, int *tried, size_t *c);

/* Runs fn(ctx, self, nthreads) on the caller (self 0) and on each helper
 * that joins before the caller's own call returns, and returns when all
 * are done (pool.c). */
void bml__pool_job(struct bml_pool *p, job_fn fn, void *ctx);

#endif
