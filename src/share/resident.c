/* resident.c -- a token's kernel on the card: launched, awaited, parked; its buffers dropped, detached. */
#include "share/token_int.h"
#include "base/util.h"
#include "card/program.h"
#include "card/submit.h"

#include <sched.h>
#include <stdatomic.h>

/* How long a run waits for its group before it takes the card for broken
 * (the token then runs its groups through the worker's batches): a group
 * takes microseconds on a GPU, but a software device's threads may wait
 * for the host's cores. */
#define TOKEN_GIVE_UP_SECONDS 10.0
/* ... and how long for the kernel to start: a software device (PoCL)
 * compiles it at its first launch, which took a minute on a busy 2-core
 * machine. */
#define TOKEN_START_SECONDS 600.0

/* Posts a word the card polls: after everything written before it (a
 * group's activation, the group), and out at once.  Host memory the card
 * reads over the bus may be mapped write-combining (NVIDIA's), whose
 * stores wait in the CPU's buffers, in any order, until a fence drains
 * them: a ticket left there is one the card never sees. */
void bml__token_post(uint32_t *word, uint32_t value) {
  atomic_thread_fence(memory_order_seq_cst);
  atomic_store_explicit((_Atomic uint32_t *)word, value, memory_order_seq_cst);
  atomic_thread_fence(memory_order_seq_cst);
}

/* ---- the resident launch --------------------------------------------------- */

uint32_t bml__token_launches(const bml_token *t) { return t ? t->launch : 0; }

/* Launches the kernel, its first ticket t->ticket. */
int bml__token_launch(bml_token *t) {
  const bml__card *c = t->card;
  const uint32_t ticket = t->ticket;
  const size_t local = bml__card_lr_wg(c);
  /* a ticket the kernel waits past (not an abort left by the last park);
   * and no done or given-up ticket of an earlier launch: a kernel parked
   * while it waited for this very ticket wrote it as given up, which
   * await would take for this launch's (then every launch after the
   * first, on a card that starts at once, gave up at its first group) */
  for (size_t k = 0; k < t->nwg; k++) t->h[t->done_at + k] = ticket - 1;
  bml__token_post(&t->h[TOKEN_EXIT], ticket - 1);
  bml__token_post(&t->h[TOKEN_REQ], TOKEN_WORD(ticket - 1, 0));
  int rc = bml__submit_token(c->queue, t->build->token, t->bits, t->d0, t->host, t->dev, TOKEN_FLAG_BYTES, ticket, t->spins,
                             t->nwg * local, local, &t->running);
  if (rc != CL_SUCCESS && t->running) bml__token_park(t);
  if (rc == CL_SUCCESS) {
    t->ticket0 = ticket;
    t->launch = t->launch + 1 ? t->launch + 1 : 1; /* 0 is no launch */
    bml__worker_set_resident(t->w, t);
  }
  return rc;
}

/* A resident launch's kernel that ended by itself (it gave up waiting):
 * its event released.  Returns its error, or 0; *started (may be NULL):
 * whether it has started (a software device compiles a kernel at its
 * first launch, which may take long before it runs). */
cl_int bml__token_reap(bml_token *t, bool *started) {
  cl_int state = CL_QUEUED;
  if (started) *started = true;
  if (!t->running) return CL_SUCCESS;
  cl_int rc = bml__submit_state(t->running, &state);
  if (started) *started = rc != CL_SUCCESS || state <= CL_RUNNING;
  if (rc == CL_SUCCESS && state > CL_COMPLETE) return CL_SUCCESS; /* still running */
  if (rc == CL_SUCCESS && state < 0) rc = state;
  bml__submit_release(t->running);
  t->running = NULL;
  bml__worker_set_resident(t->w, NULL);
  return rc;
}

bool bml__token_gave_up(const bml_token *t) {
  return t->running && atomic_load_explicit((_Atomic uint32_t *)&t->h[TOKEN_EXIT], memory_order_acquire) != t->ticket0 - 1;
}

/* Whether every work-group's done word says ticket; *k: the work-groups
 * already seen done (each writes its word once it is). */
static bool all_done(const bml_token *t, uint32_t ticket, size_t *k) {
  _Atomic uint32_t *done = (_Atomic uint32_t *)&t->h[t->done_at];
  while (*k < t->nwg && atomic_load_explicit(&done[*k], memory_order_acquire) == ticket) ++*k;
  return *k == t->nwg;
}

/* Waits for group g's ticket: 0 when done, 1 when the kernel gave up
 * before it (to launch again), or an error (the card's, or a wait past
 * TOKEN_GIVE_UP_SECONDS once the kernel runs, TOKEN_START_SECONDS before). */
int bml__token_await(bml_token *t, uint32_t ticket) {
  _Atomic uint32_t *exit = (_Atomic uint32_t *)&t->h[TOKEN_EXIT];
  const double begun = bml__now();
  double until = begun + TOKEN_GIVE_UP_SECONDS;
  bool started = false;
  size_t seen = 0;
  for (unsigned i = 1;; i++) {
    if (all_done(t, ticket, &seen)) return 0;
    if ((i & 255u) == 0) {
      if (atomic_load_explicit(exit, memory_order_acquire) == ticket) return 1;
      sched_yield(); /* a software device's thread may need this core */
      bool now_started;
      const cl_int rc = bml__token_reap(t, &now_started);
      if (rc != CL_SUCCESS) return rc;
      if (!t->running) /* ended without a word for this ticket: gave up as it was written */
        return all_done(t, ticket, &seen) ? 0 : 1;
      const double now = bml__now();
      if (!started && now_started) until = now + TOKEN_GIVE_UP_SECONDS; /* from its start */
      started |= now_started;
      if (now > (started ? until : begun + TOKEN_START_SECONDS)) return CL_OUT_OF_RESOURCES;
    }
    bml__cpu_relax();
  }
}

bool bml__token_running(const bml_token *t) { return t && t->running; }

void bml__token_park(bml_token *t) {
  if (!t || !t->running) return;
  bml__token_post(&t->h[TOKEN_REQ], TOKEN_ABORT);
  bml__submit_await(t->running);
  bml__submit_release(t->running);
  t->running = NULL;
  if (t->w) bml__worker_set_resident(t->w, NULL);
}

void bml__token_free_card(bml_token *t) {
  bml__token_park(t);
  if (t->h && t->host) {
    bml__submit_unmap(t->card->queue, t->host, t->h);
    bml__submit_finish(t->card->queue);
  }
  cl_mem *mems[] = {&t->bits, &t->d0, &t->dev, &t->host};
  for (size_t i = 0; i < BML_ARRAY_SIZE(mems); i++)
    if (*mems[i]) bml__submit_release_mem(*mems[i]), *mems[i] = NULL;
  t->h = NULL;
  if (t->w && t->card_bytes) bml__worker_token_hold(t->w, -(int64_t)t->card_bytes);
  t->card_bytes = 0;
  t->loaded = false;
}

void bml__token_drop(bml_token *t) {
  if (t->card) bml__token_free_card(t);
}

void bml__tokens_drop(bml_token *list) {
  for (bml_token *t = list; t; t = t->link) bml__token_drop(t);
}

void bml__tokens_detach(bml_token *list) {
  for (bml_token *t = list, *next; t; t = next) {
    next = t->link;
    bml__token_drop(t);
    t->w = NULL, t->link = NULL;
  }
}
