/* gen.c -- deterministic test data for the oracle and the tests: random regime (-128 quants, special scales) and layer-shaped regime. */
#include "cpu/gen.h"
#include "base/bml.h"
#include "cpu/half.h"

#include <math.h>
#include <stdlib.h>

uint64_t bml__xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* Uniform in [0, 1). */
static double uniform(uint64_t *s) { return (double)(bml__xorshift64(s) >> 11) * 0x1p-53; }

/* A random half in [2^-10, 4) with a random sign. */
static uint16_t random_scale(uint64_t *s) {
  uint64_t r = bml__xorshift64(s);
  float mag = ldexpf(1.0f + (float)uniform(s), (int)(r % 12) - 10);
  uint16_t h = bml__float_to_half(mag);
  return (uint16_t)(h | ((r >> 8) & 1 ? 0x8000u : 0));
}

/* The golden files' special scales: +0, -0, the smallest subnormal, the largest finite. */
static const uint16_t special_scales[] = {0x0000, 0x8000, 0x0001, 0x7bff};

static uint16_t weight_scale(uint64_t *s, bool layer) {
  if (layer) return bml__float_to_half(0.01f + 0.04f * (float)uniform(s));
  uint64_t r = bml__xorshift64(s);
  if (r % 16 == 0) return special_scales[(r >> 8) % BML_ARRAY_SIZE(special_scales)];
  return random_scale(s);
}

void bml__gen_q1_0(uint64_t *s, bml_block_q1_0 *w, size_t rows, size_t n, bool layer) {
  size_t nb = rows * (n / BML_Q1_0_BLOCK);
  for (size_t b = 0; b < nb; b++) {
    w[b].d = weight_scale(s, layer);
    for (int i = 0; i < 16; i += 8) {
      uint64_t r = bml__xorshift64(s);
      for (int k = 0; k < 8; k++) w[b].qs[i + k] = (uint8_t)(r >> (8 * k));
    }
  }
}

/* A standard normal (Box-Muller). */
static double gaussian(uint64_t *s) {
  double u = uniform(s), v = uniform(s);
  return sqrt(-2.0 * log(u + 0x1p-60)) * cos(6.283185307179586 * v);
}

static void gen_q8_random(uint64_t *s, bml_block_q8_0 *a, size_t nb) {
  for (size_t b = 0; b < nb; b++) {
    uint64_t kind = bml__xorshift64(s) % 8;
    a[b].d = random_scale(s);
    for (int j = 0; j < 32; j++) {
      int8_t q = (int8_t)(bml__xorshift64(s) >> 24);
      a[b].qs[j] = kind == 0 ? -128 : kind == 1 ? 127 : q;
    }
  }
}

int bml__gen_q8_0(uint64_t *s, bml_block_q8_0 *a, size_t n, bool layer) {
  if (!layer) {
    gen_q8_random(s, a, n / BML_Q8_0_BLOCK);
    return 0;
  }
  float *x = malloc(n * sizeof *x);
  if (!x) return BML_ENOMEM;
  for (size_t b = 0; b < n / BML_Q8_0_BLOCK; b++) {
    float scale = ldexpf(1.0f, (int)floor(uniform(s) * 16.0) - 8);
    for (size_t j = 0; j < BML_Q8_0_BLOCK; j++)
      x[b * BML_Q8_0_BLOCK + j] = (float)gaussian(s) * scale;
  }
  int rc = bml_q8_0_quantize(x, n, a);
  free(x);
  return rc;
}
