/* golden.c -- fuzzes the golden-file reader (src/cpu/golden.c): the input is the file, read as a Q1_0 and as a Q8_0 one. */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "cpu/golden.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[600], err[600];
  fuzz_write(BML__GOLDEN_Q1_FILE, data, size, path, sizeof path);
  fuzz_write("q8_0_quantize.golden", data, size, path, sizeof path);
  bml__golden_q1 *q1 = NULL;
  bml__golden_q8 *q8 = NULL;
  err[0] = '\0';
  int n = bml__golden_load_q1(fuzz_dir(), &q1, err, sizeof err);
  /* every failure says why */
  if (n < 0 && !err[0]) __builtin_trap();
  if (n > 0) bml__golden_free_q1(q1, n);
  err[0] = '\0';
  n = bml__golden_load_q8(fuzz_dir(), &q8, err, sizeof err);
  if (n < 0 && !err[0]) __builtin_trap();
  if (n > 0) bml__golden_free_q8(q8, n);
  return 0;
}
