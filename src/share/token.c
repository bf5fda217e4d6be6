/* token.c -- a decode's token: its groups planned and uploaded once, run resident on the card as the host asks. */
#include "share/token_int.h"
#include "base/log.h"
#include "base/util.h"
#include "cpu/pool.h"
#include "cpu/q1_0.h"
#include "card/kernels.h"
#include "card/submit.h"

#include <stdlib.h>
#include <string.h>

/* Launches a run tries where the kernel gave up waiting for its group
 * just before it came. */
#define TOKEN_TRIES 2

/* Neighbours that share an activation (pointer and n) are one group, at
 * most 16 products (as the worker's batches group them). */
static size_t count_groups(const bml_product *p, size_t count, size_t *first) {
  size_t n = 0;
  for (size_t i = 0, j; i < count; i = j) {
    for (j = i + 1; j < count && j - i < 16 && p[j].act == p[i].act && p[j].n == p[i].n; j++) continue;
    if (first) first[n] = i;
    n++;
  }
  if (first) first[n] = count;
  return n;
}

/* The group's results, from host memory into its products' outputs (those
 * the token keeps stay there: bml_token_out). */
static void scatter(bml_token *t, size_t g) {
  const float *at = (const float *)((const char *)t->h + t->out_at);
  t->last = at;
  for (size_t i = t->first[g]; i < t->first[g + 1]; i++) {
    if (t->p[i].out) memcpy(t->p[i].out, at, t->p[i].rows * sizeof *at);
    at += t->p[i].rows;
  }
}

/* Group g's products as the CPU or a batch computes them: a kept result
 * into t->kept, at its place in the group's rows. */
static size_t group_products(bml_token *t, size_t g, bml_product *q) {
  size_t np = 0, at = 0;
  for (size_t i = t->first[g]; i < t->first[g + 1]; i++, np++) {
    q[np] = t->p[i];
    if (!q[np].out) q[np].out = t->kept + at;
    at += t->p[i].rows;
  }
  t->last = t->kept;
  return np;
}

/* The ticket after `ticket`, back to 1 past TOKEN_TICKET_MOST (a launch
 * ends before: run_resident). */
static void next_ticket(bml_token *t, uint32_t ticket) {
  t->ticket = ticket >= TOKEN_TICKET_MOST ? 1 : ticket + 1;
}

/* Group g resident on the card (the worker entered); sec: upload, launch,
 * wait, copy out.  Returns 0, or an error after which the group must run
 * otherwise. */
static int run_resident(bml_token *t, size_t g, double sec[BML_TOKEN_PHASES]) {
  if (!t->loaded) {
    int rc = bml__token_load(t);
    if (rc != 0) return rc;
  }
  /* a launch runs a group once (cl/q1_0_batch.cl), and a ticket past the abort's
   * needs a new one */
  if (t->running && (t->ran[g] == t->launch || t->ticket < t->ticket0)) bml__token_park(t);
  /* the driver asked only where the kernel wrote that it gave up: a
   * kernel that failed without a word is found by the wait's own asking */
  int rc = bml__token_gave_up(t) ? bml__token_reap(t, NULL) : 0;
  for (int tries = 0; rc == 0 && tries < TOKEN_TRIES; tries++) {
    double t0 = bml__now();
    if (!t->running && (rc = bml__token_launch(t)) != 0) break;
    double t1 = bml__now();
    const uint32_t ticket = t->ticket;
    const bml_product *p = &t->p[t->first[g]];
    bml__card_act_repack(p->act, p->n, (char *)t->h + t->act_off[g]);
    bml__token_post(&t->h[TOKEN_REQ], TOKEN_WORD(ticket, g));
    double t2 = bml__now();
    rc = bml__worker_token_fault(t->w) ? CL_OUT_OF_RESOURCES : bml__token_await(t, ticket);
    double t3 = bml__now();
    sec[0] += t2 - t1, sec[1] += t1 - t0, sec[2] += t3 - t2;
    if (rc == 1) { /* it gave up just before: once more, from a new launch */
      bml__token_park(t);
      next_ticket(t, ticket);
      rc = 0;
      continue;
    }
    if (rc != 0) break;
    scatter(t, g);
    sec[3] += bml__now() - t3;
    next_ticket(t, ticket);
    t->ran[g] = t->launch;
    return 0;
  }
  cl_int state = 0;
  if (t->running) bml__submit_state(t->running, &state);
  bml__debug(BML_CAT_WORKER, "a token's group %zu: %s%s (%d); tickets: asked %u, done %u, given up %u; launch %u, "
             "its state %d, %zu work-groups, %u spins", g, rc == 0 ? "the card gave up waiting for it, every launch" : "",
             rc == 0 ? "" : bml_err_name(rc), rc, t->h[TOKEN_REQ], t->h[t->done_at], t->h[TOKEN_EXIT], t->launch,
             (int)state, t->nwg, t->spins);
  if (rc == 0) rc = CL_OUT_OF_RESOURCES; /* gave up every time */
  bml__token_park(t);
  return rc;
}

