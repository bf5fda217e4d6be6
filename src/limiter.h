/* limiter.h -- the worker's decisions as plain logic (time and memory passed in): the limiter and the per-shape calibration. */
#ifndef BML_LIMITER_H
#define BML_LIMITER_H

#include "bml.h"

/* ---- the limiter ----------------------------------------------------------
 * With limit L: card buffers stay within L of the card's memory (and, on an
 * integrated card, within L of the RAM they could use: what they hold plus
 * MemAvailable); after a dispatch of d seconds the card rests d(1-L)/L. */
typedef struct {
  double limit;       /* L, in [0.05, 1] */
  uint64_t card_mem;  /* CL_DEVICE_GLOBAL_MEM_SIZE */
  bool integrated;
  uint64_t allocated; /* bytes the worker holds on the card */
  double rest_until;  /* the card rests until then (monotonic seconds) */
} bml__limiter;

#define BML_LIMIT_MIN 0.05
#define BML_LIMIT_DEFAULT 0.8

/* L clamped to [0.05, 1].  Cannot fail. */
double bml__limit_clamp(double limit);
void bml__limiter_init(bml__limiter *l, double limit, uint64_t card_mem, bool integrated);
/* Would holding `bytes` more stay within the limit?  mem_available is
 * MemAvailable in bytes (read only on an integrated card; 0 when
 * /proc/meminfo does not say, and then only the card's memory bounds it). */
bool bml__limiter_fits(const bml__limiter *l, uint64_t bytes, uint64_t mem_available);
/* Is the card resting at `now`? */
bool bml__limiter_resting(const bml__limiter *l, double now);
/* A dispatch ran from start to end: the card rests (end-start)(1-L)/L. */
void bml__limiter_dispatched(bml__limiter *l, double start, double end);
void bml__limiter_hold(bml__limiter *l, uint64_t bytes);
void bml__limiter_drop(bml__limiter *l, uint64_t bytes);

/* ---- per-shape calibration -------------------------------------------------
 * A shape's first product goes to the card (a warm-up, which includes the
 * upload, not timed); then its products alternate between the share and the
 * CPU alone, timed begin to finish with the CPU's rows included, until each
 * has BML_SHAPE_TRIALS timings; the faster median wins.  Products the card
 * skipped (resting, no memory, an error) are not recorded. */
#define BML_SHAPE_TRIALS 6

typedef enum { BML_SHAPE_WARMUP, BML_SHAPE_TUNING, BML_SHAPE_CARD, BML_SHAPE_CPU } bml__shape_state;

typedef struct {
  size_t rows, n;
  bml__shape_state state;
  int nsplit, ncpu;
  double split[BML_SHAPE_TRIALS], cpu[BML_SHAPE_TRIALS];
} bml__shape;

/* "warmup", "tuning", "card", "cpu". */
const char *bml__shape_state_name(bml__shape_state s);
/* Should the next product of this shape give the card its share? */
bool bml__shape_wants_card(const bml__shape *s);
/* Records a product that ran as asked (on_card: the card took its share)
 * and its begin-to-finish time.  Returns true when this decided the shape
 * (its state is then BML_SHAPE_CARD or BML_SHAPE_CPU). */
bool bml__shape_record(bml__shape *s, bool on_card, double seconds);
/* The median of n timings (the mean of the middle two when n is even). */
double bml__median(const double *v, int n);

#endif
