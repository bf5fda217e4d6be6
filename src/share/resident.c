/* resident.c -- a token's kernel and buffers on the card let go: parked (its kernel stopped), dropped, detached. */
#include "share/token_int.h"
#include "card/submit.h"

#include <stdatomic.h>

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
