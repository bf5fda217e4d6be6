/* bench_clblast.c -- `bankml-cl bench --clblast`: the same products, dequantized, in CLBlast. */
#define _POSIX_C_SOURCE 200809L

#include <config.h>

#include "devices/clload.h" /* first: the OpenCL headers at bankml-cl's API level, before CLBlast's includes them */

#include <clblast_c.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"
#include "bench.h"
#include "cli.h"
#include "progress.h"
#include "clblast.h"

const char bench_clblast_help[] = "CLBlast's SGEMV and HGEMV on a device: the baseline (below)";

#define PREFIX "bankml-cl bench --clblast: "
#define UPLOAD_CHUNK ((size_t)8 << 20) /* bytes of matrix dequantized per write */
#define HALF_ONE 0x3c00u

/* ---- errors ---------------------------------------------------------------- */

/* CLBlast's own status codes; the rest are OpenCL's, which bml_err_name knows. */
static const struct {
  int code;
  const char *name;
} clblast_status[] = {
    {CLBlastNotImplemented, "CLBlastNotImplemented"},
    {CLBlastInvalidMatrixA, "CLBlastInvalidMatrixA"},
    {CLBlastInvalidVectorX, "CLBlastInvalidVectorX"},
    {CLBlastInvalidVectorY, "CLBlastInvalidVectorY"},
    {CLBlastInvalidDimension, "CLBlastInvalidDimension"},
    {CLBlastInvalidLeadDimA, "CLBlastInvalidLeadDimA"},
    {CLBlastInvalidIncrementX, "CLBlastInvalidIncrementX"},
    {CLBlastInvalidIncrementY, "CLBlastInvalidIncrementY"},
    {CLBlastInsufficientMemoryA, "CLBlastInsufficientMemoryA"},
    {CLBlastInsufficientMemoryX, "CLBlastInsufficientMemoryX"},
    {CLBlastInsufficientMemoryY, "CLBlastInsufficientMemoryY"},
    {CLBlastInvalidLocalMemUsage, "CLBlastInvalidLocalMemUsage"},
    {CLBlastNoHalfPrecision, "CLBlastNoHalfPrecision"},
    {CLBlastDatabaseError, "CLBlastDatabaseError"},
    {CLBlastUnknownError, "CLBlastUnknownError"},
    {CLBlastUnexpectedError, "CLBlastUnexpectedError"},
};

static const char *status_name(int code) {
  for (size_t i = 0; i < sizeof clblast_status / sizeof clblast_status[0]; i++)
    if (clblast_status[i].code == code) return clblast_status[i].name;
  return bml_err_name(code); /* OpenCL's codes, which CLBlast passes through */
}

/* Says that call failed with code, as "CALL: NAME (code) at FILE:LINE";
 * returns code. */
static int failed(const char *call, int code, const char *file, int line) {
  const char *base = strrchr(file, '/');
  fprintf(stderr, PREFIX "%s: %s (%d) at %s:%d\n", call, status_name(code), code,
          base ? base + 1 : file, line);
  return code;
}

/* Every OpenCL and CLBlast status goes through these: a nonzero one is
 * reported by name, stored in rc, and the function goes to its fail label. */
