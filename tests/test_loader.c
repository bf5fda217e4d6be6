/* test_loader.c -- the OpenCL ICD loader opened at run time: no loader, no driver registered, drivers that cannot be loaded; nothing links libOpenCL. */
#define _GNU_SOURCE
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/device.h"
#include "runcli.h"
#include "cpu/gen.h"

/* A loader file name that exists nowhere: the machine without the loader
 * (BANKML_TEST_OPENCL_LOADER is the tests' way to say it). */
#define NO_LOADER "libOpenCL-absent-for-bankml-cl-tests.so.1"

static void clean_environment(void) {
  unsetenv("BANKML_TEST_OPENCL_LOADER");
  unsetenv("OCL_ICD_FILENAMES");
  unsetenv("OPENCL_VENDOR_PATH");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SOFTWARE");
  unsetenv("BANKML_THREADS");
}

TestSuite(loader, .init = clean_environment, .timeout = 60);

static bml_devices *discover(void) {
  bml_devices *d = NULL;
  int rc = bml_devices_discover(NULL, &d);
  cr_assert_eq(rc, 0, "discover: %s", bml_strerror(rc));
  return d;
}

/* The notes holding needle, and the last of them in *note. */
static size_t notes_with(const bml_devices *l, const char *needle, const char **note) {
  size_t n = 0;
  for (size_t i = 0; i < bml_devices_note_count(l); i++)
    if (strstr(bml_devices_note(l, i), needle)) {
      n++;
      if (note) *note = bml_devices_note(l, i);
    }
  return n;
}

static json_t *report(const bml_devices *l) {
  char *text = NULL;
  cr_assert_eq(bml_devices_report_json(l, 0, &text), 0);
  json_t *root = json_loads(text, 0, NULL);
  cr_assert_not_null(root, "not JSON: %s", text);
  free(text);
  return root;
}

/* Each word must be in s. */
static void expect_words(const char *s, const char *const *words, size_t n) {
  for (size_t i = 0; i < n; i++) cr_expect(strstr(s, words[i]) != NULL, "no \"%s\" in: %s", words[i], s);
}

/* What the note for a missing loader or driver names: the packages of
 * each vendor family. */
static const char *const driver_packages[] = {"intel-opencl-icd", "mesa-opencl-icd", "pocl-opencl-icd",
                                              "NVIDIA", "Mali", "Adreno"};

/* ---- no loader ---------------------------------------------------------------- */

Test(loader, without_a_loader_the_listing_is_empty_with_one_note_naming_the_packages) {
  setenv("BANKML_TEST_OPENCL_LOADER", NO_LOADER, 1);
  bml_devices *l = discover();
  cr_expect_eq(bml_devices_count(l), 0);
  cr_assert_eq(bml_devices_note_count(l), 1, "one note, not %zu", bml_devices_note_count(l));
  const char *note = bml_devices_note(l, 0);
  const char *const words[] = {"no OpenCL ICD loader", NO_LOADER, "cannot open shared object file",
                               "ocl-icd-libopencl1", "runs on the CPU"};
  expect_words(note, words, sizeof words / sizeof *words);
  expect_words(note, driver_packages, sizeof driver_packages / sizeof *driver_packages);
  json_t *root = report(l), *loader = json_object_get(root, "icd_loader");
  cr_expect(json_is_false(json_object_get(loader, "loaded")));
  cr_expect_str_eq(json_string_value(json_object_get(loader, "library")), NO_LOADER);
  cr_expect(strstr(json_string_value(json_object_get(loader, "error")), NO_LOADER) != NULL);
  cr_expect(json_is_null(json_object_get(loader, "version")));
  cr_expect_eq(json_array_size(json_object_get(loader, "missing_entry_points")), 0);
  json_decref(root);
  bml_devices_free(l);
}

/* Every member of the table is a stand-in that fails with BML_ENOTSUP:
 * a call made anyway is an error, not a crash. */
