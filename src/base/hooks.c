/* hooks.c -- the oracle's test hooks, one set for the process. */
#include "base/hooks.h"

#include <string.h>

static bml__oracle_hooks hooks;

void bml__oracle_set_hooks(const bml__oracle_hooks *h) {
  if (h)
    hooks = *h;
  else
    memset(&hooks, 0, sizeof hooks);
}

const bml__oracle_hooks *bml__oracle_get_hooks(void) { return &hooks; }

bool bml__oracle_hooks_cacheable(void) {
  return !hooks.force_emulated && !hooks.max_chunk_rows && !hooks.wg && !hooks.local_mem && !hooks.kernel_wg &&
         !hooks.kernel_wg_emulated && !hooks.open_nomem && !hooks.discrete && !hooks.spoil_batch_check &&
         !hooks.spoil_token_check &&
         !hooks.fail_calibration && !hooks.lr_shape[0] && !hooks.max_groups &&
         !hooks.exact_slabs;
}
