/* dispatch.c -- a submission planned (its groups, each one's card rows, the card resting or not) and started. */
#include "base/util.h"
#include "card/kernels.h"
#include "share/worker_int.h"

#include <time.h>

/* The card's rows of a product of the submission: the fixed share, or the
 * one its shape (a single product) or its kind of batch has learnt. */
static size_t rows_for(const bml_worker *w, const submission *s, size_t rows) {
  return bml__plan_card_rows(w->share_fixed || !s->balance ? w->share : s->balance->share, rows);
}

/* The card rows each product of a group asks for; *decided is set when a
 * per-shape decision (or a single product's calibration) kept one on the CPU.
 * A single product (bml_worker_begin, s->shape set) calibrates its shape; a
 * batch's products, a batch of one included, follow the decisions made. */
static size_t want_rows(bml_worker *w, submission *s, size_t first, size_t count, bool *decided) {
  size_t total = 0;
  *decided = false;
  for (size_t i = first; i < first + count; i++) {
    const bml_product *p = &s->p[i];
    /* a single product follows its shape's calibration; a batch, its kind's balance alone */
    bool card = !s->cpu_chosen && (w->share_fixed || !s->shape || bml__shape_wants_card(s->shape));
    *decided |= !card;
    s->card_rows[i] = card ? rows_for(w, s, p->rows) : 0;
    total += s->card_rows[i];
  }
  return total;
}

/* The group's card rows: the ones its matrix holds on the card when the
 * balance's wish is close to them or not yet far (bml__plan_move); else
 * the wish.  Returns their sum. */
static size_t keep_held(bml_worker *w, submission *s, const group *g, entry *e, size_t total) {
  if (!e || !e->m.nchunks || w->share_fixed) return total;
  size_t *want = s->card_rows + g->first;
  if (bml__plan_move(&e->hist, s->p + g->first, e->held, want, g->count, s->balance ? s->balance->gain : 0.0))
    return total; /* bml__worker_ensure_uploaded counts the move when it is made */
  total = 0;
  for (size_t i = 0; i < g->count; i++) total += want[i] = e->held[i];
  return total;
}

/* Plans one group: which rows go to the card, its entry uploaded. */
static void plan_group(bml_worker *w, submission *s, group *g, bool resting) {
  g->e = NULL;
  g->forced = false;
  for (size_t i = g->first; i < g->first + g->count; i++) s->card_rows[i] = 0;
  if (w->retired) {
    count_cpu(&w->count.on_cpu_error, g->count);
    return;
  }
  bool decided;
  size_t total = want_rows(w, s, g->first, g->count, &decided);
  if (total == 0) {
    s->timed = s->shape && decided; /* a CPU-alone timing of a shape in calibration */
    count_cpu(decided ? &w->count.on_cpu_decided : &w->count.on_cpu_share, g->count);
    return;
  }
  if (resting) {
    memset(s->card_rows + g->first, 0, g->count * sizeof *s->card_rows);
    count_cpu(&w->count.on_cpu_resting, g->count);
    return;
  }
  entry *known = bml__worker_known_entry(w, s->p + g->first, g->count); /* looked up once: a token has hundreds */
  if (known && known->planned == w->plans) {
    /* the same matrix again in this submission, with another activation:
     * the rows it holds, as the group before planned them (keep_held
     * would count it twice, and a move would take that group's rows) */
    total = 0;
    for (size_t i = 0; i < g->count; i++) total += s->card_rows[g->first + i] = known->held[i];
  } else {
    total = keep_held(w, s, g, known, total);
  }
  /* The kernels' records hold offsets of 32 bits: a group whose activation
   * (after every record) or results would end past them runs on the CPU,
   * and is not uploaded for it. */
  const size_t n = s->p[g->first].n;
  const uint64_t act = s->act_bytes + bml__card_act_bytes(n), nrec = s->nrec + bml__card_matrix_chunks(w->card, total, n);
  const uint64_t in = bml__worker_staging_in_bytes(w, act, nrec);
  const uint64_t lim = w->hooks.offset_limit ? w->hooks.offset_limit : UINT32_MAX;
  entry *e = in > lim || s->out_rows + total > lim ? NULL : known ? known : bml__worker_new_entry(w, s->p + g->first, g->count);
  int rc = e ? bml__worker_ensure_uploaded(w, e, s->card_rows + g->first, bml__worker_staging_growth(w, in, s->out_rows + total))
             : BML_ENOMEM;
  if (rc != 0) {
    memset(s->card_rows + g->first, 0, g->count * sizeof *s->card_rows);
    g->forced = true;
    if (rc == BML_ENOMEM) {
      count_cpu(&w->count.on_cpu_memory, g->count);
      return;
    }
    bml__worker_card_error(w, rc);
    count_cpu(&w->count.on_cpu_error, g->count);
    return;
  }
  g->e = e;
  e->planned = w->plans;
  s->act_bytes = act, s->nrec = nrec, s->out_rows += total; /* e->m: total rows, in the chunks counted */
}

