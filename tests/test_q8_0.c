/* test_q8_0.c -- the activation quantizer against ggml's AVX2 quantize_row_q8_0, block for block. */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "base/bml.h"
#include "golden.h"

Test(q8_0, every_block_matches_ggml_avx2) {
  golden_q8_case *c = NULL;
  int n = golden_load_q8(&c);
  cr_assert(n > 0, "cannot read the Q8_0 golden file from %s", golden_dir());
  size_t blocks = 0;
  for (int i = 0; i < n; i++) {
    size_t nb = c[i].n / 32;
    bml_block_q8_0 *got = malloc(nb * sizeof *got);
    cr_assert_not_null(got);
    cr_assert_eq(bml_q8_0_quantize(c[i].x, c[i].n, got), 0);
    for (size_t b = 0; b < nb; b++, blocks++)
      cr_expect(memcmp(&got[b], &c[i].q[b], sizeof *got) == 0,
                "case %d (n=%u) block %zu: d 0x%04x vs ggml 0x%04x", i, c[i].n, b, got[b].d, c[i].q[b].d);
    free(got);
  }
  cr_expect_eq(n, 4, "%d cases read", n);
  cr_expect_eq(blocks, 20768 / 32, "only %zu blocks compared", blocks);
  golden_free_q8(c, n);
}

Test(q8_0, ties_round_to_even_unlike_ggml_ref) {
  /* The golden file has exact ties where the AVX2 and _ref quantizers differ;
   * make sure that is so, or the test above would not tell them apart. */
  golden_q8_case *c = NULL;
  int n = golden_load_q8(&c);
  cr_assert(n > 0);
  int differ = 0;
  for (int i = 0; i < n; i++) differ += memcmp(c[i].q, c[i].qref, c[i].n / 32 * sizeof *c[i].q) != 0;
  cr_expect(differ > 0, "no case tells the AVX2 quantizer from the _ref one");
  golden_free_q8(c, n);
}

Test(q8_0, bad_arguments_are_refused_and_nothing_written) {
  float x[64] = {1.0f};
  bml_block_q8_0 out[2];
  memset(out, 0x5a, sizeof out);
  cr_expect_eq(bml_q8_0_quantize(NULL, 32, out), BML_EINVAL);
  cr_expect_eq(bml_q8_0_quantize(x, 32, NULL), BML_EINVAL);
  cr_expect_eq(bml_q8_0_quantize(x, 0, out), BML_ESHAPE);
  cr_expect_eq(bml_q8_0_quantize(x, 48, out), BML_ESHAPE);
  for (size_t i = 0; i < sizeof out; i++) cr_assert_eq(((unsigned char *)out)[i], 0x5a);
}

/* In place (the blocks over the floats not read yet) would quantize other
 * values: refused; right after the floats is fine. */
Test(q8_0, blocks_over_the_inputs_are_refused) {
  float *buf = malloc(64 * sizeof *buf + 2 * sizeof(bml_block_q8_0));
  cr_assert(buf);
  for (int i = 0; i < 64; i++) buf[i] = (float)(i % 7) - 3.0f;
  bml_block_q8_0 want[2];
  cr_assert_eq(bml_q8_0_quantize(buf, 64, want), 0);
  cr_expect_eq(bml_q8_0_quantize(buf, 64, (bml_block_q8_0 *)(void *)buf), BML_EINVAL, "in place");
  cr_expect_eq(bml_q8_0_quantize(buf, 64, (bml_block_q8_0 *)(void *)(buf + 63)), BML_EINVAL, "over the last float");
  bml_block_q8_0 *after = (bml_block_q8_0 *)(void *)(buf + 64);
  cr_expect_eq(bml_q8_0_quantize(buf, 64, after), 0);
  cr_expect(memcmp(after, want, sizeof want) == 0);
  free(buf);
}

Test(q8_0, zero_block_gives_zero_scale_and_quants) {
  float x[32] = {0};
  bml_block_q8_0 out;
  cr_assert_eq(bml_q8_0_quantize(x, 32, &out), 0);
  cr_expect_eq(out.d, 0);
  for (int j = 0; j < 32; j++) cr_expect_eq(out.qs[j], 0);
}