Test(loader, without_a_loader_every_entry_point_fails_cleanly) {
  setenv("BANKML_TEST_OPENCL_LOADER", NO_LOADER, 1);
  cl_uint n = 7;
  cr_expect_eq(clGetPlatformIDs(0, NULL, &n), BML_ENOTSUP);
  cl_int err = CL_SUCCESS;
  cr_expect_null(clCreateContext(NULL, 0, NULL, NULL, NULL, &err));
  cr_expect_eq(err, BML_ENOTSUP);
  err = CL_SUCCESS;
  cr_expect_null(clEnqueueMapBuffer(NULL, NULL, CL_TRUE, 0, 0, 4, 0, NULL, NULL, &err));
  cr_expect_eq(err, BML_ENOTSUP);
  cr_expect_null(clCreateBuffer(NULL, 0, 4, NULL, NULL), "a NULL errcode_ret is not written");
  cr_expect_eq(clFinish(NULL), BML_ENOTSUP);
  const bml__cl_loader *s = bml__cl_loader_state();
  cr_expect(!s->loaded);
  cr_expect_eq(s->nmissing, 0, "no loader is not a loader lacking entry points");
  char name[64], vendor[64], version[64], ocl[64];
  cr_expect(!bml__cl_loader_info(name, vendor, version, ocl, sizeof name));
  cr_expect_str_empty(version);
}

Test(loader, without_a_loader_the_cpu_computes_and_no_worker_opens) {
  setenv("BANKML_TEST_OPENCL_LOADER", NO_LOADER, 1);
  enum { ROWS = 64, N = 512 };
  static bml_block_q1_0 w[ROWS * N / 128];
  static bml_block_q8_0 a[N / 32];
  static float ref[ROWS], out[ROWS];
  uint64_t seed = 38;
  bml__gen_q1_0(&seed, w, ROWS, N, false);
  cr_assert_eq(bml__gen_q8_0(&seed, a, N, false), 0);
  cr_assert_eq(bml_q1_0_mat_vec(w, ROWS, N, a, ref), 0);
  bml_pool *pool = NULL;
  cr_assert_eq(bml_pool_open(2, &pool), 0);
  cr_expect_eq(bml_pool_q1_0_mat_vec(pool, w, ROWS, N, a, out), 0);
  cr_expect_arr_eq(out, ref, sizeof ref, "the pool's bits differ from the single-thread kernel's");
  bml_worker *worker = (bml_worker *)&worker;
  cr_expect_eq(bml_worker_open(pool, &worker), 0);
  cr_expect_null(worker, "a worker opened with no loader");
  bml_worker_close(worker);
  bml_pool_close(pool);
}

/* ---- the loader, with no driver or broken ones ----------------------------- */

/* A fresh directory for .icd files, as OCL_ICD_VENDORS; its path in dir. */
static void vendors_dir(char *dir, size_t len) {
  snprintf(dir, len, "/tmp/bankml-cl-vendors-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  setenv("OCL_ICD_VENDORS", dir, 1);
}

/* dir/name holding the line. */
static void write_icd(const char *dir, const char *name, const char *line) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "cannot write %s", path);
  fprintf(f, "%s\n", line);
  cr_assert_eq(fclose(f), 0);
}

