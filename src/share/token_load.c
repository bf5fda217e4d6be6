/* token_load.c -- a token's matrices on the card: its groups repacked into buffers of its own, with their records. */
#include "share/token_int.h"
#include "base/log.h"
#include "card/card.h"
#include "card/kernels.h"
#include "card/slab.h"
#include "card/submit.h"

#include <stdlib.h>
#include <string.h>

static size_t group_rows(const bml_token *t, size_t g) {
  size_t rows = 0;
  for (size_t i = t->first[g]; i < t->first[g + 1]; i++) rows += t->p[i].rows;
  return rows;
}

/* Row-blocks group g's matrix takes on the card (rows x whole tiles). */
static size_t group_rb(const bml_token *t, size_t g) {
  return bml__card_matrix_bytes(group_rows(t, g), t->p[t->first[g]].n) / BML_ROW_BLOCK_BYTES;
}

/* ---- the card's copy ------------------------------------------------------- */

/* Group g's matrix repacked into the token's buffers at row-block rb0. */
static int upload_group(bml_token *t, size_t g, size_t rb0) {
  const size_t n = t->p[t->first[g]].n, nb = n / BML_Q1_0_BLOCK, rows = group_rows(t, g), rb = group_rb(t, g);
  bml__rows_part parts[16];
  size_t np = 0;
  for (size_t i = t->first[g]; i < t->first[g + 1]; i++) parts[np++] = (bml__rows_part){t->p[i].wts, t->p[i].rows};
  uint32_t *bits = malloc(rb * 16);
  float *d0 = malloc(rb * sizeof *d0);
  int rc = bits && d0 ? 0 : BML_ENOMEM;
  if (rc == 0) {
    bml__card_repack(parts, 0, rows, nb, bits, d0);
    rc = bml__submit_write(t->card->queue, t->bits, rb0 * 16, rb * 16, bits);
  }
  if (rc == 0) rc = bml__submit_write(t->card->queue, t->d0, rb0 * sizeof *d0, rb * sizeof *d0, d0);
  free(bits);
  free(d0);
  return rc;
}

/* (token.h) */
bml__token_rows bml__token_rows_plan(size_t rows, size_t lr, size_t rpt, size_t lpt, size_t nwg) {
  if (lpt == 2 && lr >= 16 && lr % 2 == 0 && (rows + lr / 2 - 1) / (lr / 2) <= nwg) return BML_TOKEN_ROWS_ONE_LANE;
  if (rpt > 1 && lr > 0 && (rows + lr - 1) / lr <= nwg) return BML_TOKEN_ROWS_ONE;
  return BML_TOKEN_ROWS_CARD;
}

/* The plan a test hook forces (base/hooks.h, token_rows), or the one
 * bml__token_rows_plan chooses; one lane only where the card has two. */
static bml__token_rows rows_plan(const bml_token *t, size_t rows) {
  const bml__card *c = t->card;
  switch (bml__worker_token_rows(t->w)) {
  case 1: return BML_TOKEN_ROWS_ONE;
  case 2: return BML_TOKEN_ROWS_CARD;
  case 3: return c->lrlpt == 2 ? BML_TOKEN_ROWS_ONE_LANE : BML_TOKEN_ROWS_ONE;
  default: return bml__token_rows_plan(rows, c->lrrows, c->lrrpt, c->lrlpt, t->nwg);
  }
}

/* Group g's records, planned as one launch of at most nwg work-groups
 * would be (kernels.c), numbered across the plan's launches: the resident
 * kernel's work-group k takes the group's work-groups k, k + nwg, ...
 * Writes them at desc, its table entry at entry; returns the records. */
static size_t plan_group(bml_token *t, size_t g, size_t rb0, bml__desc *desc, uint32_t *entry) {
  const size_t n = t->p[t->first[g]].n, rows = group_rows(t, g);
  bml__card_chunk ch = {0, rows, 0, rb0, group_rb(t, g)};
  bml__card_matrix m = {rows, n, 1, &ch, 0};
  bml__batch_item item = {&m, BML_BATCHED_LR, t->act_off[g], t->out_at / sizeof(float)}; /* out_base: host's start */
  bml__batch_rec rec;
  bml__batch_run run;
  const bml__token_rows plan = rows_plan(t, rows);
  /* a copy of the card, shaped as this plan runs it (its work-groups, the
   * rows of a group), for the batch plan to read */
  bml__card shape = *t->card;
  shape.max_groups = t->nwg, shape.run_bytes = SIZE_MAX;
  if (plan != BML_TOKEN_ROWS_CARD) shape.lrrpt = 1;
  if (plan == BML_TOKEN_ROWS_ONE_LANE) shape.lrrows /= 2, shape.lrlpt = 1;
  bml__batch_plan(&shape, &item, 1, &rec, desc, &run);
  entry[1] = 1, entry[2] = desc[0].first_group + desc[0].wgs, entry[5] = plan;
  t->plan[g] = (uint8_t)plan;
  return 1;
}

