/* token_learn.c -- where a decode's token's groups run: each group's trials, then the whole token's check. */
#include "share/token_int.h"
#include "base/log.h"

#include <stdlib.h>

/* A token whose groups have all decided, some for the CPU, is then timed
 * whole: TOKEN_CHECKS tokens as decided and as many with every group on
 * the card, in turn; where the decided tokens' median is slower, every
 * group goes back to the card for good.  A group's trials time it alone;
 * what a CPU group costs the card's groups around it (their kernel's
 * return to work, the pool's threads beside the host's wait) shows only in
 * the whole token, and a split token must not lose to the card alone:
 * this check bounds it by the card alone's time, whatever the groups
 * decided. */
enum { CHECK_NONE = 0, CHECK_RUNNING, CHECK_DONE };

static int cmpf(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* The median of n times (n odd), which it leaves sorted. */
static float median(float *v, size_t n) {
  qsort(v, n, sizeof *v, cmpf);
  return v[n / 2];
}

/* Whether group g, decided for the CPU, is still in the runs that may
 * send it back to the card (learn_group). */
static bool rechecking(const bml_token *t, size_t g) {
  return t->where[g] == WHERE_CPU && t->tried[g] < 3 * TOKEN_TRIALS + 1;
}

void bml__token_check_only(bml_token *t) { t->check_only = true; }

/* A group's first runs are timed on the card (resident) and on the CPU
 * alone, TOKEN_TRIALS each in turn after one untimed on the card (its
 * matrices' upload): the faster median wins (the time of a run includes
 * the pool's wake-up and the card's wait, which is what a decode pays for
 * either). */
int bml__token_where(bml_token *t, size_t g) {
  if (g == 0) t->all_card = t->check == CHECK_RUNNING && t->checked % 2 == 1; /* a token of the check's */
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
 * slower than the card's trials, it goes back to the card. */
static void learn_group(bml_token *t, size_t g, int ran, double seconds) {
  if (ran == WHERE_BATCH || !t->learns) return;
  float *card = t->times + g * 2 * TOKEN_TRIALS, *cpu = card + TOKEN_TRIALS;
  if (ran == WHERE_CPU && rechecking(t, g)) {
    const unsigned k = t->tried[g]++ - (2 * TOKEN_TRIALS + 1); /* card[] sorted, its median kept */
    cpu[k] = (float)bml__worker_token_seconds(t->w, false, seconds);
    if (k + 1 < TOKEN_TRIALS) return;
    const float on_cpu = median(cpu, TOKEN_TRIALS), on_card = card[TOKEN_TRIALS / 2];
    if (on_cpu <= on_card) return;
    t->where[g] = WHERE_CARD;
    bml__debug(BML_CAT_WORKER, "a token's group %zu (\"%s\"): back to the card (median %.1f us on the CPU since, %.1f "
               "on the card)", g, t->p[t->first[g]].name, on_cpu * 1e6, on_card * 1e6);
    return;
  }
  if (t->where[g] != WHERE_LEARN) return;
  const unsigned k = t->tried[g]++;
  if (k == 0) return; /* the upload's */
  const unsigned n = (k - 1) / 2; /* runs 1, 2: cpu 0, card 1 ... */
  if (n < TOKEN_TRIALS)
    (ran == WHERE_CARD ? card : cpu)[n] = (float)bml__worker_token_seconds(t->w, ran == WHERE_CARD, seconds);
  if (k < 2 * TOKEN_TRIALS) return;
  const float on_card = median(card, TOKEN_TRIALS), on_cpu = median(cpu, TOKEN_TRIALS);
  t->where[g] = on_card <= on_cpu ? WHERE_CARD : WHERE_CPU;
  bml__debug(BML_CAT_WORKER, "a token's group %zu (\"%s\", %zu products): the %s (median %.1f us on the card, %.1f on "
             "the CPU)", g, t->p[t->first[g]].name, t->first[g + 1] - t->first[g],
             t->where[g] == WHERE_CARD ? "card" : "CPU", on_card * 1e6, on_cpu * 1e6);
}

/* Whether every group has decided, and those for the CPU are past the
 * runs that may send them back. */
static bool settled(const bml_token *t, bool *some_cpu) {
  *some_cpu = false;
  for (size_t g = 0; g < t->ngroups; g++) {
    if (t->where[g] == WHERE_LEARN || rechecking(t, g)) return false;
    *some_cpu |= t->where[g] == WHERE_CPU;
  }
  return true;
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

void bml__token_learn(bml_token *t, size_t g, int ran, double seconds) {
  learn_group(t, g, ran, seconds);
  if (ran != WHERE_BATCH && t->learns) token_ran(t, g, ran, seconds);
}

int bml_token_learning(const bml_token *t) {
  return t && t->w && t->resident && !t->check_only && t->learns && t->check != CHECK_DONE;
}
