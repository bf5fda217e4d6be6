/* test_half.c -- exact half <-> float conversions, every one of the 65536 halves. */
#include <criterion/criterion.h>

#include <math.h>
#include <string.h>

#include "base/bml.h"
#include "cpu/half.h"

Test(half, every_half_round_trips) {
  for (uint32_t h = 0; h < 65536; h++) {
    float f = bml__half_to_float((uint16_t)h);
    uint16_t back = bml__float_to_half(f);
    if (isnan(f))
      cr_expect((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0, "NaN 0x%04x came back 0x%04x", h, back);
    else
      cr_expect_eq(back, h, "0x%04x -> %a -> 0x%04x", h, (double)f, back);
  }
}

Test(half, known_values) {
  cr_expect_eq(bml__half_to_float(0x3c00), 1.0f);
  cr_expect_eq(bml__half_to_float(0xc000), -2.0f);
  cr_expect_eq(bml__half_to_float(0x7bff), 65504.0f);
  cr_expect_eq(bml__half_to_float(0x0001), 0x1p-24f);
  cr_expect(isinf(bml__half_to_float(0x7c00)));
  cr_expect(signbit(bml__half_to_float(0x8000)));
}

Test(half, rounding_is_nearest_even) {
  cr_expect_eq(bml__float_to_half(1.0f + 0x1p-11f), 0x3c00, "tie to even (down)");
  cr_expect_eq(bml__float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02, "tie to even (up)");
  cr_expect_eq(bml__float_to_half(65520.0f), 0x7c00, "65520 rounds to inf");
  cr_expect_eq(bml__float_to_half(65519.0f), 0x7bff);
  cr_expect_eq(bml__float_to_half(0x1p-25f), 0x0000, "half the smallest subnormal ties to 0");
  cr_expect_eq(bml__float_to_half(0x1.8p-25f), 0x0001);
  cr_expect_eq(bml__float_to_half(0x1p-26f), 0x0000);
  cr_expect_eq(bml__float_to_half(-0.0f), 0x8000);
  cr_expect_eq(bml__float_to_half(1e-40f), 0x0000, "float subnormal to 0");
  cr_expect_eq(bml__float_to_half(0x1.ffcp-15f), 0x0400, "rounds up into the smallest normal");
}
