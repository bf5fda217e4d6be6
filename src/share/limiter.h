/* limiter.h -- the worker's decisions as plain logic (time and memory passed in): the limiter and the per-shape calibration. */
#ifndef BML_LIMITER_H
#define BML_LIMITER_H

#include "base/bml.h"

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
/* The card was at work `busy` seconds of a dispatch that ended by `end`:
 * it rests busy(1-L)/L from end.  (end may be later than the card's
 * work, when only a bound of it is known: the rest then ends later too,
 * and the card works no more than L of the time.) */
void bml__limiter_busy(bml__limiter *l, double busy, double end);
void bml__limiter_hold(bml__limiter *l, uint64_t bytes);
void bml__limiter_drop(bml__limiter *l, uint64_t bytes);

/* ---- the balance: the card's part of each product's rows ------------------
 * The share the open calibrates (one 4096x4096 product with its round trip)
 * is only where a shape or a kind of batch starts: a batch's products run
 * pipelined, small products are bound by the round trip, big ones by the
 * card's memory, and on a fast card the CPU's part, not the card's, then
 * sets the time.  So each one learns its own share from what it takes.
 * The card is taken to cost its round trip (measured at the open) plus its
 * weights over its rate, the CPU its weights over its own: when the card
 * finished after the CPU, its rate is measured (the weights it computed
 * over the time from the dispatch to its last result, less the round
 * trip); when it finished first it was at least as fast as that split
 * needed, so the card is taken for faster than that by a step that grows
 * while it keeps finishing first (1.25, 2.5, 5, ... at most 16) and starts
 * again once it does not.  The card's time beyond the round trip is
 * taken as at least a tenth of its time.  The CPU's rate is the balance's
 * own, from its last submission with CPU rows (a kind of batch of a few
 * small products and a token's differ by 3-5x on a host that drives a
 * card), until BML_RATE_AGE submissions without them.  A card that
 * finished first in less than the round trip goes alone (the round trip
 * was measured long).  The share is the one that makes both finish
 * together, unless the card alone is predicted as fast within
 * BML_SPLIT_GAIN; the card alone is left for a split predicted to save
 * BML_SPLIT_GAIN_LEAVE, asked for by BML_LEAVE_AFTER submissions in a row
 * (one slow round trip, which the driver gives now and then, would move
 * every matrix of the kind): a CPU part that saves little is not worth
 * its pool run, the host threads it takes from the card's driver, nor
 * moving matrices for it (on the H200 the CPU's 3 % of a token took 4 ms,
 * the card's 97 % 0.8; a round-trip-bound product gains nothing from a
 * CPU part). */
typedef struct {
  double share;     /* the card's part of each product's rows, in [BML_SHARE_MIN, 1] */
  double card_rate; /* the card's weights a second, as learnt (0: not yet) */
  double step;      /* 0, or the next step's factor after the card finished first */
  double cpu_rate;  /* the CPU's weights a second in this balance's last submission with CPU rows (0: none),
                       its helpers' wake-up left out */
  double wake;      /* the seconds that submission's CPU part lost to its pool's helpers waking (0: they
                       were awake): the next CPU part is predicted to lose as much */
  int leave;        /* submissions in a row, the card alone, that asked for a split */
  int alone_runs;   /* submissions since the CPU last had rows (its own rate's age) */
  double alone_s;   /* the card alone's seconds in its last submission (0: none yet) */
  bool probing;     /* the card alone was left for a split not yet measured against it */
  int hold;         /* submissions the card stays alone before a split may be asked for again */
  int hold_next;    /* the hold after the next split that does not beat the card alone */
  double gain;      /* the seconds a product the share predicts it saves against the card alone (0: alone) */
  /* the CPU alone (bml__balance_cpu_first): */
  bool cpu;         /* a kind of batch runs whole on the CPU */
  bool trying;      /* the submission in flight tries the other side (the CPU, or the card with it) */
  int cpu_hold;     /* submissions before the other side is tried again */
  int cpu_hold_next;
  double with_card_s; /* the last submission's seconds with the card taking part (0: none) */
  double cpu_s;     /* the last submission's seconds on the CPU alone (0: none) */
} bml__balance;

#define BML_SHARE_MIN 0.02
/* A share of at least this is 1 where one is given (the open's, the
 * environment's). */
#define BML_SHARE_ALONE 0.95
/* The predicted time a split must save against the card alone: to stay
 * split, and to leave the card alone. */
#define BML_SPLIT_GAIN 0.05
#define BML_SPLIT_GAIN_LEAVE 0.10
#define BML_LEAVE_AFTER 3
/* A balance's own CPU rate gives way to the one measured last on any kind
 * after this many submissions without CPU rows: one measured slow (a busy
 * host) would otherwise keep the card alone for good.  Not fewer: a small
 * kind of a model's round trips is used 28-36 times a token, and with 64
 * its card alone was probed every other token on the H200. */
