/* test_clfaults.c -- real OpenCL calls failing at random (tests/clshim) during opens and under load: no wrong bit, no leak.
 *
 * tests/load runs with tests/clshim first on LD_LIBRARY_PATH: that
 * libOpenCL.so.1 forwards each call to the real ICD loader and fails some,
 * by class (create, build, enqueue, map, flush, finish, wait, event status,
 * a command that failed, info, setarg), from a fixed seed.  On PoCL
 * (BANKML_GPU_SOFTWARE=1); skips where there is no OpenCL device.  CI runs
 * the same longer, with other seeds (.ci/run). */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/bml.h"

/* What one run of tests/load printed (stdout and stderr) and its status. */
struct run {
  int status;
  char out[1 << 16];
};

/* Whether discovery (the real loader: no shim in this process) selects a
 * usable device, as a worker's open needs. */
static bool a_device_here(void) {
  bml_devices *d = NULL;
  if (bml_devices_discover(NULL, &d) != 0 || !d) return false;
  bool any = false;
  for (size_t i = 0; i < bml_devices_count(d); i++) {
    const bml_device *v = bml_devices_get(d, i);
    any |= v->usable && v->selected;
  }
  bml_devices_free(d);
  return any;
}

static void setup(void) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_LIMIT");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  setenv("BANKML_GPU_SHARE", "0.5", 1); /* no calibration: the opens are about the faults */
  if (!*CLSHIM_REAL_LOADER) cr_skip_test("configure found no libOpenCL.so.1 to forward to (OPENCL_LOADER)");
  /* decided here, without faults: under them an open's own enumeration
   * may fail and say "no OpenCL device", which is then what it must say */
  if (!a_device_here()) cr_skip_test("no OpenCL device for a worker here");
}

TestSuite(clfaults, .init = setup, .timeout = 60);

/* Runs tests/load through the shim with seed and the arguments; keeps the
 * last 64 KB of what it printed. */
static void run_load(struct run *r, const char *seed, const char *args) {
  const char *top = getenv("BANKML_TOP_BUILDDIR");
  cr_assert_not_null(top, "BANKML_TOP_BUILDDIR is not set (run through make check)");
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "LD_LIBRARY_PATH='%s/tests/clshim/.libs'${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} CLSHIM_SEED=%s "
           "exec '%s/tests/load' --faults %s 2>&1",
           top, seed, top, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p, "%s", cmd);
  size_t len = 0;
  char chunk[4096];
  for (size_t n; (n = fread(chunk, 1, sizeof chunk, p)) > 0;) {
    if (len + n >= sizeof r->out) { /* keep the end: the summary */
      size_t drop = len + n - sizeof r->out + 1;
      memmove(r->out, r->out + drop, len - drop);
      len -= drop;
    }
    memcpy(r->out + len, chunk, n);
    len += n;
  }
  r->out[len] = '\0';
  int st = pclose(p);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A number printed after `label` in the output, or -1. */
static long number_after(const char *out, const char *label) {
  const char *at = strstr(out, label);
  return at ? strtol(at + strlen(label), NULL, 10) : -1;
}

/* Opens with every class of call failing now and then (an open makes
 * about 4000 calls: at these rates nearly every open meets a fault): each
 * open that gives no worker says why, and none leaves an OpenCL object
 * alive.  (CI's longer runs, .ci/run, mix opens that succeed under faults
 * with ones refused.) */
Test(clfaults, opens_that_fail_say_why_and_leave_nothing_alive) {
  static struct run r;
  run_load(&r, "1", "--opens 3 --open-rates all=0.002,build=0.05 --threads 2 --seconds 0.2");
  cr_expect_eq(r.status, 0, "exit %d:\n%s", r.status, r.out);
  cr_expect(strstr(r.out, "load: every result exact\n") != NULL, "%s", r.out);
  long opened = number_after(r.out, "opens: ");
  cr_expect(opened >= 0 && opened < 3, "%ld of 3 opens gave a worker: the faults refused none:\n%s", opened, r.out);
  cr_expect(strstr(r.out, ": no worker: GPU not used: ") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "OpenCL objects still alive") == NULL, "%s", r.out);
}

/* Under load from four threads, with enqueues, maps, flushes, finishes,
 * waits and event statuses failing: every product is the CPU's bits, and
 * closing the worker leaves no OpenCL object alive. */
Test(clfaults, products_under_faults_from_several_threads_stay_exact) {
  static struct run r;
  run_load(&r, "8",
           "--threads 4 --seconds 3 "
           "--load-rates create=0.01,enqueue=0.004,map=0.01,flush=0.01,finish=0.01,wait=0.01,status=0.005,"
           "failed=0.01,setarg=0.002");
  cr_expect_eq(r.status, 0, "exit %d:\n%s", r.status, r.out);
  cr_expect(strstr(r.out, "load: every result exact\n") != NULL, "%s", r.out);
  cr_expect(number_after(r.out, "faults injected under load: ") > 0, "no fault was injected under load:\n%s", r.out);
  /* the card computed, and errors on it gave products to the CPU */
  cr_expect(number_after(r.out, "products_on_card ") > 0, "%s", r.out);
  cr_expect(number_after(r.out, "products_on_cpu_error ") > 0, "no error reached a product:\n%s", r.out);
  cr_expect(number_after(r.out, "mat_vec ") > 0 && number_after(r.out, "batch ") > 0, "%s", r.out);
  cr_expect(strstr(r.out, "OpenCL objects still alive") == NULL, "%s", r.out);
}
