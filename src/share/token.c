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

/* Where a group runs.  A group's first runs are timed on the card
 * (resident) and on the CPU alone, TOKEN_TRIALS each in turn after one
 * untimed on the card (its matrices' upload): the faster median wins
 * (the time of a run includes the pool's wake-up and the card's wait, which
 * is what a decode pays for either). */
enum { WHERE_LEARN = 0, WHERE_CARD, WHERE_CPU, WHERE_BATCH };

/* A token whose groups have all decided, some for the CPU, is then timed
 * whole: TOKEN_CHECKS tokens as decided and as many with every group on
 * the card, in turn; where the decided tokens' median is slower, every
 * group goes back to the card for good.  A group's trials time it alone;
 * what a CPU group costs the card's groups around it (their kernel's
 * return to work, the pool's threads beside the host's wait) shows only in
 * the whole token (with NVIDIA's driver, an H100, bonsai-8b's split token
 * took 1.06x the card alone's with the groups' decisions alone). */
enum { CHECK_NONE = 0, CHECK_RUNNING, CHECK_DONE };

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
  int rc = bml__token_reap(t, NULL);
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

static int cmpf(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

void bml__token_check_only(bml_token *t) { t->check_only = true; }

/* Where group g runs now: its decision, or its next trial. */
static int where(bml_token *t, size_t g) {
  if (t->check_only) return t->resident ? WHERE_CARD : WHERE_BATCH;
  const int fixed = bml__worker_token_where(t->w);
  if (fixed != WHERE_LEARN) return fixed == WHERE_CARD && !t->resident ? WHERE_BATCH : fixed;
  if (!t->resident) return WHERE_BATCH;
  if (t->all_card) return WHERE_CARD;
  if (t->where[g] != WHERE_LEARN) return t->where[g];
  return t->tried[g] % 2 == 0 ? WHERE_CARD : WHERE_CPU; /* the first (untimed) on the card */
}

/* A trial's time: after TOKEN_TRIALS each way, the faster median decides.  A
 * group decided for the CPU goes on being timed there: its trials ran
 * back to back on a warm pool (every group of a trial's token on the
 * CPU), its runs now follow the card's groups, after the pool's helpers
 * have gone idle.  Where the median of its next TOKEN_TRIALS runs is
 * slower than the card's trials, it goes back to the card (with NVIDIA's
 * driver, an H100, bonsai-1.7b's split token took 1.08x the card alone's
 * with the trials' decisions alone). */
static void learn(bml_token *t, size_t g, int ran, double seconds) {
  if (ran == WHERE_BATCH || bml__worker_token_where(t->w) != WHERE_LEARN) return;
  float *card = t->times + g * 2 * TOKEN_TRIALS, *cpu = card + TOKEN_TRIALS;
  if (t->where[g] == WHERE_CPU && ran == WHERE_CPU && t->tried[g] < 3 * TOKEN_TRIALS + 1) {
    const unsigned k = t->tried[g]++ - (2 * TOKEN_TRIALS + 1); /* card[] sorted, its median kept */
    cpu[k] = (float)bml__worker_token_seconds(t->w, false, seconds);
    if (k + 1 < TOKEN_TRIALS) return;
    qsort(cpu, TOKEN_TRIALS, sizeof *cpu, cmpf);
    if (cpu[TOKEN_TRIALS / 2] <= card[TOKEN_TRIALS / 2]) return;
    t->where[g] = WHERE_CARD;
    bml__debug(BML_CAT_WORKER, "a token's group %zu (\"%s\"): back to the card (median %.1f us on the CPU since, %.1f "
               "on the card)", g, t->p[t->first[g]].name, cpu[TOKEN_TRIALS / 2] * 1e6, card[TOKEN_TRIALS / 2] * 1e6);
    return;
  }
  if (t->where[g] != WHERE_LEARN) return;
  const unsigned k = t->tried[g]++;
  if (k == 0) return; /* the upload's */
  const unsigned n = (k - 1) / 2; /* runs 1, 2: cpu 0, card 1 ... */
  if (n < TOKEN_TRIALS)
    (ran == WHERE_CARD ? card : cpu)[n] = (float)bml__worker_token_seconds(t->w, ran == WHERE_CARD, seconds);
  if (k < 2 * TOKEN_TRIALS) return;
  qsort(card, TOKEN_TRIALS, sizeof *card, cmpf);
  qsort(cpu, TOKEN_TRIALS, sizeof *cpu, cmpf);
  t->where[g] = card[TOKEN_TRIALS / 2] <= cpu[TOKEN_TRIALS / 2] ? WHERE_CARD : WHERE_CPU;
  bml__debug(BML_CAT_WORKER, "a token's group %zu (\"%s\", %zu products): the %s (median %.1f us on the card, %.1f on "
             "the CPU)", g, t->p[t->first[g]].name, t->first[g + 1] - t->first[g],
             t->where[g] == WHERE_CARD ? "card" : "CPU", card[TOKEN_TRIALS / 2] * 1e6, cpu[TOKEN_TRIALS / 2] * 1e6);
}

/* Whether every group has decided, and those for the CPU are past the
 * runs that may send them back (learn). */
static bool settled(const bml_token *t, bool *some_cpu) {
  *some_cpu = false;
  for (size_t g = 0; g < t->ngroups; g++) {
    if (t->where[g] == WHERE_LEARN || (t->where[g] == WHERE_CPU && t->tried[g] < 3 * TOKEN_TRIALS + 1)) return false;
    *some_cpu |= t->where[g] == WHERE_CPU;
  }
  return true;
}

static float median(float *v, size_t n) {
  qsort(v, n, sizeof *v, cmpf);
  return v[n / 2];
}

/* A whole token has run (every group once since group 0): the check
 * starts once the groups have settled, takes the token's time, and at its
 * end decides. */
static void token_ended(bml_token *t) {
  if (t->check == CHECK_NONE) {
    bool some_cpu;
    if (settled(t, &some_cpu)) t->check = some_cpu ? CHECK_RUNNING : CHECK_DONE;
    t->checked = 0;
    return;
  }
  if (t->check != CHECK_RUNNING) return;
  const double fixed = bml__worker_token_check_seconds(t->w, t->all_card);
  t->check_s[t->all_card][t->checked / 2] = (float)(fixed > 0 ? fixed : t->token_s);
  if (++t->checked < 2 * TOKEN_CHECKS) return;
  const float decided = median(t->check_s[0], TOKEN_CHECKS), card = median(t->check_s[1], TOKEN_CHECKS);
  t->check = CHECK_DONE;
  bml__debug(BML_CAT_WORKER, "a token's check: median %.1f us as decided, %.1f with every group on the card: %s",
             decided * 1e6, card * 1e6, decided <= card ? "as decided" : "every group on the card");
  if (decided <= card) return;
  for (size_t g = 0; g < t->ngroups; g++) t->where[g] = WHERE_CARD;
}

/* Group g ran (at: where) in seconds: the whole token's time, and its end. */
static void token_ran(bml_token *t, size_t g, int at, double seconds) {
  if (g == 0) t->token_runs = 0, t->token_s = 0;
  t->token_s += bml__worker_token_seconds(t->w, at == WHERE_CARD, seconds);
  if (++t->token_runs == t->ngroups && g + 1 == t->ngroups) token_ended(t);
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

int bml_token_learning(const bml_token *t) {
  return t && t->w && t->resident && !t->check_only && t->learns && t->check != CHECK_DONE;
}

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
  if (g == 0) t->all_card = t->check == CHECK_RUNNING && t->checked % 2 == 1;
  const int at = where(t, g);
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
  if (rc == 0) {
    const double seconds = bml__now() - t0;
    learn(t, g, ran, seconds);
    if (ran != WHERE_BATCH && t->learns) token_ran(t, g, ran, seconds);
  }
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
