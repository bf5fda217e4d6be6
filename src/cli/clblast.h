/* clblast.h -- bench --clblast's own types and functions, shared by bench_clblast.c and clblast_shape.c. */
#ifndef BML_CLI_CLBLAST_H
#define BML_CLI_CLBLAST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bankml-cl.h"
#include "bench.h"
#include "devices/clload.h"

/* One product on the device: y = A x, A row-major rows x n. */
struct gemv {
  size_t rows, n;
  cl_command_queue queue;
  cl_mem a, x, y;
};

/* One precision CLBlast computes in. */
struct precision {
  const char *mode; /* the rows' mode */
  const char *gemv_name;
  size_t size; /* bytes per element */
  bool needs_fp16;
  /* Writes the 128 weights of b; its scale is a half, so both are exact. */
  void (*weights)(const bml_block_q1_0 *b, void *out);
  /* Stores x as element i of out; returns the value stored. */
  double (*activation)(float x, void *out, size_t i);
  double (*element)(const void *y, size_t i);
  /* The largest error a correct result of row r may have, given the sum of
   * |a_j x_j| and of (a_j x_j)^2 over the row. */
  double (*bound)(size_t n, double abs_sum, double sq_sum);
  int (*gemv)(const struct gemv *g, cl_event *ev);
  const void *sentinel; /* written over y before each run: finite, so 0*y is 0 */
  /* The exact probe (below): the activation's scale and largest |quant|,
   * and the blocks of a row that are not zero. */
  uint16_t probe_scale;
  int probe_qmax;
  size_t probe_blocks;
};

/* The device and what lives on it for the whole mode. */
struct clb {
  const struct bench_config *cfg;
  const bml_device *dev;
  cl_context ctx;
  cl_command_queue queue;
  bool fp16;
  double *ms; /* cfg->runs timings */
};

/* One shape's Q1_0 operands, from the generator every mode shares. */
struct operands {
  size_t rows, n;
  bml_block_q1_0 *w;
  bml_block_q8_0 *a;
};

/* What the check compares with: each row's product in double from the same
 * dequantized values, and how far a correct result may be from it. */
struct reference {
  double *want, *bound;
};

/* ---- clblast_shape.c ---- */
/* A line on stderr after the mode's prefix. */
void clblast_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

float clblast_half_to_float(uint16_t h);
uint16_t clblast_float_to_half(float x);
void clblast_operands_free(struct operands *o);
int clblast_operands_init(struct operands *o, const struct bench_shape *shape);
bool clblast_fits(const struct clb *s, const struct bench_shape *o, const struct precision *p);
void clblast_reference_free(struct reference *r);
int clblast_reference_init(struct reference *ref, const struct operands *o, const struct precision *p, void *xdev);
double clblast_error_to_bound(const struct precision *p, const struct reference *ref, const void *y, size_t rows);

#endif