/* Removes dir and the .icd files in it. */
static void remove_dir(const char *dir, const char *const *names, size_t n) {
  char path[512];
  for (size_t i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
}

Test(loader, no_driver_registered_says_what_to_install) {
  char dir[64];
  vendors_dir(dir, sizeof dir);
  bml_devices *l = discover();
  rmdir(dir);
  cr_expect_eq(bml_devices_count(l), 0);
  const char *note = NULL;
  cr_assert_eq(notes_with(l, "no OpenCL driver is registered", &note), 1);
  const char *const words[] = {dir, "holds no .icd file", "OCL_ICD_VENDORS", "/etc/OpenCL/vendors"};
  expect_words(note, words, sizeof words / sizeof *words);
  expect_words(note, driver_packages, sizeof driver_packages / sizeof *driver_packages);
  cr_expect_eq(notes_with(l, "no OpenCL ICD loader", NULL), 0);
  json_t *root = report(l);
  cr_expect(json_is_true(json_object_get(json_object_get(root, "icd_loader"), "loaded")));
  json_decref(root);
  bml_devices_free(l);
}

/* An .icd file whose library does not exist, and one naming a file that is
 * not a library: each named with its library and dlerror()'s words; then
 * what to reinstall. */
Test(loader, icd_files_whose_library_cannot_be_loaded_are_named_with_the_error) {
  const char *src = getenv("BANKML_TOP_SRCDIR");
  cr_assert_not_null(src);
  char dir[64], text_file[4096];
  vendors_dir(dir, sizeof dir);
  snprintf(text_file, sizeof text_file, "%s/tests/fakeicd/README.md", src);
  write_icd(dir, "missing.icd", "/nonexistent/libbankml-cl-no-driver.so");
  write_icd(dir, "text.icd", text_file);
  bml_devices *l = discover();
  const char *const names[] = {"missing.icd", "text.icd"};
  remove_dir(dir, names, 2);
  cr_expect_eq(bml_devices_count(l), 0);
  const char *note = NULL;
  cr_assert_eq(notes_with(l, "missing.icd names the driver /nonexistent/libbankml-cl-no-driver.so, which cannot be "
                             "loaded (/nonexistent/libbankml-cl-no-driver.so: cannot open shared object file", &note),
               1, "the missing library is not named with its error");
  cr_assert_eq(notes_with(l, "text.icd names the driver ", &note), 1);
  cr_expect(strstr(note, text_file) && (strstr(note, "ELF") || strstr(note, "format")), "%s", note);
  cr_assert_eq(notes_with(l, "none of the 2 drivers registered in", &note), 1);
  expect_words(note, driver_packages, sizeof driver_packages / sizeof *driver_packages);
  cr_expect_eq(notes_with(l, "no OpenCL driver is registered", NULL), 0);
  bml_devices_free(l);
}

/* A broken .icd beside a working driver: the driver's devices are listed,
 * the broken file named, and no "no platform" note. */
Test(loader, a_broken_icd_beside_a_working_driver_is_named_and_the_devices_listed) {
  const char *build = getenv("BANKML_TOP_BUILDDIR"), *src = getenv("BANKML_TOP_SRCDIR");
  cr_assert(build && src);
  char dir[64], path[4096], lib[4096] = "";
  vendors_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/tests/fakeicd/vendors/fake_a.icd", build);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "no %s (make check builds it)", path);
  cr_assert_not_null(fgets(lib, sizeof lib, f));
  fclose(f);
  lib[strcspn(lib, "\n")] = '\0';
  write_icd(dir, "fake_a.icd", lib);
  write_icd(dir, "gone.icd", "libbankml-cl-gone-driver.so.1");
  snprintf(path, sizeof path, "%s/tests/fakeicd/nvidia.conf", src);
  setenv("BML_FAKEICD_CONFIG", path, 1);
  bml_devices *l = discover();
  const char *const names[] = {"fake_a.icd", "gone.icd"};
  remove_dir(dir, names, 2);
  cr_expect_eq(bml_devices_count(l), 1, "the working driver's card is listed");
  cr_expect_eq(notes_with(l, "gone.icd names the driver libbankml-cl-gone-driver.so.1, which cannot be loaded", NULL),
               1);
  cr_expect_eq(notes_with(l, "no OpenCL platform", NULL), 0);
  bml_devices_free(l);
}

/* ocl-icd (and the Khronos loader) describe themselves through cl_icdl. */
Test(loader, the_loader_describes_itself_in_the_report) {
  char dir[64];
  vendors_dir(dir, sizeof dir); /* no driver: the loader alone */
  bml_devices *l = discover();
  rmdir(dir);
  json_t *root = report(l), *loader = json_object_get(root, "icd_loader");
  bml_devices_free(l);
  cr_expect(json_is_true(json_object_get(loader, "loaded")));
  cr_expect_str_eq(json_string_value(json_object_get(loader, "library")), "libOpenCL.so.1");
  cr_expect(json_is_null(json_object_get(loader, "error")));
  cr_expect_eq(json_array_size(json_object_get(loader, "missing_entry_points")), 0,
               "this loader lacks entry points bankml-cl calls");
  json_t *version = json_object_get(loader, "version"), *ocl = json_object_get(loader, "opencl_version");
  if (json_is_null(version)) {
    json_decref(root);
    cr_skip_test("this ICD loader does not answer clGetICDLoaderInfoOCLICD (ocl-icd-libopencl1 does)");
  }
  cr_expect(json_string_length(version) > 0);
  cr_expect(strncmp(json_string_value(ocl), "OpenCL ", 7) == 0, "%s", json_string_value(ocl));
  json_decref(root);
}

/* ---- nothing links the loader ------------------------------------------------ */

/* ldd's output for path (with the build's libraries first). */
static char *ldd(const char *path) {
  const char *build = getenv("BANKML_TOP_BUILDDIR");
  cr_assert_not_null(build);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "no %s", path);
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH='%s/src/.libs' ldd '%s' 2>&1", build, path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  static char out[16384];
  size_t len = fread(out, 1, sizeof out - 1, p);
  out[len] = '\0';
  cr_assert_eq(pclose(p), 0, "%s: %s", cmd, out);
  return out;
}

