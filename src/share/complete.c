/* complete.c -- a submission completed: the CPU's rows, the card's results awaited and copied out, what it teaches. */
#include "share/worker_int.h"

#include "base/log.h"
#include "base/util.h"
#include "cpu/pool.h"
#include "card/program.h"
#include "card/submit.h"

#include <math.h>

/* A read's results into the products' outputs: one copy per product and
 * piece, spread over the pool's threads when there is much to copy (a
 * model's token brings back megabytes of results). */
typedef struct {
  const bml_worker *w;
  const submission *s;
  const readback *rb;
} copy_out;

/* Rows [a, b) of piece pc into the outputs of the products they belong to. */
static void copy_piece(const copy_out *c, const piece *pc, size_t a, size_t b) {
  const group *g = &c->s->groups[pc->group];
  const float *src = (const float *)c->w->outs.host + pc->at;
  const size_t lo = pc->row0 + a, hi = pc->row0 + b; /* in the group's card rows */
  size_t at = 0;                                      /* the group row of product i's first card row */
  for (size_t i = g->first; i < g->first + g->count && at < hi; i++) {
    const size_t rows = c->s->card_rows[i], x = at > lo ? at : lo, y = at + rows < hi ? at + rows : hi;
    if (x < y) memcpy(c->s->p[i].out + (x - at), src + (x - pc->row0), (y - x) * sizeof *src);
    at += rows;
  }
}

/* Floats [lo, hi) of the read (its pieces lie back to back). */
static void copy_slice(const copy_out *c, size_t lo, size_t hi) {
  for (size_t k = c->rb->first; k < c->rb->first + c->rb->count; k++) {
    const piece *pc = &c->s->pieces[k];
    const size_t off = pc->at - c->rb->at;
    if (hi <= off) break;
    const size_t a = lo > off ? lo - off : 0, b = hi - off < pc->rows ? hi - off : pc->rows;
    if (a < b) copy_piece(c, pc, a, b);
  }
}

static void copy_job(void *ctx, int tid, int nthreads) {
  const copy_out *c = ctx;
  size_t per = (c->rb->len + (size_t)nthreads - 1) / (size_t)nthreads;
  size_t lo = per * (size_t)tid, hi = lo + per < c->rb->len ? lo + per : c->rb->len;
  if (lo < hi) copy_slice(c, lo, hi);
}

#define COPY_PARALLEL_FLOATS (64 * 1024) /* below this, one thread copies */

static void scatter(bml_worker *w, const submission *s, const readback *rb) {
  copy_out c = {w, s, rb};
  if (rb->len >= COPY_PARALLEL_FLOATS && bml_pool_threads(w->pool) > 1) bml__pool_run(w->pool, copy_job, &c);
  else copy_slice(&c, 0, rb->len);
}

/* Whether the card is done with the submission: every read complete.
 * With several queues the last read enqueued can end before another
 * queue's; reads once seen complete are not asked again.  False when
 * there is none, or the driver cannot say. */
static bool card_done(submission *s) {
  for (; s->reads_done < s->nreads; s->reads_done++) {
    if (!bml__submit_complete(s->reads[s->reads_done].done)) return false;
  }
  return s->nreads > 0;
}

/* What a submission that ran teaches: the CPU's rate, and the balance of
 * its shape or kind (unless the share is fixed).  t_card: from the
 * dispatch to the card's last result (card_first: it finished first and
 * t_card is only a bound); t_cpu: from the card's part enqueued to the
 * CPU's part done. */
