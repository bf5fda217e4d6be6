/* q1_0_avx512.c -- the AVX-512 (F, BW, VL, VNNI) Q1_0 x Q8_0 path: two rows per zmm, the reference's bits. */
#include "base/bml.h"
#include "cpu/half.h"
#include "cpu/q1_0.h"

#include <immintrin.h>
#include <string.h>

/*
 * Why this is bit-exact with the reference (doc/ARITHMETIC.md):
 * - The integer sums s (lane l of sub-block K: elements 4l..4l+3) are exact
 *   in any order.  Here a byte blend under the weight bits picks q or its
 *   8-bit negation (-128 stays -128) and VNNI's dpbusd sums each group of
 *   four bytes, so int32 lane l of a 256-bit half is s for lane l.
 * - ab = d1*s for K = 0 and fma(d1, s, ab) for K > 0, per lane, as the
 *   reference writes it.
 * - acc = fma(d0, ab, acc) per block and the final reduction are done in
 *   the reference's lane order.
 * Two rows share a zmm: lanes 0..7 are row A's eight accumulators, lanes
 * 8..15 row B's.  The integer sums come out as [K0 | K1] and [K2 | K3] of
 * one row (the 64 weight bits of two sub-blocks are one mask register), and
 * a 256-bit shuffle regroups them into [A_K | B_K] for the float steps.
 * Measured on a 2-vCPU Sapphire Rapids: the loop is bound by ports 0 and 5
 * (dpbusd and cvt run on port 0 only), about 11 cycles a block of a pair.
 */

/* Prepared activation: bml__q1_0_act_split's layout (quants, their 8-bit
 * negations, the scales as floats), shared with the AVX2 path. */
static size_t prep_size(size_t n) { return bml__q1_0_act_split_size(n); }

static void prep(const bml_block_q8_0 *a, size_t n, void *scratch) { bml__q1_0_act_split(a, n, scratch); }

/* The four sub-block sums of one row's block b as floats, two per zmm:
 * lo = [K0 | K1], hi = [K2 | K3] (lanes 0..7 and 8..15). */
static inline void block_sums(const bml_block_q1_0 *w, const int8_t *q, const int8_t *nq,
                              __m512 *lo, __m512 *hi) {
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i zero = _mm512_setzero_si512();
  uint64_t bits[2];
  memcpy(bits, w->qs, sizeof bits);
  const __m512i v01 = _mm512_mask_blend_epi8(_cvtu64_mask64(bits[0]), _mm512_load_si512(nq),
                                             _mm512_load_si512(q));
  const __m512i v23 = _mm512_mask_blend_epi8(_cvtu64_mask64(bits[1]), _mm512_load_si512(nq + 64),
                                             _mm512_load_si512(q + 64));
  *lo = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ones, v01));
  *hi = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ones, v23));
}

/* PAIRS pairs of rows at once (rows wr[2p] and wr[2p+1]): the activation's
 * loads are shared; pair p's lanes are 0..7 (first row) and 8..15 (second
 * row) of acc[p]. */
#define PAIRS 2

static inline void pairs_dot(const bml_block_q1_0 *const wr[2 * PAIRS], size_t nb, const int8_t *q,
                             const int8_t *nq, const float *d1, const float *half, __m512 acc[PAIRS]) {
  for (int p = 0; p < PAIRS; p++) acc[p] = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; b++) {
    const __m512 d10 = _mm512_set1_ps(d1[4 * b]), d11 = _mm512_set1_ps(d1[4 * b + 1]);
    const __m512 d12 = _mm512_set1_ps(d1[4 * b + 2]), d13 = _mm512_set1_ps(d1[4 * b + 3]);
#pragma GCC unroll 4
    for (int p = 0; p < PAIRS; p++) {
      __m512 a01, a23, b01, b23;
      block_sums(&wr[2 * p][b], q + 128 * b, nq + 128 * b, &a01, &a23);
      block_sums(&wr[2 * p + 1][b], q + 128 * b, nq + 128 * b, &b01, &b23);
      /* regroup per sub-block: [A_K | B_K] */
      __m512 ab = _mm512_mul_ps(d10, _mm512_shuffle_f32x4(a01, b01, _MM_SHUFFLE(1, 0, 1, 0)));
      ab = _mm512_fmadd_ps(d11, _mm512_shuffle_f32x4(a01, b01, _MM_SHUFFLE(3, 2, 3, 2)), ab);
      ab = _mm512_fmadd_ps(d12, _mm512_shuffle_f32x4(a23, b23, _MM_SHUFFLE(1, 0, 1, 0)), ab);
      ab = _mm512_fmadd_ps(d13, _mm512_shuffle_f32x4(a23, b23, _MM_SHUFFLE(3, 2, 3, 2)), ab);
      __m512 d0 = _mm512_set1_ps(half[wr[2 * p][b].d]);
      d0 = _mm512_mask_broadcastss_ps(d0, 0xff00, _mm_load_ss(&half[wr[2 * p + 1][b].d]));
      acc[p] = _mm512_fmadd_ps(d0, ab, acc[p]);
    }
  }
}

/* ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)) for each 8-lane half. */
static inline void reduce_pair(__m512 acc, float *ra, float *rb) {
  __m512 t = _mm512_add_ps(acc, _mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(2, 3, 0, 1)));
  __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));
  __m512 v = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));
  *ra = _mm512_cvtss_f32(v);
  *rb = _mm512_cvtss_f32(_mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(0, 0, 0, 2)));
}

static void rows_fn(const bml_block_q1_0 *w, size_t rows, size_t n, const bml_block_q8_0 *a,
                    const void *scratch, float *out) {
  (void)a;
  const size_t nb = n / BML_Q1_0_BLOCK;
  const int8_t *q = scratch, *nq = q + n;
  const float *d1 = (const float *)(nq + n);
  const float *half = bml__half_table();
  size_t r = 0;
  for (; r < rows; r += 2 * PAIRS) {
    /* rows past the end repeat the last row; their results are dropped */
    const bml_block_q1_0 *wr[2 * PAIRS];
    for (int i = 0; i < 2 * PAIRS; i++) wr[i] = w + (r + (size_t)i < rows ? r + (size_t)i : rows - 1) * nb;
    __m512 acc[PAIRS];
    pairs_dot(wr, nb, q, nq, d1, half, acc);
    for (int p = 0; p < PAIRS; p++) {
      float res[2];
      reduce_pair(acc[p], &res[0], &res[1]);
      for (int i = 0; i < 2; i++)
        if (r + (size_t)(2 * p + i) < rows) out[r + (size_t)(2 * p + i)] = res[i];
    }
  }
}

static bool supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("fma");
}

const bml__q1_0_kernel bml__q1_0_avx512 = {"avx512", supported, prep_size, prep, rows_fn};