#define CHECK(rc, call, status)                                                                    \
  do {                                                                                             \
    int check_status_ = (int)(status);                                                             \
    if (check_status_ != 0) {                                                                      \
      (rc) = failed((call), check_status_, __FILE__, __LINE__);                                    \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)
#define TRY(rc, fn, args) CHECK(rc, #fn, fn args)


/* ---- CLBlast, opened at run time ------------------------------------------ */

/* The command links no CLBlast: libclblast needs the OpenCL loader, and
 * the command must start without it.  It is opened here, by --clblast
 * alone, and its three functions are called through this table. */
static struct {
  __typeof__(CLBlastSgemv) *sgemv;
  __typeof__(CLBlastHgemv) *hgemv;
  __typeof__(CLBlastClearCache) *clear_cache;
  char error[512]; /* why it could not be opened, or "" */
} clblast;
static pthread_once_t clblast_once = PTHREAD_ONCE_INIT;

static void clblast_open(void) {
  dlerror();
  void *lib = dlopen(BML_CLBLAST_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    clblast.sgemv = (__typeof__(clblast.sgemv))dlsym(lib, "CLBlastSgemv");
    clblast.hgemv = (__typeof__(clblast.hgemv))dlsym(lib, "CLBlastHgemv");
    clblast.clear_cache = (__typeof__(clblast.clear_cache))dlsym(lib, "CLBlastClearCache");
  }
  const char *e = dlerror();
  if (!lib || !clblast.sgemv || !clblast.hgemv || !clblast.clear_cache)
    snprintf(clblast.error, sizeof clblast.error, "%s", e ? e : "a function is missing");
}

/* 0, or BML_ENOTSUP after saying why CLBlast cannot be used. */
static int clblast_load(void) {
  pthread_once(&clblast_once, clblast_open);
  if (!clblast.error[0]) return 0;
  clblast_note("cannot open CLBlast (%s): %s; install it (apt-get install libclblast1), with the OpenCL "
       "loader (ocl-icd-libopencl1) it needs", BML_CLBLAST_SONAME, clblast.error);
  return BML_ENOTSUP;
}

#define CLBlastSgemv (clblast.sgemv)
#define CLBlastHgemv (clblast.hgemv)
#define CLBlastClearCache (clblast.clear_cache)

/* ---- the two precisions ---------------------------------------------------- */

static void weights_f32(const bml_block_q1_0 *b, void *out) {
  float d = clblast_half_to_float(b->d), *o = out;
  for (int j = 0; j < BML_Q1_0_BLOCK; j++) o[j] = b->qs[j / 8] >> (j % 8) & 1 ? d : -d;
}

static void weights_f16(const bml_block_q1_0 *b, void *out) {
  uint16_t *o = out;
  for (int j = 0; j < BML_Q1_0_BLOCK; j++)
    o[j] = b->qs[j / 8] >> (j % 8) & 1 ? b->d : (uint16_t)(b->d ^ 0x8000);
}

static double activation_f32(float x, void *out, size_t i) {
  ((float *)out)[i] = x;
  return x;
}

static double activation_f16(float x, void *out, size_t i) {
  uint16_t h = clblast_float_to_half(x);
  ((uint16_t *)out)[i] = h;
  return clblast_half_to_float(h);
}

static double element_f32(const void *y, size_t i) { return ((const float *)y)[i]; }
static double element_f16(const void *y, size_t i) {
  return clblast_half_to_float(((const uint16_t *)y)[i]);
}

/* F32: the worst case of an n-term float dot product summed in any order,
 * gamma_n = n u / (1 - n u) times the sum of |a_j x_j| (Higham, Accuracy
 * and Stability, 3.1).  A correct GEMV cannot exceed it. */
static double bound_f32(size_t n, double abs_sum, double sq_sum) {
  (void)sq_sum;
  double nu = (double)n * 0x1p-24;
  return nu < 1 ? nu / (1 - nu) * abs_sum : INFINITY;
}

/* F16: the worst case, n 2^-11 sum |t|, exceeds the result itself from
 * n = 2048 on, so the bound is statistical: 2^-6 sqrt(n) |t|_2.  The
 * rounding error of a sequential half sum of these random terms is near
 * 2^-11 sqrt(n / 10) |t|_2 (rms), with a heavy tail: in a simulation of
 * 20000 rows per shape, n from 128 to 12288, the worst row used 14 % of the
 * bound; any other order of summation erred less. */
static double bound_f16(size_t n, double abs_sum, double sq_sum) {
  (void)abs_sum;
  return 0x1p-6 * sqrt((double)n) * sqrt(sq_sum);
}

static int sgemv(const struct gemv *g, cl_event *ev) {
  cl_command_queue q = g->queue;
  return CLBlastSgemv(CLBlastLayoutRowMajor, CLBlastTransposeNo, g->rows, g->n, 1.0f, g->a, 0, g->n,
                      g->x, 0, 1, 0.0f, g->y, 0, 1, &q, ev);
}

static int hgemv(const struct gemv *g, cl_event *ev) {
  cl_command_queue q = g->queue;
  return CLBlastHgemv(CLBlastLayoutRowMajor, CLBlastTransposeNo, g->rows, g->n, HALF_ONE, g->a, 0,
                      g->n, g->x, 0, 1, 0, g->y, 0, 1, &q, ev);
}

static const float sentinel_f32 = 1e30f;
static const uint16_t sentinel_f16 = 0x7bff; /* 65504 */

/* The probes: F32 with weights +-1 and activations q 2^-7 (|q| <= 128) over
 * at most 1023 blocks: every partial sum, in any order, is a multiple of
 * 2^-7 below 2^17, so float holds it exactly.  F16 with activations -1, 0
 * or 1 over 16 blocks: every partial sum is an integer of at most 2048,
 * which half holds exactly. */
static const struct precision precisions[] = {
    {"clblast-f32", "CLBlastSgemv", sizeof(float), false, weights_f32, activation_f32, element_f32,
     bound_f32, sgemv, &sentinel_f32, 0x2000 /* 2^-7 */, 128, 1023},
    {"clblast-f16", "CLBlastHgemv", sizeof(uint16_t), true, weights_f16, activation_f16,
     element_f16, bound_f16, hgemv, &sentinel_f16, HALF_ONE, 1, 16},
};

/* ---- the device ------------------------------------------------------------ */

/* Whether the space-separated list holds the word. */
static bool has_word(const char *list, const char *word) {
  size_t len = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += len)
    if ((p == list || p[-1] == ' ') && (p[len] == '\0' || p[len] == ' ')) return true;
  return false;
}

