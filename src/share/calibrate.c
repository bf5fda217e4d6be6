/* calibrate.c -- the open's calibration: one product timed on the card and on the pool, and the card's round trip. */
#include "base/util.h"
#include "cpu/gen.h"
#include "card/kernels.h"
#include "share/worker_int.h"

/* ---- open: verify, calibrate -------------------------------------------------------- */

/* Best of CAL_RUNS of m's product (rows) on the card with its wait, after
 * one untimed. */
static int best_card_seconds(bml_worker *w, const bml__card_matrix *m, size_t rows, const bml_block_q8_0 *act,
                             float *out, double *best) {
  int rc = 0;
  *best = 1e30;
  for (int i = 0; rc == 0 && i <= CAL_RUNS; i++) {
    double t0 = bml__now();
    rc = bml__card_product(w->card, &w->build, bml__worker_kernel_for(w, rows), 0, m, act, &w->acts, &w->outs, out);
    double t1 = bml__now();
    if (i > 0 && t1 - t0 < *best) *best = t1 - t0;
  }
  return rc;
}

/* Best of CAL_RUNS of one CAL_ROWS x CAL_N product on the card and on the
 * pool, each after one untimed, and of a CAL_TRIP_ROWS x CAL_N product on
 * the card (its round trip: w->round_trip). */
int bml__worker_calibrate(bml_worker *w, double *card_s, double *cpu_s) {
  const size_t rows = CAL_ROWS, n = CAL_N;
  bml_block_q1_0 *wts = malloc(rows * (n / BML_Q1_0_BLOCK) * sizeof *wts);
  bml_block_q8_0 *act = malloc(n / BML_Q8_0_BLOCK * sizeof *act);
  float *out = malloc(rows * sizeof *out);
  uint64_t seed = 0xca11b7a7e;
  bml__card_matrix m = {0}, trip = {0};
  int rc = wts && act && out ? 0 : BML_ENOMEM;
  if (rc == 0) {
    bml__gen_q1_0(&seed, wts, rows, n, true);
    rc = bml__gen_q8_0(&seed, act, n, true);
  }
  bml__rows_part part = {wts, rows}, small = {wts, CAL_TRIP_ROWS};
  if (rc == 0) rc = bml__card_matrix_upload(w->card, &part, 1, n, true, &m);
  if (rc == 0) rc = bml__card_matrix_upload(w->card, &small, 1, n, true, &trip);
  /* Each side is timed in a run of its own, after an untimed product: a
   * CPU product timed right after a card's wait found the pool's threads
   * asleep, or the driver's threads still spinning, and moved 3-6x between
   * opens (0.30-0.95 ms on PoCL here, 0.05-0.31 ms on the H200). The CPU
   * goes first, before the driver's threads have work. */
  *card_s = *cpu_s = 1e30;
  for (int i = 0; rc == 0 && i <= CAL_RUNS; i++) {
    double t0 = bml__now();
    rc = bml_pool_q1_0_mat_vec(w->pool, wts, rows, n, act, out);
    double t1 = bml__now();
    if (i > 0 && t1 - t0 < *cpu_s) *cpu_s = t1 - t0;
  }
  if (rc == 0 && bml__oracle_get_hooks()->fail_calibration) rc = CL_OUT_OF_RESOURCES;
  if (rc == 0) rc = best_card_seconds(w, &m, rows, act, out, card_s);
  double best_trip = 1e30;
  if (rc == 0) rc = best_card_seconds(w, &trip, CAL_TRIP_ROWS, act, out, &best_trip);
  if (rc == 0) w->round_trip = best_trip;
  bml__card_matrix_free(w->card, &trip);
  bml__card_matrix_free(w->card, &m);
  free(wts), free(act), free(out);
  return rc;
}

