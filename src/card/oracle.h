/* oracle.h -- the on-card verification, as the worker and the tests use it. */
#ifndef BML_ORACLE_H
#define BML_ORACLE_H

#include "card/card.h"

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
  bool spoil_token_check;     /* the worker's check of resident tokens at open sees other bits */
  bool fail_calibration;      /* the worker's calibration at open fails as on the card
                                (CL_OUT_OF_RESOURCES) */
  size_t lr_shape[3];         /* q1_0_mat_vec_lr built with these rows per slice, slices and lanes
                                 per work-item instead of the tuning's (0 rows: the tuning's) */
  size_t max_groups;          /* a table kernel's launch runs at most this many work-groups
                                 (0: the card's; SIZE_MAX: a work-group per group) */
} bml__oracle_hooks;

/* Whether the hooks set are only those a remembered verdict's key holds
 * (extra_options, in the build options; quick, in its checks): any other
 * keeps the worker's open from reading or writing the cache (src/card/verdict.c).
 * A new hook is named there. */
bool bml__oracle_hooks_cacheable(void);

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

/* The steps of bml__oracle_verify, for the worker's open:
 * Opens device d's card (on the engine's context and queue where they are
 * not NULL: bml__card_open_on) with the hooks' settings and its tuning.
 * Returns 0 and *out, or an error with err saying it. */
int bml__oracle_card_open(const bml__device *d, cl_context ctx, cl_command_queue queue, bml__card **out, char *err,
                          size_t errlen);
/* Verifies the open card c (device d, report index `index`) as
 * bml__oracle_verify does; on 0 and when use is not NULL, *use is the
 * build the products must use (the caller releases it). */
int bml__oracle_verify_card(bml__card *c, const bml__device *d, size_t index, const bml_verify_options *opt,
                            bml__build *use);
/* Whether a verification with opt checks the small shapes only (opt's
 * quick, or the hooks'). */
bool bml__oracle_quick(const bml_verify_options *opt);

/* Confirms a remembered verdict on the card, in milliseconds: builds the
 * remembered variant (the emulated fma, or the native), runs the fma probe
 * (the emulation exact on its domain; the native fma exact where the build
 * uses it) and every kernel, the batched ones too, on a random product
 * with -128 quants and a layer-shaped one (data from seed), every row
 * compared with the CPU kernel.  Returns 0 with *use built (the caller
 * releases it), or BML_EVERIFY (why says what differed or failed: the
 * remembered verdict does not stand), BML_ENOMEM. */
int bml__oracle_confirm(bml__card *c, bool emulated, uint64_t seed, bml__build *use, char *why, size_t len);

#endif
