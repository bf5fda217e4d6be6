/* launch.c -- a submission's card part: the activations in, the launches laid out and enqueued, the reads back. */
#include "share/worker_int.h"

#include "base/env.h"
#include "base/log.h"
#include "base/util.h"
#include "cpu/pool.h"
#include "card/card.h"
#include "card/kernels.h"
#include "card/submit.h"
#include "card/tune.h"

/* ---- the card's part: copies in, batched launches, a read back after each -------- */

bml__kernel_id bml__worker_kernel_for(const bml_worker *w, size_t rows) {
  return w->hooks.kernel < BML_KERNEL_COUNT ? w->hooks.kernel : bml__tune_kernel_for(w->card, rows);
}

/* The activations of groups [first, last) into the staging, spread over
 * the pool's threads when there are many (a model's token has a megabyte). */
typedef struct {
  bml_worker *w;
  const submission *s;
  size_t first, last;
} repack_job;

static void repack_part(void *ctx, int tid, int nthreads) {
  const repack_job *j = ctx;
  for (size_t i = j->first + (size_t)tid; i < j->last; i += (size_t)nthreads) {
    const group *g = &j->s->groups[i];
    if (g->e) bml__card_act_repack(j->s->p[g->first].act, g->e->n, (char *)j->w->acts.host + g->act_off);
  }
}

#define REPACK_PARALLEL_BYTES (256 * 1024) /* below this, one thread repacks */

static void repack_acts(bml_worker *w, const submission *s, size_t first, size_t last, size_t bytes) {
  repack_job j = {w, s, first, last};
  if (bytes >= REPACK_PARALLEL_BYTES && bml_pool_threads(w->pool) > 1) bml__pool_run(w->pool, repack_part, &j);
  else repack_part(&j, 0, 1);
}

/* The plan of the batched launches: a record per chunk of the card's
 * groups, at the start of the activations' buffer.  The results
 * are laid out in the launches' order, so each launch's results are one
 * range of the results' buffer, read back as soon as the launch is done. */
static int plan_launches(bml_worker *w, submission *s, size_t nrec, bml__desc *desc, size_t *nruns) {
  int rc = reserve((void **)&w->items, &w->items_cap, s->ngroups, sizeof *w->items);
  if (rc == 0) rc = reserve((void **)&w->recs, &w->recs_cap, nrec, sizeof *w->recs);
  if (rc == 0) rc = reserve((void **)&w->runs, &w->runs_cap, nrec, sizeof *w->runs);
  if (rc == 0) rc = reserve((void **)&w->pieces, &w->pieces_cap, nrec, sizeof *w->pieces);
  if (rc == 0) rc = reserve((void **)&w->piece_src, &w->piece_src_cap, nrec, sizeof *w->piece_src);
  if (rc == 0) rc = reserve((void **)&w->reads, &w->reads_cap, nrec, sizeof *w->reads);
  if (rc != 0) return rc;
  /* The kernel is chosen by the rows of the whole launch, not of each
   * product: many small products in one launch fill the card as one big
   * one does, and q1_0_mat_vec_lr serves more rows per table. */
  size_t n = 0, rows = 0, k = 0;
  for (size_t i = 0; i < s->ngroups; i++) rows += s->groups[i].e ? s->groups[i].e->m.rows : 0;
  const bml__batched_id kind = bml__worker_kernel_for(w, rows) == BML_KERNEL_MAT_VEC_LR ? BML_BATCHED_LR : BML_BATCHED_L;
  for (size_t i = 0; i < s->ngroups; i++) {
    const group *g = &s->groups[i];
    if (!g->e) continue;
    w->items[n++] = (bml__batch_item){&g->e->m, kind, g->act_off, 0};
    for (size_t c = 0; c < g->e->m.nchunks; c++) /* the records' first order: groups, then chunks */
      w->piece_src[k++] = (piece){i, g->e->m.chunks[c].row0, g->e->m.chunks[c].rows, 0};
  }
  *nruns = bml__batch_plan(w->card, w->items, n, w->recs, desc, w->runs);
  size_t at = 0;
  for (size_t i = 0; i < nrec; i++) {
    piece *pc = &w->pieces[i];
    *pc = w->piece_src[w->recs[i].order];
    pc->at = at;
    desc[i].out_off = (uint32_t)at;
    at += pc->rows;
  }
  s->pieces = w->pieces, s->npieces = nrec;
  return 0;
}

/* Enqueues the read of rb's results on queue q, non-blocking, with an
 * event; with zero-copy results there is none to make (the launch's event
 * stands for it). */
static int read_back(bml_worker *w, cl_command_queue q, readback *rb) {
  cl_event ev = NULL;
  int rc = bml__card_buf_read_on(q, &w->outs, rb->at * sizeof(float), rb->len * sizeof(float), &ev);
  if (ev) rb->done = ev;
  return rc;
}

void bml__worker_release_reads(submission *s) {
  for (size_t i = 0; i < s->nreads; i++)
    if (s->reads[i].done) bml__submit_release(s->reads[i].done);
  s->nreads = 0;
  s->reads_done = 0;
}

