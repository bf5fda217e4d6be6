/* check.c -- the open's check of the worker's own batches and resident tokens on the card, and the transfers it settles. */
#include "share/worker_int.h"

#include "base/log.h"
#include "base/util.h"
#include "cpu/gen.h"
#include "cpu/golden.h"
#include "card/card.h"
#include "card/program.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

/* How long a wait for the card polls its event before it sleeps: a
 * decode's group comes back in tens of microseconds, and a sleep's wake
 * costs more than that (bml__worker_choose_transfers). */
#define WAIT_SPIN 1e-3

/* ---- open: the worker's own batches, checked on the card ----------------------------
 *
 * The oracle checks each kernel, batched ones included, on the card's own
 * queue.  A batch runs otherwise: its activations are copied in by
 * prefixes on that queue while earlier launches run on the side queues,
 * several launches write one results buffer and each one's results are
 * read back as it ends.  OpenCL leaves a buffer so shared between queues
 * undefined (QUEUES_DEFAULT, share/plan.c), and the scatter of the results is the
 * worker's own.  So before the card takes a product the open runs a small
 * model's batch through this very path, a launch per group, with each
 * batched kernel, and compares every row with the CPU kernel's bits.
 * Other bits on several queues: one queue, checked again; other bits on
 * one queue, or the card failing to take the batch: the card is not used. */
#define CHECK_LAYERS 2
#define CHECK_PER_LAYER 7
#define CHECK_PRODUCTS (CHECK_LAYERS * CHECK_PER_LAYER)
#define CHECK_LAYER_ACTS 4 /* activations a layer of the check's model has (check_layer's act) */

/* A layer of the check's model (hidden 512, key/value 128, intermediate
 * 1536): q, k and v share one activation, gate and up another. */
static const struct {
  const char *name;
  size_t rows, n;
  int act; /* the layer's activation: 0 (the normed hidden state), 1 (attention), 2 (normed), 3 (the MLP's) */
} check_layer[CHECK_PER_LAYER] = {{"q", 512, 512, 0},    {"k", 128, 512, 0},  {"v", 128, 512, 0},
                                  {"o", 512, 512, 1},    {"gate", 1536, 512, 2}, {"up", 1536, 512, 2},
                                  {"down", 512, 1536, 3}};

typedef struct {
  bml_product p[CHECK_PRODUCTS];
  char names[CHECK_PRODUCTS][24];
  bml_block_q1_0 *wts;
  bml_block_q8_0 *acts;
  float *want, *got;
} batch_check;

static void check_free(batch_check *b) { free(b->wts), free(b->acts), free(b->want), free(b->got); }

/* The check's products again, a batch a group (its products that share an
 * activation) as a decode submits them: each group one launch, its
 * results awaited before the next.  Returns 0 or an error of a batch. */
static int round_trips(bml_worker *t, batch_check *b, size_t rows) {
  memset(b->got, 0xff, rows * sizeof *b->got);
  int rc = 0;
  for (size_t i = 0, j; rc == 0 && i < CHECK_PRODUCTS; i = j) {
    for (j = i + 1; j < CHECK_PRODUCTS && b->p[j].act == b->p[i].act; j++) continue;
    rc = bml_worker_mat_vec_batch(t, b->p + i, j - i);
  }
  return rc;
}

/* The check's products: random weights and activations (-128 quants among
 * them) in the first layer, layer-shaped ones in the second; the CPU
 * kernel's results in b->want. */
