/* golden.h -- the tests' view of ggml's golden vectors (the reader is the library's, src/cpu/golden.c). */
#ifndef BML_TEST_GOLDEN_H
#define BML_TEST_GOLDEN_H

#include "cpu/golden.h"

typedef bml__golden_q1 golden_q1_case;
typedef bml__golden_q8 golden_q8_case;

/* $BANKML_GOLDEN_DIR, else tests/golden under $BANKML_TOP_SRCDIR. */
const char *golden_dir(void);

/* The number of cases (> 0) and *out, or -1 after printing why to stderr. */
int golden_load_q1(golden_q1_case **out);
int golden_load_q8(golden_q8_case **out);

#define golden_free_q1 bml__golden_free_q1
#define golden_free_q8 bml__golden_free_q8
#define golden_same_bits bml__same_bits
#define golden_bits bml__float_bits
#define golden_first_difference bml__first_difference

#endif
