/* test_faults.c -- OpenCL calls that fail on the card path, made to fail here: this program defines
 * clBuildProgram, clEnqueueWriteBuffer, clEnqueueUnmapMemObject and clEnqueueNDRangeKernel itself
 * (exported, so the library's table of the loader's entry points, which takes the process's own
 * definitions first, comes here), and passes each call on to the ICD loader's unless a test has
 * asked for that call to fail.  On PoCL (BANKML_GPU_SOFTWARE=1); skips without a device. */
#define _GNU_SOURCE
#define BML_CL_DIRECT /* the definitions below are the entry points' own names */
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/hooks.h"
#include "devices/device.h"
#include "logbuf.h"
#include "card/oracle.h"
#include "card/card.h"
#include "card/program.h"
#include "card/kernels.h"

/* ---- the calls, failing on demand ---------------------------------------------- */

/* The next call of each kind fails on its Nth (1: the next; 0: none fail). */
static atomic_int fail_write, fail_unmap;
static atomic_bool fail_probe; /* launches of bml_fma_probe fail */
/* Which builds fail, as a driver's compiler that refuses one variant:
 * those of the emulated fma (options with -DBML_EMULATE_FMA=1), those of
 * the native one, or both. */
enum { BUILDS_PASS, EMULATED_FAILS, NATIVE_FAILS, BOTH_FAIL };
static atomic_int fail_builds;

static void *real(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) abort(); /* the ICD loader is linked: it has every entry point */
  return f;
}

/* Whether this call is the one to fail (counting down). */
static bool fails(atomic_int *n) {
  int left = atomic_load(n);
  while (left > 0 && !atomic_compare_exchange_weak(n, &left, left - 1)) continue;
  return left == 1;
}

CL_API_ENTRY cl_int CL_API_CALL clBuildProgram(cl_program p, cl_uint ndev, const cl_device_id *dev, const char *options,
                                               void(CL_CALLBACK *notify)(cl_program, void *), void *user) {
  typedef cl_int (*fn)(cl_program, cl_uint, const cl_device_id *, const char *, void(CL_CALLBACK *)(cl_program, void *),
                       void *);
  const bool emulated = options && strstr(options, "-DBML_EMULATE_FMA=1");
  const int mode = atomic_load(&fail_builds);
  if (mode == BOTH_FAIL || (mode == EMULATED_FAILS && emulated) || (mode == NATIVE_FAILS && !emulated))
    return CL_BUILD_PROGRAM_FAILURE;
  return ((fn)real("clBuildProgram"))(p, ndev, dev, options, notify, user);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueWriteBuffer(cl_command_queue q, cl_mem b, cl_bool blocking, size_t off,
                                                     size_t size, const void *p, cl_uint nev, const cl_event *ev,
                                                     cl_event *e) {
  typedef cl_int (*fn)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *,
                       cl_event *);
  if (fails(&fail_write)) return CL_OUT_OF_RESOURCES;
  return ((fn)real("clEnqueueWriteBuffer"))(q, b, blocking, off, size, p, nev, ev, e);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueUnmapMemObject(cl_command_queue q, cl_mem m, void *p, cl_uint nev,
                                                        const cl_event *ev, cl_event *e) {
  typedef cl_int (*fn)(cl_command_queue, cl_mem, void *, cl_uint, const cl_event *, cl_event *);
  if (fails(&fail_unmap)) return CL_OUT_OF_RESOURCES;
  return ((fn)real("clEnqueueUnmapMemObject"))(q, m, p, nev, ev, e);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dims,
                                                       const size_t *offset, const size_t *global,
                                                       const size_t *local, cl_uint nev, const cl_event *ev,
                                                       cl_event *e) {
  typedef cl_int (*fn)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *, cl_uint,
                       const cl_event *, cl_event *);
  char name[64] = "";
  if (atomic_load(&fail_probe) && clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL) == CL_SUCCESS &&
      strcmp(name, "bml_fma_probe") == 0)
    return CL_OUT_OF_RESOURCES;
  return ((fn)real("clEnqueueNDRangeKernel"))(q, k, dims, offset, global, local, nev, ev, e);
}

/* ---- a card --------------------------------------------------------------------- */

static void setup(void) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU_SHARE");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  bml__oracle_hooks h = {.quick = true};
  bml__oracle_set_hooks(&h);
}

static void teardown(void) { bml__oracle_set_hooks(NULL); }

/* The timeout catches a hang (a queue never drained), not slowness: on
 * an NVIDIA H200 the probe's test opens and verifies the card twice
 * through NVIDIA's compiler, 24 s in one make check
 * and past 120 s in another (2026-12-02, -j12) whose every suite ran three to
 * six times its usual time.  The oracle's suite, which builds as much, has
 * 600. */
TestSuite(faults, .init = setup, .fini = teardown, .timeout = 600);

