/* half.c -- exact IEEE binary16 <-> binary32 conversions, as F16C does them. */
#include "cpu/half.h"
#include "base/bml.h"

#include <pthread.h>
#include <string.h>

static float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

float bml__half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) /* inf or NaN: keep the payload, quieted like F16C */
    return bits_to_float(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
  if (exp != 0) return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
  if (man == 0) return bits_to_float(sign);
  /* subnormal half: man * 2^-24, exact in float */
  float v = (float)man * 0x1p-24f;
  return sign ? -v : v;
}

uint16_t bml__float_to_half(float f) {
  uint32_t u = float_to_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t exp = (u >> 23) & 0xffu;
  uint32_t man = u & 0x7fffffu;
  if (exp == 0xff) /* inf, or NaN quieted with the top of its payload */
    return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
  int e = (int)exp - 127 + 15; /* biased half exponent */
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  uint32_t full, shift;
  if (e <= 0) { /* subnormal half (or zero): shift the implicit-one mantissa */
    if (e < -10) return sign; /* below half the smallest subnormal: rounds to 0 */
    full = man | 0x800000u;
    shift = (uint32_t)(14 - e);
  } else {
    full = man;
    shift = 13;
  }
  uint32_t q = full >> shift;
  uint32_t rem = full & ((1u << shift) - 1);
  uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) q++;
  /* normal: exponent field plus the rounded mantissa (a carry bumps the exponent) */
  uint32_t bits = e <= 0 ? q : ((uint32_t)e << 10) + q;
  return (uint16_t)(sign | bits);
}

/* In BSS: pages are touched only when a SIMD kernel first runs. */
static _Alignas(64) float half_table[65536];
static pthread_once_t half_table_once = PTHREAD_ONCE_INIT;

static void build_half_table(void) {
  for (uint32_t h = 0; h < 65536; h++) half_table[h] = bml__half_to_float((uint16_t)h);
}

const float *bml__half_table(void) {
  pthread_once(&half_table_once, build_half_table);
  return half_table;
}
