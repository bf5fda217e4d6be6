/* cacheflush.c -- evicts a benchmark's matrices from the CPU caches before a cold run. */
#include <stdint.h>
#include <stdlib.h>

#include "bankml-cl.h"
#include "bench.h"

/* The one place the bench looks at the architecture: x86-64 has clflush
 * (SSE2, so every x86-64 CPU), which evicts exactly the given lines from
 * every level; elsewhere a sweep through a buffer larger than any cache
 * pushes everything else out. */
#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define FLUSH_BY_CLFLUSH 1
#else
#define FLUSH_BY_CLFLUSH 0
#endif

#define LINE 64
#define SWEEP_BYTES ((size_t)256 << 20)

struct cache_flusher {
  unsigned char *sweep; /* SWEEP_BYTES, without clflush only */
};

const char *cache_flusher_method(void) { return FLUSH_BY_CLFLUSH ? "clflush" : "stream"; }

int cache_flusher_open(struct cache_flusher **out) {
  struct cache_flusher *f = calloc(1, sizeof *f);
  if (!f) return BML_ENOMEM;
  if (!FLUSH_BY_CLFLUSH) {
    f->sweep = calloc(1, SWEEP_BYTES);
    if (!f->sweep) {
      free(f);
      return BML_ENOMEM;
    }
  }
  *out = f;
  return 0;
}

void cache_flusher_close(struct cache_flusher *f) {
  if (!f) return;
  free(f->sweep);
  free(f);
}

#if FLUSH_BY_CLFLUSH
static void evict_lines(const void *p, size_t len) {
  uintptr_t line = (uintptr_t)p & ~(uintptr_t)(LINE - 1);
  uintptr_t end = (uintptr_t)p + len;
  for (; line < end; line += LINE) _mm_clflush((const void *)line);
}

void cache_flusher_evict(struct cache_flusher *f, const void *const *ptrs, const size_t *lens,
                         size_t n) {
  (void)f;
  for (size_t i = 0; i < n; i++) evict_lines(ptrs[i], lens[i]);
  _mm_mfence(); /* the flushes are done before the timed run reads anything */
}
#else
void cache_flusher_evict(struct cache_flusher *f, const void *const *ptrs, const size_t *lens,
                         size_t n) {
  (void)ptrs, (void)lens, (void)n;
  /* Writing every line makes the sweep's lines dirty owners of the caches,
   * so the matrix's lines are gone when this returns. */
  volatile unsigned char *b = f->sweep;
  for (size_t i = 0; i < SWEEP_BYTES; i += LINE) b[i] = (unsigned char)(b[i] + 1);
}
#endif