static int query_fp16(struct clb *s) {
  cl_device_id id = s->dev->cl_device;
  size_t size = 0;
  char *ext = NULL;
  int rc = 0;
  TRY(rc, clGetDeviceInfo, (id, CL_DEVICE_EXTENSIONS, 0, NULL, &size));
  if (!(ext = malloc(size + 1))) return BML_ENOMEM;
  TRY(rc, clGetDeviceInfo, (id, CL_DEVICE_EXTENSIONS, size, ext, NULL));
  ext[size] = '\0';
  s->fp16 = has_word(ext, "cl_khr_fp16");
fail:
  free(ext);
  return rc;
}

static void clb_close(struct clb *s) {
  if (s->ctx) {
    /* CLBlast keeps its compiled programs, and with them the context. */
    CLBlastStatusCode st = CLBlastClearCache();
    if (st != CLBlastSuccess) failed("CLBlastClearCache", st, __FILE__, __LINE__);
  }
  if (s->queue) clReleaseCommandQueue(s->queue);
  if (s->ctx) clReleaseContext(s->ctx);
  free(s->ms);
  s->queue = NULL;
  s->ctx = NULL;
  s->ms = NULL;
}

static int clb_open(struct clb *s) {
  cl_device_id id = s->dev->cl_device;
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)s->dev->cl_platform,
                                   0};
  cl_int err = CL_SUCCESS;
  int rc = 0;
  s->ctx = clCreateContext(props, 1, &id, NULL, NULL, &err);
  CHECK(rc, "clCreateContext", err);
  s->queue = clCreateCommandQueue(s->ctx, id, 0, &err);
  CHECK(rc, "clCreateCommandQueue", err);
  if ((rc = query_fp16(s)) != 0) goto fail;
  if (!(s->ms = malloc((size_t)s->cfg->runs * sizeof *s->ms))) {
    rc = BML_ENOMEM;
    goto fail;
  }
  return 0;
