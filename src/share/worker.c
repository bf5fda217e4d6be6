/* worker.c -- the worker's public calls: products begun, finished, batched; its settings; release and close. */
#include "base/fork.h"
#include "base/log.h"
#include "base/util.h"
#include "cpu/pool.h"
#include "cpu/q1_0.h"
#include "card/kernels.h"
#include "card/program.h"
#include "share/worker_int.h"

#include <sched.h>
#include <time.h>

/* Enters w, waiting while another thread is inside a call (a product's
 * CPU rows may take milliseconds): a short spin, then sleeps of 50 us,
 * not a spin that would take a core from the pool's threads. */
static void enter_waiting(bml_worker *w) {
  for (unsigned i = 0; !enter(w); i++) {
    if (i < 64) {
      bml__cpu_relax();
      continue;
    }
    const struct timespec pause = {0, 50000};
    nanosleep(&pause, NULL);
  }
}

void bml__worker_enter_waiting(bml_worker *w) { enter_waiting(w); }

/* ---- the public calls --------------------------------------------------------------- */

static int check_product(const bml_product *p) {
  if (!p->name) return BML_EINVAL;
  return bml__q1_0_check(p->wts, p->rows, p->n, p->act, p->out);
}

/* bml_worker_begin; own_cpu: the worker computes the CPU's rows itself. */
static int begin(bml_worker *w, const char *name, const bml_block_q1_0 *wts, size_t rows, size_t n,
                 const bml_block_q8_0 *act, size_t *card_rows, bool own_cpu) {
  if (!w || !card_rows || !name) return BML_EINVAL;
  bml_product p = {name, wts, rows, n, act, NULL /* finish's */};
  int rc = bml__q1_0_check_shape(wts, rows, n, act);
  if (rc != 0) return rc;
  if (!enter(w)) return BML_EBUSY;
  if (w->cur.active) {
    rc = in_flight_error(w);
    leave(w);
    return rc;
  }
  w->single = p;
  submission *s = &w->cur;
  memset(s, 0, sizeof *s);
  s->p = &w->single;
  s->count = 1;
  s->own_cpu = own_cpu;
  s->owner = pthread_self();
  s->shape = bml__worker_find_shape(w, rows, n);
  s->balance = s->shape ? &s->shape->balance : NULL;
  rc = s->shape ? bml__worker_start(w, s) : BML_ENOMEM;
  if (rc == 0) {
    s->active = true;
    *card_rows = s->card_rows[0];
  }
  leave(w);
  return rc;
}

int bml_worker_begin(bml_worker *w, const char *name, const bml_block_q1_0 *wts, size_t rows, size_t n,
                     const bml_block_q8_0 *act, size_t *card_rows) {
  return begin(w, name, wts, rows, n, act, card_rows, false);
}

/* bml_worker_finish; own: bml_worker_mat_vec finishing its own product,
 * which no other thread's finish may take (its rows would go to that
 * thread's out, and the call that began it would find none in flight). */
static int finish(bml_worker *w, float *out, bool own) {
  if (!w || !out) return BML_EINVAL;
  if (w->hooks.busy_finishes > 0) return w->hooks.busy_finishes--, BML_EBUSY;
  if (!enter(w)) return BML_EBUSY;
  if (!w->cur.active || (w->cur.own_cpu && !own)) {
    const int rc = w->cur.active ? BML_EBUSY : BML_ESTATE;
    leave(w);
    return rc;
  }
  /* the card's rows land in out, and after an error the CPU computes them
   * from wts and act; the caller's rows are there too (whatever the split,
   * the same answer) */
  const bml_product *p = &w->single;
  if (bml__q1_0_check(p->wts, p->rows, p->n, p->act, out) != 0) {
    leave(w);
    return BML_EINVAL;
  }
  w->single.out = out;
  int rc = 0;
  if (w->child) { /* nothing of the card's, nor a timing of the parent's, is used here */
    bml__worker_say_child(w);
    if (w->cur.on_card) /* begun in the parent: its card rows are computed here */
      rc = bml_q1_0_mat_vec(p->wts, w->cur.card_rows[0], p->n, p->act, out);
    w->cur.on_card = false, w->cur.nreads = 0; /* the parent's events, left alone */
  } else {
    rc = bml__worker_complete(w, &w->cur);
  }
  w->cur.active = false;
  leave(w);
  return rc;
}

int bml_worker_finish(bml_worker *w, float *out) { return finish(w, out, false); }

int bml_worker_mat_vec(bml_worker *w, const char *name, const bml_block_q1_0 *wts, size_t rows, size_t n,
                       const bml_block_q8_0 *act, float *out) {
  if (!w || !name) return BML_EINVAL;
  int rc = bml__q1_0_check(wts, rows, n, act, out);
  if (rc != 0) return rc;
  size_t card_rows = 0;
  rc = begin(w, name, wts, rows, n, act, &card_rows, true);
  if (rc != 0) return rc;
  if (w->hooks.in_mat_vec) w->hooks.in_mat_vec(w->hooks.in_mat_vec_ctx);
  const bml__cpu_piece pc = {wts + card_rows * (n / BML_Q1_0_BLOCK), rows - card_rows, n, act, out + card_rows};
  /* this thread's product: bml__worker_complete() reads what it notes in finish */
  int cpu = rows > card_rows ? bml__worker_pool_part(w, &w->cur, &pc, 1, false) : 0;
  /* the product must not stay in flight: a finish that met another thread's
   * short call (status, share) is tried again */
  while ((rc = finish(w, out, true)) == BML_EBUSY) sched_yield();
  return cpu ? cpu : rc;
}

