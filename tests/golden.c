/* golden.c -- where the tests find ggml's golden vectors, and loaders that say why they failed. */
#include "golden.h"

#include <stdio.h>
#include <stdlib.h>

const char *golden_dir(void) {
  static char buf[4096];
  const char *d = getenv("BANKML_GOLDEN_DIR");
  if (d && *d) return d;
  const char *top = getenv("BANKML_TOP_SRCDIR");
  snprintf(buf, sizeof buf, "%s/tests/golden", top && *top ? top : ".");
  return buf;
}

int golden_load_q1(golden_q1_case **out) {
  char err[512] = "";
  int n = bml__golden_load_q1(golden_dir(), out, err, sizeof err);
  if (n < 0) fprintf(stderr, "golden: %s (%s)\n", err, bml_strerror(n));
  return n < 0 ? -1 : n;
}

int golden_load_q8(golden_q8_case **out) {
  char err[512] = "";
  int n = bml__golden_load_q8(golden_dir(), out, err, sizeof err);
  if (n < 0) fprintf(stderr, "golden: %s (%s)\n", err, bml_strerror(n));
  return n < 0 ? -1 : n;
}