fail:
  clb_close(s);
  return rc;
}

/* The first selected device of the listing (BANKML_GPU's choice, else every
 * usable one), or NULL. */
static const bml_device *first_selected(const bml_devices *list) {
  for (size_t i = 0; i < bml_devices_count(list); i++) {
    const bml_device *d = bml_devices_get(list, i);
    if (d->selected) return d;
  }
  return NULL;
}

/* ---- the device buffers and the timing ------------------------------------- */

static void gemv_release(struct gemv *g) {
  if (g->y) clReleaseMemObject(g->y);
  if (g->x) clReleaseMemObject(g->x);
  if (g->a) clReleaseMemObject(g->a);
  g->a = g->x = g->y = NULL;
}

static int gemv_create(struct gemv *g, const struct clb *s, size_t elem) {
  cl_int err = CL_SUCCESS;
  int rc = 0;
  g->queue = s->queue;
  g->a = clCreateBuffer(s->ctx, CL_MEM_READ_ONLY, g->rows * g->n * elem, NULL, &err);
  CHECK(rc, "clCreateBuffer", err);
  g->x = clCreateBuffer(s->ctx, CL_MEM_READ_ONLY, g->n * elem, NULL, &err);
  CHECK(rc, "clCreateBuffer", err);
  g->y = clCreateBuffer(s->ctx, CL_MEM_READ_WRITE, g->rows * elem, NULL, &err);
  CHECK(rc, "clCreateBuffer", err);
  return 0;
fail:
  gemv_release(g);
  return rc;
}

/* Dequantizes the weights in chunks of rows and writes them into g->a. */
static int upload_matrix(const struct gemv *g, const struct operands *o,
                         const struct precision *p) {
  size_t row_bytes = o->n * p->size, nb = o->n / BML_Q1_0_BLOCK;
  size_t chunk = UPLOAD_CHUNK / row_bytes ? UPLOAD_CHUNK / row_bytes : 1;
  unsigned char *buf = malloc((chunk < o->rows ? chunk : o->rows) * row_bytes);
  int rc = buf ? 0 : BML_ENOMEM;
  for (size_t r0 = 0; rc == 0 && r0 < o->rows; r0 += chunk) {
    size_t count = o->rows - r0 < chunk ? o->rows - r0 : chunk;
    for (size_t i = 0; i < count * nb; i++)
      p->weights(&o->w[r0 * nb + i], buf + i * BML_Q1_0_BLOCK * p->size);
    TRY(rc, clEnqueueWriteBuffer,
        (g->queue, g->a, CL_TRUE, r0 * row_bytes, count * row_bytes, buf, 0, NULL, NULL));
  }
fail:
  free(buf);
  return rc;
}

/* One product, timed from the enqueue to the end of clFinish; y is first
 * overwritten so that a product that writes nothing cannot pass. */
static int run_once(const struct gemv *g, const struct precision *p, double *ms) {
  cl_event ev = NULL;
  int rc = 0;
  TRY(rc, clEnqueueFillBuffer,
      (g->queue, g->y, p->sentinel, p->size, 0, g->rows * p->size, 0, NULL, NULL));
  TRY(rc, clFinish, (g->queue));
  double t0 = bench_now_ms();
  CHECK(rc, p->gemv_name, p->gemv(g, &ev));
  TRY(rc, clFinish, (g->queue));
  *ms = bench_now_ms() - t0;
fail:
  if (ev) clReleaseEvent(ev);
  return rc;
}

/* A timed run, then its result read back and checked; worst is raised to
 * its error_to_bound. */
static int checked_run(const struct gemv *g, const struct precision *p, const struct reference *ref,
                       void *y, double *ms, double *worst) {
  int rc = run_once(g, p, ms);
  if (rc != 0) return rc;
  TRY(rc, clEnqueueReadBuffer, (g->queue, g->y, CL_TRUE, 0, g->rows * p->size, y, 0, NULL, NULL));
  double e = clblast_error_to_bound(p, ref, y, g->rows);
  if (e > *worst) *worst = e;
fail:
  return rc;
}

