/* access.c -- the worker as token.c and the tests reach it: its card for a resident token, its counts, its test hooks. */
#include "share/access.h"
#include "base/util.h"
#include "card/card.h"
#include "share/worker_int.h"

/* ---- tokens (token.c) ---------------------------------------------------------------------- */

bool bml__worker_enter(bml_worker *w) { return enter(w); }
void bml__worker_leave(bml_worker *w) { leave(w); }

/* A resident launch runs a work-group on each compute unit (all held at
 * once: a launch's work-groups wait for each other), one on a software
 * device (whose threads run work-groups in turn).  Its first work-group
 * waits for the next group this long before it gives up (the host then
 * launches it again when the group comes): on NVIDIA's build, microseconds
 * of the card's clock (cl/q1_0_batch.cl); elsewhere reads of host memory (2^30 in
 * the host's own memory: seconds, for a software device's thread may wait
 * long for a core while the host's threads hold them). */
#define TOKEN_SPIN_US 50000u
#define TOKEN_SPINS_BUS (1u << 20)
#define TOKEN_SPINS_HOST (1u << 30)

bool bml__worker_software_card(const bml_worker *w) {
  return w->card && w->devices->dev[w->device].software != NULL;
}

bml__card *bml__worker_token_card(bml_worker *w, const bml__build **build, size_t *nwg, uint32_t *spins) {
  if (!w->card || w->retired || w->child || !w->tokens_resident || !w->build.token) return NULL;
  if (!w->card->create_buffer_nv && !w->card->host_unified) return NULL; /* no memory both reach */
  *build = &w->build;
  *nwg = bml__worker_software_card(w) ? 1 : w->card->max_groups / BML_GROUPS_PER_UNIT;
  if (*nwg == 0) *nwg = 1;
  *spins = w->hooks.token_spins ? w->hooks.token_spins
           : w->card->nvidia_build ? TOKEN_SPIN_US
           : w->card->create_buffer_nv ? TOKEN_SPINS_BUS
                                       : TOKEN_SPINS_HOST;
  return w->card;
}

bool bml__worker_token_fits(bml_worker *w, uint64_t bytes) {
  const uint64_t avail = w->limiter.integrated ? bml__mem_available() : 0;
  return bml__limiter_fits(&w->limiter, bytes, avail);
}

void bml__worker_token_hold(bml_worker *w, int64_t bytes) {
  w->token_bytes = (uint64_t)((int64_t)w->token_bytes + bytes);
  bml__worker_sync_allocated(w);
}

void bml__worker_set_resident(bml_worker *w, bml_token *t) { w->resident = t; }

void bml__worker_token_ran(bml_worker *w, size_t products, int err, const double sec[BML_TOKEN_PHASES]) {
  if (err == 0) {
    w->count.on_card += products;
    w->errors_in_row = 0;
  } else if (err == BML_EVERIFY) {
    w->count.on_cpu_decided += products;
  } else if (err != BML_ENOMEM) {
    bml__worker_card_error(w, err);
  }
  w->time.submissions++;
  w->time.upload += sec[0], w->time.launch += sec[1], w->time.wait += sec[2], w->time.copy += sec[3];
  w->time.cpu += sec[4];
  w->time.enqueue += sec[0] + sec[1];
}

int bml__worker_token_where(const bml_worker *w) {
  if (!w->share_fixed) return 0;
  return w->share >= BML_SHARE_ALONE ? 1 : w->share < BML_SHARE_MIN ? 2 : 3;
}

bml_pool *bml__worker_pool(bml_worker *w) { return w->pool; }

double bml__worker_token_seconds(const bml_worker *w, bool on_card, double measured) {
  const double fixed = w->hooks.token_seconds[on_card ? 0 : 1];
  return fixed > 0 ? fixed : measured;
}

double bml__worker_token_check_seconds(const bml_worker *w, bool all_card) {
  return w->hooks.token_check_seconds[all_card ? 1 : 0];
}

int bml__worker_token_rows(const bml_worker *w) { return w->hooks.token_rows; }

bool bml__worker_token_fault(bml_worker *w) { return w->hooks.fail_tokens > 0 && w->hooks.fail_tokens-- > 0; }

bml_token **bml__worker_tokens(bml_worker *w) { return &w->tokens; }

/* ---- test hooks -------------------------------------------------------------------------- */

void bml__worker_set_hooks(bml_worker *w, const bml__worker_hooks *h) { w->hooks = *h; }

void bml__worker_set_transfers(bml_worker *w, int acts_zero_copy, int outs_zero_copy, double wait_spin) {
  bml__worker_set_buffers(w, acts_zero_copy < 0 ? w->acts.zero_copy : acts_zero_copy > 0,
              outs_zero_copy < 0 ? w->outs.zero_copy : outs_zero_copy > 0);
  if (wait_spin >= 0) w->wait_spin = wait_spin;
}

void bml__worker_set_card_mem(bml_worker *w, uint64_t bytes) { w->limiter.card_mem = bytes; }

const bml__limiter *bml__worker_limiter(const bml_worker *w) { return &w->limiter; }

size_t bml__worker_held_rows(const bml_worker *w, const char *name) {
  for (size_t i = 0; i < w->nentries; i++)
    if (strcmp(w->entries[i]->members[0].name, name) == 0) return w->entries[i]->m.nchunks ? w->entries[i]->held[0] : 0;
  return 0;
}

void bml__worker_set_share_calibrated(bml_worker *w, double share) {
  w->share = share;
  w->share_fixed = false;
  for (size_t i = 0; i < w->nshapes; i++) bml__balance_init(&w->shapes[i].balance, share);
  w->nkinds = 0;
}
