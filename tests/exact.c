/* exact.c -- one product on a worker, compared row for row with the CPU kernel. */
#include "exact.h"

#include <stdlib.h>

#include "golden.h"
#include "cpu/gen.h"

long exact_worker_product(bml_worker *w, size_t rows, size_t n, uint64_t seed, bool layer, int *rc) {
  bml_block_q1_0 *wt = malloc(rows * (n / BML_Q1_0_BLOCK) * sizeof *wt);
  bml_block_q8_0 *a = malloc(n / BML_Q8_0_BLOCK * sizeof *a);
  float *want = malloc(rows * sizeof *want), *got = malloc(rows * sizeof *got);
  long bad = -1;
  *rc = wt && a && want && got ? 0 : BML_ENOMEM;
  if (*rc == 0) {
    bml__gen_q1_0(&seed, wt, rows, n, layer);
    *rc = bml__gen_q8_0(&seed, a, n, layer);
  }
  if (*rc == 0) *rc = bml_q1_0_mat_vec(wt, rows, n, a, want);
  if (*rc == 0) *rc = bml_worker_mat_vec(w, "m", wt, rows, n, a, got);
  if (*rc == 0) bad = golden_first_difference(want, got, rows);
  free(wt), free(a), free(want), free(got);
  return bad;
}