/* The dynamic linker must be able to start both without libOpenCL (nor
 * CLBlast, which needs it): neither may depend on it, directly or
 * through another library. */
Test(loader, neither_the_library_nor_the_command_depends_on_the_loader) {
  const char *build = getenv("BANKML_TOP_BUILDDIR");
  cr_assert_not_null(build);
  char path[4096];
  snprintf(path, sizeof path, "%s/src/.libs/libbankml-cl.so", build);
  const char *lib = ldd(path);
  cr_expect(strstr(lib, "libjansson") != NULL, "ldd lists no dependency: %s", lib);
  cr_expect(strstr(lib, "libOpenCL") == NULL, "libbankml-cl depends on the loader: %s", lib);
  snprintf(path, sizeof path, "%s/src/.libs/bankml-cl", build);
  const char *cmd = ldd(path);
  cr_expect(strstr(cmd, "libbankml-cl.so") != NULL && strstr(cmd, "not found") == NULL, "%s", cmd);
  cr_expect(strstr(cmd, "libOpenCL") == NULL, "the command depends on the loader: %s", cmd);
  cr_expect(strstr(cmd, "libclblast") == NULL, "the command depends on CLBlast: %s", cmd);
}

Test(loader, without_a_loader_the_command_starts_and_runs_on_the_cpu) {
  setenv("BANKML_TEST_OPENCL_LOADER", NO_LOADER, 1);
  struct run r = RUN("--version");
  cr_expect_eq(r.status, 0, "%s", r.err);
  run_free(&r);
  r = RUN("devices", "--brief");
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "no OpenCL device found") && strstr(r.out, "note: no OpenCL ICD loader: ") &&
                strstr(r.out, "ocl-icd-libopencl1"),
            "%s", r.out);
  run_free(&r);
  r = RUN("devices", "--verify");
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.out, "no usable GPU found; bankml-cl runs on the CPU") != NULL, "%s", r.out);
  run_free(&r);
  r = RUN("bench", "--cpu", "--shape", "256x512", "--runs", "1", "--warmup", "0", "--threads", "1", "--json");
  cr_expect_eq(r.status, 0, "%s", r.err);
  json_t *root = json_loads(r.out, 0, NULL);
  json_t *rows = json_object_get(root, "results");
  cr_expect_eq(json_array_size(rows), 2, "%s", r.out);
  for (size_t i = 0; i < json_array_size(rows); i++)
    cr_expect(json_is_true(json_object_get(json_array_get(rows, i), "exact")), "%s", r.out);
  json_decref(root);
  run_free(&r);
  r = RUN("bench", "--card", "--shape", "256x512", "--runs", "1");
  cr_expect_eq(r.status, 3, "%s", r.err);
  cr_expect(strstr(r.err, "no card is used here") != NULL, "%s", r.err);
  run_free(&r);
}
