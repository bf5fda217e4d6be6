/* bench_common.c -- what every bench mode shares: the random operands, the clock, the median, the report's rows, the verbose lines. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bankml-cl.h"
#include "bench.h"
#include "progress.h"

/* Marsaglia's xorshift64: the command's own data, the same on every run.
 * Speed does not depend on the values; only their plausibility matters. */
static uint64_t xorshift64(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* A half-precision scale of either sign, 2^-7 <= |d| < 2^-2: the range of
 * a trained layer's block scales, written as binary16 bits directly. */
static uint16_t random_scale(uint64_t *s) {
  uint64_t r = xorshift64(s);
  unsigned exponent = 8 + (unsigned)(r % 5); /* biased: 2^(8-15) .. 2^(12-15) */
  return (uint16_t)(((r >> 16) & 1) << 15 | exponent << 10 | ((r >> 20) & 0x3ff));
}

static void fill_weights(uint64_t *s, bml_block_q1_0 *w, size_t nblocks) {
  for (size_t i = 0; i < nblocks; i++) {
    w[i].d = random_scale(s);
    uint64_t bits[2] = {xorshift64(s), xorshift64(s)};
    memcpy(w[i].qs, bits, sizeof w[i].qs);
  }
}

/* Activations as an engine makes them: random floats in [-1, 1), quantized. */
static int fill_activation(uint64_t *s, bml_block_q8_0 *a, size_t n) {
  float *x = malloc(n * sizeof *x);
  if (!x) return BML_ENOMEM;
  for (size_t i = 0; i < n; i++) x[i] = (float)((double)(xorshift64(s) >> 11) * 0x1p-52 - 1.0);
  int rc = bml_q8_0_quantize(x, n, a);
  free(x);
  return rc;
}

int bench_random_operands(size_t rows, size_t n, bml_block_q1_0 *w, bml_block_q8_0 *a) {
  return bench_random_operands_seeded(rows, n, 0, w, a);
}

int bench_random_operands_seeded(size_t rows, size_t n, uint64_t variant, bml_block_q1_0 *w, bml_block_q8_0 *a) {
  uint64_t seed = 0x9e3779b97f4a7c15u ^ ((uint64_t)rows << 32) ^ (uint64_t)n ^ (variant * 0xd1b54a32d192ed03u);
  if (seed == 0) seed = 1; /* xorshift's one fixed point */
  if (w) fill_weights(&seed, w, rows * (n / BML_Q1_0_BLOCK));
  return a ? fill_activation(&seed, a, n) : 0;
}

double bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

void bench_summarize(double *ms, long n, struct bench_row *row) {
  qsort(ms, (size_t)n, sizeof *ms, compare_double);
  row->min_ms = ms[0];
  row->median_ms = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  row->p90_ms = ms[(9 * n + 9) / 10 - 1]; /* the ceil(0.9 n)-th smallest */
  row->max_ms = ms[n - 1];
  uint64_t bytes = row->bytes_read ? row->bytes_read : row->weight_bytes;
  row->gbps = row->median_ms > 0 ? (double)bytes / (row->median_ms * 1e6) : 0;
}

/* Whether the test suite's variable `name` is "1", read once into *latch
 * (-1 before). */
static bool test_flag(const char *name, int *latch) {
  if (*latch < 0) {
    const char *v = getenv(name);
    *latch = v && strcmp(v, "1") == 0;
  }
  return *latch;
}

bool bench_test_quick(void) {
  static int quick = -1;
  return test_flag("BANKML_TEST_QUICK_BENCH", &quick);
}

/* BANKML_TEST_SPOIL_BENCH=1 is the test suite's own (tests/test_bench.c): it
 * shows that the check below can fail, which no product of a correct
 * build can make it do. */
bool bench_exact(const float *got, const float *want, size_t rows) {
  static int spoil = -1;
  if (rows == 0) return true;
  uint32_t u, v; /* the first row's bits, one of them flipped when spoilt */
  memcpy(&u, &got[0], sizeof u);
  memcpy(&v, &want[0], sizeof v);
  if (test_flag("BANKML_TEST_SPOIL_BENCH", &spoil)) u ^= 1u;
  return u == v && memcmp(got + 1, want + 1, (rows - 1) * sizeof *got) == 0;
}

int bench_report_add(struct bench_report *rep, const struct bench_row *row) {
  if (rep->nrows == rep->cap) {
    size_t cap = rep->cap ? rep->cap * 2 : 32;
    struct bench_row *rows = realloc(rep->rows, cap * sizeof *rows);
    if (!rows) return BML_ENOMEM;
    rep->rows = rows;
    rep->cap = cap;
  }
  rep->rows[rep->nrows++] = *row;
  progress_advance();
  return 0;
}

bool bench_row_ok(const struct bench_row *row) {
  return row->check == BENCH_CHECK_EXACT ? row->exact : row->agrees;
}

void bench_report_free(struct bench_report *rep) {
  if (!rep) return;
  free(rep->rows);
  rep->rows = NULL;
  rep->nrows = rep->cap = 0;
}

void bench_progress(const struct bench_config *cfg, const char *fmt, ...) {
  if (!cfg->verbose) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("bankml-cl bench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void bench_idle_gap(long ms) {
  struct timespec left = {ms / 1000, ms % 1000 * 1000000L};
  while (ms > 0 && nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}