/* The warm-up (at least one run: CLBlast builds its kernels on the first
 * call, which is never timed), then cfg->runs checked runs, into row. */
static int measure(const struct clb *s, const struct gemv *g, const struct precision *p,
                   const struct reference *ref, struct bench_row *row) {
  void *y = malloc(g->rows * p->size);
  int rc = y ? 0 : BML_ENOMEM;
  double ignored, worst = 0;
  long warmup = s->cfg->warmup > 0 ? s->cfg->warmup : 1;
  for (long i = 0; rc == 0 && i < warmup; i++) rc = run_once(g, p, &ignored);
  for (long i = 0; rc == 0 && i < s->cfg->runs; i++)
    rc = checked_run(g, p, ref, y, &s->ms[i], &worst);
  free(y);
  if (rc != 0) return rc;
  row->agrees = worst <= 1;
  row->error_to_bound = worst;
  bench_summarize(s->ms, s->cfg->runs, row);
  return 0;
}

/* The matrix and the activation (x, in p's format) into g's buffers. */
static int upload(const struct gemv *g, const struct operands *o, const struct precision *p,
                  const void *x) {
  int rc = upload_matrix(g, o, p);
  if (rc != 0) return rc;
  TRY(rc, clEnqueueWriteBuffer, (g->queue, g->x, CL_TRUE, 0, o->n * p->size, x, 0, NULL, NULL));
fail:
  return rc;
}

static int add_row(const struct bench_config *cfg, const struct bench_row *row,
                   struct bench_report *rep) {
  bench_progress(cfg, "%zux%zu, %s: median %.4f ms, min %.4f ms, %.2f GB/s, %s (%.3g of bound)",
                 row->rows, row->n, row->mode, row->median_ms, row->min_ms, row->gbps,
                 row->agrees ? "agrees" : "DISAGREES", row->error_to_bound);
  return bench_report_add(rep, row);
}

/* Whether block b of row r is in the probe: p->probe_blocks blocks from
 * block r * p->probe_blocks (mod nb), wrapping, so that every column is
 * probed by some rows however wide the matrix. */
static bool probed(const struct precision *p, size_t nb, size_t rows, size_t round, size_t r, size_t b) {
  if (nb <= p->probe_blocks) return true;
  size_t start = (size_t)((((uint64_t)round * rows + r) * p->probe_blocks) % nb);
  return (b + nb - start) % nb < p->probe_blocks;
}

/* The probe products a shape needs so that every block is in some row's
 * window: one, unless the rows are too few for the width. */
static size_t probe_rounds(const struct precision *p, size_t rows, size_t nb) {
  const uint64_t per_round = (uint64_t)rows * p->probe_blocks;
  return nb <= p->probe_blocks ? 1 : (size_t)((nb + per_round - 1) / per_round);
}

/* The exact probe: one product of the shape on data that any order of
 * summation (with or without fused multiply-adds) computes exactly, so a
 * correct GEMV gives the exact result on every row, bit for bit.  The
 * bound above is loose at large n (a GEMV that dropped a column or
 * flipped one weight's sign could stay within it); this is not.  The
 * weights keep the shape's signs with scales 1 on p->probe_blocks blocks
 * of a row (probed(): a window that moves from row to row, and from
 * round to round where the rows are too few to cover the width) and 0 on
 * the others; the activation keeps its
 * quants' signs and sizes, clamped to p->probe_qmax, with scale
 * p->probe_scale.  Sets row->probe_exact; the matrix in g is replaced. */
