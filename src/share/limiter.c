/* limiter.c -- the limiter on the card's memory and time, and the per-shape card-or-CPU decision: plain logic, no OpenCL. */
#include "share/limiter.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double bml__limit_clamp(double limit) {
  if (!(limit >= BML_LIMIT_MIN)) return BML_LIMIT_MIN; /* NaN too */
  return limit > 1.0 ? 1.0 : limit;
}

void bml__limiter_init(bml__limiter *l, double limit, uint64_t card_mem, bool integrated) {
  memset(l, 0, sizeof *l);
  l->limit = bml__limit_clamp(limit);
  l->card_mem = card_mem;
  l->integrated = integrated;
}

bool bml__limiter_fits(const bml__limiter *l, uint64_t bytes, uint64_t mem_available) {
  double want = (double)l->allocated + (double)bytes;
  if (want > l->limit * (double)l->card_mem) return false;
  /* an integrated card's buffers are host RAM: what they hold and what is
   * free (0: the kernel did not say, and the card's own memory bounds it) */
  if (l->integrated && mem_available && want > l->limit * ((double)l->allocated + (double)mem_available))
    return false;
  return true;
}

bool bml__limiter_resting(const bml__limiter *l, double now) { return now < l->rest_until; }

void bml__limiter_busy(bml__limiter *l, double busy, double end) {
  const double d = busy > 0.0 ? busy : 0.0; /* NaN too */
  l->rest_until = end + d * (1.0 - l->limit) / l->limit;
}

void bml__limiter_hold(bml__limiter *l, uint64_t bytes) { l->allocated += bytes; }

void bml__limiter_drop(bml__limiter *l, uint64_t bytes) {
  l->allocated = bytes > l->allocated ? 0 : l->allocated - bytes;
}

static double share_clamp(double share) {
  return share < BML_SHARE_MIN ? BML_SHARE_MIN : share >= BML_SHARE_ALONE ? 1.0 : share;
}

void bml__balance_init(bml__balance *b, double share) {
  b->share = share_clamp(share);
  b->card_rate = 0.0;
  b->step = 0.0;
  b->cpu_rate = 0.0;
  b->wake = 0.0;
  b->leave = 0;
  b->alone_runs = 0;
  b->alone_s = 0.0;
  b->probing = false;
  b->hold = 0;
  b->hold_next = BML_HOLD_FIRST;
  b->gain = 0.0;
  b->cpu = b->trying = false;
  b->cpu_hold = 0;
  b->cpu_hold_next = BML_HOLD_FIRST;
  b->with_card_s = b->cpu_s = 0.0;
}

/* After a try that did not pay: the hold its next one set, and the one
 * after it twice as long (at most BML_HOLD_MAX). */
static void hold_longer(int *hold, int *next) {
  *hold = *next;
  *next = *next < BML_HOLD_MAX / 2 ? 2 * *next : BML_HOLD_MAX;
}

#define BALANCE_STEP_FIRST 1.25
#define BALANCE_STEP_MAX 16.0

/* The part of t seconds beyond a fixed cost (the round trip, the pool's
 * wake-up), at least a tenth of t (a cost measured long, or a submission
 * that beat it). */
static double beyond(double t, double fixed) {
  double own = t - fixed;
  return own > 0.1 * t ? own : 0.1 * t;
}

/* The balance's own CPU rate after a submission, and its age. */
static void keep_cpu_rate(bml__balance *b, bool measured, double rate) {
  b->cpu_rate = rate;
  b->alone_runs = measured ? 0 : b->alone_runs < BML_RATE_AGE ? b->alone_runs + 1 : BML_RATE_AGE;
}

