/* log.c -- the one place bankml-cl's messages go through: levels, categories, a settable sink. */
#include "base/log.h"
#include "base/bml.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sink and its context change together: a message logged by another
 * thread meanwhile reaches the old pair or the new one, never a mix. */
static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static bml_log_fn sink_fn;
static void *sink_ctx;
static pthread_once_t debug_once = PTHREAD_ONCE_INIT;
static unsigned debug_mask;

static const struct {
  unsigned cat;
  const char *name;
} categories[] = {
    {BML_CAT_POOL, "pool"},     {BML_CAT_CPU, "cpu"},     {BML_CAT_DEVICE, "device"},
    {BML_CAT_PCI, "pci"},       {BML_CAT_BUILD, "build"}, {BML_CAT_ORACLE, "oracle"},
    {BML_CAT_WORKER, "worker"}, {BML_CAT_ENV, "env"},
};

static const char *category_name(unsigned cat) {
  for (size_t i = 0; i < BML_ARRAY_SIZE(categories); i++)
    if (categories[i].cat == cat) return categories[i].name;
  return "general";
}

/* A category by name (0: none). */
static unsigned debug_category(const char *name, size_t len) {
  for (size_t i = 0; i < BML_ARRAY_SIZE(categories); i++)
    if (strlen(categories[i].name) == len && strncmp(categories[i].name, name, len) == 0)
      return categories[i].cat;
  return 0;
}

#define DEBUG_KNOWN "all, pool, cpu, device, pci, build, oracle, worker, env"

/* Appends "name" (cut past 32 bytes) to the list of unknown categories in
 * buf, ", "-separated, until it would pass cap - 8 bytes: then "..." once. */
static void list_unknown(char *buf, size_t cap, const char *name, size_t len) {
  size_t used = strlen(buf);
  if (used >= cap - 8) return; /* already full, and said so */
  const int shown = len > 32 ? 29 : (int)len;
  int n = snprintf(buf + used, cap - used, "%s\"%.*s%s\"", used ? ", " : "", shown, name, len > 32 ? "..." : "");
  if (n < 0 || used + (size_t)n >= cap - 8) snprintf(buf + used, cap - used, "%s...", used ? ", " : "");
}

/* The categories of BANKML_DEBUG.  Names it does not know are one warning
 * that lists them (20,000 of them were 20,000 warnings, each repeating
 * the whole value: 41 MB on stderr). */
unsigned bml__env_debug(void) {
  const char *v = getenv("BANKML_DEBUG");
  if (!v || !*v) return 0;
  if (strcmp(v, "all") == 0 || strcmp(v, "1") == 0) return ~0u;
  unsigned mask = 0;
  size_t unknown = 0;
  char names[200] = "";
  for (const char *p = v; *p;) {
    size_t len = strcspn(p, ",");
    unsigned cat = debug_category(p, len);
    if (cat == 0 && len > 0) {
      unknown++;
      list_unknown(names, sizeof names, p, len);
    }
    mask |= cat;
    p += len;
    if (*p == ',') p++;
  }
  const size_t vlen = strlen(v);
  if (unknown == 1)
    bml__warn(BML_CAT_ENV, "BANKML_DEBUG=\"%.*s%s\": unknown category %s ignored (known: %s)", vlen > 64 ? 61 : (int)vlen,
              v, vlen > 64 ? "..." : "", names, DEBUG_KNOWN);
  else if (unknown > 1)
    bml__warn(BML_CAT_ENV, "BANKML_DEBUG=\"%.*s%s\": %zu unknown categories ignored: %s (known: %s)",
              vlen > 64 ? 61 : (int)vlen, v, vlen > 64 ? "..." : "", unknown, names, DEBUG_KNOWN);
  return mask;
}

static void load_debug(void) { debug_mask = bml__env_debug(); }

void bml__debug_load(void) { pthread_once(&debug_once, load_debug); }

bool bml__debug_on(unsigned cat) {
  bml__debug_load();
  return (debug_mask & cat) != 0;
}

void bml_log_set_sink(bml_log_fn fn, void *ctx) {
  pthread_mutex_lock(&sink_lock);
  sink_fn = fn;
  sink_ctx = ctx;
  pthread_mutex_unlock(&sink_lock);
}

/* In a child of fork() (fork.c): another thread may have held the lock at
 * the fork, and is not there to let it go. */
void bml__log_in_child(void) { pthread_mutex_init(&sink_lock, NULL); }

void bml__vlog(bml_log_level level, unsigned cat, const char *fmt, va_list ap) {
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&sink_lock);
  const bml_log_fn fn = sink_fn;
  void *const ctx = sink_ctx;
  pthread_mutex_unlock(&sink_lock);
  if (fn) { /* called outside the lock: a sink may log, or set another */
    fn(ctx, level, category_name(cat), msg);
    return;
  }
  /* stderr is often a terminal: a driver's string quoted in msg (a device
   * name, a build log) must not move the cursor or retitle the window, so
   * control characters other than newline and tab (C0, DEL, UTF-8's C1)
   * print as '?'.  A sink gets msg as it was. */
  unsigned char *w = (unsigned char *)msg;
  for (const unsigned char *p = w; *p; p++) {
    bool c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
    *w++ = c1 || (p[0] < 0x20 && p[0] != '\n' && p[0] != '\t') || p[0] == 0x7f ? '?' : p[0];
    p += c1;
  }
  *w = '\0';
  static const char *const prefix[] = {"error: ", "warning: ", "", "debug: "};
  fprintf(stderr, "bankml-cl: %s%s\n", prefix[level], msg);
}

void bml__log(bml_log_level level, unsigned cat, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  bml__vlog(level, cat, fmt, ap);
  va_end(ap);
}
