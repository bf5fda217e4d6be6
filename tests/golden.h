/* golden.h -- reads ggml's golden vectors (tests/golden/README.md) and compares results bit for bit. */
#ifndef BML_TEST_GOLDEN_H
#define BML_TEST_GOLDEN_H

#include "bankml-cl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t rows, n, flags; /* flags bit0: a -128 quant; bit1: layer-shaped */
  bml_block_q1_0 *w;       /* rows * n/128 blocks */
  bml_block_q8_0 *a;       /* n/32 blocks */
  float *ref;              /* ggml's x86 AVX2 results: THE reference */
  float *generic;          /* ggml's scalar results, for information */
} golden_q1_case;

typedef struct {
  uint32_t n;
  float *x;
  bml_block_q8_0 *q;    /* ggml's AVX2 quantize_row_q8_0: THE reference */
  bml_block_q8_0 *qref; /* quantize_row_q8_0_ref, for information */
} golden_q8_case;

/* The golden directory: $BANKML_GOLDEN_DIR, else tests/golden under
 * $BANKML_TOP_SRCDIR, else "tests/golden". */
const char *golden_dir(void);

/* Each returns the number of cases read (> 0) and *out, or -1 after printing
 * why to stderr.  Free with golden_free_q1 / golden_free_q8. */
int golden_load_q1(golden_q1_case **out);
int golden_load_q8(golden_q8_case **out);
void golden_free_q1(golden_q1_case *c, int count);
void golden_free_q8(golden_q8_case *c, int count);

/* Bitwise equality, except that any NaN equals any NaN (DESIGN §1). */
bool golden_same_bits(float a, float b);
uint32_t golden_bits(float f);

/* First row r < rows where got differs from want (golden_same_bits), or -1. */
long golden_first_difference(const float *want, const float *got, size_t rows);

#endif