/* Group g on the worker's pool alone.  On a software device the resident
 * kernel is parked first: its first work-group waits for the next group on
 * one of the host's cores, which the pool's threads need (with PoCL on 2
 * cores it took bonsai-1.7b's split token, every group on the CPU, from
 * 22 ms to 32). */
static int run_cpu(bml_token *t, size_t g) {
  if (t->running && bml__worker_software_card(t->w)) bml__token_park(t);
  bml_product q[16];
  bml__cpu_piece pc[16];
  const size_t np = group_products(t, g, q);
  for (size_t i = 0; i < np; i++) pc[i] = (bml__cpu_piece){q[i].wts, q[i].rows, q[i].n, q[i].act, q[i].out};
  return bml__pool_mat_vec_many(bml__worker_pool(t->w), pc, np, NULL, NULL, NULL);
}

/* ---- the calls ------------------------------------------------------------- */

/* Room for the results of t's largest group (rows that could not be in
 * memory give NULL, as a failed allocation). */
static float *keep_room(const bml_token *t) {
  size_t most = 0;
  for (size_t g = 0; g < t->ngroups; g++) {
    size_t rows = 0;
    for (size_t i = t->first[g]; i < t->first[g + 1]; i++) {
      if (rows > SIZE_MAX / sizeof(float) - t->p[i].rows) return NULL;
      rows += t->p[i].rows;
    }
    if (rows > most) most = rows;
  }
  return malloc(most * sizeof(float));
}

/* Links t into (or out of) its worker's list. */
static void link_token(bml_token *t, bool add) {
  bml_token **head = bml__worker_tokens(t->w);
  if (add) {
    t->link = *head, *head = t;
    return;
  }
  while (*head && *head != t) head = &(*head)->link;
  if (*head) *head = t->link;
}


int bml_worker_token_open(bml_worker *w, const bml_product *products, size_t count, bml_token **out) {
  if (!out) return BML_EINVAL;
  *out = NULL;
  if (!w || !products || count == 0) return BML_EINVAL;
  bool keeps = false; /* a product whose results the token keeps (its out NULL) */
  for (size_t i = 0; i < count; i++) {
    const bml_product *p = &products[i];
    int rc = !p->name ? BML_EINVAL
             : p->out ? bml__q1_0_check(p->wts, p->rows, p->n, p->act, p->out)
                      : bml__q1_0_check_shape(p->wts, p->rows, p->n, p->act);
    if (rc != 0) return rc;
    keeps = keeps || !p->out;
  }
  bml_token *t = calloc(1, sizeof *t);
  if (!t) return BML_ENOMEM;
  t->count = count;
  t->ngroups = count_groups(products, count, NULL);
  t->p = malloc(count * sizeof *t->p);
  t->first = malloc((t->ngroups + 1) * sizeof *t->first);
  t->act_off = calloc(t->ngroups, sizeof *t->act_off);
  t->ran = calloc(t->ngroups, sizeof *t->ran);
  t->where = calloc(t->ngroups, sizeof *t->where);
  t->times = calloc(t->ngroups * 2 * TOKEN_TRIALS, sizeof *t->times);
  t->tried = calloc(t->ngroups, sizeof *t->tried);
  t->plan = calloc(t->ngroups, sizeof *t->plan);
  if (!t->p || !t->first || !t->act_off || !t->ran || !t->where || !t->times || !t->tried || !t->plan) {
    bml_token_close(t);
    return BML_ENOMEM;
  }
  memcpy(t->p, products, count * sizeof *t->p);
  count_groups(products, count, t->first);
  if (keeps && (t->kept = keep_room(t)) == NULL) {
    bml_token_close(t);
    return BML_ENOMEM;
  }
  if (!bml__worker_enter(w)) {
    bml_token_close(t);
    return BML_EBUSY;
  }
  t->w = w;
  t->card = bml__worker_token_card(w, &t->build, &t->nwg, &t->spins);
  t->resident = t->card != NULL && t->ngroups < TOKEN_GROUPS_MOST;
  t->learns = bml__worker_token_where(w) == WHERE_LEARN;
  t->ticket = 1;
  link_token(t, true);
  bml__worker_leave(w);
  *out = t;
  return 0;
}