/* A launch per group, for the kernels that have no batched form (a test's
 * choice), and one read of every result after them. */
static int launch_each(bml_worker *w, submission *s, cl_command_queue *q, size_t nq, size_t out_rows) {
  bml__card *c = w->card;
  int rc = reserve((void **)&w->pieces, &w->pieces_cap, s->ngroups, sizeof *w->pieces);
  if (rc == 0) rc = reserve((void **)&w->reads, &w->reads_cap, 1, sizeof *w->reads);
  s->pieces = w->pieces, s->npieces = 0;
  size_t launched = 0;
  for (size_t i = 0; rc == 0 && i < s->ngroups; i++) {
    const group *g = &s->groups[i];
    if (!g->e) continue;
    s->pieces[s->npieces++] = (piece){i, 0, g->e->m.rows, g->out_off};
    cl_command_queue on = q[launched % nq];
    rc = bml__card_mat_vec_enqueue_on(c, on, &w->build, bml__worker_kernel_for(w, g->e->m.rows), 0, &g->e->m, &w->acts,
                                      g->act_off, &w->outs, g->out_off);
    if (rc == 0 && ++launched % 8 == 0) rc = bml__submit_flush(on);
  }
  /* the read (or, with zero-copy results, a marker: the event to wait
   * for), on the main queue, waits for the side queues' launches */
  cl_event done[BML_MAX_QUEUES] = {NULL};
  for (size_t i = 1; rc == 0 && i < nq; i++) rc = bml__submit_marker(q[i], &done[i - 1]);
  if (rc == 0 && nq > 1) rc = bml__submit_barrier(c->queue, (nq - 1), done);
  for (size_t i = 0; i + 1 < nq; i++)
    if (done[i]) bml__submit_release(done[i]);
  s->reads = w->reads;
  if (rc == 0) {
    readback *rb = &s->reads[0];
    *rb = (readback){0, s->npieces, 0, out_rows, NULL};
    rc = read_back(w, c->queue, rb);
    if (rc == 0 && !rb->done) rc = bml__submit_marker(c->queue, &rb->done);
    if (rc == 0) s->nreads = 1;
  }
  return rc;
}

/* The batched launches, each one's results read back right after it on its
 * queue.  The activations go in by prefixes: a launch needs the groups up
 * to its last record's activation (the first slabs hold the first
 * matrices, so the first launch needs few), and those are repacked and
 * copied in just before it, so the card starts early and the host repacks
 * the rest while it computes.  The records lie before the activations and
 * go in with the first prefix.  With several queues the copies in have the
 * main queue to themselves (behind no launch) and the launches and reads
 * go round the side queues, each waiting for the copy it needs.  A copy in
 * is flushed at once where launches follow it (the card copies while the
 * host enqueues them), each launch and its read as they are enqueued: a
 * batch of one launch (a decode's group) is one flush.  Zero-copy
 * activations or results have no copy in or read to enqueue: the kernels
 * read and write the host's memory, and a launch's own event marks its
 * results ready. */
static int launch_batched(bml_worker *w, submission *s, cl_command_queue *q, size_t nq, size_t launches) {
  bml__card *c = w->card;
  const bml__desc *desc = w->acts.host;
  cl_event in = NULL;                      /* the latest copy in (with side queues) */
  size_t copied = 0, next = 0;             /* bytes copied in; the first group not yet repacked */
  size_t waited[BML_MAX_QUEUES] = {0};     /* bytes of the copy in each queue has waited for */
  int rc = 0;
  double up = 0, fl = 0, t = bml__now();
  s->reads = w->reads;
  for (size_t i = 0; rc == 0 && i < launches; i++) {
    const bml__batch_run *run = &w->runs[i];
    size_t need = copied;
    for (size_t k = run->first; k < run->first + run->count; k++) {
      size_t end = desc[k].act_off + bml__card_act_bytes((size_t)desc[k].nb * BML_Q1_0_BLOCK);
      if (end > need) need = end;
    }
    if (need > copied) {
      size_t last = next;
      while (last < s->ngroups && (!s->groups[last].e || s->groups[last].act_off < need)) last++;
      const double t0 = bml__now();
      repack_acts(w, s, next, last, need - copied);
      next = last;
      if (in) bml__submit_release(in), in = NULL;
      rc = bml__card_buf_write_on(c->queue, &w->acts, copied, need - copied, nq > 1 ? &in : NULL);
      if (rc == 0 && (i + 1 < launches || in)) rc = bml__submit_flush(c->queue); /* in: another queue waits for it */
      copied = need;
      up += bml__now() - t0;
    }
    const size_t qi = nq > 1 ? 1 + i % (nq - 1) : 0;
    if (rc == 0 && qi != 0 && in && waited[qi] < copied) {
      rc = bml__submit_barrier(q[qi], 1, &in);
      waited[qi] = copied;
    }
    if (rc == 0 && w->hooks.fail_launch > 0 && (size_t)w->hooks.fail_launch == i + 1)
      w->hooks.fail_launch = 0, rc = CL_OUT_OF_RESOURCES;
    readback *rb = &s->reads[i];
    *rb = (readback){run->first, run->count, s->pieces[run->first].at, 0, NULL};
    for (size_t k = run->first; k < run->first + run->count; k++) rb->len += s->pieces[k].rows;
    if (rc == 0)
      rc = bml__card_batched_enqueue(c, q[qi], &w->build, run->kind, run->slab, &w->acts,
                                     run->first * sizeof(bml__desc), run->count, run->groups, &w->outs,
                                     w->outs.zero_copy ? &rb->done : NULL);
    if (rc == 0) rc = read_back(w, q[qi], rb);
    if (rb->done) s->nreads++;
    const double t0 = bml__now();
    if (rc == 0) rc = bml__submit_flush(q[qi]);
    fl += bml__now() - t0;
  }
  if (in) bml__submit_release(in);
  w->time.upload += up;
  w->time.flush += fl;
  w->time.launch += bml__now() - t - up - fl;
  return rc;
}

