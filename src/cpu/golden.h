/* golden.h -- ggml's golden vectors (tests/golden/README.md): the reader, and bit-for-bit comparison. */
#ifndef BML_GOLDEN_H
#define BML_GOLDEN_H

#include "base/bml.h"

typedef struct {
  uint32_t rows, n, flags; /* flags bit0: a -128 quant; bit1: layer-shaped */
  bml_block_q1_0 *w;       /* rows * n/128 blocks */
  bml_block_q8_0 *a;       /* n/32 blocks */
  float *ref;              /* ggml's x86 AVX2 results: THE reference */
  float *generic;          /* ggml's scalar results, for information */
} bml__golden_q1;

typedef struct {
  uint32_t n;
  float *x;
  bml_block_q8_0 *q;    /* ggml's AVX2 quantize_row_q8_0: THE reference */
  bml_block_q8_0 *qref; /* quantize_row_q8_0_ref, for information */
} bml__golden_q8;

/* Where the golden files are by default: $BANKML_GOLDEN_DIR, else the copy
 * `make install` puts in $(pkgdatadir)/golden.  Static string. */
const char *bml__golden_default_dir(void);

#define BML__GOLDEN_Q1_FILE "q1_0_x_q8_0.golden"

/* Read dir/q1_0_x_q8_0.golden (or dir/q8_0_quantize.golden).  Return the
 * number of cases (> 0) and *out, or BML_EIO (cannot open: err says which
 * path), BML_EFORMAT (err says what), BML_ENOMEM. */
int bml__golden_load_q1(const char *dir, bml__golden_q1 **out, char *err, size_t errlen);
int bml__golden_load_q8(const char *dir, bml__golden_q8 **out, char *err, size_t errlen);
void bml__golden_free_q1(bml__golden_q1 *c, int count); /* NULL-safe */
void bml__golden_free_q8(bml__golden_q8 *c, int count); /* NULL-safe */

/* Bitwise equality, except that any NaN equals any NaN (doc/ARITHMETIC.md). */
bool bml__same_bits(float a, float b);
uint32_t bml__float_bits(float f);
/* The first row r < rows where got differs from want, or -1. */
long bml__first_difference(const float *want, const float *got, size_t rows);

#endif
