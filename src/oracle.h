/* oracle.h -- the on-card verification, as the worker and the tests use it. */
#ifndef BML_ORACLE_H
#define BML_ORACLE_H

#include "card.h"

/* Test hooks (never read from the environment: a user cannot weaken the
 * oracle by accident). */
typedef struct {
  const char *extra_options; /* appended to every build: -DBML_TEST_UNFUSED_OUTER=1, a bad option */
  bool force_emulated;       /* use the emulated fma even where the native one is exact */
  bool quick;                /* the small shapes only */
  bool tiny;                 /* four small shapes of few rows, and the infinite scale on 32 rows,
                                instead: a simulator's (oclgrind) */
  size_t max_chunk_rows;     /* split matrices into chunks of at most this many rows */
  size_t wg;                 /* work-group size of q1_0_mat_vec (0: 64) */
  cl_ulong local_mem;        /* pretend the card has this much local memory (0: what it says) */
  size_t kernel_wg;          /* pretend each kernel runs at most this many work-items a group
                                (CL_KERNEL_WORK_GROUP_SIZE; 0: what the driver says) */
  size_t kernel_wg_emulated; /* the same for the emulated fma's build only (its longer code
                                may leave a kernel fewer work-items on a GPU) */
  bool open_nomem;           /* the card's open (bml__card_open) runs out of memory */
  bool discrete;             /* treat the card as discrete (no host-unified memory): a discrete
                                card's upload path on PoCL, whose memory is the host's */
  unsigned spoil_batch_check; /* the worker's check of its batches at open (worker.c) sees one
                                 card result changed: bit 0 in its first round, bit 1 in its
                                 second (on one queue, after several gave other bits) */
  bool fail_calibration;      /* the worker's calibration at open fails as on the card
                                (CL_OUT_OF_RESOURCES) */
  size_t lr_shape[3];         /* q1_0_mat_vec_lr built with these rows per slice, slices and lanes
                                 per work-item instead of the tuning's (0 rows: the tuning's) */
  size_t max_groups;          /* a table kernel's launch runs at most this many work-groups
                                 (0: the card's; SIZE_MAX: a work-group per group) */
} bml__oracle_hooks;

/* Sets (NULL: clears) the hooks for every later verification.  Not
 * thread-safe against running ones. */
void bml__oracle_set_hooks(const bml__oracle_hooks *h);
const bml__oracle_hooks *bml__oracle_get_hooks(void);

/* Verifies device d (report index `index`), reporting each check through
 * opt->on_line.  Returns 0 when every check passed, BML_EVERIFY when one
 * did not (a build failure, an OpenCL error and a differing row all refuse
 * the card), or BML_ENOMEM (the card not verified either).  On 0 and when card is not NULL, *card is the
 * open card and *use the build the products must use (native fma when the
 * probe found it exact, else the emulated one); the caller owns both. */
int bml__oracle_verify(const bml__device *d, size_t index, const bml_verify_options *opt, bml__card **card,
                       bml__build *use);

#endif
