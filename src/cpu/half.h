/* half.h -- IEEE halves, converted exactly (half.c). */
#ifndef BML_HALF_H
#define BML_HALF_H

#include "base/bml.h"

float bml__half_to_float(uint16_t h);          /* exact, every value incl. inf/NaN */
uint16_t bml__float_to_half(float f);          /* round to nearest even, like F16C */
/* All 65536 halves as floats (256 KiB, built once): a SIMD kernel turns a
 * scale into a broadcast with one load.  Cannot fail. */
const float *bml__half_table(void);

#endif
