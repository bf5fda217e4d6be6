/* oracletest.h -- what the suites of the oracle, the tuning and the card share: the card under test and a verification's lines. */
#ifndef BML_TEST_ORACLETEST_H
#define BML_TEST_ORACLETEST_H

#include "base/hooks.h"
#include "card/oracle.h"
#include "card/tune.h"
#include "cpu/q1_0.h"
#include "cpu/gen.h"
#include "card/card.h"
#include "card/slab.h"
#include "card/program.h"
#include "card/kernels.h"

/* What a verification reported. */
typedef struct {
  bml_verify_line lines[256];
  char details[256][512];
  size_t n;
} collected;

/* The card under test: the first real GPU bankml-cl would use (an NVIDIA
 * H200, say), else the PoCL device allowed as a software device (CI).
 * Skips, visibly, where there is neither. */
bml_devices *card_under_test(size_t *index);

/* Options whose lines are collected in c. */
bml_verify_options collecting(collected *c);

/* Verifies device i of l (quick: the small shapes only), its lines into c. */
int verify(bml_devices *l, size_t i, collected *c, int quick);

/* Verifies device i under hooks h, keeping the card and the build in use. */
int verify_keeping(bml_devices *l, size_t i, const bml__oracle_hooks *h, collected *c, bml__card **card,
                   bml__build *use);

/* c's line of check, fma, shape and regime, or NULL. */
const bml_verify_line *find_line(const collected *c, const char *check, const char *fma, size_t rows, size_t n,
                                 const char *regime);

#endif
