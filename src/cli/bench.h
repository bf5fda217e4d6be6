/* bench.h -- `bankml-cl bench`: its settings, its results, and the modes that fill them. */
#ifndef BML_CLI_BENCH_H
#define BML_CLI_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* One matrix: rows x n weights (n a positive multiple of 128). */
struct bench_shape {
  size_t rows, n;
};

/* What to measure, after the defaults are filled in. */
struct bench_config {
  struct bench_shape *shapes;
  size_t nshapes;
  int *threads; /* CPU pool sizes, each 1..BENCH_MAX_THREADS */
  size_t nthreads;
  long runs;   /* timed runs per measurement */
  long warmup; /* untimed runs before the warm measurement */
  bool json, verbose;
};

#define BENCH_MAX_THREADS 1024 /* what bml_pool_open accepts */

/* One line of the table: one measurement of one shape. */
struct bench_row {
  const char *mode; /* "cpu": the mode's name */
  size_t rows, n;
  int threads;
  const char *cache; /* "warm" or "flushed" */
  double median_ms, min_ms;
  double gbps; /* Q1_0 weight bytes / median time, in 1e9 bytes per second */
  uint64_t weight_bytes;
  bool exact; /* every timed result equal, bit for bit, to bml_q1_0_mat_vec's */
};

/* Everything a run produced, rendered in one place (bench_render.c). */
struct bench_report {
  char modes[64];       /* the modes run, comma-separated: "cpu" */
  const char *cpu_path; /* bml_cpu_path() */
  const char *flush;    /* how caches were flushed: "clflush" or "stream" */
  int threads_available;
  long runs, warmup;
  time_t started;
  struct bench_row *rows;
  size_t nrows, cap;
};

/* A way of running the products (--cpu; --card and --split later).  run()
 * appends rows to rep and returns 0 or a negative bankml-cl error, having
 * said on stderr what failed. */
struct bench_mode {
  const char *name;
  const char *help;
  int (*run)(const struct bench_config *cfg, struct bench_report *rep);
};

int bench_cpu_run(const struct bench_config *cfg, struct bench_report *rep);

/* Appends a copy of row.  Returns 0 or BML_ENOMEM. */
int bench_report_add(struct bench_report *rep, const struct bench_row *row);
/* Frees rep's rows.  NULL-safe. */
void bench_report_free(struct bench_report *rep);

/* Write rep to f as an aligned table with a header line, or as one JSON
 * object.  Return 0 or BML_ENOMEM / BML_EIO. */
int bench_render_text(const struct bench_report *rep, FILE *f);
int bench_render_json(const struct bench_report *rep, FILE *f);

/* Progress on stderr, only with --verbose. */
void bench_progress(const struct bench_config *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Evicting data from the CPU caches before a cold run (cacheflush.c). */
struct cache_flusher;
/* Returns 0 and *out, or BML_ENOMEM.  Free with cache_flusher_close(). */
int cache_flusher_open(struct cache_flusher **out);
/* Evicts the n regions (pointers and byte lengths) from every cache level,
 * and waits until that is done.  Cannot fail. */
void cache_flusher_evict(struct cache_flusher *f, const void *const *ptrs, const size_t *lens,
                         size_t n);
/* "clflush" or "stream": how evict() works on this machine.  Cannot fail. */
const char *cache_flusher_method(void);
/* NULL-safe. */
void cache_flusher_close(struct cache_flusher *f);

#endif /* BML_CLI_BENCH_H */
