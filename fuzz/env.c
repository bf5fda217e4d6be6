/* env.c -- fuzzes the environment's parsers (src/base/env.c, BANKML_GPU in src/devices/registry.c): the input is the values, NUL-separated. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "devices/device.h"
#include "base/log.h"
#include "base/env.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = {
    "BANKML_THREADS",    "BANKML_GPU",        "BANKML_GPU_SOFTWARE", "BANKML_GPU_SHARE", "BANKML_GPU_LIMIT",
    "BANKML_GPU_QUEUES", "BANKML_SYSFS_ROOT", "BANKML_DEBUG",        "BANKML_CPU_PATH",  "BANKML_CACHE_DIR",
};
#define NNAMES (sizeof names / sizeof names[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int quiet;
  if (!quiet++) fuzz_quiet();
  char *v[NNAMES];
  fuzz_fields(data, size, 0, v, NNAMES);
  for (size_t i = 0; i < NNAMES; i++) setenv(names[i], v[i], 1);
  int rc = bml_env_check();
  if (rc != 0 && rc != BML_EENV) __builtin_trap();
  bml__env_debug();
  const char *s = NULL, *x = NULL, *h = NULL;
  bml__env_cpu_path(&s);
  bml__env_cache_dirs(&s, &x, &h);
  /* the parsers themselves, on every value */
  for (size_t i = 0; i < NNAMES; i++) {
    long l;
    double d;
    bml__gpu_choice choice;
    bml__pci_addr addr;
    bml__parse_long(v[i], -1000, 1000, &l);
    bml__parse_double(v[i], 0, 1, &d);
    bml__gpu_choice_parse("BANKML_GPU", v[i], &choice);
    bml__pci_addr_parse(v[i], &addr);
  }
  fuzz_fields_free(v, NNAMES);
  return 0;
}
