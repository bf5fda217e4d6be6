/* bench.h -- `bankml-cl bench`: its settings, its results, and the modes that fill them. */
#ifndef BML_CLI_BENCH_H
#define BML_CLI_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "bankml-cl.h"

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
  const struct bench_model *model; /* --model: a model's token instead of the shapes */
  long *gaps; /* --gap: idle milliseconds before each timed product of the CPU, card and split modes */
  size_t ngaps; /* 0: the CPU mode times warm and flushed, the card modes single and pipelined, instead */
};

/* A model's shapes (--model): per layer Q, K, V, O, gate, up, down, then the
 * output head, in decode order. */
struct bench_model {
  const char *name;
  size_t hidden, intermediate, layers, q_heads, kv_heads, head_dim, vocab;
};
/* The model named name, or NULL. */
const struct bench_model *bench_model_find(const char *name);
/* "bonsai-8b, bonsai-1.7b". */
const char *bench_model_names(void);

#define BENCH_MAX_THREADS BML_POOL_MAX_THREADS /* what bml_pool_open accepts */

/* How a row's results were checked. */
enum bench_check {
  BENCH_CHECK_EXACT,    /* bit for bit against bml_q1_0_mat_vec: bankml-cl's own modes */
  BENCH_CHECK_TOLERANCE /* within a bound of a CPU reference: the baselines (CLBlast) */
};

/* Where a model's round-trip group spends its time: the activations
 * repacked and copied in, the launches (and reads) enqueued, the CPU's
 * rows, the wait for the card, the results copied out, and the rest of the
 * host's time (planning, bookkeeping). */
#define BENCH_PHASES 6
/* "upload", "launch", "cpu", "wait", "download", "host". */
extern const char *const bench_phase_names[BENCH_PHASES];

/* One line of the table: one measurement of one shape. */
struct bench_row {
  const char *mode; /* "cpu", "clblast-f32": what ran */
  size_t rows, n;
  int threads;       /* CPU threads; 0 for a device's library (CLBlast) */
  const char *cache; /* "warm" or "flushed" */
  const char *label; /* shown instead of the shape (a model's name); NULL: the shape */
  size_t products;   /* products per run (a model's token); 0: one */
  size_t matrices;   /* distinct matrices a run's products read (the card's and the split's shapes); 0: not said */
  uint64_t card_bytes; /* bytes the card reads per run (20 per 128 weights); 0: not a card row */
  double median_ms, min_ms;
  double p90_ms, max_ms; /* the 90th percentile (nearest rank) and the slowest run */
  bool gapped;           /* each timed run came after an idle gap of gap_ms (--gap) */
  long gap_ms;
  double gbps;           /* bytes read (below) / median time, in 1e9 bytes per second */
  uint64_t weight_bytes; /* the Q1_0 weights of the shape, whatever the mode reads */
  uint64_t bytes_read;   /* the matrix bytes one product reads; 0: weight_bytes */
  enum bench_check check;
  bool exact;            /* BENCH_CHECK_EXACT: every timed result equal, bit for bit, to
                            bml_q1_0_mat_vec's; false for the baselines */
  bool agrees;           /* BENCH_CHECK_TOLERANCE: every timed result within its bound, and
                            the exact probe bit-exact */
  double error_to_bound; /* BENCH_CHECK_TOLERANCE: the largest error / its bound */
  bool probe_exact;      /* BENCH_CHECK_TOLERANCE: the product on data that every order of
                            summation computes exactly gave the exact result on every row */
  /* A model's token through the worker (--model with --card or --split): */
  size_t groups;         /* round trips: the token's dependent groups (a batch and a wait each); 0 otherwise */
  bool pipelined;        /* the token as one batch: the bound with no dependencies between groups */
  double group_cost_us;  /* round trips: (this token - the pipelined token) / groups, in µs; NaN: not known */
  double group_us[BENCH_PHASES]; /* round trips: where a group's time went, mean µs a group (bench_phase_names) */
  const char *token;     /* round trips: "resident" (the token stayed on the card) or "batches" */
};