size_t bml_token_groups(const bml_token *t) { return t ? t->ngroups : 0; }

size_t bml_token_group_first(const bml_token *t, size_t g) { return t && g <= t->ngroups ? t->first[g] : 0; }

int bml_token_resident(const bml_token *t) { return t && t->resident; }

int bml_token_run(bml_token *t, size_t g) {
  if (!t || g >= t->ngroups) return BML_EINVAL;
  if (!t->w) return BML_ESTATE;
  bml_worker *w = t->w;
  const bml_product *p = t->p + t->first[g];
  const size_t count = t->first[g + 1] - t->first[g];
  if (!bml__worker_enter(w)) return BML_EBUSY;
  /* the worker may have lost the card since (retired, or a child of fork()) */
  if (t->resident && bml__worker_token_card(w, &t->build, &t->nwg, &t->spins) != t->card) t->resident = false;
  t->learns = bml__worker_token_where(w) == WHERE_LEARN;
  const int at = bml__token_where(t, g);
  const double t0 = bml__now();
  t->last = NULL;
  double sec[BML_TOKEN_PHASES] = {0};
  int rc = 1;
  if (at == WHERE_CARD) {
    rc = run_resident(t, g, sec);
    bml__worker_token_ran(w, count, rc, sec);
    if (rc != 0) {
      bml__debug(BML_CAT_WORKER, "a token's group %zu did not run resident: %s (%d); its groups run as batches", g,
                 bml_err_name(rc), rc);
      t->resident = false;
      bml__token_free_card(t);
    }
  } else if (at == WHERE_CPU) {
    rc = run_cpu(t, g);
    sec[BML_TOKEN_PHASES - 1] = bml__now() - t0;
    if (rc == 0) bml__worker_token_ran(w, count, BML_EVERIFY, sec); /* the CPU's by decision */
  }
  const int ran = rc == 0 ? at : WHERE_BATCH;
  if (rc != 0 && at != WHERE_CPU && !t->check_only) {
    bml_product q[16];
    rc = bml__worker_batch_entered(w, t->kept ? q : p, t->kept ? group_products(t, g, q) : count);
  }
  t->last_group = g;
  if (rc != 0) t->last = NULL;
  if (rc == 1) rc = BML_ENOTSUP; /* check only: not resident here */
  if (rc == 0) bml__token_learn(t, g, ran, bml__now() - t0);
  bml__worker_leave(w);
  return rc;
}

void bml_token_close(bml_token *t) {
  if (!t) return;
  bml_worker *w = t->w;
  if (w) {
    bml__worker_enter_waiting(w); /* another thread's call: wait it out */
    bml__token_drop(t);
    link_token(t, false);
    bml__worker_leave(w);
  }
  free(t->p);
  free(t->first);
  free(t->act_off);
  free(t->ran);
  free(t->where);
  free(t->times);
  free(t->tried);
  free(t->plan);
  free(t->kept);
  free(t);
}

const float *bml_token_out(const bml_token *t, size_t i) {
  if (!t || i >= t->count || t->p[i].out || !t->last) return NULL;
  const size_t g = t->last_group;
  if (i < t->first[g] || i >= t->first[g + 1]) return NULL;
  const float *at = t->last;
  for (size_t k = t->first[g]; k < i; k++) at += t->p[k].rows;
  return at;
}
