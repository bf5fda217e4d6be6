/* ptxrun.c -- the table kernel's PTX, as NVIDIA's OpenCL built it, run through
 * the CUDA driver API, so that Nsight Compute (which does not profile OpenCL)
 * can count what it does.  Not built, installed or distributed (README.md).
 *   ptxrun DIR [LAUNCHES]   DIR: what `HARNESS_DUMP=DIR harness ...` wrote
 * It loads DIR/program.bin (PTX text; OpenCL's environment registers,
 * which the CUDA driver does not set, replaced: set_envregs), launches q1_0_mat_vec_lr on DIR's operands with the
 * harness's work-groups, compares every row bit for bit with DIR/ref.bin
 * (the library's reference; any NaN equals any NaN, as the library's
 * compare, bml__same_bits, has it), then times LAUNCHES launches (20) back to back
 * by CUDA events.  libcuda is opened at run time, so no CUDA toolkit is
 * needed to build it.  Exit status 0 only when every row is exact. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;
typedef unsigned long long CUdeviceptr;

static struct {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice *, int);
  CUresult (*primary_retain)(CUcontext *, CUdevice);
  CUresult (*ctx_set)(CUcontext);
  CUresult (*module_load)(CUmodule *, const void *, unsigned, int *, void **);
  CUresult (*get_function)(CUfunction *, CUmodule, const char *);
  CUresult (*func_attr)(int *, int, CUfunction);
  CUresult (*mem_alloc)(CUdeviceptr *, size_t);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void **, void **);
  CUresult (*sync)(void);
  CUresult (*event_create)(CUevent *, unsigned);
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*event_sync)(CUevent);
  CUresult (*event_elapsed)(float *, CUevent, CUevent);
  CUresult (*error_string)(CUresult, const char **);
} cu;

static void check(CUresult rc, const char *what) {
  if (rc == 0) return;
  const char *s = "unknown error";
  if (cu.error_string) cu.error_string(rc, &s);
  fprintf(stderr, "ptxrun: %s: %s (%d)\n", what, s, rc);
  exit(1);
}

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "ptxrun: libcuda has no %s\n", name);
    exit(1);
  }
  return p;
}

/* The first of two names libcuda exports (a newer one, then the older). */
static void *sym2(void *lib, const char *name, const char *older) {
  void *p = dlsym(lib, name);
  return p ? p : sym(lib, older);
}

static void load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "ptxrun: cannot open libcuda.so.1: %s\n", dlerror());
    exit(1);
  }
  *(void **)&cu.init = sym(lib, "cuInit");
  *(void **)&cu.device_get = sym(lib, "cuDeviceGet");
  *(void **)&cu.primary_retain = sym(lib, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.ctx_set = sym(lib, "cuCtxSetCurrent");
  *(void **)&cu.module_load = sym(lib, "cuModuleLoadDataEx");
  *(void **)&cu.get_function = sym(lib, "cuModuleGetFunction");
  *(void **)&cu.func_attr = sym(lib, "cuFuncGetAttribute");
  *(void **)&cu.mem_alloc = sym(lib, "cuMemAlloc_v2");
  *(void **)&cu.htod = sym(lib, "cuMemcpyHtoD_v2");
  *(void **)&cu.dtoh = sym(lib, "cuMemcpyDtoH_v2");
  *(void **)&cu.launch = sym(lib, "cuLaunchKernel");
  *(void **)&cu.sync = sym(lib, "cuCtxSynchronize");
  *(void **)&cu.event_create = sym(lib, "cuEventCreate");
  *(void **)&cu.event_record = sym(lib, "cuEventRecord");
  *(void **)&cu.event_sync = sym(lib, "cuEventSynchronize");
  *(void **)&cu.event_elapsed = sym2(lib, "cuEventElapsedTime_v2", "cuEventElapsedTime");
  *(void **)&cu.error_string = sym(lib, "cuGetErrorString");
}

static void *slurp(const char *dir, const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  const long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  char *p = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
  if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "ptxrun: cannot read %s\n", path);
    exit(1);
  }
  p[n] = 0;
  fclose(f);
  *len = (size_t)n;
  return p;
}