#define BML_RATE_AGE 4096
/* A split that left the card alone is measured against the card alone's
 * last time: one that does not save BML_SPLIT_GAIN goes back to the card
 * alone, which then stays for BML_HOLD_FIRST submissions, twice as many
 * after each such split, at most BML_HOLD_MAX (the model's prediction
 * missed a cost it does not know of: on an NVIDIA H100 a 4096x4096 split
 * predicted at 19.7 us against the card's 22 took 23-35 and moved the
 * matrix at each try). */
#define BML_HOLD_FIRST 16
#define BML_HOLD_MAX 4096

void bml__balance_init(bml__balance *b, double share);
/* Learns from one submission: the card computed wg weights, the CPU wc.
 * card_first: the card's last result was there when the CPU was done; t_card:
 * seconds from the dispatch to the card's last result (card_first: to the
 * CPU being done, an upper bound); t_cpu: the CPU's seconds for its wc;
 * cpu_rate: the CPU's weights a second measured elsewhere, for a balance
 * that has no rate of its own yet (0: unknown); round_trip: the card's
 * seconds for a submission of next to no work (0: unknown); wake: the
 * seconds of t_cpu the CPU part lost to its pool's helpers, asleep after
 * an idle gap (0: they were awake): the CPU's rate leaves them out, and
 * the next split is predicted with its CPU part losing as many (a decode
 * calls the pool after the same gaps token after token).  Nothing
 * is learnt from a submission the card had no part in, or with no rate
 * for the CPU. */
void bml__balance_learn(bml__balance *b, double wg, double wc, bool card_first, double t_card, double t_cpu,
                        double cpu_rate, double round_trip, double wake);

/* The CPU alone, for a kind of batch.  A slow card's part can take the
 * pool's own time (a software device's threads run on the host's cores,
 * an integrated card shares its memory), which the rates above do not
 * see: on PoCL with 2 cores a split bonsai-1.7b token as one batch took
 * 62 ms, the pool alone 25, at a share of 0.06.  So a kind whose last
 * submission with the card took longer than its weights over the CPU's
 * rate (a rate measured beside the card, so at worst too slow) tries one
 * submission on the CPU alone; faster by BML_SPLIT_GAIN, it stays there,
 * trying the card again after BML_HOLD_FIRST submissions, twice as many
 * after each try that does not pay, at most BML_HOLD_MAX; else the card
 * takes part again and the CPU alone is not tried for as long.  Seconds
 * run from the submission's begin to its end (its copies and waits in). */
/* Whether the next submission of this kind, of `weights` weights, runs whole
 * on the CPU; cpu_rate: the CPU's weights a second (0: unknown, never). */
bool bml__balance_cpu_first(bml__balance *b, double weights, double cpu_rate);
/* A submission of this kind took `seconds`, whole on the CPU (on_cpu) or
 * with the card's part. */
void bml__balance_cpu_timed(bml__balance *b, bool on_cpu, double seconds);

/* What a product's split with `held` of its rows on the card costs over
 * the `want` rows the balance asks for, as a part of the wanted split's
 * time: how much the card's part, or the CPU's, grows (HUGE_VAL where a
 * device's part grows from nothing, or the card's shrinks to nothing). */
double bml__split_loss(size_t rows, size_t held, size_t want);
/* The matrix the card holds is kept (another split uploads it again) while
 * the loss is at most BML_HELD_LOSS; beyond BML_HELD_FAR it moves at once. */
#define BML_HELD_LOSS 0.15
#define BML_HELD_FAR 1.0

/* Should a submission that arrives while the card rests wait for the rest
 * to end (the card then takes its part as usual) rather than run whole on
 * the CPU?  Yes when the rest left is shorter than the CPU would take for
 * the submission alone (its weights over cpu_rate; 0: unknown, never wait). */
bool bml__rest_worth_waiting(double rest_left, double weights, double cpu_rate);

/* ---- per-shape calibration -------------------------------------------------
 * A shape's first BML_SHAPE_WARMUPS products go to the card, untimed: the
 * first uploads its matrix, the others let its balance settle from the
 * open's share (its split trials once ran while it still moved: on the
 * H200 4096x4096 then took twice the card's round trip).  Then its products
 * alternate between its share and the CPU alone, timed begin to finish
 * with the CPU's rows included, until each has BML_SHAPE_TRIALS timings;
 * the faster median wins.  Products the card skipped (resting, no memory,
 * an error) are not recorded. */
#define BML_SHAPE_WARMUPS 5
#define BML_SHAPE_TRIALS 6

typedef enum { BML_SHAPE_WARMUP, BML_SHAPE_TUNING, BML_SHAPE_CARD, BML_SHAPE_CPU } bml__shape_state;

typedef struct {
  size_t rows, n;
  bml__shape_state state;
  bml__balance balance; /* the share of this shape's single products */
  int nwarm, nsplit, ncpu;
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
