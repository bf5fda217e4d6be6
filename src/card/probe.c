/* probe.c -- the oracle's fma probe: whether the card's native fma, and the emulated one, give the CPU's fmaf bits. */
#include "card/oracle_int.h"

#include "base/log.h"
#include "base/util.h"
#include "cpu/gen.h"
#include "cpu/golden.h"
#include "cpu/half.h"
#include "card/kernels.h"
#include "card/program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the fma probe ---------------------------------------------------------------- */

/* The probe's cases: a*b + c where the fused and the unfused results
 * differ, including subnormal results and results near overflow, and where
 * an fma that rounds twice differs.  in_domain:
 * the emulation's domain too (a a half, products of normal size). */
typedef struct {
  float a, b, c;
  bool in_domain;
} probe_case;

#define PROBE_RANDOM 48

static const probe_case designed[] = {
    /* (1+2^-12)^2 = 1 + 2^-11 + 2^-24: the unfused product rounds the 2^-24 away */
    {0x1.001p0f, 0x1.001p0f, -0x1.002p0f, false},
    /* a subnormal result: the product is normal, c cancels its top */
    {0x1.001p0f, 0x1.001p-120f, -0x1.002p-120f, false},
    /* near overflow: the product is finite and its low bits survive only fused */
    {0x1.001p64f, 0x1.001p63f, -0x1p127f, false},
    /* near overflow: the unfused product overflows to inf, the exact sum is finite */
    {0x1.000002p64f, 0x1.000002p64f, -0x1p127f, false},
    /* halves against the reference's own magnitudes */
    {0x1.ffcp15f, 0x1.000002p10f, -0x1.ffcp25f, true},
    {0x1p-24f, 0x1.fffffep20f, 0x1.8p-4f, true},
    {-0x1.554p-3f, 0x1.123456p3f, 0x1.6c16c2p0f, true},
    /* An fma that rounds twice (exact -> double -> float) is right on all of
     * the above.  These land a hair off a float's rounding midpoint, closer
     * than half a double's ulp: rounded to double first, they become the
     * midpoint, which ties to even, the wrong way.  Fused / twice-rounded
     * results in the comments; the unfused results are the twice-rounded. */
    {0x1.004p0f, 0x1.ff802p-5f, 0x1.8p20f, true},           /* 0x1.800002p+20 / 0x1.8p+20 */
    {-0x1.004p0f, 0x1.ff802p-5f, -0x1.8p20f, true},         /* -0x1.800002p+20 / -0x1.8p+20 */
    {0x1.004p0f, 0x1.ff802p-25f, 0x1.8p0f, true},           /* 0x1.800002p+0 / 0x1.8p+0 */
    {0x1.004p-3f, 0x1.ff802p-2f, 0x1.8p20f, true},          /* 0x1.800002p+20 / 0x1.8p+20 */
    {0x1.ffcp-1f, 0x1.002004p-4f, 0x1.800002p20f, true},    /* 0x1.800002p+20 / 0x1.800004p+20 */
    {-0x1.ffcp-1f, 0x1.002004p-4f, -0x1.800002p20f, true},  /* -0x1.800002p+20 / -0x1.800004p+20 */
};

static float random_float(uint64_t *s, int lo_exp, int hi_exp) {
  uint64_t r = bml__xorshift64(s);
  float m = 1.0f + (float)(r >> 41) * 0x1p-23f;
  int e = lo_exp + (int)((r >> 8) % (uint64_t)(hi_exp - lo_exp + 1));
  return (r & 1 ? -1.0f : 1.0f) * ldexpf(m, e);
}

/* Random in-domain cases where fusing matters: a a half, b a float, c close
 * to -a*b so most of the product cancels. */
static size_t random_cases(probe_case *out, size_t cap) {
  uint64_t s = 0x6f6d61707262656full;
  size_t n = 0;
  for (int tries = 0; n < cap && tries < 100000; tries++) {
    float a = bml__half_to_float(bml__float_to_half(random_float(&s, -10, 10)));
    float b = random_float(&s, -20, 20);
    float p = a * b;
    float c = -p * (1.0f + random_float(&s, -40, -20));
    volatile float unfused = a * b;
    if (fmaf(a, b, c) != unfused + c) out[n++] = (probe_case){a, b, c, true};
  }
  return n;
}