/* Everything a run produced, rendered in one place (bench_render.c). */
struct bench_report {
  char modes[64];       /* the modes run, comma-separated: "cpu" */
  char device[256];     /* the OpenCL device a device mode ran on; "" when none */
  const char *cpu_path; /* bml_cpu_path() */
  const char *flush;    /* how caches were flushed: "clflush" or "stream" */
  int threads_available;
  double card_read_gbps; /* the card's read bandwidth, measured by the bench; 0: not measured */
  uint64_t card_memory;  /* the card's global memory (the worker's status); 0: no card mode ran */
  double open_seconds;   /* the first worker's bml_worker_open (the status's open.seconds); 0: none */
  char open_verdict[16]; /* its verdict: "verified" (the oracle ran) or "remembered" (the cache's) */
  long runs, warmup;
  long pool_wait_ms; /* BANKML_POOL_WAIT_MS where set (the pools' helpers' wait); -1: unset, the default */
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
/* --card and --split (bench_card.c); with --model, bench_model.c's token. */
int bench_card_run(const struct bench_config *cfg, struct bench_report *rep);
int bench_split_run(const struct bench_config *cfg, struct bench_report *rep);
int bench_model_run(const struct bench_config *cfg, struct bench_report *rep, const char *mode);
/* The bytes the card reads for a matrix: 20 per block of 128 weights (16 of
 * signs, the scale as a float), each row padded to whole tiles of eight
 * blocks, as the card stores it (cl/q1_0.cl) and its kernels read it. */
static inline uint64_t bench_card_bytes(size_t rows, size_t n) {
  return (uint64_t)rows * ((n / BML_Q1_0_BLOCK + 7) / 8 * 8) * 20;
}

/* The largest of --threads' counts. */
static inline int bench_threads_largest(const struct bench_config *cfg) {
  int t = 1;
  for (size_t i = 0; i < cfg->nthreads; i++) t = cfg->threads[i] > t ? cfg->threads[i] : t;
  return t;
}
/* Opens a pool of the largest thread count and a worker on it (card_alone:
 * share 1 and limit 1).  Returns 0 or an error, said on stderr. */
int bench_worker_open(const struct bench_config *cfg, bool card_alone, bml_pool **pool, bml_worker **w,
                      struct bench_report *rep);
/* Names the worker's card in rep->device and, for the card's own mode
 * (card_alone), measures its read bandwidth once. */
void bench_note_device(struct bench_report *rep, bml_worker *w, bool card_alone);
/* Names the report's card (the first mode's), cut at a whole UTF-8 character. */
void bench_set_device(struct bench_report *rep, const char *name);
/* The read bandwidth of the first selected card, in GB/s, by a streaming
 * kernel of the command's own (bench_bandwidth.c); 0 when it cannot run. */
double bench_card_read_gbps(void);
/* --clblast (bench_clblast.c, or bench_clblast_none.c in a build without
 * CLBlast, where run says so and returns BML_ENOTSUP). */
extern const char bench_clblast_help[];
int bench_clblast_run(const struct bench_config *cfg, struct bench_report *rep);

/* Fills w (rows x n/128 blocks) and a (n/32 blocks) with the benchmark's
 * pseudo-random operands for this shape: the same in every mode and on
 * every run.  Returns 0 or what bml_q8_0_quantize returns. */
int bench_random_operands(size_t rows, size_t n, bml_block_q1_0 *w, bml_block_q8_0 *a);
/* The same with a variant number, for matrices of one shape that must
 * differ (a model's layers, a pipeline's activations); w or a may be NULL. */
int bench_random_operands_seeded(size_t rows, size_t n, uint64_t variant, bml_block_q1_0 *w, bml_block_q8_0 *a);
/* CLOCK_MONOTONIC in milliseconds.  Cannot fail. */
double bench_now_ms(void);
/* Sleeps ms milliseconds (--gap), the whole of them through signals; 0: not at all. */
void bench_idle_gap(long ms);
/* Whether got's rows are want's, bit for bit (NaN payloads too: the
 * reference and the product run one kernel order). */
bool bench_exact(const float *got, const float *want, size_t rows);
/* BANKML_TEST_QUICK_BENCH=1, the test suite's own (make check sets it):
 * the card's read bandwidth on 16 MiB instead of up to 1 GiB, and a
 * model's token of two layers (and the head), so the tests of bench spend
 * their seconds on the products they check.  Figures for tests, not for a
 * card's speed. */
bool bench_test_quick(void);
/* Sorts ms[0..n) and sets row's median_ms, min_ms, p90_ms, max_ms and gbps
 * (from bytes_read, else weight_bytes).  Cannot fail. */
void bench_summarize(double *ms, long n, struct bench_row *row);
/* Whether row passed its check (exact, or agrees).  Cannot fail. */
bool bench_row_ok(const struct bench_row *row);

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
