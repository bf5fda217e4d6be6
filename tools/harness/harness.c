/* harness.c -- kernel experiments on a card, outside the library: cl/q1_0_lanes.cl's
 * q1_0_mat_vec_lr (the shipped table kernel) and tools/harness/dp4a.cl's
 * q1_0_dp on one matrix, every row compared bit for bit with the library's
 * reference (bml__q1_0_dot_ref, doc/ARITHMETIC.md), timed as launches spread over
 * in-order queues.  See README.md here for the build and the figures.
 *   harness ROWS N SPEC...   SPEC: lr:GROUPS:OPTIONS, nv:GROUPS:OPTIONS (the same kernel with
 *                            cl/nvidia.cl ahead) or dp:GROUPS:OPTIONS
 *                            (GROUPS 0: a work-group a group of rows)
 * env: HARNESS_PLATFORM (a substring of the platform's name), HARNESS_ITERS
 *      (200 launches a round, three rounds), HARNESS_QUEUES (4), HARNESS_MATS
 *      (copies of the matrix the launches cycle over, 2), HARNESS_SRC (the
 *      tree's top, .), HARNESS_DATA (random | layer | infinite: random with
 *      infinite and NaN activation scales), HARNESS_VERBOSE (build logs),
 *      HARNESS_DUMP (a folder: the first lr or nv spec's program binary, on NVIDIA
 *      its PTX, and the operands and reference, for ptxrun.c)
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/bml.h"
#include "cpu/golden.h"
#include "cpu/q1_0.h"
#include "cpu/gen.h"
#include "card/kernels.h"

#define CK(x)                                                                    \
  do {                                                                           \
    cl_int e_ = (x);                                                             \
    if (e_ != CL_SUCCESS) {                                                      \
      fprintf(stderr, "%s:%d: %s: %d\n", __FILE__, __LINE__, #x, (int)e_);       \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); exit(1); }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)len + 1);
  if (fread(s, 1, (size_t)len, f) != (size_t)len) exit(1);
  s[len] = 0;
  fclose(f);
  return s;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint32_t transpose_word(uint32_t x) {
  uint32_t y = 0;
  for (int g = 0; g < 8; g++)
    for (int u = 0; u < 4; u++)
      if (x >> (4 * g + u) & 1u) y |= 1u << (8 * u + g);
  return y;
}

static void write_file(const char *dir, const char *name, const void *p, size_t len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, len, f) != len || fclose(f) != 0) { perror(path); exit(1); }
}

/* The program's binary (NVIDIA's: PTX text) and the kernel's operands, for
 * ptxrun.c, which runs the PTX through the CUDA driver (so that Nsight
 * Compute, which does not profile OpenCL, can). */