int bml_worker_mat_vec_batch(bml_worker *w, const bml_product *products, size_t count) {
  if (!w || (!products && count)) return BML_EINVAL;
  for (size_t i = 0; i < count; i++) {
    int rc = check_product(&products[i]);
    if (rc != 0) { /* the return says what, this says which */
      bml__debug(BML_CAT_WORKER, "batch of %zu refused: product %zu (\"%s\", %zux%zu): %s", count, i,
                 products[i].name ? products[i].name : "(no name)", products[i].rows, products[i].n,
                 bml_strerror(rc));
      return rc;
    }
  }
  if (count == 0) return 0;
  if (!enter(w)) return BML_EBUSY;
  const int rc = bml__worker_batch_entered(w, products, count);
  leave(w);
  return rc;
}

int bml__worker_batch_entered(bml_worker *w, const bml_product *products, size_t count) {
  if (w->cur.active) return in_flight_error(w);
  submission *s = &w->cur;
  memset(s, 0, sizeof *s);
  s->p = products;
  s->count = count;
  s->own_cpu = true;
  s->owner = pthread_self();
  s->balance = bml__worker_find_kind(w, products, count);
  int rc = bml__worker_start(w, s);
  double t0 = bml__now();
  int cpu = rc == 0 ? bml__worker_cpu_rows(w, s) : 0;
  w->time.cpu += bml__now() - t0;
  if (rc == 0) rc = bml__worker_complete(w, s);
  return cpu ? cpu : rc;
}

/* ---- settings, status, release -------------------------------------------------------- */

int bml_worker_set_share(bml_worker *w, double share) {
  if (!w) return BML_EINVAL;
  if (!(share >= 0.0 && share <= 1.0)) return BML_ERANGE;
  if (!enter(w)) return BML_EBUSY;
  int rc = w->cur.active ? in_flight_error(w) : 0;
  if (rc == 0) {
    w->share = share;
    w->share_fixed = true;
  }
  leave(w);
  return rc;
}

int bml_worker_set_limit(bml_worker *w, double limit) {
  if (!w) return BML_EINVAL;
  if (!(limit >= BML_LIMIT_MIN && limit <= 1.0)) return BML_ERANGE;
  if (!enter(w)) return BML_EBUSY;
  w->limiter.limit = limit;
  w->limiter.rest_until = 0;
  leave(w);
  return 0;
}

/* Whether the product in flight has a group on entry e. */
static bool in_flight(const bml_worker *w, const entry *e) {
  for (size_t i = 0; w->cur.active && i < w->cur.ngroups; i++)
    if (w->cur.groups[i].e == e) return true;
  return false;
}

static void release_all(bml_worker *w) {
  bml__tokens_drop(w->tokens); /* their kernels parked, their matrices freed */
  if (w->card) bml__card_finish(w->card); /* a product in flight keeps its staged rows */
  /* the matrices are forgotten too (an engine that loads model after model
   * would otherwise keep every name it ever used, and look each up), except
   * those of a product in flight, whose groups point at them */
  size_t kept = 0;
  for (size_t i = 0; i < w->nentries; i++) {
    entry *e = w->entries[i];
    bml__worker_drop_matrix(w, e);
    e->cpu_only = false;
    if (in_flight(w, e)) w->entries[kept++] = e;
    else bml__worker_free_entry(e);
  }
  w->nentries = kept;
  /* a product in flight keeps its results: they were read into outs' host
   * staging, which is only freed when no product is in flight */
  bml__card_buf_free(&w->acts);
  if (!w->cur.active) bml__card_buf_free(&w->outs);
  bml__worker_sync_allocated(w);
}

void bml_worker_release(bml_worker *w) {
  if (!w || w->child) return; /* the card's buffers are the parent's */
  enter_waiting(w); /* another thread is inside a call: wait it out */
  release_all(w);
  leave(w);
}

/* Frees what w holds on the card and on the heap, but not the card, its
 * build and the devices (a worker of the open's check shares them). */
void bml__worker_free_state(bml_worker *w) {
  w->cur.active = false;
  if (!w->child) {
    release_all(w);
    bml__worker_release_reads(&w->cur); /* a product begun and never finished: the card is drained now */
  }
  for (size_t i = 0; i < w->nentries; i++) bml__worker_free_entry(w->entries[i]);
  free(w->entries);
  free(w->shapes);
  free(w->card_rows);
  free(w->groups);
  free(w->cpu_pieces);
  free(w->items);
  free(w->recs);
  free(w->runs);
  free(w->pieces);
  free(w->piece_src);
  free(w->reads);
}

void bml_worker_close(bml_worker *w) {
  if (!w) return;
  bml__fork_watch_remove(&w->watch);
  if (w->quieted) bml__pool_quiet(w->pool, false); /* a torn worker's too: the pool outlives it */
  if (w->torn) { /* its lists may be half changed: left, with the card's objects */
    free(w);
    return;
  }
  bml__tokens_detach(w->tokens);
  bml__worker_free_state(w);
  if (!w->child) { /* in a child the card's objects are the parent's: left as they are */
    bml__build_release(&w->build);
    bml__card_close(w->card);
  }
  bml_devices_free(w->devices);
  free(w);
}