/* The first selected device, open as a card; a skip when there is none. */
static bml__card *open_card(bml_devices **list) {
  cr_assert_eq(bml_devices_discover(NULL, list), 0);
  for (size_t i = 0; i < bml_devices_count(*list); i++) {
    if (!bml_devices_get(*list, i)->selected) continue;
    bml__card *c = NULL;
    char err[256];
    cr_assert_eq(bml__card_open(&(*list)->dev[i].cl, &c, err, sizeof err), 0, "%s", err);
    return c;
  }
  bml_devices_free(*list);
  cr_skip_test("no OpenCL device here (apt-get install pocl-opencl-icd)");
  return NULL;
}

/* A queue kept busy until `drained` is set: earlier work, as the worker's
 * in-order queue has. */
typedef struct {
  cl_event busy;
  atomic_bool drained;
} earlier_work;

static void *finish_later(void *ctx) {
  earlier_work *w = ctx;
  usleep(200 * 1000);
  atomic_store(&w->drained, true);
  clSetUserEventStatus(w->busy, CL_COMPLETE);
  return NULL;
}

/* A discrete card's upload copies the repacked rows from the host without
 * waiting; when a later copy cannot be enqueued, the host's rows were freed
 * while the first copy still read them (AddressSanitizer: a use after
 * free).  The failed upload now returns only once the queue is done. */
Test(faults, a_failed_discrete_upload_frees_its_rows_after_the_copies_end) {
  bml_devices *l;
  bml__card *c = open_card(&l);
  c->host_unified = false; /* the discrete path: copies from the host */
  const size_t rows = 1024, n = 4096;
  bml_block_q1_0 *w = calloc(rows * (n / BML_Q1_0_BLOCK), sizeof *w);
  cr_assert_not_null(w);
  bml__rows_part part = {w, rows};
  bml__card_matrix m = {0};
  cl_int rc;
  earlier_work work = {clCreateUserEvent(c->ctx, &rc), false};
  cr_assert_eq(rc, CL_SUCCESS);
  cr_assert_eq(clEnqueueBarrierWithWaitList(c->queue, 1, &work.busy, NULL), CL_SUCCESS);
  cr_assert_eq(clFlush(c->queue), CL_SUCCESS);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, finish_later, &work), 0);
  atomic_store(&fail_write, 2); /* the scales' copy, after the bits' */
  const int up = bml__card_matrix_upload(c, &part, 1, n, true, &m);
  const bool drained = atomic_load(&work.drained);
  atomic_store(&fail_write, 0);
  pthread_join(t, NULL);
  cr_expect_eq(up, CL_OUT_OF_RESOURCES, "upload: %d", up);
  cr_expect(drained, "the failed upload returned while its first copy could still read the freed rows");
  clReleaseEvent(work.busy);
  if (up == 0) bml__card_matrix_free(c, &m);
  bml__card_close(c);
  bml_devices_free(l);
  free(w);
}

/* On a card that shares the host's memory the repack writes into the
 * slabs mapped; an unmap that fails leaves them mapped, which no launch may
 * read: the upload fails.  (On the H200 the card is discrete: the test
 * takes the mapped path there too, which any device can.) */
Test(faults, a_failed_unmap_fails_the_upload) {
  bml_devices *l;
  bml__card *c = open_card(&l);
  c->host_unified = true; /* the mapped path (PoCL's own; a discrete card maps as well) */
  const size_t rows = 256, n = 1024;
  bml_block_q1_0 *w = calloc(rows * (n / BML_Q1_0_BLOCK), sizeof *w);
  cr_assert_not_null(w);
  bml__rows_part part = {w, rows};
  bml__card_matrix m = {0};
  atomic_store(&fail_unmap, 1);
  const int up = bml__card_matrix_upload(c, &part, 1, n, true, &m);
  atomic_store(&fail_unmap, 0);
  cr_expect_neq(up, 0, "an upload whose slab stays mapped succeeded");
  if (up == 0) bml__card_matrix_free(c, &m);
  bml__card_close(c);
  bml_devices_free(l);
  free(w);
}

static char logged[4096];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

typedef struct {
  bool seen;
  char fma[64], detail[256];
} probe_seen;

static void on_line(void *ctx, const bml_verify_line *line) {
  probe_seen *p = ctx;
  if (strcmp(line->check, "fma probe") != 0 || line->ok || p->seen) return;
  p->seen = true;
  snprintf(p->fma, sizeof p->fma, "%s", line->fma);
  snprintf(p->detail, sizeof p->detail, "%s", line->detail ? line->detail : "");
}

/* The probe kernel failing to run refuses the card, and says so: it was
 * reported as the native fma's line, which alone refuses nothing, so the
 * worker's log and the command blamed the card's bits. */