/* Runs the probe kernel of build b over the cases; writes both results. */
static int probe_run(bml__card *c, const bml__build *b, const probe_case *pc, size_t n, float *native,
                     float *emulated) {
  float *abc = malloc(3 * n * sizeof *abc);
  cl_mem buf[5] = {NULL};
  cl_int rc = abc ? CL_SUCCESS : BML_ENOMEM;
  for (size_t i = 0; abc && i < n; i++) abc[i] = pc[i].a, abc[n + i] = pc[i].b, abc[2 * n + i] = pc[i].c;
  for (int i = 0; i < 5 && rc == CL_SUCCESS; i++)
    buf[i] = clCreateBuffer(c->ctx, i < 3 ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_WRITE_ONLY,
                            n * sizeof(float), i < 3 ? abc + (size_t)i * n : NULL, &rc);
  cl_uint count = (cl_uint)n;
  size_t global = n;
  for (cl_uint i = 0; i < 5 && rc == CL_SUCCESS; i++) rc = clSetKernelArg(b->probe, i < 3 ? i : i + 1, sizeof(cl_mem), &buf[i]);
  if (rc == CL_SUCCESS) rc = clSetKernelArg(b->probe, 3, sizeof count, &count);
  if (rc == CL_SUCCESS) rc = clEnqueueNDRangeKernel(c->queue, b->probe, 1, NULL, &global, NULL, 0, NULL, NULL);
  if (rc == CL_SUCCESS) rc = clEnqueueReadBuffer(c->queue, buf[3], CL_TRUE, 0, n * sizeof(float), native, 0, NULL, NULL);
  if (rc == CL_SUCCESS) rc = clEnqueueReadBuffer(c->queue, buf[4], CL_TRUE, 0, n * sizeof(float), emulated, 0, NULL, NULL);
  for (int i = 0; i < 5; i++)
    if (buf[i]) clReleaseMemObject(buf[i]);
  free(abc);
  return rc;
}

/* Compares one column of probe results with the host's correctly rounded
 * fmaf.  Returns whether every case matched.  A native fma that is not
 * exact does not refuse the card (the kernels then use the emulation), so
 * its line is informational: it does not count as a failure. */
static bool probe_line(run *v, const char *fma, const probe_case *pc, size_t n, const float *got,
                       bool domain_only, double ms) {
  bml_verify_line line = {.check = "fma probe", .fma = fma, .regime = "probe", .first_bad = -1, .ms = ms};
  for (size_t i = 0; i < n; i++) {
    if (domain_only && !pc[i].in_domain) continue;
    float want = fmaf(pc[i].a, pc[i].b, pc[i].c);
    line.total++;
    if (bml__same_bits(want, got[i])) {
      line.exact++;
    } else if (line.first_bad < 0) {
      line.first_bad = (long)i;
      line.cpu_bits = bml__float_bits(want);
      line.card_bits = bml__float_bits(got[i]);
    }
  }
  line.ok = line.exact == line.total;
  bool was_failed = v->failed;
  if (!line.ok && !domain_only)
    line.detail = "the native fma is not correctly rounded: the kernels use the exact emulation";
  bml__oracle_emit(v, &line);
  if (!domain_only) v->failed = was_failed;
  return line.ok;
}

/* The probe: returns 0 and whether the native fma is correctly rounded; the
 * emulation must be exact on its domain whatever the native one does. */
int bml__oracle_probe(run *v, bml__card *c, const bml__build *b, bool *native_ok) {
  probe_case pc[BML_ARRAY_SIZE(designed) + PROBE_RANDOM];
  memcpy(pc, designed, sizeof designed);
  size_t n = BML_ARRAY_SIZE(designed) + random_cases(pc + BML_ARRAY_SIZE(designed), PROBE_RANDOM);
  float native[BML_ARRAY_SIZE(pc)], emulated[BML_ARRAY_SIZE(pc)];
  char e[64], detail[128];
  double t0 = bml__now();
  int rc = probe_run(c, b, pc, n, native, emulated);
  double ms = (bml__now() - t0) * 1e3;
  if (rc != 0) {
    snprintf(detail, sizeof detail, "the probe kernel failed: %s", bml__cl_error_string(rc, e, sizeof e));
    /* not "native": that line, alone, refuses nothing (its readers know) */
    bml__oracle_emit_error(v, "fma probe", "native and emulated", detail);
    return rc;
  }
  *native_ok = probe_line(v, "native", pc, n, native, false, ms) && !hooks.force_emulated;
  probe_line(v, "emulated", pc, n, emulated, true, ms);
  return 0;
}

/* The fma probe for a remembered verdict: the emulation exact on its
 * domain, and the native fma exact when the build uses it. */
int bml__oracle_spot_probe(bml__card *c, const bml__build *b, char *why, size_t len) {
  probe_case pc[BML_ARRAY_SIZE(designed) + PROBE_RANDOM];
  memcpy(pc, designed, sizeof designed);
  size_t n = BML_ARRAY_SIZE(designed) + random_cases(pc + BML_ARRAY_SIZE(designed), PROBE_RANDOM);
  float native[BML_ARRAY_SIZE(pc)], emulated[BML_ARRAY_SIZE(pc)];
  int rc = probe_run(c, b, pc, n, native, emulated);
  char e[64];
  if (rc != 0) {
    snprintf(why, len, "the fma probe failed: %s", bml__cl_error_string(rc, e, sizeof e));
    return BML_EVERIFY;
  }
  for (size_t i = 0; i < n; i++) {
    const float want = fmaf(pc[i].a, pc[i].b, pc[i].c);
    const bool native_bad = !b->emulated_fma && !bml__same_bits(want, native[i]);
    if (!native_bad && (!pc[i].in_domain || bml__same_bits(want, emulated[i]))) continue;
    snprintf(why, len, "the fma probe: case %zu, the %s fma gives 0x%08x, not 0x%08x", i,
             native_bad ? "native" : "emulated", bml__float_bits(native_bad ? native[i] : emulated[i]),
             bml__float_bits(want));
    return BML_EVERIFY;
  }
  return 0;
}
