/* util.c -- small helpers: aligned scratch, the monotonic clock. */
#include "base/util.h"
#include "base/bml.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *bml__aligned_alloc(size_t size) {
  void *p = NULL;
  if (size == 0) size = 64;
  if (posix_memalign(&p, 64, (size + 63) & ~(size_t)63) != 0) return NULL;
  return p;
}

void bml__aligned_free(void *p) { free(p); }

double bml__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void bml__notes_add(bml__notes *n, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  /* a finding is said once: libpci, set up for each device, repeats its own */
  for (size_t i = 0; i < n->len; i++)
    if (strcmp(n->items[i], buf) == 0) return;
  if (n->len == n->cap) {
    size_t cap = n->cap ? 2 * n->cap : 8;
    char **items = realloc(n->items, cap * sizeof *items);
    if (!items) return;
    n->items = items;
    n->cap = cap;
  }
  char *copy = strdup(buf);
  if (copy) n->items[n->len++] = copy;
}

void bml__notes_free(bml__notes *n) {
  if (!n) return;
  for (size_t i = 0; i < n->len; i++) free(n->items[i]);
  free(n->items);
  n->items = NULL;
  n->len = n->cap = 0;
}

uint64_t bml__mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb * 1024;
}

void bml__uuid_format(const uint8_t uuid[16], char buf[37]) {
  for (int i = 0; i < 16; i++) buf += sprintf(buf, i == 4 || i == 6 || i == 8 || i == 10 ? "-%02x" : "%02x", uuid[i]);
}