/* OpenCL's environment registers, which the CUDA driver does not set, in
 * a copy of the PTX text: %envreg0-2 (the launch's offset in work-groups,
 * none here) and %envreg3-5 (its global offset) read as 0, %envreg6-8 (the
 * work-groups) as %nctaid.x-z.  (Made 0, the work-groups' count divided the
 * stream's steps by zero, and ptxas dropped the kernel's body.) */
static char *set_envregs(const char *ptx, size_t *count) {
  char *out = malloc(2 * strlen(ptx) + 1), *w = out;
  if (!out) exit(1);
  *count = 0;
  for (const char *r = ptx; *r;) {
    if (!strncmp(r, "%envreg", 7) && r[7] >= '0' && r[7] <= '9') {
      const long k = strtol(r + 7, (char **)&r, 10);
      w += sprintf(w, "%s", k >= 6 && k <= 8 ? (k == 6 ? "%nctaid.x" : k == 7 ? "%nctaid.y" : "%nctaid.z") : "0");
      ++*count;
    } else {
      *w++ = *r++;
    }
  }
  *w = 0;
  return out;
}

static int cmpf(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ptxrun DIR [LAUNCHES]\n");
    return 2;
  }
  const char *dir = argv[1];
  const int launches = argc > 2 ? atoi(argv[2]) : 20;
  if (launches < 1 || launches > 100000) {
    fprintf(stderr, "ptxrun: LAUNCHES \"%s\": a whole number, 1 to 100000\n", argv[2]);
    return 2;
  }
  size_t len, bits_len, d0_len, act_len, ref_len;
  char *meta = slurp(dir, "meta.txt", &len);
  size_t rows, nb, groups, wg;
  if (sscanf(meta, "%zu %zu %zu %zu", &rows, &nb, &groups, &wg) != 4 || rows == 0 || nb == 0 || groups == 0 ||
      wg == 0) {
    fprintf(stderr, "ptxrun: %s/meta.txt: want rows nb groups wg, each more than 0\n", dir);
    return 2;
  }
  char *text = slurp(dir, "program.bin", &len);
  const void *bits = slurp(dir, "bits.bin", &bits_len), *d0 = slurp(dir, "d0.bin", &d0_len);
  const void *act = slurp(dir, "act.bin", &act_len);
  const float *ref = slurp(dir, "ref.bin", &ref_len);
  /* the sizes the harness writes (a dump of another shape, or half
   * written, stops here rather than reading past a buffer) */
  const size_t tiles = (nb + 7) / 8, n = nb * 128, act_want = (n + n / 32 * sizeof(float) + 63) / 64 * 64;
  const struct {
    const char *name;
    size_t got, want;
  } sizes[] = {{"bits.bin", bits_len, tiles * 8 * rows * 16},
               {"d0.bin", d0_len, tiles * 8 * rows * sizeof(float)},
               {"act.bin", act_len, act_want},
               {"ref.bin", ref_len, rows * sizeof(float)}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    if (sizes[i].got != sizes[i].want) {
      fprintf(stderr, "ptxrun: %s/%s holds %zu bytes, not the %zu of meta.txt's %zu rows of %zu blocks\n", dir,
              sizes[i].name, sizes[i].got, sizes[i].want, rows, nb);
      return 2;
    }
  if (!strstr(text, ".version") || !strstr(text, ".entry q1_0_mat_vec_lr(")) {
    fprintf(stderr, "ptxrun: %s/program.bin is not PTX with q1_0_mat_vec_lr (the harness ran on another platform "
            "than NVIDIA's)\n", dir);
    return 2;
  }
  size_t envregs;
  char *ptx = set_envregs(text, &envregs);
  free(text);
  printf("ptxrun: %zu %%envreg reads replaced\n", envregs);

  load_driver();
  CUdevice dev;
  CUcontext ctx;
  check(cu.init(0), "cuInit");
  check(cu.device_get(&dev, 0), "cuDeviceGet");
  check(cu.primary_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cu.ctx_set(ctx), "cuCtxSetCurrent");
  char log[16384] = "";
  int opt[2] = {5, 6}; /* CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */
  void *val[2] = {log, (void *)(uintptr_t)sizeof log};
  CUmodule mod;
  const CUresult loaded = cu.module_load(&mod, ptx, 2, opt, val);
  if (loaded != 0) fprintf(stderr, "ptxrun: the PTX's JIT log:\n%s\n", log);
  check(loaded, "cuModuleLoadDataEx");
  CUfunction fn;
  check(cu.get_function(&fn, mod, "q1_0_mat_vec_lr"), "cuModuleGetFunction(q1_0_mat_vec_lr)");
  int regs = 0, smem = 0, lmem = 0;
  check(cu.func_attr(&regs, 4, fn), "registers");   /* CU_FUNC_ATTRIBUTE_NUM_REGS */
  check(cu.func_attr(&smem, 1, fn), "shared");      /* CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES */
  check(cu.func_attr(&lmem, 3, fn), "local bytes"); /* CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES */
  printf("ptxrun: q1_0_mat_vec_lr: %d registers, %d bytes shared, %d bytes local (spills) a thread\n", regs, smem,
         lmem);

  CUdeviceptr dbits, dd0, dact, dout;
  check(cu.mem_alloc(&dbits, bits_len), "cuMemAlloc");
  check(cu.mem_alloc(&dd0, d0_len), "cuMemAlloc");
  check(cu.mem_alloc(&dact, act_len), "cuMemAlloc");
  check(cu.mem_alloc(&dout, rows * sizeof(float)), "cuMemAlloc");
  check(cu.htod(dbits, bits, bits_len), "copy in");
  check(cu.htod(dd0, d0, d0_len), "copy in");
  check(cu.htod(dact, act, act_len), "copy in");
  float *got = malloc(rows * sizeof *got);
  if (!got) return 1;
  memset(got, 0xAB, rows * sizeof *got);
  check(cu.htod(dout, got, rows * sizeof *got), "copy in");
  /* the kernel's arguments, in cl/q1_0_lanes.cl's order */
  unsigned zero = 0, R = (unsigned)rows, NB = (unsigned)nb;
  void *args[] = {&dbits, &dd0, &dact, &zero, &R, &NB, &dout, &zero, &zero, &zero};
  check(cu.launch(fn, (unsigned)groups, 1, 1, (unsigned)wg, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel");
  check(cu.sync(), "the first launch");
  check(cu.dtoh(got, dout, rows * sizeof *got), "copy out");
  size_t bad = 0;
  for (size_t r = 0; r < rows; r++) {
    const bool same = memcmp(&got[r], &ref[r], sizeof *got) == 0 || (isnan(got[r]) && isnan(ref[r]));
    if (!same && bad++ < 5) printf("  row %zu: %a want %a\n", r, got[r], ref[r]);
  }
  CUevent e[2];
  check(cu.event_create(&e[0], 0), "cuEventCreate");
  check(cu.event_create(&e[1], 0), "cuEventCreate");
  float *ms = malloc((size_t)launches * sizeof *ms);
  if (!ms) return 1;
  for (int i = 0; i < launches; i++) {
    check(cu.event_record(e[0], NULL), "cuEventRecord");
    check(cu.launch(fn, (unsigned)groups, 1, 1, (unsigned)wg, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel");
    check(cu.event_record(e[1], NULL), "cuEventRecord");
    check(cu.event_sync(e[1]), "cuEventSynchronize");
    check(cu.event_elapsed(&ms[i], e[0], e[1]), "cuEventElapsedTime");
  }
  qsort(ms, (size_t)launches, sizeof *ms, cmpf);
  const double bytes = (double)bits_len + (double)d0_len;
  printf("ptxrun: %zux%zu on %zu work-groups of %zu: %s (%zu rows differ); %d launches, each alone: median %.2f us "
         "(%.0f GB/s of the card's weights), min %.2f\n",
         rows, nb * 128, groups, wg, bad ? "NOT EXACT" : "bit-exact", bad, launches, ms[launches / 2] * 1e3,
         bytes / (ms[launches / 2] * 1e-3) / 1e9, ms[0] * 1e3);
  return bad ? 1 : 0;
}