static void learn(bml_worker *w, const submission *s, bool card_first, double t_card, double t_cpu) {
  if (!s->own_cpu) return; /* the caller's time between begin and finish is not the CPU's rows' */
  if (s->cpu_alone) return; /* the pool driven by another thread: the rows ran on this one alone */
  double wg = 0, wc = 0;
  for (size_t i = 0; i < s->count; i++) {
    wg += (double)s->card_rows[i] * (double)s->p[i].n;
    wc += (double)(s->p[i].rows - s->card_rows[i]) * (double)s->p[i].n;
  }
  double cpu_rate = w->cpu_rate;
  if (wc > 0 && t_cpu > 0) w->cpu_rate = wc / t_cpu;
  if (w->share_fixed || !s->balance || !s->on_card || s->uploaded || w->hooks.hold_balance) return;
  /* the groups the card was to take and did not: their CPU work does not
   * follow the share (the card finishing first at every submission once
   * made the learnt rate grow without bound) */
  wc -= s->forced_weights, t_cpu -= s->forced_time;
  if (wc < 0) wc = 0;
  if (t_cpu < 0) t_cpu = 0;
  /* the card first, and the CPU had only those: its bound is theirs */
  if (card_first && wc == 0) return;
  double before = s->balance->share;
  bml__balance_learn(s->balance, wg, wc, card_first, t_card, t_cpu, cpu_rate, w->round_trip, s->wake);
  if (fabs(s->balance->share - before) >= 0.005)
    bml__debug(BML_CAT_WORKER, "share %.3f -> %.3f: the card %s %.3f ms for %.0f%%, the CPU %.3f ms", before,
               s->balance->share, card_first ? "first, at most" : "took", t_card * 1e3, 100 * wg / (wg + wc),
               t_cpu * 1e3);
}

/* Waits for the card's reads, in order, copying each one's results out as
 * it arrives (while the card computes later launches), and completes every
 * product; on a card error its rows are computed on the pool (out stays
 * complete and exact). */