static int check_make(batch_check *b) {
  size_t blocks = 0, act_blocks = 0, rows = 0;
  for (int i = 0; i < CHECK_PER_LAYER; i++) {
    blocks += check_layer[i].rows * (check_layer[i].n / BML_Q1_0_BLOCK);
    rows += check_layer[i].rows;
  }
  size_t act_n[CHECK_LAYER_ACTS] = {0};
  for (int i = 0; i < CHECK_PER_LAYER; i++) act_n[check_layer[i].act] = check_layer[i].n;
  for (int a = 0; a < CHECK_LAYER_ACTS; a++) act_blocks += act_n[a] / BML_Q8_0_BLOCK;
  memset(b, 0, sizeof *b);
  b->wts = malloc(CHECK_LAYERS * blocks * sizeof *b->wts);
  b->acts = malloc(CHECK_LAYERS * act_blocks * sizeof *b->acts);
  b->want = malloc(CHECK_LAYERS * rows * sizeof *b->want);
  b->got = malloc(CHECK_LAYERS * rows * sizeof *b->got);
  if (!b->wts || !b->acts || !b->want || !b->got) return BML_ENOMEM;
  uint64_t seed = 0xba7c4ec7;
  bml_block_q1_0 *wt = b->wts;
  bml_block_q8_0 *at = b->acts;
  float *want = b->want, *got = b->got;
  int rc = 0;
  for (int layer = 0; rc == 0 && layer < CHECK_LAYERS; layer++) {
    const bool shaped = layer % 2 == 1;
    bml_block_q8_0 *act[CHECK_LAYER_ACTS];
    for (int a = 0; rc == 0 && a < CHECK_LAYER_ACTS; a++) {
      act[a] = at;
      rc = bml__gen_q8_0(&seed, at, act_n[a], shaped);
      at += act_n[a] / BML_Q8_0_BLOCK;
    }
    for (int i = 0; rc == 0 && i < CHECK_PER_LAYER; i++) {
      const size_t r = check_layer[i].rows, n = check_layer[i].n, k = (size_t)layer * CHECK_PER_LAYER + (size_t)i;
      bml__gen_q1_0(&seed, wt, r, n, shaped);
      snprintf(b->names[k], sizeof b->names[k], "check.%d.%s", layer, check_layer[i].name);
      b->p[k] = (bml_product){b->names[k], wt, r, n, act[check_layer[i].act], got};
      rc = bml_q1_0_mat_vec(wt, r, n, act[check_layer[i].act], want);
      wt += r * (n / BML_Q1_0_BLOCK), want += r, got += r;
    }
  }
  return rc;
}

/* One round of the check: the batch on w's card with each batched kernel,
 * through a worker of its own that gives the card every row.  Returns 0,
 * BML_EVERIFY (why says what), BML_ENOMEM or an error of the batch. */
static int check_round(bml_worker *w, batch_check *b, unsigned round, char *why, size_t len, bool *bits) {
  static const bml__kernel_id kernels[] = {BML_KERNEL_MAT_VEC_L, BML_KERNEL_MAT_VEC_LR};
  const unsigned spoil = bml__oracle_get_hooks()->spoil_batch_check;
  size_t rows = 0;
  for (size_t i = 0; i < CHECK_PRODUCTS; i++) rows += b->p[i].rows;
  int rc = 0;
  for (size_t k = 0; rc == 0 && k < BML_ARRAY_SIZE(kernels); k++) {
    bml_worker *t = calloc(1, sizeof *t);
    if (!t) return BML_ENOMEM;
    t->pool = w->pool, t->card = w->card, t->build = w->build, t->device = w->device;
    t->share = 1.0, t->share_fixed = true;
    t->acts.zero_copy = w->acts.zero_copy, t->outs.zero_copy = w->outs.zero_copy, t->wait_spin = w->wait_spin;
    atomic_flag_clear(&t->driving);
    bml__limiter_init(&t->limiter, 1.0, w->card->global_mem, w->card->host_unified);
    t->hooks.kernel = kernels[k];
    t->errors_in_row = INT_MIN / 2; /* it never retires the card: an error refuses it (below) */
    const size_t queues = w->card->nside + 1;
    w->card->run_bytes = 1; /* a launch per record */
    memset(b->got, 0xff, rows * sizeof *b->got);
    const double t0 = bml__now();
    rc = bml_worker_mat_vec_batch(t, b->p, CHECK_PRODUCTS);
    const double took = bml__now() - t0;
    const uint64_t launches = t->time.launches;
    w->card->run_bytes = 0;
    if (rc == 0 && (spoil >> round) & 1u) {
      uint32_t u;
      memcpy(&u, &b->got[rows / 2], sizeof u);
      u ^= 1u;
      memcpy(&b->got[rows / 2], &u, sizeof u);
    }
    /* the batch right: then as a decode runs them, a batch a group */
    const bool trips = rc == 0 && t->count.on_card == CHECK_PRODUCTS && bml__first_difference(b->want, b->got, rows) < 0;
    if (trips) rc = round_trips(t, b, rows);
    char what[160]; /* what a refusal names */
    snprintf(what, sizeof what, "the worker's batch%s with %s on %zu queue%s, %s", trips ? "es of one group" : "",
             bml__kernel_name(kernels[k]), queues, queues == 1 ? "" : "s", bml__worker_buffers_name(t));
    if (rc == 0 && t->count.on_card != (trips ? 2 : 1) * CHECK_PRODUCTS) {
      snprintf(why, len, "%s: the card did not take it (%s)", what,
               t->count.on_cpu_error ? "an OpenCL error; BANKML_DEBUG=worker names it" : "not enough memory");
      rc = BML_EVERIFY;
    }
    const float *want = b->want, *got = b->got;
    for (size_t i = 0; rc == 0 && i < CHECK_PRODUCTS; want += b->p[i].rows, got += b->p[i].rows, i++) {
      const long bad = bml__first_difference(want, got, b->p[i].rows);
      if (bad < 0) continue;
      snprintf(why, len, "%s: %s (%zux%zu) row %ld differs (cpu 0x%08x, card 0x%08x)", what, b->p[i].name, b->p[i].rows,
               b->p[i].n, bad, bml__float_bits(want[bad]), bml__float_bits(got[bad]));
      rc = BML_EVERIFY;
      *bits = true;
    }
    if (rc == 0)
      bml__debug(BML_CAT_WORKER,
                 "\"%s\": the worker's batch with %s, %d products in %" PRIu64 " launches on %zu queue%s, %s, "
                 "and a batch a group: bit-exact (%.2f ms)",
                 w->card->name, bml__kernel_name(kernels[k]), CHECK_PRODUCTS, launches, queues,
                 queues == 1 ? "" : "s", bml__worker_buffers_name(t), took * 1e3);
    bml__worker_free_state(t);
    free(t);
  }
  return rc;
}