void bml__balance_learn(bml__balance *b, double wg, double wc, bool card_first, double t_card, double t_cpu,
                        double cpu_rate, double round_trip, double wake) {
  if (!(wg > 0.0) || !(t_card > 0.0)) return;
  const bool measured_cpu = wc > 0.0 && t_cpu > 0.0 && isfinite(wc / t_cpu);
  if (measured_cpu) b->wake = wake > 0.0 && isfinite(wake) ? wake : 0.0;
  const double own_rc = measured_cpu ? wc / beyond(t_cpu, b->wake) : b->cpu_rate;
  const bool aged = !measured_cpu && b->alone_runs >= BML_RATE_AGE && cpu_rate > 0.0;
  double rc = own_rc > 0.0 && !aged ? own_rc : cpu_rate;
  if (!(rc > 0.0)) return;
  if (wc <= 0.0 && !card_first) b->alone_s = t_card;
  if (b->probing && wc > 0.0) {
    /* the first split measured since the card alone was left: its time
     * (the later side's) against the card alone's */
    b->probing = false;
    const double t_split = card_first ? t_cpu : t_card;
    if (b->alone_s > 0.0 && !(t_split < (1.0 - BML_SPLIT_GAIN) * b->alone_s)) {
      b->share = 1.0, b->step = 0.0, b->leave = 0, b->gain = 0.0;
      hold_longer(&b->hold, &b->hold_next);
      keep_cpu_rate(b, measured_cpu, own_rc);
      return;
    }
    b->hold_next = BML_HOLD_FIRST; /* it saved: a later failure holds briefly */
  }
  if (card_first && t_card < round_trip) {
    /* the card beat the round trip believed: it was measured long; the
     * card alone measures the card again */
    b->share = 1.0, b->step = 0.0, b->leave = 0, b->gain = 0.0;
    keep_cpu_rate(b, measured_cpu, own_rc);
    return;
  }
  const double rt = round_trip > 0.0 ? (round_trip < t_card ? round_trip : t_card) : 0.0;
  double measured = wg / beyond(t_card, rt), rate = measured, step = 0.0;
  if (card_first) {
    /* at least as fast as the bound says and as this split balanced (the
     * card's head start, its enqueueing, can make the bound the weaker),
     * and a step faster.  The step multiplies what this submission shows,
     * not the rate believed before: a card that keeps finishing first
     * while the CPU's time does not follow the share (a group the limiter
     * keeps on the CPU) would make that grow without bound. */
    double balanced = wc > 0.0 ? wg / beyond(b->wake + wc / rc, rt) : measured;
    if (balanced > rate) rate = balanced;
    step = b->step > 0.0 ? b->step * 2.0 : BALANCE_STEP_FIRST;
    if (step > BALANCE_STEP_MAX) step = BALANCE_STEP_MAX;
    rate *= step;
  }
  /* both finish together: rt + s W / rate = wake + (1 - s) W / rc */
  const double w = wg + wc, t_gpu = w / rate, t_cpu_all = w / rc, wait = b->wake;
  double share = (t_cpu_all + wait - rt) / (t_gpu + t_cpu_all);
  if (!isfinite(rate) || !(share == share)) return; /* an overflow teaches nothing */
  if (share < BML_SHARE_MIN) share = BML_SHARE_MIN;
  /* the longer side: at the least share, a CPU alone faster than the round
   * trip leaves the card's the longer */
  const double card_side = rt + share * t_gpu, cpu_side = wait + (1.0 - share) * t_cpu_all;
  const double split = card_side > cpu_side ? card_side : cpu_side, alone = rt + t_gpu;
  const bool alone_now = b->share >= 1.0;
  if (share >= 1.0 || !(split < (1.0 - (alone_now ? BML_SPLIT_GAIN_LEAVE : BML_SPLIT_GAIN)) * alone)) share = 1.0;
  if (alone_now && b->hold > 0) b->hold--, share = 1.0; /* a split lost to it not long ago */
  b->leave = alone_now && share < 1.0 ? b->leave + 1 : 0;
  if (b->leave > 0 && b->leave < BML_LEAVE_AFTER) share = 1.0;
  else b->leave = 0;
  if (alone_now && share < 1.0) b->probing = true;
  b->step = step;
  b->card_rate = rate;
  keep_cpu_rate(b, measured_cpu, own_rc);
  b->share = share;
  b->gain = share < 1.0 ? alone - split : 0.0;
}

