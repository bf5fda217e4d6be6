/* oracletest.c -- what the suites of the oracle, the tuning and the card share: the card under test and a verification's lines. */
#include "oracletest.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void collect(void *ctx, const bml_verify_line *l) {
  collected *c = ctx;
  cr_assert(c->n < BML_ARRAY_SIZE(c->lines), "too many lines");
  c->lines[c->n] = *l;
  if (l->detail) {
    snprintf(c->details[c->n], sizeof c->details[0], "%s", l->detail);
    c->lines[c->n].detail = c->details[c->n];
  }
  c->n++;
}

/* The card under test: the first real GPU bankml-cl would use (an NVIDIA
 * H200, say), else the PoCL device allowed as a software device (CI).
 * Skips, visibly, where there is neither. */
bml_devices *card_under_test(size_t *index) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_SYSFS_ROOT");
  bml_discover_options o;
  bml_discover_options_init(&o);
  o.software = 1;
  bml_devices *l = NULL;
  cr_assert_eq(bml_devices_discover(&o, &l), 0);
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < bml_devices_count(l); i++) {
      const bml_device *d = bml_devices_get(l, i);
      bool wanted = pass == 0 ? d->kind != BML_KIND_CPU : strstr(d->platform, "Portable Computing Language") != NULL;
      if (d->usable && wanted) {
        *index = i;
        cr_log_info("card under test: %s (%s)", d->name, d->platform);
        return l;
      }
    }
  bml_devices_free(l);
  cr_skip_test("no OpenCL GPU and no PoCL device here: the card tests need one (apt-get install pocl-opencl-icd)");
  return NULL;
}

/* Options whose lines are collected in c. */
bml_verify_options collecting(collected *c) {
  bml_verify_options o;
  bml_verify_options_init(&o);
  o.on_line = collect;
  o.ctx = c;
  return o;
}

int verify(bml_devices *l, size_t i, collected *c, int quick) {
  bml_verify_options o = collecting(c);
  o.quick = quick;
  return bml_devices_verify(l, i, &o);
}

/* Verifies device i under hooks h, keeping the card and the build in use. */
int verify_keeping(bml_devices *l, size_t i, const bml__oracle_hooks *h, collected *c, bml__card **card,
                   bml__build *use) {
  bml__oracle_set_hooks(h);
  bml_verify_options o = collecting(c);
  return bml__oracle_verify(&l->dev[i], i, &o, card, use);
}

const bml_verify_line *find_line(const collected *c, const char *check, const char *fma, size_t rows, size_t n,
                                 const char *regime) {
  for (size_t i = 0; i < c->n; i++) {
    const bml_verify_line *l = &c->lines[i];
    if (strcmp(l->check, check) == 0 && strcmp(l->fma, fma) == 0 && l->rows == rows && l->n == n &&
        strcmp(l->regime, regime) == 0)
      return l;
  }
  return NULL;
}
