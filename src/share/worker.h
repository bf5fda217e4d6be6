/* worker.h -- the worker's internals that the tests reach: fault injection and the limiter's state. */
#ifndef BML_WORKER_H
#define BML_WORKER_H

#include "share/limiter.h"
#include "card/oracle.h"

/* Test hooks: faults on demand, and the kernel the worker launches. */
typedef struct {
  int fail_enqueues;    /* the next N enqueues fail with CL_OUT_OF_RESOURCES */
  int fail_uploads;     /* the next N uploads fail with CL_MEM_OBJECT_ALLOCATION_FAILURE */
  int break_uploads;    /* the next N uploads fail with CL_INVALID_OPERATION (an error, not memory) */
  int fail_launch;      /* the next batch's launch number N (from 1) fails with CL_OUT_OF_RESOURCES, after
                           the launches, copies and reads before it were enqueued (0: none) */
  int fail_waits;       /* the next N waits for the card see its command failed
                           (CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) */
  int fail_tokens;      /* the next N resident runs of a token's group fail as on the card
                           (CL_OUT_OF_RESOURCES), after its kernel was launched and asked */
  double token_seconds[2]; /* a token's timed trials take these seconds, on the card and on the CPU,
                              instead of their own (0: as measured): the decision, without the noise */
  bml__kernel_id kernel; /* BML_KERNEL_COUNT (the default): the tuned choice by rows */
  int busy_finishes;    /* the next N finishes meet another thread's call: BML_EBUSY */
  uint64_t offset_limit; /* a submission's card activations (bytes) and results (floats) stay
                            within it; 0: UINT32_MAX (the kernels' offsets of 32 bits) */
  double cpu_rate;       /* the CPU's weights a second as the rest's wait sees it (0: as measured) */
  bool hold_balance;     /* the balances learn nothing (their shares stay where set) */
  void (*in_mat_vec)(void *ctx); /* called by bml_worker_mat_vec between its begin and its CPU
                                    rows, outside the worker: what another thread's calls meet */
  void *in_mat_vec_ctx;
} bml__worker_hooks;

void bml__worker_set_hooks(bml_worker *w, const bml__worker_hooks *h);
/* Sets how w's activations go in and results come back (1: zero-copy, 0:
 * copies, -1: as they are) and how long a wait polls (seconds; < 0: as it
 * is), instead of the open's choice, for tests and experiments: no check
 * of the batches follows.  Call with no product in flight. */
void bml__worker_set_transfers(bml_worker *w, int acts_zero_copy, int outs_zero_copy, double wait_spin);
/* Pretends the card has `bytes` of memory (the limiter's test). */
void bml__worker_set_card_mem(bml_worker *w, uint64_t bytes);
const bml__limiter *bml__worker_limiter(const bml_worker *w);
/* The rows the card holds of the matrix called `name` (the first member of
 * its group), 0 when none. */
size_t bml__worker_held_rows(const bml_worker *w, const char *name);
/* The queues a card gets: BANKML_GPU_QUEUES's (asked, 0 when unset), else 4
 * on NVIDIA's driver and 1 elsewhere; always 1 on a software device. */
int bml__worker_queues(int asked, bool nvidia_driver, bool software);
/* The open's share from one product's seconds on the card and on the CPU:
 * card rate / (card rate + CPU rate). */
double bml__calibrated_share(double card_s, double cpu_s);
/* Sets the share but keeps the per-shape calibration on (set_share turns it off). */
void bml__worker_set_share_calibrated(bml_worker *w, double share);

#endif