/* Waits until `until` (a rest's end, monotonic seconds).  A sleep ends
 * some 50-60 us late (the kernel's timer slack), longer than a round
 * trip's rest (on the H200 a product's 25-30 us rest 6-8 us): the last
 * SPIN_LAST seconds are spun. */
#define SPIN_LAST 1e-3

static void wait_until(double until) {
  double left = until - bml__now();
  if (left > SPIN_LAST) {
    double sleep = left - SPIN_LAST;
    struct timespec t = {(time_t)sleep, (long)((sleep - (double)(time_t)sleep) * 1e9)};
    while (nanosleep(&t, &t) != 0) continue; /* EINTR: the rest of it */
  }
  while (bml__now() < until) continue;
}

/* The weights (rows times columns) of the submission's products. */
static double weights_of(const submission *s) {
  double weights = 0;
  for (size_t i = 0; i < s->count; i++) weights += (double)s->p[i].rows * (double)s->p[i].n;
  return weights;
}

/* Is the card resting for this submission?  Not when the rest left is
 * shorter than the CPU would take for the whole submission: the worker
 * then waits for it to end, and the card takes its part as usual. */
static bool rest_or_wait(bml_worker *w, submission *s) {
  double now = bml__now(), left = w->limiter.rest_until - now;
  if (!bml__limiter_resting(&w->limiter, now)) return false;
  if (w->retired) return true;
  double cpu_rate = w->hooks.cpu_rate > 0 ? w->hooks.cpu_rate : w->cpu_rate;
  bool decided;
  if (!bml__rest_worth_waiting(left, weights_of(s), cpu_rate) || want_rows(w, s, 0, s->count, &decided) == 0) return true;
  wait_until(w->limiter.rest_until);
  double waited = bml__now() - now;
  w->count.rests_waited++;
  w->time.rest += waited;
  s->begin_time += waited; /* a calibration timing and the enqueue's time leave the wait out */
  return false;
}

bool bml__worker_kind_chooses(const bml_worker *w, const submission *s) {
  return !s->shape && s->balance && !w->share_fixed && !w->retired && s->own_cpu && !w->hooks.hold_balance &&
         !w->hooks.keep_card;
}

/* Whether the batch's kind sends it whole to the CPU (the CPU's rate: a
 * test hook's, else the kind's own, measured beside the card, else the
 * worker's). */
static bool cpu_first(bml_worker *w, submission *s) {
  if (!bml__worker_kind_chooses(w, s)) return false;
  const double own = s->balance->cpu_rate > 0 ? s->balance->cpu_rate : w->cpu_rate;
  return bml__balance_cpu_first(s->balance, weights_of(s), w->hooks.cpu_rate > 0 ? w->hooks.cpu_rate : own);
}

/* Splits the products into groups (neighbours with one activation) and plans each. */
static int plan(bml_worker *w, submission *s) {
  if (w->child) bml__worker_say_child(w);
  if (reserve((void **)&w->card_rows, &w->card_rows_cap, s->count, sizeof *w->card_rows) ||
      reserve((void **)&w->groups, &w->groups_cap, s->count, sizeof *w->groups) ||
      reserve((void **)&w->cpu_pieces, &w->cpu_pieces_cap, s->count, sizeof *w->cpu_pieces))
    return BML_ENOMEM;
  s->card_rows = w->card_rows;
  s->groups = w->groups;
  s->ngroups = 0;
  w->plans++;
  s->act_bytes = s->nrec = s->out_rows = 0;
  s->cpu_chosen = cpu_first(w, s);
  bool resting = rest_or_wait(w, s);
  for (size_t i = 0; i < s->count;) {
    const size_t j = bml__plan_group_end(s->p, s->count, i);
    group *g = &s->groups[s->ngroups++];
    g->first = i, g->count = j - i;
    plan_group(w, s, g, resting);
    i = j;
  }
  /* A group's error may have retired the card (the third in a row), which
   * dropped the matrices of the groups planned before it: they go to the
   * CPU too, or their card rows would be computed by no one. */
  for (size_t i = 0; w->retired && i < s->ngroups; i++) {
    group *g = &s->groups[i];
    if (!g->e) continue;
    g->e = NULL;
    memset(s->card_rows + g->first, 0, g->count * sizeof *s->card_rows);
    count_cpu(&w->count.on_cpu_error, g->count);
  }
  return 0;
}

int bml__worker_start(bml_worker *w, submission *s) {
  bml__token_park(w->resident); /* a token's kernel holds the card's queue */
  s->begin_time = bml__now();
  int rc = plan(w, s);
  if (rc != 0) return rc;
  s->dispatch_time = bml__now();
  w->time.plan += s->dispatch_time - s->begin_time;
  rc = bml__worker_enqueue_groups(w, s);
  s->ready_time = bml__now();
  w->time.submissions++;
  w->time.enqueue += bml__now() - s->begin_time;
  if (rc != 0) bml__worker_all_to_cpu(w, s, rc);
  else if (s->on_card && s->shape) s->timed = true; /* a single product's trial on the card */
  return 0;
}

