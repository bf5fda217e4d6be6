/* util.h -- small utilities: notes, aligned scratch, the clock, MemAvailable, a uuid's text, a pause (util.c). */
#ifndef BML_UTIL_H
#define BML_UTIL_H

#include "base/bml.h"

/* Aligned scratch (64 bytes).  Free with bml__aligned_free (NULL-safe). */
void *bml__aligned_alloc(size_t size);
void bml__aligned_free(void *p);

/* ---- notes: the non-fatal findings a listing carries ---- */
typedef struct {
  char **items;
  size_t len, cap;
} bml__notes;
/* Appends a formatted note, unless the same note is there already; on
 * memory exhaustion the note is dropped.
 * Cannot fail. */
void bml__notes_add(bml__notes *n, const char *fmt, ...) BML_PRINTF(2, 3);
void bml__notes_free(bml__notes *n); /* NULL-safe; leaves n empty */

/* MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read. */
uint64_t bml__mem_available(void);

/* A uuid as cl_khr_device_uuid's users write it, 8-4-4-4-12 hex digits. */
void bml__uuid_format(const uint8_t uuid[16], char buf[37]);

/* Monotonic clock in seconds. */
double bml__now(void);

/* One step of a spin loop: the CPU's pause hint, where it has one. */
static inline void bml__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif
