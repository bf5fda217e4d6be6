/* q8_0.c -- Q8_0 quantization of activations, bit for bit as ggml's x86 AVX2 quantize_row_q8_0. */
#include "base/bml.h"
#include "cpu/half.h"

#include <math.h>

/* _mm256_cvtps_epi32 after _mm256_round_ps(nearest): values outside int32
 * (and NaN) become INT32_MIN, "the integer indefinite". */
static int32_t cvt_nearest(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return INT32_MIN;
  return (int32_t)nearbyintf(v);
}

/* packs_epi32 then packs_epi16: signed saturation to int16, then to int8. */
static int8_t saturate_i8(int32_t v) {
  int32_t s16 = v < -32768 ? -32768 : v > 32767 ? 32767 : v;
  return (int8_t)(s16 < -128 ? -128 : s16 > 127 ? 127 : s16);
}

/* _mm256_max_ps(a, b) returns b when either is NaN. */
static float max_ps(float a, float b) { return a > b ? a : b; }

/* The AVX2 code reduces |x| in 8-wide vectors: max(max(max(v0, v1), v2), v3),
 * then the lanes as a tree.  The order only matters for NaN inputs; it is
 * kept so those come out the same too. */
static float block_amax(const float *x) {
  float m[8];
  for (int l = 0; l < 8; l++)
    m[l] = max_ps(max_ps(max_ps(fabsf(x[l]), fabsf(x[8 + l])), fabsf(x[16 + l])), fabsf(x[24 + l]));
  float h[4], q[2];
  for (int l = 0; l < 4; l++) h[l] = max_ps(m[4 + l], m[l]); /* extractf128 hi, lo */
  for (int l = 0; l < 2; l++) q[l] = max_ps(h[l], h[2 + l]); /* movehl */
  return max_ps(q[0], q[1]);                                 /* movehdup, max_ss */
}

int bml_q8_0_quantize(const float *x, size_t n, bml_block_q8_0 *out) {
  if (!x || !out) return BML_EINVAL;
  if (n == 0 || n % BML_Q8_0_BLOCK != 0 || n > SIZE_MAX / sizeof *x) return BML_ESHAPE;
  /* a block written over inputs not read yet would quantize other values */
  const uintptr_t xa = (uintptr_t)x, oa = (uintptr_t)out, xb = n * sizeof *x, ob = n / BML_Q8_0_BLOCK * sizeof *out;
  if (xa < oa ? oa - xa < xb : xa - oa < ob) return BML_EINVAL;
  for (size_t b = 0; b < n / BML_Q8_0_BLOCK; b++) {
    const float *v = x + b * BML_Q8_0_BLOCK;
    const float amax = block_amax(v);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = bml__float_to_half(d);
    for (int j = 0; j < BML_Q8_0_BLOCK; j++) out[b].qs[j] = saturate_i8(cvt_nearest(v[j] * id));
  }
  return 0;
}
