/* clblast_shape.c -- bench --clblast's operands and exact reference for one shape, and CLBlast's halves. */
#define _POSIX_C_SOURCE 200809L

#include <config.h>

#include "devices/clload.h" /* first: the OpenCL headers at bankml-cl's API level */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"
#include "bench.h"
#include "clblast.h"
#include "cli.h"

#define PREFIX "bankml-cl bench --clblast: "

void clblast_note(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs(PREFIX, stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- half precision -------------------------------------------------------- */

float clblast_half_to_float(uint16_t h) {
  unsigned exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float v = exponent == 0    ? ldexpf((float)mantissa, -24)
            : exponent == 31 ? (mantissa ? NAN : INFINITY)
                             : ldexpf((float)(mantissa | 0x400), (int)exponent - 25);
  return h & 0x8000 ? -v : v;
}

/* x rounded to the nearest binary16, ties to even (finite x only: the
 * activations are at most 127 times a half scale). */
uint16_t clblast_float_to_half(float x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  float a = fabsf(x);
  if (a < 0x1p-14f) return sign | (uint16_t)nearbyintf(a * 0x1p24f); /* subnormal, or 2^-14 */
  int e;
  float m = frexpf(a, &e) * 2048.0f; /* 1024 <= m < 2048: 11 significant bits */
  long q = lrintf(m);
  if (q == 2048) q = 1024, e++;
  if (e + 14 > 30) return sign | 0x7c00; /* beyond 65504: infinity */
  return sign | (uint16_t)((e + 14) << 10 | (q - 1024));
}

/* ---- one shape ------------------------------------------------------------- */


void clblast_operands_free(struct operands *o) {
  free(o->w);
  free(o->a);
  o->w = NULL;
  o->a = NULL;
}

int clblast_operands_init(struct operands *o, const struct bench_shape *shape) {
  o->rows = shape->rows;
  o->n = shape->n;
  o->w = malloc(o->rows * (o->n / BML_Q1_0_BLOCK) * sizeof *o->w);
  o->a = malloc(o->n / BML_Q8_0_BLOCK * sizeof *o->a);
  int rc = o->w && o->a ? bench_random_operands(o->rows, o->n, o->w, o->a) : BML_ENOMEM;
  if (rc != 0) {
    clblast_note("%zux%zu: %s", o->rows, o->n, bml_strerror(rc));
    clblast_operands_free(o);
  }
  return rc;
}

/* Whether the device can hold the shape in this precision; says why not. */
bool clblast_fits(const struct clb *s, const struct bench_shape *o, const struct precision *p) {
  const bml_device *d = s->dev;
  double mb = 1e6;
  if (o->rows > SIZE_MAX / o->n / p->size) {
    clblast_note("%zux%zu: skipped for %s: too large for this machine's address space", o->rows, o->n,
         p->mode);
    return false;
  }
  uint64_t a = (uint64_t)o->rows * o->n * p->size, all = a + (o->rows + o->n) * p->size;
  if (a > d->max_alloc_bytes || all > d->global_mem_bytes) {
    clblast_note("%zux%zu: skipped for %s: the matrix takes %.1f MB; %s allows %.1f MB in one buffer "
         "(CL_DEVICE_MAX_MEM_ALLOC_SIZE), %.1f MB in all",
         o->rows, o->n, p->mode, (double)a / mb, CLI_PRINTABLE(d->name), (double)d->max_alloc_bytes / mb,
         (double)d->global_mem_bytes / mb);
    return false;
  }
  return true;
}


void clblast_reference_free(struct reference *r) {
  free(r->want);
  free(r->bound);
  r->want = r->bound = NULL;
}

/* Row r: sum of +-d x_j over its blocks, with |t| and t^2 sums for the bound;
 * xs[3b..3b+2] are block b's sums of x, |x| and x^2. */
static void reference_row(const struct operands *o, const struct precision *p, const double *x,
                          const double *xs, size_t r, struct reference *ref) {
  size_t nb = o->n / BML_Q1_0_BLOCK;
  double want = 0, abs_sum = 0, sq_sum = 0;
  for (size_t b = 0; b < nb; b++) {
    const bml_block_q1_0 *blk = &o->w[r * nb + b];
    double d = clblast_half_to_float(blk->d), set = 0;
    for (int j = 0; j < BML_Q1_0_BLOCK; j++)
      if (blk->qs[j / 8] >> (j % 8) & 1) set += x[b * BML_Q1_0_BLOCK + (size_t)j];
    want += d * (2 * set - xs[3 * b]);
    abs_sum += fabs(d) * xs[3 * b + 1];
    sq_sum += d * d * xs[3 * b + 2];
  }
  ref->want[r] = want;
  ref->bound[r] = p->bound(o->n, abs_sum, sq_sum);
}

/* The activation in p's format into xdev (n elements), and the reference. */
int clblast_reference_init(struct reference *ref, const struct operands *o,
                          const struct precision *p, void *xdev) {
  size_t nb = o->n / BML_Q1_0_BLOCK;
  double *x = malloc(o->n * sizeof *x), *xs = calloc(3 * nb, sizeof *xs);
  ref->want = malloc(o->rows * sizeof *ref->want);
  ref->bound = malloc(o->rows * sizeof *ref->bound);
  int rc = x && xs && ref->want && ref->bound ? 0 : BML_ENOMEM;
  for (size_t j = 0; rc == 0 && j < o->n; j++) {
    const bml_block_q8_0 *blk = &o->a[j / BML_Q8_0_BLOCK];
    x[j] = p->activation(clblast_half_to_float(blk->d) * blk->qs[j % BML_Q8_0_BLOCK], xdev, j);
    double *s = &xs[3 * (j / BML_Q1_0_BLOCK)];
    s[0] += x[j];
    s[1] += fabs(x[j]);
    s[2] += x[j] * x[j];
  }
  for (size_t r = 0; rc == 0 && r < o->rows; r++) reference_row(o, p, x, xs, r, ref);
  if (rc != 0) clblast_reference_free(ref);
  free(x);
  free(xs);
  return rc;
}

/* The worst |got - want| / bound over y (rows elements); infinity for a
 * result that is not a finite number. */
double clblast_error_to_bound(const struct precision *p, const struct reference *ref, const void *y,
                             size_t rows) {
  double worst = 0;
  for (size_t r = 0; r < rows; r++) {
    double got = p->element(y, r), err = fabs(got - ref->want[r]);
    double ratio = !isfinite(got)      ? INFINITY
                   : ref->bound[r] > 0 ? err / ref->bound[r]
                   : err == 0          ? 0
                                       : INFINITY;
    if (ratio > worst) worst = ratio;
  }
  return worst;
}
