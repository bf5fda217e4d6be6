/* oclgrind-check.c -- every shipped variant of the kernels through the oracle on Oclgrind, small shapes, every row the CPU's.
 *
 * Run by .ci/run twice: `oclgrind --data-races oclgrind-check` and
 * `oclgrind --uninitialized oclgrind-check --exact-slabs`.  Oclgrind
 * simulates an OpenCL device and reports every data race, out-of-bounds
 * access and read of uninitialised memory of the kernels it runs, which a
 * real card would let pass or compute past; .ci/run fails the step on any
 * such report.  This program runs the oracle's checks (doc/ORACLE.md: the
 * fma probe, then every kernel, each build of the native and of the
 * emulated fma, on random, layer-shaped and infinite-scale data) on the
 * oracle's four smallest shapes, once per variant the library ships or
 * chooses on some card: the table kernels double-buffered and with one
 * table (little local memory), two lanes a work-item, and NVIDIA's
 * formulation written in C.
 *
 * --exact-slabs gives each matrix of the batched checks a slab of its own
 * size, for the uninitialised-value check: Oclgrind forgets what it knew
 * of a whole buffer when the host writes part of it, so with shared slabs
 * every matrix but the last written reads as uninitialised (doc/ORACLE.md).
 * The run without it keeps the slabs the library uses, so the kernels'
 * offsets into a shared slab are checked for races and bounds.
 *
 * Exit status 0 when every variant passed every check; 1 otherwise (the
 * failing lines on standard error); 2 when there is no Oclgrind device or
 * the arguments are wrong.  An argument of digits runs those variants only
 * ("02": the first and the third).  Not part of the library; linked with
 * its convenience archive, as tools/harness is. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hooks.h"
#include "card/oracle.h"
#include "card/tune.h"

/* The library stages a copy to the card in a buffer it keeps mapped (the
 * pinned staging of bml__card_buf) and writes into the mapping.  Oclgrind
 * hands out its own storage as the mapping, sees no host write until an
 * unmap, and so takes every byte of such a copy for an uninitialised one
 * (each table entry then "uninitialised"): this program's own
 * clEnqueueWriteBuffer, which the library's calls reach before the
 * simulator's, passes a copy of the bytes from ordinary memory instead.
 * (src/devices/clload.h names each entry point as a macro through the library's
 * table, which takes the process's own definition first; this definition is
 * of the real symbol, exported by linking this program -rdynamic: without
 * it, the library's calls went past it to the simulator's.) */
#undef clEnqueueWriteBuffer
CL_API_ENTRY cl_int CL_API_CALL clEnqueueWriteBuffer(cl_command_queue q, cl_mem b, cl_bool blocking, size_t off,
                                                     size_t size, const void *p, cl_uint nev, const cl_event *ev,
                                                     cl_event *e) {
  typedef cl_int (*fn)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *,
                       cl_event *);
  fn real = (fn)dlsym(RTLD_NEXT, "clEnqueueWriteBuffer");
  void *copy = malloc(size ? size : 1);
  if (!real || !copy) {
    free(copy);
    return CL_OUT_OF_HOST_MEMORY;
  }
  memcpy(copy, p, size);
  const cl_int rc = real(q, b, CL_TRUE, off, size, copy, nev, ev, e); /* blocking: the copy is freed below */
  (void)blocking;
  free(copy);
  return rc;
}

#include "kernel_variants.h" /* NVIDIA's build with its PTX written in C, as the tests build it */

static const struct {
  const char *name;
  bml__oracle_hooks hooks;
} variants[] = {
    {"default (the table double-buffered)", {.tiny = true, .quick = true}},
    {"one table (little local memory)", {.tiny = true, .quick = true, .local_mem = 16 << 10}},
    {"two lanes a work-item", {.tiny = true, .quick = true, .lr_shape = {64, 2, 2}}},
    {"NVIDIA's build in C", {.tiny = true,
      .quick = true,
      .device_source = bml_test_nvidia_in_c,
      .extra_options = BML_TEST_NVIDIA_IN_C_OPTIONS}},
};

typedef struct {
  const char *variant;
  size_t lines, failed;
} tally;

static void on_line(void *ctx, const bml_verify_line *l) {
  tally *t = ctx;
  t->lines++;
  /* the native probe's line only chooses the emulation; it refuses nothing */
  if (l->ok || (strcmp(l->check, "fma probe") == 0 && strcmp(l->fma, "native") == 0)) return;
  t->failed++;
  fprintf(stderr, "oclgrind-check: %s: %s (fma: %s) %zux%zu %s: %zu/%zu exact, first row %ld%s%s\n", t->variant,
          l->check, l->fma, l->rows, l->n, l->regime, l->exact, l->total, l->first_bad, l->detail ? ": " : "",
          l->detail ? l->detail : "");
}

/* The index of the Oclgrind device in l, or -1. */
static long oclgrind_device(const bml_devices *l) {
  for (size_t i = 0; i < bml_devices_count(l); i++) {
    const bml_device *d = bml_devices_get(l, i);
    if (d->usable && strstr(d->platform, "Oclgrind")) return (long)i;
  }
  return -1;
}

int main(int argc, char **argv) {
  bool exact_slabs = false;
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--exact-slabs") == 0)
      exact_slabs = true;
    else if (argv[i][0] && strspn(argv[i], "0123456789") == strlen(argv[i]))
      only = argv[i];
    else {
      fprintf(stderr, "oclgrind-check: unknown argument '%s' (usage: oclgrind-check [--exact-slabs] [DIGITS])\n", argv[i]);
      return 2;
    }
  }
  bml__tune_disable(true); /* the default shapes: the tuning's products would take hours here */
  bml_discover_options o;
  bml_discover_options_init(&o);
  o.software = 1;
  bml_devices *l = NULL;
  if (bml_devices_discover(&o, &l) != 0) return 2;
  const long dev = oclgrind_device(l);
  if (dev < 0) {
    fprintf(stderr, "oclgrind-check: no Oclgrind device (run it as: oclgrind oclgrind-check)\n");
    bml_devices_free(l);
    return 2;
  }
  int status = 0;
  for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
    if (only && !strchr(only, '0' + (int)v)) continue; /* "013": those variants only */
    tally t = {variants[v].name, 0, 0};
    bml_verify_options vo;
    bml_verify_options_init(&vo);
    vo.on_line = on_line;
    vo.ctx = &t;
    vo.golden_dir = ""; /* ggml's cases are thousands of rows: the CPU suites and the cards check them */
    bml__oracle_hooks hooks = variants[v].hooks;
    hooks.exact_slabs = exact_slabs;
    bml__oracle_set_hooks(&hooks);
    const int rc = bml__oracle_verify(&l->dev[dev], (size_t)dev, &vo, NULL, NULL);
    bml__oracle_set_hooks(NULL);
    printf("oclgrind-check: %s: %zu checks, %zu failed%s\n", t.variant, t.lines, t.failed, rc == 0 ? "" : " (not verified)");
    if (rc != 0 || t.failed != 0 || t.lines == 0) status = 1;
  }
  bml_devices_free(l);
  return status;
}