bool bml__balance_cpu_first(bml__balance *b, double weights, double cpu_rate) {
  b->trying = false;
  if (b->cpu_hold > 0) {
    b->cpu_hold--;
    return b->cpu;
  }
  if (b->cpu) { /* the card's turn to show that it pays */
    b->trying = true;
    return false;
  }
  b->trying = b->with_card_s > 0.0 && cpu_rate > 0.0 && weights / cpu_rate < b->with_card_s;
  return b->trying;
}

void bml__balance_cpu_timed(bml__balance *b, bool on_cpu, double seconds) {
  if (!(seconds > 0.0)) return; /* NaN too */
  const bool tried = b->trying;
  b->trying = false;
  if (on_cpu) b->cpu_s = seconds;
  else b->with_card_s = seconds;
  if (!tried) return;
  const double other = on_cpu ? b->with_card_s : b->cpu_s;
  if (seconds < (1.0 - BML_SPLIT_GAIN) * other) { /* the side tried wins */
    b->cpu = on_cpu;
    b->cpu_hold = BML_HOLD_FIRST;
    b->cpu_hold_next = 2 * BML_HOLD_FIRST;
  } else {
    hold_longer(&b->cpu_hold, &b->cpu_hold_next);
  }
}

double bml__split_loss(size_t rows, size_t held, size_t want) {
  if (held == want) return 0.0;
  if (held == 0 || want == 0 || want >= rows) return HUGE_VAL; /* the card's part from or to nothing, the CPU's from it */
  double h = (double)held, d = (double)want;
  return h > d ? (h - d) / d : (d - h) / ((double)rows - d);
}

bool bml__rest_worth_waiting(double rest_left, double weights, double cpu_rate) {
  return cpu_rate > 0.0 && rest_left < weights / cpu_rate;
}

const char *bml__shape_state_name(bml__shape_state s) {
  static const char *const names[] = {"warmup", "tuning", "card", "cpu"};
  return (unsigned)s < BML_ARRAY_SIZE(names) ? names[s] : "?";
}

bool bml__shape_wants_card(const bml__shape *s) {
  switch (s->state) {
  case BML_SHAPE_WARMUP:
  case BML_SHAPE_CARD: return true;
  case BML_SHAPE_CPU: return false;
  case BML_SHAPE_TUNING:
    /* alternate, the card first; whichever has its six goes on alone */
    if (s->nsplit >= BML_SHAPE_TRIALS) return false;
    if (s->ncpu >= BML_SHAPE_TRIALS) return true;
    return s->nsplit <= s->ncpu;
  }
  return false;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bml__median(const double *v, int n) {
  if (n <= 0) return 0.0;
  double sorted[BML_SHAPE_TRIALS * 4];
  if (n > (int)BML_ARRAY_SIZE(sorted)) n = (int)BML_ARRAY_SIZE(sorted);
  memcpy(sorted, v, (size_t)n * sizeof *v);
  qsort(sorted, (size_t)n, sizeof *sorted, compare_double);
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
}

bool bml__shape_record(bml__shape *s, bool on_card, double seconds) {
  if (s->state == BML_SHAPE_WARMUP) { /* the warm-ups, the upload among them, are not timings */
    if (on_card && ++s->nwarm >= BML_SHAPE_WARMUPS) s->state = BML_SHAPE_TUNING;
    return false;
  }
  if (s->state != BML_SHAPE_TUNING) return false;
  if (on_card && s->nsplit < BML_SHAPE_TRIALS)
    s->split[s->nsplit++] = seconds;
  else if (!on_card && s->ncpu < BML_SHAPE_TRIALS)
    s->cpu[s->ncpu++] = seconds;
  if (s->nsplit < BML_SHAPE_TRIALS || s->ncpu < BML_SHAPE_TRIALS) return false;
  s->state = bml__median(s->split, s->nsplit) < bml__median(s->cpu, s->ncpu) ? BML_SHAPE_CARD : BML_SHAPE_CPU;
  return true;
}