/* The card's part of a submission: the activations (and the records of the
 * batched launches) in, the launches, and the results read back.  The
 * table kernels run batched: one launch per slab and kernel (cut every
 * BML_RUN_BYTES of weights) computes every product of the batch there (a
 * launch costs the host some microseconds,
 * and a model's token has hundreds of products).  The launches are spread
 * over the card's queues, which may run them side by side.  Flushed as it
 * goes, so the card starts while the host enqueues the rest, and the host
 * copies a launch's results out while the card computes the next ones
 * (complete.c). */
int bml__worker_enqueue_groups(bml_worker *w, submission *s) {
  const bool batched = uses_records(w);
  size_t act_bytes = 0, nrec = 0;
  for (size_t i = 0; i < s->ngroups; i++) {
    const group *g = &s->groups[i];
    if (g->e) act_bytes += bml__card_act_bytes(g->e->n), nrec += g->e->m.nchunks;
  }
  if (act_bytes == 0) return 0;
  if (w->hooks.fail_enqueues > 0) return w->hooks.fail_enqueues--, CL_OUT_OF_RESOURCES;
  /* the records first (rounded up to 64 bytes), then the activations, as planning counted them */
  const size_t in_bytes = (size_t)bml__worker_staging_in_bytes(w, act_bytes, nrec), head = in_bytes - act_bytes;
  size_t at = head, out_rows = 0;
  for (size_t i = 0; i < s->ngroups; i++) {
    group *g = &s->groups[i];
    if (!g->e) continue;
    g->act_off = at, g->out_off = out_rows;
    at += bml__card_act_bytes(g->e->n);
    out_rows += g->e->m.rows;
  }
  int rc = bml__card_buf_reserve(w->card, &w->acts, in_bytes);
  if (rc == 0) rc = bml__card_buf_reserve(w->card, &w->outs, out_rows * sizeof(float));
  bml__worker_sync_allocated(w);
  double t_plan = bml__now();
  size_t launches = 0;
  if (rc == 0 && batched) {
    rc = plan_launches(w, s, nrec, w->acts.host, &launches);
  } else {
    for (size_t i = 0; i < s->ngroups; i++) launches += s->groups[i].e != NULL;
  }
  w->time.plan += bml__now() - t_plan;
  bml__card *c = w->card;
  /* batched, several launches: the main queue for the copies in and the
   * side queues for the launches; else the launches round all queues */
  const size_t want = batched && launches > 1 ? launches + 1 : launches;
  size_t nq = c->nside + 1 < want ? c->nside + 1 : want;
  if (nq == 0) nq = 1;
  cl_command_queue q[BML_MAX_QUEUES];
  q[0] = c->queue;
  for (size_t i = 1; i < nq; i++) q[i] = c->side[i - 1];
  double t_launch = bml__now();
  if (rc == 0 && batched) {
    rc = launch_batched(w, s, q, nq, launches);
  } else if (rc == 0) {
    repack_acts(w, s, 0, s->ngroups, act_bytes);
    cl_event copied_in = NULL;
    rc = bml__card_buf_write_on(c->queue, &w->acts, 0, in_bytes, nq > 1 ? &copied_in : NULL);
    for (size_t i = 1; rc == 0 && copied_in && i < nq; i++) rc = bml__submit_barrier(q[i], 1, &copied_in);
    if (copied_in) bml__submit_release(copied_in);
    double t_up = bml__now();
    w->time.upload += t_up - t_launch;
    if (rc == 0) rc = launch_each(w, s, q, nq, out_rows);
    for (size_t i = 0; rc == 0 && i < nq; i++) rc = bml__submit_flush(q[i]);
    w->time.launch += bml__now() - t_up;
  }
  double t_end = bml__now();
  if (s->count >= 64) /* a model's token: where the host's time goes */
    bml__debug(BML_CAT_WORKER, "batch of %zu: plan %.1f us, %zu launches with their copies in and reads %.1f us",
               s->count, (t_launch - t_plan) * 1e6, launches, (t_end - t_launch) * 1e6);
  s->on_card = true;
  if (rc == 0) w->time.launches += launches;
  return rc;
}

