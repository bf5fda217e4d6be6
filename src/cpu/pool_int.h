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
  void *scratch;       /* activation scratch of the mat-vec jobs */
  size_t scratch_size;
  bml__fork_watch watch;
#if !defined(__linux__)
  pthread_mutex_t mu; /* the sleeping words' lock and condition */
  pthread_cond_t cv;
#endif
};

/* Runs fn(ctx, self, nthreads) on the caller (self 0) and on each helper
 * that joins before the caller's own call returns, and returns when all
 * are done (pool.c). */
void bml__pool_job(struct bml_pool *p, job_fn fn, void *ctx);

#endif
