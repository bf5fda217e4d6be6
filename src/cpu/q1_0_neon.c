/* q1_0_neon.c -- the AArch64 Q1_0 x Q8_0 paths, plain NEON and with the dot-product extension: two rows a pass, the reference's bits. */
#include "base/bml.h"
#include "cpu/half.h"
#include "cpu/q1_0.h"

#include <arm_neon.h>
#include <string.h>
#include <sys/auxv.h>

/*
 * Bit-exact with the reference (doc/ARITHMETIC.md) because it is the
 * reference's order: a row's eight accumulators are two float32x4 (lanes
 * 0..3 and 4..7).  Per 32-sub-block the 32 weight bits become byte masks
 * (TBL spreads each bit byte over eight bytes, CMTST tests each byte's
 * bit); BSL picks q or its 8-bit negation (-128 stays -128); the exact sums
 * of each group of four bytes are int32 lane l: two pairwise widening adds
 * (SADDLP, "neon") or one SDOT against ones ("neon-dot", ARMv8.2's
 * dot-product extension).  Then ab = d1*s (K = 0) or fma(d1, s, ab) and,
 * per block, acc = fma(d0, ab, acc): FMUL and FMLA by element, FMLA being a
 * true fused multiply-add; then the fixed reduction.  Two rows share each
 * load of the activation (four, as on AVX2, spill vector registers:
 * doc/PERFORMANCE.md).  The two paths differ in the integer sums only,
 * which are exact in any order.
 */

/* Where <sys/auxv.h> predates them (Linux's values for AArch64). */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif

/* This file is compiled twice (Makefile.am): as it is, for the plain path,
 * and with -march=armv8.2-a+dotprod -DBML_NEON_DOTPROD=1 for the
 * dot-product path, which the dispatch (cpu.c) runs only where the kernel
 * says the CPU has it.  A -march in CFLAGS that drops the dot product
 * would make the second copy the plain path again. */
#if defined(BML_NEON_DOTPROD) && !defined(__ARM_FEATURE_DOTPROD)
#error "BML_NEON_DOTPROD: this compilation lacks the dot product (a -march in CFLAGS without +dotprod?)"
#endif

/* Prepared activation: bml__q1_0_act_split's layout (quants, their 8-bit
 * negations, the scales as floats), as the x86 paths have it. */
static size_t prep_size(size_t n) { return bml__q1_0_act_split_size(n); }

static void prep(const bml_block_q8_0 *a, size_t n, void *scratch) { bml__q1_0_act_split(a, n, scratch); }

/* 0xff in byte j of lo (elements 0..15) and hi (16..31) where bit j of the
 * 32 weight bits at p is set. */
static inline void bit_masks(const uint8_t *p, uint8x16_t *lo, uint8x16_t *hi) {
  static const uint8_t spread[2][16] = {{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
                                        {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3}};
  const uint8x16_t select = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
  uint32_t bits;
  memcpy(&bits, p, sizeof bits);
  const uint8x16_t x = vreinterpretq_u8_u32(vdupq_n_u32(bits));
  *lo = vtstq_u8(vqtbl1q_u8(x, vld1q_u8(spread[0])), select);
  *hi = vtstq_u8(vqtbl1q_u8(x, vld1q_u8(spread[1])), select);
}

/* The exact sums of each group of four bytes of v: int32 lane l is bytes
 * 4l..4l+3. */
static inline int32x4_t sum4(int8x16_t v) {
#if defined(BML_NEON_DOTPROD)
  return vdotq_s32(vdupq_n_s32(0), v, vdupq_n_s8(1));
#else
  return vpaddlq_s16(vpaddlq_s8(v));
#endif
}

#define ROWS 2

/* The eight lanes of rows wr[0..ROWS): acc[r][0] lanes 0..3, acc[r][1]
 * lanes 4..7. */
static inline void rows_dot(const bml_block_q1_0 *const wr[ROWS], size_t nb, const int8_t *q, const int8_t *nq,
                            const float *d1, const float *half, float32x4_t acc[ROWS][2]) {
  for (int r = 0; r < ROWS; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
  for (size_t b = 0; b < nb; b++) {
    float32x4_t ab[ROWS][2];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
      const size_t sk = 4 * b + (size_t)k;
      const int8x16_t q0 = vld1q_s8(q + 32 * sk), q1 = vld1q_s8(q + 32 * sk + 16);
      const int8x16_t n0 = vld1q_s8(nq + 32 * sk), n1 = vld1q_s8(nq + 32 * sk + 16);
      const float d = d1[sk];
#pragma GCC unroll 4
      for (int r = 0; r < ROWS; r++) {
        uint8x16_t m0, m1;
        bit_masks(wr[r][b].qs + 4 * k, &m0, &m1);
        const float32x4_t s0 = vcvtq_f32_s32(sum4(vbslq_s8(m0, q0, n0)));
        const float32x4_t s1 = vcvtq_f32_s32(sum4(vbslq_s8(m1, q1, n1)));
        ab[r][0] = k == 0 ? vmulq_n_f32(s0, d) : vfmaq_n_f32(ab[r][0], s0, d);
        ab[r][1] = k == 0 ? vmulq_n_f32(s1, d) : vfmaq_n_f32(ab[r][1], s1, d);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < ROWS; r++) {
      const float d0 = half[wr[r][b].d];
      acc[r][0] = vfmaq_n_f32(acc[r][0], ab[r][0], d0);
      acc[r][1] = vfmaq_n_f32(acc[r][1], ab[r][1], d0);
    }
  }
}

/* ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7)), as the reference. */
static inline float reduce(float32x4_t lo, float32x4_t hi) {
  const float32x4_t t = vaddq_f32(lo, hi);                             /* a0+a4, a1+a5, a2+a6, a3+a7 */
  const float32x2_t u = vadd_f32(vget_low_f32(t), vget_high_f32(t)); /* the two inner pairs */
  return vget_lane_f32(u, 0) + vget_lane_f32(u, 1);
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
    float32x4_t acc[ROWS][2];
    rows_dot(wr, nb, q, nq, d1, half, acc);
    for (int i = 0; i < ROWS; i++)
      if (r + (size_t)i < rows) out[r + (size_t)i] = reduce(acc[i][0], acc[i][1]);
  }
}

#if defined(BML_NEON_DOTPROD)
/* The dot product came with ARMv8.2 (optional there, required from
 * ARMv8.4): ARMv8.0's Cortex-A53, A57, A72 and A73 lack it. */
static bool supported(void) {
  const unsigned long hw = getauxval(AT_HWCAP);
  return (hw & HWCAP_ASIMD) && (hw & HWCAP_ASIMDDP);
}

const bml__q1_0_kernel bml__q1_0_neon_dot = {"neon-dot", supported, prep_size, prep, rows_fn};
#else
/* Advanced SIMD is part of every AArch64 Linux system; the kernel says so
 * all the same. */
static bool supported(void) { return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0; }

const bml__q1_0_kernel bml__q1_0_neon = {"neon", supported, prep_size, prep, rows_fn};
#endif