Test(faults, a_probe_that_cannot_run_is_named_not_taken_for_wrong_bits) {
  bml_devices *l;
  bml__card_close(open_card(&l)); /* a skip when there is no device */
  size_t i = 0;
  while (!bml_devices_get(l, i)->selected) i++;
  probe_seen p = {0};
  bml_verify_options o;
  bml_verify_options_init(&o);
  o.on_line = on_line;
  o.ctx = &p;
  atomic_store(&fail_probe, true);
  const int rc = bml_devices_verify(l, i, &o);
  cr_expect_eq(rc, BML_EVERIFY);
  cr_expect(p.seen, "no failed fma probe line");
  cr_expect_str_eq(p.fma, "native and emulated");
  cr_expect(strstr(p.detail, "the probe kernel failed: CL_OUT_OF_RESOURCES") != NULL, "%s", p.detail);
  bml_devices_free(l);
  /* the worker's log names it */
  bml_pool *pool;
  cr_assert_eq(bml_pool_open(1, &pool), 0);
  bml_worker *w = NULL;
  bml_log_set_sink(capture, NULL);
  const int opened = bml_worker_open(pool, &w);
  bml_log_set_sink(NULL, NULL);
  atomic_store(&fail_probe, false);
  cr_expect_eq(opened, 0);
  cr_expect_null(w);
  cr_expect(strstr(logged, "NOT VERIFIED \u2014 fma probe: the probe kernel failed") != NULL, "%s", logged);
  bml_worker_close(w);
  bml_pool_close(pool);
}

/* ---- a build that fails on one variant ------------------------------------------ */

typedef struct {
  size_t builds_ok, builds_refusing, native_checks, emulated_checks;
  char left_out[64], detail[512];
} variants_seen;

static void on_variant_line(void *ctx, const bml_verify_line *line) {
  variants_seen *s = ctx;
  if (strcmp(line->check, "build") == 0) {
    if (line->ok) {
      s->builds_ok++;
      snprintf(s->left_out, sizeof s->left_out, "%s", line->fma);
      snprintf(s->detail, sizeof s->detail, "%s", line->detail ? line->detail : "");
    } else {
      s->builds_refusing++;
    }
  } else if (strncmp(line->check, "q1_0_", 5) == 0) {
    ++*(strcmp(line->fma, "native") == 0 ? &s->native_checks : &s->emulated_checks);
  }
}

/* Verifies the first selected device with builds failing as mode says:
 * returns what verify did, the lines seen and the build in use. */
static int verify_with_builds(int mode, variants_seen *s, bool *emulated_in_use) {
  bml_devices *l;
  bml__card_close(open_card(&l)); /* a skip when there is no device */
  size_t i = 0;
  while (!bml_devices_get(l, i)->selected) i++;
  bml_verify_options o;
  bml_verify_options_init(&o);
  o.on_line = on_variant_line;
  o.ctx = s;
  bml__card *card = NULL;
  bml__build use = {0};
  atomic_store(&fail_builds, mode);
  const int rc = bml__oracle_verify(&l->dev[i], i, &o, &card, &use);
  atomic_store(&fail_builds, BUILDS_PASS);
  *emulated_in_use = use.emulated_fma;
  bml__build_release(&use);
  bml__card_close(card);
  bml_devices_free(l);
  return rc;
}

/* A compiler that refuses the emulated fma's build (longer code, which a
 * phone's compiler may not take) but builds the native one: the card is
 * verified and used with the native fma, and the line says what was left
 * out.  (PoCL's fma is correctly rounded, so the native build passes.) */
Test(faults, a_card_whose_emulated_build_fails_is_verified_with_the_native_one) {
  variants_seen s = {0};
  bool emulated = true;
  cr_expect_eq(verify_with_builds(EMULATED_FAILS, &s, &emulated), 0);
  cr_expect(!emulated, "the build in use is the emulated one, which did not build");
  cr_expect_eq(s.builds_ok, 1);
  cr_expect_eq(s.builds_refusing, 0);
  cr_expect_str_eq(s.left_out, "emulated");
  cr_expect(strstr(s.detail, "left out") && strstr(s.detail, "CL_BUILD_PROGRAM_FAILURE"), "%s", s.detail);
  cr_expect_gt(s.native_checks, 0);
  cr_expect_eq(s.emulated_checks, 0, "checks ran on a build that does not exist");
}

/* The other way round: the emulated fma alone is built, probed, checked
 * and used. */
Test(faults, a_card_whose_native_build_fails_is_verified_with_the_emulated_one) {
  variants_seen s = {0};
  bool emulated = false;
  cr_expect_eq(verify_with_builds(NATIVE_FAILS, &s, &emulated), 0);
  cr_expect(emulated, "the build in use is the native one, which did not build");
  cr_expect_eq(s.builds_ok, 1);
  cr_expect_str_eq(s.left_out, "native");
  cr_expect_gt(s.emulated_checks, 0);
  cr_expect_eq(s.native_checks, 0);
}

/* Neither builds: the card is refused, a line for each. */
Test(faults, a_card_that_builds_neither_variant_is_refused) {
  variants_seen s = {0};
  bool emulated = false;
  cr_expect_eq(verify_with_builds(BOTH_FAIL, &s, &emulated), BML_EVERIFY);
  cr_expect_eq(s.builds_refusing, 2);
  cr_expect_eq(s.builds_ok, 0);
  cr_expect_eq(s.native_checks + s.emulated_checks, 0);
}
