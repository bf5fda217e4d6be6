/* common.h -- what the fuzz targets share: a scratch directory, files written from the input, the input cut into fields. */
#ifndef BML_FUZZ_COMMON_H
#define BML_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "bankml-cl.h"

/* A directory of this process's own (made at the first call, removed at
 * exit), under $TMPDIR or /tmp.  Exits the process when it cannot be made. */
const char *fuzz_dir(void);

/* Writes size bytes of data as fuzz_dir()/name; its path into path (cap
 * bytes).  Exits the process on a failed write (a full disk is not a
 * finding). */
void fuzz_write(const char *name, const void *data, size_t size, char *path, size_t cap);

/* Cuts data at each byte sep into at most max pieces: at[i] and len[i]
 * (missing ones empty).  Returns the count cut. */
size_t fuzz_split(const uint8_t *data, size_t size, uint8_t sep, const uint8_t **at, size_t *len, size_t max);

/* fuzz_split's pieces as strings (cut at a NUL) that fuzz_fields_free
 * releases; missing ones are "".  Returns the count cut. */
size_t fuzz_fields(const uint8_t *data, size_t size, uint8_t sep, char **fields, size_t max);
void fuzz_fields_free(char **fields, size_t max);

/* The library's log goes nowhere: a target's inputs are mostly bad ones,
 * and writing each message would be most of the time spent.  (Inline: the
 * fake ICD's target does not link the library.) */
static inline void fuzz_drop(void *ctx, bml_log_level level, const char *category, const char *msg) {
  (void)ctx, (void)level, (void)category, (void)msg;
}
static inline void fuzz_quiet(void) { bml_log_set_sink(fuzz_drop, NULL); }

#endif