/* The check's products as a resident token (token.c), twice round, every
 * row compared: a card whose resident tokens give other bits, or do not
 * run resident, runs them as batches (said once).  Returns 0 or
 * BML_ENOMEM. */
static int check_tokens(bml_worker *w, batch_check *b) {
  w->tokens_resident = true;
  const bml__build *build;
  size_t nwg;
  uint32_t spins;
  if (!bml__worker_token_card(w, &build, &nwg, &spins)) return w->tokens_resident = false, 0;
  size_t rows = 0;
  for (size_t i = 0; i < CHECK_PRODUCTS; i++) rows += b->p[i].rows;
  bml_token *t = NULL;
  int rc = bml_worker_token_open(w, b->p, CHECK_PRODUCTS, &t);
  if (rc == 0) bml__token_check_only(t);
  char why[200] = "";
  for (int round = 0; rc == 0 && !why[0] && round < 2; round++) {
    memset(b->got, 0xff, rows * sizeof *b->got);
    for (size_t g = 0; rc == 0 && g < bml_token_groups(t); g++) rc = bml_token_run(t, g);
    if (rc == 0 && !bml_token_resident(t))
      snprintf(why, sizeof why, "it did not run resident (BANKML_DEBUG=worker says why)");
    const float *want = b->want, *got = b->got;
    for (size_t i = 0; rc == 0 && !why[0] && i < CHECK_PRODUCTS; want += b->p[i].rows, got += b->p[i].rows, i++) {
      long bad = bml__first_difference(want, got, b->p[i].rows);
      if (bad < 0 && bml__oracle_get_hooks()->spoil_token_check) bad = 0;
      if (bad >= 0)
        snprintf(why, sizeof why, "%s (%zux%zu) row %ld differs (cpu 0x%08x, card 0x%08x)", b->p[i].name,
                 b->p[i].rows, b->p[i].n, bad, bml__float_bits(want[bad]), bml__float_bits(got[bad]));
    }
  }
  bml_token_close(t);
  /* the check's products are the open's, not the engine's: uncounted */
  memset(&w->count, 0, sizeof w->count);
  memset(&w->time, 0, sizeof w->time);
  w->errors_in_row = 0;
  if (rc == BML_ENOMEM) return rc;
  if (rc != 0 && !why[0]) snprintf(why, sizeof why, "%s", bml_strerror(rc));
  if (why[0]) {
    bml__warn(BML_CAT_WORKER, "\"%s\": a decode's token resident on the card: %s; tokens run as batches",
              w->card->name, why);
    w->tokens_resident = false;
    w->tokens_unsure = rc != 0 || !strstr(why, " differs ("); /* not for other bits: not to remember */
  } else {
    bml__debug(BML_CAT_WORKER, "\"%s\": a decode's token resident on the card, %zu work-groups: bit-exact",
               w->card->name, nwg);
  }
  return 0;
}

/* The check at open (above).  Returns 0 (the card may be used, perhaps on
 * one queue now), BML_EVERIFY (it may not: why says why; *bits: a row
 * differed) or BML_ENOMEM. */
