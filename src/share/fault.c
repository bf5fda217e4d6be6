/* fault.c -- the card's faults: its rows to the CPU, the card retired after errors in a row, a child of fork(). */
#include "base/log.h"
#include "card/kernels.h"
#include "card/program.h"
#include "share/worker_int.h"

/* Errors in a row that retire the card for the process. */
#define RETIRE_AFTER 3

/* ---- faults ------------------------------------------------------------------------ */

static void retire(bml_worker *w, int err) {
  w->retired = true;
  /* each worker's retirement is said (a worker opened later verifies the
   * card again, and may use it) */
  bml__warn(BML_CAT_WORKER, "GPU not used: \"%s\" retired after %d OpenCL errors in a row (the last: %s (%d)); "
            "this worker's products run on the CPU", w->card->name, RETIRE_AFTER, bml_err_name(err), err);
  bml__card_finish(w->card);
  for (size_t i = 0; i < w->nentries; i++) bml__worker_drop_matrix(w, w->entries[i]);
  bml__card_buf_free(&w->acts);
  bml__card_buf_free(&w->outs);
  bml__worker_sync_allocated(w);
}

/* In a child of fork() (fork.c) the card, its queues and buffers are the
 * parent's (the driver's threads are not in the child, and a wait on them
 * would never end): the copy retires without a word to the driver, and
 * its products run on the CPU; a call another thread was inside (its
 * product with it) is not in the child either.  A product this thread
 * began is finished on the CPU; release and close leave the card's
 * objects alone.  It says so at its first product (not here: no logging
 * in a pthread_atfork handler). */
void bml__worker_in_child(void *ctx) {
  bml_worker *w = ctx;
  w->child = true;
  w->retired = true;
  w->limiter.allocated = 0; /* the card's buffers are the parent's */
  if (atomic_flag_test_and_set(&w->driving)) {
    /* another thread was inside a call, changing the worker's lists as it
     * went: the copy may be half changed, so it stays busy (BML_EBUSY)
     * and its close frees only the worker itself */
    w->torn = true;
    return;
  }
  if (w->cur.active && !pthread_equal(w->cur.owner, pthread_self()))
    w->cur.active = false; /* another thread's product (its mat_vec's CPU rows, or between its begin and finish) */
  atomic_flag_clear(&w->driving);
}

void bml__worker_say_child(bml_worker *w) {
  if (w->child_said) return;
  w->child_said = true;
  bml__warn(BML_CAT_WORKER, "GPU not used: this process is a child of fork(), and \"%s\" belongs to its parent: "
            "this worker's products run on the CPU", w->card->name);
}

/* An OpenCL error: the submission's card rows go to the CPU. */
void bml__worker_card_error(bml_worker *w, int err) {
  bml__debug(BML_CAT_WORKER, "card error %s (%d): the rows go to the CPU", bml_err_name(err), err);
  if (++w->errors_in_row >= RETIRE_AFTER) retire(w, err);
}

/* The card failed: every card row of the submission goes to the CPU. */
void bml__worker_all_to_cpu(bml_worker *w, submission *s, int err) {
  if (s->on_card) bml__card_finish(w->card);
  bml__worker_release_reads(s);
  bml__worker_card_error(w, err);
  size_t n = 0;
  for (size_t i = 0; i < s->ngroups; i++)
    if (s->groups[i].e) n += s->groups[i].count, s->groups[i].e = NULL;
  count_cpu(&w->count.on_cpu_error, n);
  memset(s->card_rows, 0, s->count * sizeof *s->card_rows);
  s->on_card = false;
  s->timed = false;
}

