/* hooks.h -- every test hook of the library, in one place: plain values any layer may read.
 *
 * The hooks are never read from the environment (a user cannot weaken the
 * oracle or the worker by accident): the tests, the fuzz targets and the
 * tools set them through the calls below.  The oracle's are one set for
 * the process (base/hooks.c holds them); the worker's belong to one worker
 * (share/). */
#ifndef BML_HOOKS_H
#define BML_HOOKS_H

#include "base/bml.h"

/* ---- the oracle's (card/oracle.c, card/program.c, card/verdict.c, the worker's open) ---- */
typedef struct {
  const char *extra_options; /* appended to every build's options: a tunable, a bad option */
  const char *device_source; /* OpenCL C in place of the device's own file ahead of cl/q1_0.cl
                                (cl/nvidia.cl, or none): its hooks written otherwise, a wrong fma */
  const char *source_after;  /* OpenCL C after cl/q1_0*.cl: a kernel in place of one renamed by
                                device_source */
  bool force_emulated;       /* use the emulated fma even where the native one is exact */
  bool quick;                /* the small shapes only */
  bool tiny;                 /* four small shapes of few rows, and the infinite scale on 32 rows,
                                instead: a simulator's (oclgrind) */
  size_t max_chunk_rows;     /* split matrices into chunks of at most this many rows */
  size_t wg;                 /* work-group size of q1_0_mat_vec (0: 64) */
  uint64_t local_mem;        /* pretend the card has this much local memory (0: what it says) */
  size_t kernel_wg;          /* pretend each kernel runs at most this many work-items a group
                                (CL_KERNEL_WORK_GROUP_SIZE; 0: what the driver says) */
  size_t kernel_wg_emulated; /* the same for the emulated fma's build only (its longer code
                                may leave a kernel fewer work-items on a GPU) */
  bool open_nomem;           /* the card's open (bml__card_open) runs out of memory */
  bool discrete;             /* treat the card as discrete (no host-unified memory): a discrete
                                card's upload path on PoCL, whose memory is the host's */
  unsigned spoil_batch_check; /* the worker's check of its batches at open (share/check.c) sees one
                                 card result changed: bit 0 in its first round, bit 1 in its
                                 second (on one queue, after several gave other bits) */
  bool spoil_token_check;     /* the worker's check of resident tokens at open sees other bits */
  bool fail_calibration;      /* the worker's calibration at open fails as on the card
                                (CL_OUT_OF_RESOURCES) */
  size_t lr_shape[3];         /* q1_0_mat_vec_lr built with these rows per slice, slices and lanes
                                 per work-item instead of the tuning's (0 rows: the tuning's) */
  size_t max_groups;          /* a table kernel's launch runs at most this many work-groups
                                 (0: the card's; SIZE_MAX: a work-group per group) */
  bool exact_slabs;           /* the batched checks give each matrix a slab of its own size, so
                                 every host write fills a whole buffer (Oclgrind's uninitialised-
                                 value check forgets a buffer's other bytes at a partial write:
                                 tests/oclgrind-check.c) */
} bml__oracle_hooks;

/* Whether the hooks set are only those a remembered verdict's key holds
 * (extra_options, in the build options; device_source and source_after, in its sources' hash;
 * quick and tiny, in its checks): any other
 * keeps the worker's open from reading or writing the cache (src/card/verdict.c).
 * A new hook is named there. */
bool bml__oracle_hooks_cacheable(void);

/* Sets (NULL: clears) the hooks for every later verification.  Not
 * thread-safe against running ones. */
void bml__oracle_set_hooks(const bml__oracle_hooks *h);
const bml__oracle_hooks *bml__oracle_get_hooks(void);

/* ---- the CPU's (cpu/) --------------------------------------------------------- */
/* Forces a CPU kernel by name (NULL: back to automatic, BANKML_CPU_PATH
 * or the best this CPU supports).  Returns 0, BML_EINVAL (no such kernel
 * in this build) or BML_ENOTSUP (this CPU cannot run it).  Not thread-safe
 * against running products. */
int bml__q1_0_kernel_force(const char *name);
/* While held, p's helper threads join no job, as if descheduled (each
 * waits once it has noticed a job); the caller computes every row.  Not
 * for two tests at once on one pool. */
void bml__pool_hold_helpers(bml_pool *p, bool hold);

/* ---- a worker's (share/) ------------------------------------------------------- */
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
  double token_check_seconds[2]; /* a whole token in a token's check takes these seconds, as decided
                                    and every group on the card (0: its groups' as above) */
  uint32_t token_spins; /* a resident token's kernel gives up waiting for a group after these spins
                           (0: the card's own): a kernel that ends between groups */
  int token_rows;       /* a token's groups planned at one row a work-item: 1 every group, 2 none,
                           3 every group at one row and one lane (where the card has two lanes),
                           0 as bml__token_rows_plan decides (on PoCL's one work-group: none) */
  unsigned kernel;      /* a bml__kernel_id; BML_KERNEL_COUNT (the default): the tuned choice by rows */
  int busy_finishes;    /* the next N finishes meet another thread's call: BML_EBUSY */
  uint64_t offset_limit; /* a submission's card activations (bytes) and results (floats) stay
                            within it; 0: UINT32_MAX (the kernels' offsets of 32 bits) */
  double cpu_rate;       /* the CPU's weights a second as the rest's wait and a kind of batch's try of
                            the CPU alone see it (0: as measured) */
  bool hold_balance;     /* the balances learn nothing (their shares stay where set; no kind of batch
                            tries the CPU alone) */
  bool keep_card;        /* no kind of batch tries the CPU alone (tests of the share's learning, on a
                            card whose part takes the pool's time) */
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
/* Sets the share but keeps the per-shape calibration on (set_share turns it off). */
void bml__worker_set_share_calibrated(bml_worker *w, double share);

#endif