static int exact_probe_round(const struct gemv *g, const struct operands *o, const struct precision *p,
                             size_t round, struct bench_row *row) {
  const size_t nb = o->n / BML_Q1_0_BLOCK, na = o->n / BML_Q8_0_BLOCK;
  struct operands probe = {o->rows, o->n, malloc(o->rows * nb * sizeof *o->w), malloc(na * sizeof *o->a)};
  void *x = malloc(o->n * p->size), *y = malloc(o->rows * p->size);
  double *xv = malloc(o->n * sizeof *xv);
  int rc = probe.w && probe.a && x && y && xv ? 0 : BML_ENOMEM;
  for (size_t i = 0; rc == 0 && i < o->rows * nb; i++) {
    probe.w[i] = o->w[i];
    probe.w[i].d = probed(p, nb, o->rows, round, i / nb, i % nb) ? HALF_ONE : 0;
  }
  for (size_t i = 0; rc == 0 && i < na; i++) {
    probe.a[i].d = p->probe_scale;
    for (int j = 0; j < BML_Q8_0_BLOCK; j++) {
      int q = o->a[i].qs[j];
      probe.a[i].qs[j] = (int8_t)(q > p->probe_qmax ? p->probe_qmax : q < -p->probe_qmax ? -p->probe_qmax : q);
    }
  }
  for (size_t j = 0; rc == 0 && j < o->n; j++) {
    const bml_block_q8_0 *blk = &probe.a[j / BML_Q8_0_BLOCK];
    xv[j] = p->activation(clblast_half_to_float(blk->d) * blk->qs[j % BML_Q8_0_BLOCK], x, j);
  }
  if (rc == 0) rc = upload(g, &probe, p, x);
  double ignored;
  if (rc == 0) rc = run_once(g, p, &ignored);
  if (rc == 0) TRY(rc, clEnqueueReadBuffer, (g->queue, g->y, CL_TRUE, 0, g->rows * p->size, y, 0, NULL, NULL));
  row->probe_exact = rc == 0;
  for (size_t r = 0; rc == 0 && r < o->rows && row->probe_exact; r++) {
    double want = 0; /* exact in double too */
    for (size_t b = 0; b < nb; b++) {
      const bml_block_q1_0 *blk = &probe.w[r * nb + b];
      if (!probed(p, nb, o->rows, round, r, b)) continue;
      for (int j = 0; j < BML_Q1_0_BLOCK; j++) {
        double t = xv[b * BML_Q1_0_BLOCK + (size_t)j];
        want += blk->qs[j / 8] >> (j % 8) & 1 ? t : -t;
      }
    }
    double got = p->element(y, r);
    if (!(got == want)) {
      row->probe_exact = false;
      clblast_note("%zux%zu, %s: the exact probe's row %zu is %.9g, exactly %.9g: the GEMV is wrong", o->rows, o->n,
           p->mode, r, got, want);
    }
  }
fail:
  clblast_operands_free(&probe);
  free(x), free(y), free(xv);
  return rc;
}

static int exact_probe(const struct gemv *g, const struct operands *o, const struct precision *p,
                       struct bench_row *row) {
  const size_t rounds = probe_rounds(p, o->rows, o->n / BML_Q1_0_BLOCK);
  int rc = 0;
  row->probe_exact = true;
  for (size_t k = 0; rc == 0 && k < rounds && row->probe_exact; k++) rc = exact_probe_round(g, o, p, k, row);
  return rc;
}