bml__token_rows bml__token_plan(const bml_token *t, size_t g) {
  return t && t->plan && g < t->ngroups ? (bml__token_rows)t->plan[g] : BML_TOKEN_ROWS_CARD;
}

size_t bml__token_rpt(const bml_token *t, size_t g) {
  if (!t || !t->plan || !t->loaded || g >= t->ngroups) return 0;
  return t->plan[g] == BML_TOKEN_ROWS_CARD ? t->card->lrrpt : 1;
}

/* The token's matrices, records and buffers on the card.  Returns 0, or an
 * error (then nothing is held and the token runs through batches). */
int bml__token_load(bml_token *t) {
  bml__card *c = t->card;
  /* dev: the words, the table, the activations (one each), the records
   * (one a group); host: the words, the activations at the same offsets,
   * the results of a group */
  const size_t table = TOKEN_TABLE * 4;
  size_t rb = 0, act = (table + t->ngroups * TOKEN_GROUP_WORDS * 4 + 63) / 64 * 64, rows_most = 0;
  for (size_t g = 0; g < t->ngroups; g++) {
    const size_t r = group_rows(t, g);
    rb += group_rb(t, g);
    t->act_off[g] = act;
    act += bml__card_act_bytes(t->p[t->first[g]].n);
    if (r > rows_most) rows_most = r;
  }
  const size_t records = (act + 63) / 64 * 64, dev_bytes = records + t->ngroups * sizeof(bml__desc);
  t->out_at = (act + 63) / 64 * 64;
  t->done_at = (t->out_at + rows_most * sizeof(float) + 63) / 64 * 64 / 4;
  const size_t host_bytes = (t->done_at + t->nwg) * 4;
  const size_t bytes = rb * BML_ROW_BLOCK_BYTES + dev_bytes + host_bytes;
  if (rb * 16 > c->max_alloc || dev_bytes > c->max_alloc || host_bytes > c->max_alloc ||
      records / 4 + t->ngroups * sizeof(bml__desc) / 4 > UINT32_MAX || rb > UINT32_MAX || t->done_at > UINT32_MAX ||
      !bml__worker_token_fits(t->w, bytes))
    return BML_ENOMEM;
  cl_int rc = CL_SUCCESS;
  uint32_t *words = calloc(1, dev_bytes);
  if (!words) return BML_ENOMEM;
  t->bits = bml__submit_buffer(c, CL_MEM_READ_ONLY, rb * 16, &rc);
  if (rc == CL_SUCCESS) t->d0 = bml__submit_buffer(c, CL_MEM_READ_ONLY, rb * sizeof(float), &rc);
  if (rc == CL_SUCCESS) t->dev = bml__submit_buffer(c, CL_MEM_READ_WRITE, dev_bytes, &rc);
  if (rc == CL_SUCCESS) t->host = bml__submit_host_buffer(c, host_bytes, &rc);
  if (rc == CL_SUCCESS) t->h = bml__submit_map(c->queue, t->host, host_bytes, &rc);
  if (rc == CL_SUCCESS) {
    t->card_bytes = bytes;
    bml__worker_token_hold(t->w, (int64_t)bytes);
    memset(t->h, 0, TOKEN_HEAD); /* (the done words: each launch sets them) */
  }
  words[TOKEN_DONES] = (uint32_t)t->done_at;
  words[TOKEN_GROUPS] = (uint32_t)t->ngroups;
  size_t rb0 = 0;
  bml__desc *desc = (bml__desc *)((char *)words + records);
  for (size_t g = 0; rc == CL_SUCCESS && g < t->ngroups; g++) {
    uint32_t *entry = words + TOKEN_TABLE + g * TOKEN_GROUP_WORDS;
    entry[0] = (uint32_t)((records + g * sizeof(bml__desc)) / 4);
    entry[3] = (uint32_t)t->act_off[g];
    entry[4] = (uint32_t)bml__card_act_bytes(t->p[t->first[g]].n);
    plan_group(t, g, rb0, desc + g, entry);
    rc = upload_group(t, g, rb0);
    rb0 += group_rb(t, g);
  }
  if (rc == CL_SUCCESS)
    rc = bml__submit_write(c->queue, t->dev, 0, dev_bytes, words);
  free(words);
  if (rc != CL_SUCCESS) {
    bml__debug(BML_CAT_WORKER, "a token of %zu groups cannot be put on the card: %s (%d); it runs as batches",
               t->ngroups, bml_err_name(rc), rc);
    bml__token_free_card(t);
    return rc;
  }
  size_t plans[3] = {0};
  for (size_t g = 0; g < t->ngroups; g++) plans[t->plan[g]]++;
  bml__debug(BML_CAT_WORKER,
             "a token of %zu groups on the card, %zu work-groups of _lr %zux%zu, %zu lanes: %zu groups at its rows a "
             "work-item, %zu at one row, %zu at one row and one lane",
             t->ngroups, t->nwg, c->lrrows, c->lrrpt, c->lrlpt, plans[0], plans[1], plans[2]);
  t->loaded = true;
  return 0;
}
