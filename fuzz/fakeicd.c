/* fakeicd.c -- fuzzes the fake ICD's scenario reader (tests/fakeicd/config.c): the input is the scenario file. */
#include <stdio.h>

#include "common.h"
#include "fakeicd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static struct fake_model m;
  char path[600];
  fuzz_write("scenario.conf", data, size, path, sizeof path);
  /* both libraries read every file: each keeps its own platforms */
  fake_config_load(path, "a", &m);
  fake_config_load(path, "b", &m);
  return 0;
}
