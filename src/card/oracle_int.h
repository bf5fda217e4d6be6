/* oracle_int.h -- one verification in progress, shared by the oracle's files (oracle.c, lines.c, probe.c, reference.c). */
#ifndef BML_ORACLE_INT_H
#define BML_ORACLE_INT_H

#include "base/hooks.h"
#include "card/card.h"
#include "cpu/golden.h"

/* The hooks set for the process (base/hooks.c), read. */
#define hooks (*bml__oracle_get_hooks())

/* A verification: its options, the device, and whether a check failed. */
typedef struct {
  const bml_verify_options *opt;
  size_t index;
  const char *name;
  bool failed;
} run;

/* ---- lines.c ---- */
/* Reports a check's line (through opt->on_line) and remembers a failure. */
void bml__oracle_emit(run *v, bml_verify_line *line);
/* Reports a check that could not run: detail says why. */
void bml__oracle_emit_error(run *v, const char *check, const char *fma, const char *detail);

/* ---- probe.c ---- */
/* The fma probe of build b on card c, reported on v: *native_ok when the
 * native fma gave every case's bits.  Returns 0 or an error. */
int bml__oracle_probe(run *v, bml__card *c, const bml__build *b, bool *native_ok);
/* The fma probe for a remembered verdict: the emulation exact on its
 * domain, and the native fma exact when the build uses it.  Returns 0 or
 * BML_EVERIFY (why says what). */
int bml__oracle_spot_probe(bml__card *c, const bml__build *b, char *why, size_t len);

/* ---- reference.c ---- */
/* ggml's golden cases into *g, where they are this build's CPU kernel's
 * bits: how many (0: none to check; a file that cannot be read is a
 * refusing line on v). */
int bml__oracle_load_golden(run *v, bml__golden_q1 **g);

#endif
