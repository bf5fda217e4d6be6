/* verdict.h -- a card's verdict at a worker's open: found by the oracle, or remembered and confirmed on the card. */
#ifndef BML_VERDICT_H
#define BML_VERDICT_H

#include "card/card.h"

#include <jansson.h>

/* What an open knows of its card, and what it will remember of it: an
 * entry of kind "verdict" in the cache (cache.h), keyed by the card's
 * identity (bml__card_identity), the native build's options and the
 * oracle's extent ("full" or "quick"):
 *   "verdict": "verified" or "refused", "why": a refusal's reason,
 *   "fma": "native" or "emulated", "build_options": the build's exact
 *   options, "nvidia_build", "nvidia_tma": NVIDIA's options kept,
 *   "batches": {"queues", "kept", "acts_zero_copy", "outs_zero_copy",
 *   "tokens"}: the worker's batch check on that many queues passed on "kept"
 *   of them, through those transfers, and a resident token passed,
 *   "calibration": {"threads", "cpu_path", "card_seconds", "cpu_seconds",
 *   "round_trip_seconds"}. */
typedef struct {
  json_t *key;      /* NULL: nothing is read or remembered (test hooks, memory) */
  json_t *entry;    /* what is known of the card (NULL: nothing to remember) */
  bool always;      /* BML_VERIFY_ALWAYS: nothing remembered is used */
  bool remembered;  /* the verdict was remembered, and the spot check confirmed it */
  bool changed;     /* entry is to be stored (bml__verdict_end) */
  char why[400];    /* why the card is not used */
} bml__verdict;

/* Opens device d's card (report index `index`; on the engine's ctx and
 * queue where not NULL) and finds its verdict: a remembered one, unless
 * always, confirmed by bml__oracle_confirm (a verified card) or taken as
 * it is (a refusal), else the oracle's.  Returns 0 with *card open and
 * *use its build (the caller owns both), or 0 with *card NULL and v->why
 * saying why it is not used (v->remembered: a remembered refusal); or
 * BML_ENOMEM.  A refusal for a row that differed is remembered; one for an
 * error (a failed call, memory) is not. */
int bml__verdict_open(const bml__device *d, size_t index, cl_context ctx, cl_command_queue queue, bool always,
                      bml__verdict *v, bml__card **card, bml__build *use);

/* What the worker's batch check found: the queues it passed on, whether
 * zero-copy activations and results passed (share/check.c's transfers), and
 * whether a resident token did. */
typedef struct {
  size_t kept;
  bool acts_zero_copy, outs_zero_copy, tokens;
} bml__batch_verdict;
/* The remembered batch check of a card on `queues` queues: true with *b. */
bool bml__verdict_batches(const bml__verdict *v, size_t queues, bml__batch_verdict *b);
void bml__verdict_set_batches(bml__verdict *v, size_t queues, const bml__batch_verdict *b);
/* The card refused after all (the batch check gave other bits): why is
 * remembered. */
void bml__verdict_refuse(bml__verdict *v, const char *why);

/* The remembered calibration for a pool of `threads` on this CPU path:
 * true with the seconds of the card's, the CPU's and the round trip's
 * product. */
bool bml__verdict_calibration(const bml__verdict *v, int threads, double *card_s, double *cpu_s, double *trip_s);
void bml__verdict_set_calibration(bml__verdict *v, int threads, double card_s, double cpu_s, double trip_s);

/* Stores what changed and frees v.  NULL-safe. */
void bml__verdict_end(bml__verdict *v);

#endif