/* One shape in one precision: reference, buffers, upload, timing, a row. */
static int bench_precision(const struct clb *s, const struct operands *o,
                           const struct precision *p, struct bench_report *rep) {
  struct gemv g = {.rows = o->rows, .n = o->n};
  struct reference ref = {NULL, NULL};
  struct bench_row row = {
      .mode = p->mode,
      .rows = o->rows,
      .n = o->n,
      .threads = 0, /* the device computes; no CPU threads */
      .cache = "warm",
      .weight_bytes = (uint64_t)o->rows * (o->n / BML_Q1_0_BLOCK) * sizeof(bml_block_q1_0),
      .bytes_read = (uint64_t)o->rows * o->n * p->size,
      .check = BENCH_CHECK_TOLERANCE,
  };
  void *x = malloc(o->n * p->size);
  int rc = x ? clblast_reference_init(&ref, o, p, x) : BML_ENOMEM;
  if (rc == 0) rc = gemv_create(&g, s, p->size);
  if (rc == 0) rc = upload(&g, o, p, x);
  if (rc == 0) rc = measure(s, &g, p, &ref, &row);
  if (rc == 0) rc = exact_probe(&g, o, p, &row);
  row.agrees = row.agrees && row.probe_exact;
  if (rc == 0) rc = add_row(s->cfg, &row, rep);
  if (rc == BML_ENOMEM) clblast_note("%zux%zu, %s: %s", o->rows, o->n, p->mode, bml_strerror(rc));
  gemv_release(&g);
  clblast_reference_free(&ref);
  free(x);
  return rc;
}

/* Every precision the device has room and support for, on one shape. */
static int bench_shape(const struct clb *s, const struct bench_shape *shape,
                       struct bench_report *rep) {
  enum { NP = sizeof precisions / sizeof precisions[0] };
  bool run[NP], any = false;
  for (size_t i = 0; i < NP; i++) {
    run[i] = (!precisions[i].needs_fp16 || s->fp16) && clblast_fits(s, shape, &precisions[i]);
    any |= run[i];
  }
  struct operands o = {0, 0, NULL, NULL};
  int rc = any ? clblast_operands_init(&o, shape) : 0;
  for (size_t i = 0; any && rc == 0 && i < NP; i++) {
    const struct precision *p = &precisions[i];
    if (!run[i]) continue;
    progress_step("%s %zux%zu", p->mode, o.rows, o.n);
    bench_progress(s->cfg, "%zux%zu, %s: dequantizing and uploading %.1f MB", o.rows, o.n, p->mode,
                   (double)o.rows * (double)o.n * (double)p->size / 1e6);
    rc = bench_precision(s, &o, p, rep);
  }
  if (any) clblast_operands_free(&o);
  return rc;
}

/* ---- the mode -------------------------------------------------------------- */

static int run_on(const bml_device *dev, const struct bench_config *cfg, struct bench_report *rep) {
  struct clb s = {.cfg = cfg, .dev = dev};
  int rc = clb_open(&s);
  if (rc != 0) {
    clblast_note("cannot set up %s: %s", dev->name, bml_strerror(rc));
    return rc;
  }
  bench_set_device(rep, dev->name);
  if (!s.fp16) clblast_note("%s has no cl_khr_fp16: F16 (CLBlastHgemv) not measured", CLI_PRINTABLE(dev->name));
  const size_t rows_before = rep->nrows;
  for (size_t i = 0; rc == 0 && i < cfg->nshapes; i++) rc = bench_shape(&s, &cfg->shapes[i], rep);
  clb_close(&s);
  if (rc == 0 && rep->nrows == rows_before) { /* every shape skipped: exit 0 would say all was measured */
    clblast_note("nothing measured: no shape fits %s for CLBlast", CLI_PRINTABLE(dev->name));
    rc = BML_ENOTSUP;
  }
  return rc;
}

int bench_clblast_run(const struct bench_config *cfg, struct bench_report *rep) {
  bml_devices *list = NULL;
  int rc = clblast_load();
  if (rc != 0) return rc;
  rc = bml_devices_discover(NULL, &list);
  if (rc != 0) {
    if (rc != BML_EENV) clblast_note("cannot list the OpenCL devices: %s", bml_strerror(rc));
    return rc; /* BML_EENV: the library has named the variable */
  }
  const bml_device *dev = first_selected(list);
  if (dev) {
    rc = run_on(dev, cfg, rep);
  } else {
    clblast_note("no usable OpenCL device is selected (see `bankml-cl devices --brief`; software devices "
         "such as PoCL need BANKML_GPU_SOFTWARE=1)");
    rc = BML_ENODEV;
  }
  bml_devices_free(list);
  return rc;
}