static void dump(const char *dir, cl_program prog, size_t rows, size_t nb, size_t groups, size_t wg,
                 const void *bits, size_t bits_len, const void *d0, size_t d0_len, const void *act, size_t act_len,
                 const float *ref) {
  size_t len = 0;
  CK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, 0));
  unsigned char *bin = malloc(len);
  if (!bin) exit(1);
  CK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, 0));
  write_file(dir, "program.bin", bin, len);
  free(bin);
  write_file(dir, "bits.bin", bits, bits_len);
  write_file(dir, "d0.bin", d0, d0_len);
  write_file(dir, "act.bin", act, act_len);
  write_file(dir, "ref.bin", ref, rows * sizeof *ref);
  char meta[256];
  const int m = snprintf(meta, sizeof meta, "%zu %zu %zu %zu\n", rows, nb, groups, wg);
  write_file(dir, "meta.txt", meta, (size_t)m);
  printf("dumped the program (%zu bytes) and operands into %s\n", len, dir);
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: harness ROWS N SPEC... (lr:GROUPS:OPTIONS, nv:GROUPS:OPTIONS or dp:GROUPS:OPTIONS)\n"); return 2; }
  const size_t rows = strtoul(argv[1], 0, 10), n = strtoul(argv[2], 0, 10);
  const size_t nb = n / 128, nt = (nb + 7) / 8;
  const char *want = getenv("HARNESS_PLATFORM"), *top = getenv("HARNESS_SRC") ? getenv("HARNESS_SRC") : ".";
  const int iters = getenv("HARNESS_ITERS") ? atoi(getenv("HARNESS_ITERS")) : 200;
  const int nq = getenv("HARNESS_QUEUES") ? atoi(getenv("HARNESS_QUEUES")) : 4;
  const int nmats = getenv("HARNESS_MATS") ? atoi(getenv("HARNESS_MATS")) : 2;
  const char *data = getenv("HARNESS_DATA") ? getenv("HARNESS_DATA") : "random";
  const bool layer = !strcmp(data, "layer"), infinite = !strcmp(data, "infinite");
  if (!layer && !infinite && strcmp(data, "random")) { fprintf(stderr, "HARNESS_DATA: random, layer or infinite\n"); return 2; }
  if (n == 0 || n % 128 || rows == 0) { fprintf(stderr, "ROWS > 0, N a multiple of 128\n"); return 2; }
  if (nmats < 1 || nmats > 8 || nq < 1 || nq > 16) { fprintf(stderr, "HARNESS_MATS 1-8, HARNESS_QUEUES 1-16\n"); return 2; }

  cl_platform_id plats[8];
  cl_uint np = 0;
  CK(clGetPlatformIDs(8, plats, &np));
  cl_platform_id plat = 0;
  for (cl_uint i = 0; i < np; i++) {
    char name[256];
    CK(clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof name, name, 0));
    if (!want || strstr(name, want)) { plat = plats[i]; printf("platform %s\n", name); break; }
  }
  if (!plat) { fprintf(stderr, "no platform %s\n", want ? want : ""); return 1; }
  cl_device_id dev;
  CK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, 0));
  cl_int err;
  cl_context ctx = clCreateContext(0, 1, &dev, 0, 0, &err);
  CK(err);
  cl_command_queue qs[16];
  for (int i = 0; i < nq; i++) { qs[i] = clCreateCommandQueue(ctx, dev, 0, &err); CK(err); }

  /* ggml's blocks from the library's generators, then the card's layouts:
   * the library's own (bml__card_repack, bml__card_act_repack) and its
   * words transposed (dp4a.cl) */
  uint64_t state = 0x9E3779B97F4A7C15ull;
  bml_block_q1_0 *w = malloc(rows * nb * sizeof *w);
  bml_block_q8_0 *a8 = malloc(n / 32 * sizeof *a8);
  if (!w || !a8) return 1;
  bml__gen_q1_0(&state, w, rows, n, layer);
  if (bml__gen_q8_0(&state, a8, n, layer) != 0) return 1;
  for (size_t i = 0; infinite && i < n / 32; i++) {
    if (i % 37 == 5) a8[i].d = i % 3 ? 0x7C00 : 0xFC00;
    else if (i % 101 == 7) a8[i].d = 0x7E00;
  }
  const size_t nwords = nt * 8 * rows * 4;
  uint32_t *nat = malloc(nwords * 4), *tr = malloc(nwords * 4);
  float *d0 = malloc(nt * 8 * rows * 4);
  const size_t actbytes = bml__card_act_bytes(n);
  char *act = malloc(actbytes);
  if (!nat || !tr || !d0 || !act) return 1;
  const bml__rows_part part = {w, rows};
  bml__card_repack(&part, 0, rows, nb, nat, d0);
  for (size_t i = 0; i < nwords; i++) tr[i] = transpose_word(nat[i]);
  bml__card_act_repack(a8, n, act);
  float *ref = malloc(rows * 4);
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++) ref[r] = bml__q1_0_dot_ref(&w[r * nb], a8, nb);

  cl_mem bn[8], bt[8], bd, ba, bo;
  for (int m = 0; m < nmats; m++) {
    bn[m] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nwords * 4, nat, &err); CK(err);
    bt[m] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nwords * 4, tr, &err); CK(err);
  }
  bd = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nt * 8 * rows * 4, d0, &err); CK(err);
  ba = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, actbytes, act, &err); CK(err);
  bo = clCreateBuffer(ctx, CL_MEM_READ_WRITE, rows * 4, 0, &err); CK(err);
  float *got = malloc(rows * 4);
  char path[1024];

  for (int a = 3; a < argc; a++) {
    char spec[1024];
    snprintf(spec, sizeof spec, "%s", argv[a]);
    char *c1 = strchr(spec, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : 0;
    if (!c2) { fprintf(stderr, "bad spec %s\n", argv[a]); return 2; }
    *c1 = *c2 = 0;
    const int is_dp = !strcmp(spec, "dp"), is_nv = !strcmp(spec, "nv");
    size_t groups = strtoul(c1 + 1, 0, 10);
    const char *opts = c2 + 1;
    /* the library's program: cl/q1_0.cl and the files after it, in Makefile.am's order */
    static const char *const q1_0_files[] = {"cl/q1_0.cl", "cl/q1_0_table.cl", "cl/q1_0_lanes.cl", "cl/q1_0_batch.cl"};
    char *srcs[5];
    cl_uint nsrc = 0;
    if (is_nv) { /* NVIDIA's build: cl/nvidia.cl ahead of the program, as the library builds it */
      snprintf(path, sizeof path, "%s/cl/nvidia.cl", top);
      srcs[nsrc++] = slurp(path);
    }
    for (size_t f = 0; f < (is_dp ? 1 : 4); f++) {
      snprintf(path, sizeof path, "%s/%s", top, is_dp ? "tools/harness/dp4a.cl" : q1_0_files[f]);
      srcs[nsrc++] = slurp(path);
    }
    cl_program prog = clCreateProgramWithSource(ctx, nsrc, (const char **)srcs, 0, &err);
    CK(err);
    err = clBuildProgram(prog, 1, &dev, opts, 0, 0);
    {
      size_t len;
      clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, 0, &len);
      char *log = malloc(len + 1);
      clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, len, log, 0);
      log[len] = 0;
      if (err != CL_SUCCESS || getenv("HARNESS_VERBOSE")) fprintf(stderr, "build log (%s):\n%s\n", argv[a], log);
      free(log);
    }
    CK(err);
    const char *kname = is_dp ? "q1_0_dp" : "q1_0_mat_vec_lr";
    size_t gr = 0;
    if (is_dp) {
      const char *r = strstr(opts, "-DDP_RPT=");
      gr = 32 * (r ? strtoul(r + 9, 0, 10) : 4);
    } else {
      const char *r1 = strstr(opts, "-DBML_LRROWS="), *r2 = strstr(opts, "-DBML_LRRPT=");
      if (!r1 || !r2) { fprintf(stderr, "%s: an lr spec names -DBML_LRROWS= and -DBML_LRRPT=\n", argv[a]); return 2; }
      gr = strtoul(r1 + 13, 0, 10) * strtoul(r2 + 12, 0, 10);
    }
    const size_t need = (rows + gr - 1) / gr;
    if (groups == 0 || groups > need) groups = need;
    const cl_uint R = (cl_uint)rows, NB = (cl_uint)nb, z = 0;
    cl_kernel ks[8];
    for (int m = 0; m < nmats; m++) {
      ks[m] = clCreateKernel(prog, kname, &err);
      CK(err);
      cl_mem mem = is_dp ? bt[m] : bn[m];
      if (is_dp) {
        CK(clSetKernelArg(ks[m], 0, sizeof mem, &mem));
        CK(clSetKernelArg(ks[m], 1, sizeof bd, &bd));
        CK(clSetKernelArg(ks[m], 2, sizeof ba, &ba));
        CK(clSetKernelArg(ks[m], 3, 4, &R));
        CK(clSetKernelArg(ks[m], 4, 4, &NB));
        CK(clSetKernelArg(ks[m], 5, sizeof bo, &bo));
      } else {
        CK(clSetKernelArg(ks[m], 0, sizeof mem, &mem));
        CK(clSetKernelArg(ks[m], 1, sizeof bd, &bd));
        CK(clSetKernelArg(ks[m], 2, sizeof ba, &ba));
        CK(clSetKernelArg(ks[m], 3, 4, &z));
        CK(clSetKernelArg(ks[m], 4, 4, &R));
        CK(clSetKernelArg(ks[m], 5, 4, &NB));
        CK(clSetKernelArg(ks[m], 6, sizeof bo, &bo));
        CK(clSetKernelArg(ks[m], 7, 4, &z));
        CK(clSetKernelArg(ks[m], 8, 4, &z));
        CK(clSetKernelArg(ks[m], 9, 4, &z));
      }
    }
    size_t cwg[3]; /* both kernels fix their work-group size */
    CK(clGetKernelWorkGroupInfo(ks[0], dev, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof cwg, cwg, 0));
    size_t wg = cwg[0];
    if (!is_dp && getenv("HARNESS_DUMP")) {
      dump(getenv("HARNESS_DUMP"), prog, rows, nb, groups, wg, nat, nwords * 4, d0, nt * 8 * rows * 4, act, actbytes,
           ref);
      unsetenv("HARNESS_DUMP"); /* the first lr or nv spec's only */
    }
    const size_t gsz = groups * wg;
    /* correctness: every matrix copy */
    size_t bad = 0;
    for (int m = 0; m < nmats; m++) {
      memset(got, 0xAB, rows * 4);
      CK(clEnqueueWriteBuffer(qs[0], bo, CL_TRUE, 0, rows * 4, got, 0, 0, 0));
      CK(clEnqueueNDRangeKernel(qs[0], ks[m], 1, 0, &gsz, &wg, 0, 0, 0));
      CK(clEnqueueReadBuffer(qs[0], bo, CL_TRUE, 0, rows * 4, got, 0, 0, 0));
      for (size_t r = 0; r < rows; r++) {
        if (!bml__same_bits(ref[r], got[r])) {
          uint32_t x, y;
          memcpy(&x, &got[r], 4), memcpy(&y, &ref[r], 4);
          if (bad < 5) printf("  row %zu: %a (%08x) want %a (%08x)\n", r, got[r], x, ref[r], y);
          bad++;
        }
      }
    }
    /* timing: 3 rounds of iters launches over the queues */
    double t[3];
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < nq; i++) CK(clFinish(qs[i]));
      const double t0 = now();
      for (int i = 0; i < iters; i++) CK(clEnqueueNDRangeKernel(qs[i % nq], ks[i % nmats], 1, 0, &gsz, &wg, 0, 0, 0));
      for (int i = 0; i < nq; i++) CK(clFinish(qs[i]));
      t[round] = (now() - t0) / iters * 1e6;
    }
    qsort(t, 3, sizeof t[0], cmpd);
    const double bytes = (double)rows * nb * 20;
    printf("%-4s groups %zu wg %zu  %s\n  %zux%zu: %.2f us (min %.2f, max %.2f) %.0f GB/s  %s (%zu rows differ)\n",
           spec, groups, wg, opts, rows, n, t[1], t[0], t[2], bytes / t[1] / 1e3, bad ? "NOT EXACT" : "bit-exact",
           bad);
    fflush(stdout);
    for (int m = 0; m < nmats; m++) clReleaseKernel(ks[m]);
    clReleaseProgram(prog);
    for (cl_uint i = 0; i < nsrc; i++) free(srcs[i]);
  }
  return 0;
}
