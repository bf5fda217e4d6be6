/* q1_0.c -- the Q1_0 x Q8_0 dot product: the portable reference and the public CPU entry points. */
#include "cpu/q1_0.h"
#include "base/bml.h"
#include "base/util.h"
#include "cpu/half.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The reference, written as doc/ARITHMETIC.md gives it (ggml's x86 AVX2 order) reads:
 * eight float lanes; per 32-sub-block K each lane l takes the exact integer
 * sum of elements 4l..4l+3 (a clear bit negates the quant in 8 bits, so -128
 * stays -128), ab = d1*s for K = 0 and fma(d1, s, ab) after; per block
 * acc = fma(d0, ab, acc); then the fixed pairwise reduction. */
float bml__q1_0_dot_ref(const bml_block_q1_0 *w, const bml_block_q8_0 *a, size_t nb) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t b = 0; b < nb; b++) {
    const float d0 = bml__half_to_float(w[b].d);
    float ab[8];
    for (int k = 0; k < 4; k++) {
      const bml_block_q8_0 *q = &a[4 * b + (size_t)k];
      const float d1 = bml__half_to_float(q->d);
      const uint8_t *bits = &w[b].qs[4 * k];
      for (int l = 0; l < 8; l++) {
        int s = 0;
        for (int t = 0; t < 4; t++) {
          const int j = 4 * l + t;
          const int8_t v = q->qs[j];
          const int8_t neg = (int8_t)(uint8_t)(0u - (uint8_t)v); /* 8-bit negation */
          s += ((bits[j >> 3] >> (j & 7)) & 1) ? v : neg;
        }
        ab[l] = k == 0 ? d1 * (float)s : fmaf(d1, (float)s, ab[l]);
      }
    }
    for (int l = 0; l < 8; l++) acc[l] = fmaf(d0, ab[l], acc[l]);
  }
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

size_t bml__q1_0_act_split_size(size_t n) { return 2 * n + n / BML_Q8_0_BLOCK * sizeof(float); }

void bml__q1_0_act_split(const bml_block_q8_0 *a, size_t n, void *dst) {
  const float *half = bml__half_table();
  int8_t *q = dst, *nq = q + n;
  float *d1 = (float *)(nq + n);
  for (size_t k = 0; k < n / BML_Q8_0_BLOCK; k++) {
    memcpy(q + 32 * k, a[k].qs, 32);
    for (int j = 0; j < 32; j++) nq[32 * k + (size_t)j] = (int8_t)(uint8_t)(0u - (uint8_t)a[k].qs[j]); /* -(-128) = -128 */
    d1[k] = half[a[k].d];
  }
}

static bool ref_supported(void) { return true; }
static size_t ref_prep_size(size_t n) { (void)n; return 0; }
static void ref_prep(const bml_block_q8_0 *a, size_t n, void *scratch) { (void)a; (void)n; (void)scratch; }

static void ref_rows(const bml_block_q1_0 *w, size_t rows, size_t n, const bml_block_q8_0 *a,
                     const void *scratch, float *out) {
  (void)scratch;
  const size_t nb = n / BML_Q1_0_BLOCK;
  for (size_t r = 0; r < rows; r++) out[r] = bml__q1_0_dot_ref(w + r * nb, a, nb);
}

const bml__q1_0_kernel bml__q1_0_ref = {"ref", ref_supported, ref_prep_size, ref_prep, ref_rows};

int bml__q1_0_check_shape(const void *w, size_t rows, size_t n, const void *a) {
  if (!w || !a) return BML_EINVAL;
  if (n == 0 || n % BML_Q1_0_BLOCK != 0) return BML_ESHAPE;
  /* an activation that could not be in memory beside its prepared copy
   * (2n + n/8 bytes, whose size would wrap past SIZE_MAX) */
  if (n > SIZE_MAX / 4) return BML_ESHAPE;
  /* rows whose weights or results could not be in memory */
  if (rows > SIZE_MAX / (n / BML_Q1_0_BLOCK * sizeof(bml_block_q1_0)) || rows > SIZE_MAX / sizeof(float))
    return BML_ESHAPE;
  return 0;
}

/* Whether [p, p + a) and [q, q + b) share a byte (addresses compared as
 * integers: the objects are unrelated). */
static bool bytes_overlap(const void *p, size_t a, const void *q, size_t b) {
  const uintptr_t x = (uintptr_t)p, y = (uintptr_t)q;
  return a && b && (x < y ? y - x < a : x - y < b);
}

int bml__q1_0_check(const void *w, size_t rows, size_t n, const void *a, const void *out) {
  if (!out) return BML_EINVAL;
  int rc = bml__q1_0_check_shape(w, rows, n, a);
  if (rc != 0) return rc;
  /* results written over the weights or the activation would change what
   * the rest of the product reads, differently on each path */
  const size_t out_bytes = rows * sizeof(float), w_bytes = rows * (n / BML_Q1_0_BLOCK) * sizeof(bml_block_q1_0),
               a_bytes = n / BML_Q8_0_BLOCK * sizeof(bml_block_q8_0);
  if (bytes_overlap(out, out_bytes, w, w_bytes) || bytes_overlap(out, out_bytes, a, a_bytes)) return BML_EINVAL;
  return 0;
}

int bml__q1_0_run(const bml__q1_0_kernel *k, const bml_block_q1_0 *w, size_t rows, size_t n,
                  const bml_block_q8_0 *a, float *out) {
  _Alignas(64) unsigned char stack[16384];
  size_t need = k->prep_size(n);
  void *scratch = need <= sizeof stack ? stack : bml__aligned_alloc(need);
  if (!scratch) return BML_ENOMEM;
  k->prep(a, n, scratch);
  k->rows(w, rows, n, a, scratch, out);
  if (scratch != stack) bml__aligned_free(scratch);
  return 0;
}
