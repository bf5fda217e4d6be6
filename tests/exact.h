/* exact.h -- one product on a worker, compared row for row with the CPU kernel. */
#ifndef BML_TEST_EXACT_H
#define BML_TEST_EXACT_H

#include "base/bml.h"

/* A rows x n product of generated data (seed; layer-shaped or random) on
 * w, called "m": its first row that differs from bml_q1_0_mat_vec's bits,
 * or -1; *rc the worker's (or the CPU's, or BML_ENOMEM) code. */
long exact_worker_product(bml_worker *w, size_t rows, size_t n, uint64_t seed, bool layer, int *rc);

#endif
