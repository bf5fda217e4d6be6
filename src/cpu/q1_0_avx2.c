/* q1_0_avx2.c -- the AVX2+FMA Q1_0 x Q8_0 path: one row per ymm, four rows a pass, the reference's bits. */
#include "base/bml.h"
#include "cpu/half.h"
#include "cpu/q1_0.h"

#include <immintrin.h>
#include <string.h>

/*
 * Bit-exact with the reference (doc/ARITHMETIC.md) because it is the reference's
 * order: a ymm holds one row's eight accumulators.  Per 32-sub-block the
 * weight bits become a byte mask (broadcast, shuffle each byte to its eight
 * lanes, test its bit); a blend picks q or its 8-bit negation (-128 stays
 * -128); maddubs and madd sum each group of four bytes exactly into int32
 * lane l; then ab = d1*s (K = 0) or fma(d1, s, ab), acc = fma(d0, ab, acc),
 * and the fixed reduction.  Four rows share each load of the activation.
 */

/* Prepared activation: bml__q1_0_act_split's layout (quants, their 8-bit
 * negations, the scales as floats), shared with the AVX-512 path. */
static size_t prep_size(size_t n) { return bml__q1_0_act_split_size(n); }

static void prep(const bml_block_q8_0 *a, size_t n, void *scratch) { bml__q1_0_act_split(a, n, scratch); }

/* 0xff in byte j where bit j of the 32 weight bits at p is set. */
static inline __m256i bit_mask(const uint8_t *p) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                          2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i select = _mm256_set1_epi64x((long long)0x8040201008040201ull);
  uint32_t bits;
  memcpy(&bits, p, sizeof bits);
  __m256i x = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(x, select), select);
}

/* The eight lane sums of one sub-block as floats. */
static inline __m256 sub_block_sums(const uint8_t *bits, __m256i q, __m256i nq) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i v = _mm256_blendv_epi8(nq, q, bit_mask(bits));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16));
}

#define ROWS 4

static inline void rows_dot(const bml_block_q1_0 *const wr[ROWS], size_t nb, const int8_t *q,
                            const int8_t *nq, const float *d1, const float *half, __m256 acc[ROWS]) {
  for (int r = 0; r < ROWS; r++) acc[r] = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; b++) {
    __m256 ab[ROWS];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      const size_t sk = 4 * b + (size_t)k;
      const __m256i vq = _mm256_load_si256((const __m256i *)(q + 32 * sk));
      const __m256i vnq = _mm256_load_si256((const __m256i *)(nq + 32 * sk));
      const __m256 d = _mm256_broadcast_ss(&d1[sk]);
#pragma GCC unroll 4
      for (int r = 0; r < ROWS; r++) {
        const __m256 sf = sub_block_sums(wr[r][b].qs + 4 * k, vq, vnq);
        ab[r] = k == 0 ? _mm256_mul_ps(d, sf) : _mm256_fmadd_ps(d, sf, ab[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++)
      acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&half[wr[r][b].d]), ab[r], acc[r]);
  }
}

/* ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)), as ggml's hsum_float_8. */
static inline float reduce(__m256 acc) {
  __m128 t = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_movehdup_ps(t));
  return _mm_cvtss_f32(t);
}

static void rows_fn(const bml_block_q1_0 *w, size_t rows, size_t n, const bml_block_q8_0 *a,
                    const void *scratch, float *out) {
  (void)a;
  const size_t nb = n / BML_Q1_0_BLOCK;
  const int8_t *q = scratch, *nq = q + n;
  const float *d1 = (const float *)(nq + n);
  const float *half = bml__half_table();
  for (size_t r = 0; r < rows; r += ROWS) {
    /* rows past the end repeat the last row; their results are dropped */
    const bml_block_q1_0 *wr[ROWS];
    for (int i = 0; i < ROWS; i++) wr[i] = w + (r + (size_t)i < rows ? r + (size_t)i : rows - 1) * nb;
    __m256 acc[ROWS];
    rows_dot(wr, nb, q, nq, d1, half, acc);
    for (int i = 0; i < ROWS; i++)
      if (r + (size_t)i < rows) out[r + (size_t)i] = reduce(acc[i]);
  }
}

static bool supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

const bml__q1_0_kernel bml__q1_0_avx2 = {"avx2", supported, prep_size, prep, rows_fn};
