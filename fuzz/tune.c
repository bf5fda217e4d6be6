/* tune.c -- fuzzes the tuning cache's reader (src/card/tune.c): the input is $BANKML_CACHE_DIR/tuning.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "card/card.h"
#include "common.h"
#include "devices/device.h"
#include "card/tune.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bml__card card;
  static bml__cl_info ci;
  if (!ci.name) { /* the device the seeds' entries are for */
    setenv("BANKML_CACHE_DIR", fuzz_dir(), 1);
    bml__tune_disable(true); /* the cache is read; nothing is measured */
    fuzz_quiet();
    ci.name = (char *)"Fuzz Card";
    ci.driver_version = (char *)"1.0";
    snprintf(card.name, sizeof card.name, "%s", ci.name);
  }
  char path[600];
  fuzz_write("tuning.json", data, size, path, sizeof path);
  card.max_work_group = 256;
  if (bml__tune(&card, &ci) != 0) __builtin_trap(); /* the cache alone never fails */
  /* whatever the file said, the tunables are ones the kernels are right for */
  if (card.lrows < 8 || card.lrrows < 8 || card.lrrpt < 1 || card.lrrpt > 4 || card.lrlpt < 1 || card.lrlpt > 2)
    __builtin_trap();
  return 0;
}
