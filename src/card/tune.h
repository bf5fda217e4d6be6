/* tune.h -- per-card shapes of the table kernels and which one runs a product, measured once and remembered. */
#ifndef BML_TUNE_H
#define BML_TUNE_H

#include "card/card.h"

/* Sets c's tunables for later builds: those remembered for this device,
 * driver and bankml-cl version (an entry of kind "tuning" in the cache,
 * src/card/cache.h), else the fastest of the candidates on a 4096x4096 and a
 * 32768x4096 product, which is then remembered.
 * Returns 0, or an error of the measurement (the defaults are then set). */
int bml__tune(bml__card *c, const bml__cl_info *ci);

/* The kernel for a product of `rows` rows on c: q1_0_mat_vec_lr from the
 * tuned threshold up, else q1_0_mat_vec_l.  Cannot fail. */
bml__kernel_id bml__tune_kernel_for(const bml__card *c, size_t rows);

/* q1_0_mat_vec_lr's candidate shapes (rows per slice, slices and lanes per
 * work-item), *n of them: the tests verify each. */
const size_t (*bml__tune_lr_candidates(size_t *n))[3];

/* Tests: no measuring (the remembered or default tunables only). */
void bml__tune_disable(bool off);

/* Tests: the quick measurement (on off: the full one).  The default
 * shapes first, taken where they fit; the other candidates only where they
 * do not, timed on products a sixteenth as big and once: a choice for
 * tests, not for a card's speed.
 * Its remembered entries have "measure": "quick" in their key, so neither
 * measurement takes the other's.  Until this is called, the environment's
 * BANKML_TEST_QUICK_TUNE=1 (the test suite's own: make check sets it, and
 * so reaches the command's processes) turns it on. */
void bml__tune_quick(bool on);
bool bml__tune_is_quick(void);

#endif
