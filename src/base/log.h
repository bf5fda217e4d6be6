/* log.h -- levels and categories of the library's messages, and where they go (log.c). */
#ifndef BML_LOG_H
#define BML_LOG_H

#include "base/bml.h"

/* Categories for BANKML_DEBUG. */
enum {
  BML_CAT_POOL = 1u << 0,
  BML_CAT_CPU = 1u << 1,
  BML_CAT_DEVICE = 1u << 2,
  BML_CAT_PCI = 1u << 3,
  BML_CAT_BUILD = 1u << 4,
  BML_CAT_ORACLE = 1u << 5,
  BML_CAT_WORKER = 1u << 6,
  BML_CAT_ENV = 1u << 7,
};
void bml__log(bml_log_level level, unsigned cat, const char *fmt, ...) BML_PRINTF(3, 4);
void bml__vlog(bml_log_level level, unsigned cat, const char *fmt, va_list ap) BML_PRINTF(3, 0);
bool bml__debug_on(unsigned cat);
/* Reads BANKML_DEBUG now, once a process, so that a bad value is reported
 * when the work starts (the entry points call it), not at the first
 * debug message, which may never come. */
void bml__debug_load(void);
#define bml__error(cat, ...) bml__log(BML_LOG_ERROR, (cat), __VA_ARGS__)
#define bml__warn(cat, ...) bml__log(BML_LOG_WARN, (cat), __VA_ARGS__)
#define bml__info(cat, ...) bml__log(BML_LOG_INFO, (cat), __VA_ARGS__)
#define bml__debug(cat, ...) \
  do { if (bml__debug_on(cat)) bml__log(BML_LOG_DEBUG, (cat), __VA_ARGS__); } while (0)

/* The categories BANKML_DEBUG names; junk names warn once. */
unsigned bml__env_debug(void);
/* Makes the log's lock anew in a child of fork() (fork.c). */
void bml__log_in_child(void);

#endif