static int check_batches(bml_worker *w, char *why, size_t len, bool *bits) {
  batch_check b;
  why[0] = '\0';
  *bits = false;
  int rc = check_make(&b);
  unsigned round = 0;
  if (rc == 0) rc = check_round(w, &b, round++, why, len, bits);
  if (rc != 0 && rc != BML_ENOMEM && (w->acts.zero_copy || w->outs.zero_copy)) {
    bml__warn(BML_CAT_WORKER, "\"%s\": %s; its activations and results are copied", w->card->name,
              why[0] ? why : bml_strerror(rc));
    bml__worker_set_buffers(w, false, false);
    why[0] = '\0';
    *bits = false;
    rc = check_round(w, &b, round++, why, len, bits);
  }
  if (rc != 0 && rc != BML_ENOMEM && w->card->nside > 0) {
    bml__warn(BML_CAT_WORKER, "\"%s\": %s; it runs on one queue", w->card->name,
              why[0] ? why : bml_strerror(rc));
    bml__card_drop_side_queues(w->card);
    why[0] = '\0';
    *bits = false;
    rc = check_round(w, &b, round++, why, len, bits);
  }
  if (rc == 0) rc = check_tokens(w, &b);
  check_free(&b);
  if (rc != 0 && rc != BML_ENOMEM && rc != BML_EVERIFY) {
    if (!why[0]) snprintf(why, len, "the worker's batch failed on the card: %s", bml_strerror(rc));
    rc = BML_EVERIFY;
  }
  return rc;
}

/* How a submission's activations and results travel, and how its waits
 * wait.  Zero-copy both ways where the card shares the host's memory (an
 * integrated GPU, a software device): nothing is copied.  On NVIDIA's
 * driver, where it places buffers in host memory (cl_nv_create_buffer),
 * the results are zero-copy (the kernels write them over the bus) and the
 * activations copied: every work-group reads the whole activation, which
 * over the bus took a bonsai-8b token with round trips from 4.1-4.5 ms to
 * 12.4-14.4 ms on the H200, where zero-copy results took it from 4.9-5.2
 * to 4.1-4.5 (tools/harness/tripfit.c; doc/WORKER.md).  Copies elsewhere.  The open's check runs the
 * batches through these, and falls back to copies where they give other
 * bits.  A wait polls its event for WAIT_SPIN first, except on a software
 * device, whose own threads would lose the core it spins on. */
void bml__worker_choose_transfers(bml_worker *w, bool software) {
  const bool unified = w->card->host_unified;
  bml__worker_set_buffers(w, unified, unified || w->card->create_buffer_nv);
  w->wait_spin = software ? 0 : WAIT_SPIN;
}

/* The batch check, or the one remembered for the card's queues.  What is
 * remembered can only take away (queues, zero-copy transfers, resident
 * tokens), and what it leaves on is confirmed on the card at each open:
 * a round of the check through the transfers kept (where any is
 * zero-copy) and a resident token (where tokens are); a failure there
 * runs the whole check. */
int bml__worker_batches(bml_worker *w, bml__verdict *v, char *why, size_t len, bool *bits) {
  const size_t queues = w->card->nside + 1;
  bml__batch_verdict kept;
  *bits = false;
  if (bml__verdict_batches(v, queues, &kept)) {
    if (kept.kept < queues) bml__card_drop_side_queues(w->card); /* several gave other bits, one did not */
    bml__worker_set_buffers(w, w->acts.zero_copy && kept.acts_zero_copy, w->outs.zero_copy && kept.outs_zero_copy);
    batch_check b;
    int rc = 0;
    if (w->acts.zero_copy || w->outs.zero_copy || kept.tokens) {
      rc = check_make(&b);
      if (rc == 0 && (w->acts.zero_copy || w->outs.zero_copy)) rc = check_round(w, &b, 0, why, len, bits);
      if (rc == 0 && kept.tokens) rc = check_tokens(w, &b);
      check_free(&b);
    }
    if (rc == BML_ENOMEM) return rc;
    if (rc == 0 && (!kept.tokens || w->tokens_resident)) {
      w->batches_remembered = true;
      bml__debug(BML_CAT_WORKER, "\"%s\": the remembered check of its batches (%zu queue%s, %s%s) confirmed on the card",
                 w->card->name, w->card->nside + 1, w->card->nside ? "s" : "", bml__worker_buffers_name(w),
                 kept.tokens ? ", resident tokens" : "");
      return 0;
    }
    bml__warn(BML_CAT_WORKER, "\"%s\": the remembered check of its batches did not hold (%s): checking again",
              w->card->name, why[0] ? why : "a resident token");
    bml__worker_choose_transfers(w, w->devices->dev[w->device].software != NULL);
    why[0] = '\0';
    *bits = false;
  }
  int rc = check_batches(w, why, len, bits);
  const bml__batch_verdict found = {w->card->nside + 1, w->acts.zero_copy, w->outs.zero_copy, w->tokens_resident};
  if (rc == 0 && !w->tokens_unsure) bml__verdict_set_batches(v, queues, &found);
  return rc;
}