int bml__worker_complete(bml_worker *w, submission *s) {
  int rc = 0;
  const double arrived = bml__now(); /* the CPU's part is done */
  bool card_first = false;
  if (s->on_card) {
    int err = CL_SUCCESS;
    card_first = card_done(s);
    /* busy: the last moment the card is known to have been at work (for
     * the limiter; the copies out in between are the host's time) */
    double waited = 0, copied = 0, busy = bml__now();
    for (size_t r = 0; err == CL_SUCCESS && r < s->nreads; r++) {
      bool was_done = false;
      double t0 = bml__now();
      err = w->hooks.fail_waits > 0 ? (w->hooks.fail_waits--, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
                                    : bml__submit_wait(s->reads[r].done, w->wait_spin, &was_done);
      double t = bml__now();
      const cl_int state = was_done ? CL_COMPLETE : CL_QUEUED;
      waited += t - t0;
      if (state != CL_COMPLETE) busy = t;
      if (err == CL_SUCCESS) {
        scatter(w, s, &s->reads[r]);
        copied += bml__now() - t;
      }
    }
    w->time.wait += waited;
    w->time.copy += copied;
    /* the rest: where the card finished first and a batch's CPU part saw
     * it done, its work ended by then, and the rest runs from then, as long
     * as the time from the dispatch to then (the CPU's part after it is not
     * the card's); else from the end known, which a single product's CPU
     * part or a late bml_worker_finish still lengthens (nothing looks at
     * the card then).  The driver's own clock would say more, but profiled
     * queues cost the H200 microseconds a product (doc/WORKER.md). */
    const double done = card_first && s->seen_done > 0 && s->seen_done < busy ? s->seen_done : busy;
    bml__limiter_busy(&w->limiter, done - s->dispatch_time, done);
    bml__worker_release_reads(s);
    size_t on_card = 0;
    for (size_t i = 0; i < s->ngroups; i++) on_card += s->groups[i].e ? s->groups[i].count : 0;
    if (err != CL_SUCCESS) {
      bml__card_finish(w->card); /* nothing of the card's still running */
      /* the card's rows of every product, in one run of the pool */
      size_t np = 0;
      for (size_t i = 0; i < s->count; i++)
        if (s->card_rows[i])
          w->cpu_pieces[np++] = (bml__cpu_piece){s->p[i].wts, s->card_rows[i], s->p[i].n, s->p[i].act, s->p[i].out};
      rc = bml__pool_mat_vec_many(w->pool, w->cpu_pieces, np, NULL, NULL, NULL);
      s->on_card = false; /* the queues are drained already */
      bml__worker_all_to_cpu(w, s, err);
    } else {
      w->count.on_card += on_card;
      w->errors_in_row = 0;
      /* the card's time: measured (it finished last, or the CPU saw it
       * done within a quarter of it), or bounded (by when the CPU saw it
       * done, or was done itself) */
      double end = !card_first ? busy : s->seen_done > 0 ? s->seen_done : arrived;
      double since = s->seen_busy > s->dispatch_time ? s->seen_busy : s->dispatch_time;
      bool measured = !card_first || (s->seen_done > 0 && s->seen_done - since <= 0.25 * (end - s->dispatch_time));
      learn(w, s, !measured, end - s->dispatch_time, arrived - s->ready_time);
    }
  } else
    learn(w, s, false, 0.0, arrived - s->ready_time); /* the CPU's rate alone */
  /* a batch's seconds, for its kind's choice of the CPU alone: one the
   * card took part in, or one sent to the CPU by that choice (not one the
   * card's rest, memory or error sent there, nor one that uploaded) */
  if (bml__worker_kind_chooses(w, s) && !s->cpu_alone && !s->uploaded && (s->cpu_chosen || s->on_card))
    bml__balance_cpu_timed(s->balance, s->cpu_chosen, bml__now() - s->begin_time);
  if (s->timed && !w->share_fixed && s->shape &&
      bml__shape_record(s->shape, s->on_card && s->card_rows[0] > 0, bml__now() - s->begin_time))
    bml__worker_shape_decided(w, s->shape);
  return rc;
}

/* Between a batch's products the CPU looks at the card's reads (at most
 * every WATCH_EVERY seconds, until all are done): when the card finishes
 * first, its time is then known within the CPU's step rather than bounded
 * by the CPU's whole part. */
#define WATCH_EVERY 20e-6

static void watch_card(submission *s) {
  if (!s->on_card || s->seen_done > 0) return;
  double now = bml__now();
  if (now - s->seen_busy < WATCH_EVERY) return;
  if (card_done(s)) s->seen_done = now;
  else s->seen_busy = now;
}

static void watch_tick(void *ctx) { watch_card(ctx); }

/* The CPU's rows of group g's products into pc; returns how many pieces. */
static size_t cpu_pieces(const submission *s, const group *g, bml__cpu_piece *pc) {
  size_t np = 0;
  for (size_t i = g->first; i < g->first + g->count; i++) {
    const bml_product *p = &s->p[i];
    const size_t r0 = s->card_rows[i];
    if (r0 < p->rows)
      pc[np++] = (bml__cpu_piece){p->wts + r0 * (p->n / BML_Q1_0_BLOCK), p->rows - r0, p->n, p->act, p->out + r0};
  }
  return np;
}

int bml__worker_pool_part(bml_worker *w, submission *s, const bml__cpu_piece *pc, size_t np, bool watch) {
  /* helpers asleep at the start (an idle gap before): until they arrive
   * (the pool's wake-up, at most the part's time) the caller computes
   * alone, so the part loses all but the caller's share of that time,
   * which the balance learns apart */
  const bool asleep = np > 0 && bml__pool_asleep(w->pool) > 0;
  const double t0 = bml__now();
  bool alone = false;
  int rc = bml__pool_mat_vec_many(w->pool, pc, np, watch ? watch_tick : NULL, s, &alone);
  s->cpu_alone |= alone;
  s->wake = 0.0;
  if (asleep) {
    const double wake = bml__pool_wake_seconds(w->pool), took = bml__now() - t0;
    s->wake = (wake < took ? wake : took) * (1.0 - 1.0 / bml_pool_threads(w->pool));
  }
  return rc;
}

/* The CPU's rows: those of the groups the card shares in one run of the
 * pool (a run a product cost a token of small CPU parts milliseconds), then
 * each forced group's in its own, timed apart (its time does not follow the
 * share). */
int bml__worker_cpu_rows(bml_worker *w, submission *s) {
  size_t np = 0;
  for (size_t k = 0; k < s->ngroups; k++)
    if (!s->groups[k].forced) np += cpu_pieces(s, &s->groups[k], w->cpu_pieces + np);
  bool alone = false;
  int rc = bml__worker_pool_part(w, s, w->cpu_pieces, np, true);
  for (size_t k = 0; rc == 0 && k < s->ngroups; k++) {
    const group *g = &s->groups[k];
    if (!g->forced) continue;
    const double t0 = bml__now();
    np = cpu_pieces(s, g, w->cpu_pieces);
    rc = bml__pool_mat_vec_many(w->pool, w->cpu_pieces, np, watch_tick, s, &alone);
    s->cpu_alone |= alone;
    for (size_t i = 0; i < np; i++) s->forced_weights += (double)w->cpu_pieces[i].rows * (double)w->cpu_pieces[i].n;
    s->forced_time += bml__now() - t0;
  }
  return rc;
}

