/* test_fakeicd_scenarios.c -- the fake OpenCL ICD's scenario files: their syntax, bad and oversized ones refused, ocl-icd's own behaviour. */
#include "fakeicdtest.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Scenario syntax                                                     */
/* ------------------------------------------------------------------ */

Test(fakeicd, scenario_syntax_variants) {
  static const char text[] =
    "; a comment\r\n"
    "  # another\n"
    "\n"
    "[ platform ]\r\n"
    "name=Tight Spacing\r\n"
    "version = OpenCL 1.2 old\n"
    "[device]\n"
    "type = gpu,default\n"
    "uuid = 00112233445566778899AABBCCDDEEFF\n"
    "global_mem = 512MiB\n"
    "local_mem = 0x8000\n"
    "fp32_config = 0x5\n"
    "host_unified = yes\n"
    "extensions =\n";
  static const struct want_num numbers[] = {
    {CL_DEVICE_TYPE, 8, CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_DEFAULT},
    {CL_DEVICE_GLOBAL_MEM_SIZE, 8, 512ull << 20},
    {CL_DEVICE_MAX_MEM_ALLOC_SIZE, 8, 128ull << 20},
    {CL_DEVICE_LOCAL_MEM_SIZE, 8, 0x8000},
    {CL_DEVICE_SINGLE_FP_CONFIG, 8, 5},
    {CL_DEVICE_HOST_UNIFIED_MEMORY, 4, CL_TRUE},
  };
  static const struct want_str strings[] = {{CL_DEVICE_EXTENSIONS, ""}, {CL_DEVICE_NAME, "Fake Device"}};
  char path[4096];
  cl_device_id d;
  cl_uchar uuid[16];
  use_text_scenario(text, path, sizeof path);
  d = device_of("Tight Spacing");
  unlink(path);
  cr_expect(device_numbers_are(d, numbers, COUNT(numbers)), "device numbers");
  cr_expect(device_strings_are(d, strings, COUNT(strings)), "device strings");
  device_value(d, CL_DEVICE_UUID_KHR, uuid, sizeof uuid);
  cr_expect(uuid[0] == 0x00 && uuid[1] == 0x11 && uuid[15] == 0xff);
}

/* Runs the loader's first call with stderr going to a file; text gets what was written. */
static cl_int first_call_capturing_stderr(cl_uint *n, char *text, size_t size)
{
  FILE *tmp = tmpfile();
  int saved;
  cl_int err;
  size_t len;
  cr_assert_not_null(tmp);
  fflush(stderr);
  saved = dup(2);
  cr_assert_geq(dup2(fileno(tmp), 2), 0);
  err = clGetPlatformIDs(0, NULL, n);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(tmp);
  len = fread(text, 1, size - 1, tmp);
  text[len] = '\0';
  fclose(tmp);
  return err;
}

/* A rejected scenario: both libraries name file:line and present nothing. */
static void expect_rejected(const char *path, const char *where)
{
  char err_text[8192];
  char needle[4352];
  cl_uint n = 99;
  cr_assert_eq(first_call_capturing_stderr(&n, err_text, sizeof err_text), CL_PLATFORM_NOT_FOUND_KHR);
  cr_assert_eq(n, 0);
  snprintf(needle, sizeof needle, "fakeicd[a]: %s:%s", path, where);
  cr_expect_not_null(strstr(err_text, needle), "want \"%s\" in:\n%s", needle, err_text);
  snprintf(needle, sizeof needle, "fakeicd[b]: %s:%s", path, where);
  cr_expect_not_null(strstr(err_text, needle), "want \"%s\" in:\n%s", needle, err_text);
}

Test(fakeicd, shipped_bad_scenario_is_rejected) {
  char path[4096];
  use_scenario("bad.conf");
  snprintf(path, sizeof path, "%s", getenv("BML_FAKEICD_CONFIG"));
  expect_rejected(path, "5: unknown key 'pci' in [platform]");
}

/* Parameters are copied into the test's own process: arrays, not pointers. */
struct bad_case {
  char text[96];
  char where[96];  /* "LINE: message start" */
};

ParameterizedTestParameters(fakeicd, bad_scenarios_are_rejected) {
  static struct bad_case cases[] = {
    {"[platform]\nbogus = 1\n", "2: unknown key 'bogus' in [platform]"},
    {"[platform]\n[device]\nicd = a\n", "3: unknown key 'icd' in [device]"},
    {"[device]\n", "1: [device] before any [platform]"},
    {"name = x\n", "1: 'name' before any [platform]"},
    {"[platform]\n[gadget]\n", "2: unknown section [gadget]"},
    {"[platform\n", "1: expected [platform] or [device]"},
    {"[platform]\njust words\n", "2: expected key = value"},
    {"[platform]\nname = a\nname = b\n", "3: name given twice"},
    {"[platform]\nicd = c\n", "2: icd = c: expected a or b"},
    {"[platform]\nget_device_ids_error = CL_BOGUS\n", "2: get_device_ids_error = CL_BOGUS: expected an OpenCL error"},
    {"[platform]\nget_device_ids_error = 3\n", "2: get_device_ids_error = 3: expected an OpenCL error"},
    {"[platform]\n[device]\ncreate_context_error = CL_SUCCESS\n", "3: create_context_error = CL_SUCCESS: expected"},
    {"[platform]\n[device]\nvendor_id = 0x1g\n", "3: vendor_id = 0x1g: expected an unsigned number"},
    {"[platform]\n[device]\nvendor_id = -1\n", "3: vendor_id = -1: expected an unsigned number"},
    {"[platform]\n[device]\ncompute_units = 010x\n", "3: compute_units = 010x: expected an unsigned number"},
    {"[platform]\n[device]\ncompute_units = 4294967296\n", "3: compute_units = 4294967296: too large for 32 bits"},
    {"[platform]\n[device]\nglobal_mem = 16Q\n", "3: global_mem = 16Q: expected an unsigned number"},
    {"[platform]\n[device]\nglobal_mem = 99999999999T\n", "3: global_mem = 99999999999T: too large"},
    {"[platform]\n[device]\ntype = tpu\n", "3: type = tpu: expected gpu"},
    {"[platform]\n[device]\ntype =\n", "3: type = : expected gpu"},
    {"[platform]\n[device]\nhost_unified = maybe\n", "3: host_unified = maybe: expected 0, 1"},
    {"[platform]\n[device]\nfp32_config = fma,turbo\n", "3: fp32_config = fma,turbo: expected a number or a list"},
    {"[platform]\n[device]\npci = 0000:03:00\n", "3: pci = 0000:03:00: expected a PCI address"},
    {"[platform]\n[device]\npci = 0000:03:20.0\n", "3: pci = 0000:03:20.0: expected a PCI address"},
    {"[platform]\n[device]\npci = 03:00.0\n", "3: pci = 03:00.0: expected a PCI address"},
    {"[platform]\n[device]\npci = 0000:03:00.0x\n", "3: pci = 0000:03:00.0x: expected a PCI address"},
    {"[platform]\n[device]\namd_topology = 0c:00\n", "3: amd_topology = 0c:00: expected BB:DD.F"},
    {"[platform]\n[device]\nuuid = 1234\n", "3: uuid = 1234: expected 32 hex digits"},
    {"[platform]\n[device]\nuuid = 00112233445566778899aabbccddeeff00\n", "3: uuid = 00112233445566778899aabbccddeeff00: expected 32"},
  };
  return cr_make_param_array(struct bad_case, cases, COUNT(cases));
}

ParameterizedTest(struct bad_case *c, fakeicd, bad_scenarios_are_rejected) {
  char path[4096];
  use_text_scenario(c->text, path, sizeof path);
  expect_rejected(path, c->where);
  unlink(path);
}

Test(fakeicd, missing_scenario_file_is_reported) {
  char err_text[4096];
  cl_uint n = 99;
  use_scenario("/nonexistent/fakeicd.conf");
  cr_assert_eq(first_call_capturing_stderr(&n, err_text, sizeof err_text), CL_PLATFORM_NOT_FOUND_KHR);
  cr_expect_eq(n, 0);
  cr_expect_not_null(strstr(err_text, "fakeicd[a]: /nonexistent/fakeicd.conf: No such file"), "%s", err_text);
}

/* Scenarios too big to write out: built by generated_text(). */
enum generated { LONG_VALUE, LONG_LINE, TOO_MANY_PLATFORMS, TOO_MANY_DEVICES };

struct generated_case {
  enum generated kind;
  char where[64];
};

static void generated_text(enum generated kind, char *text, size_t size)
{
  size_t len;
  if (kind == LONG_VALUE) {
    snprintf(text, size, "[platform]\n[device]\nvendor = %0300d\n", 0);
  } else if (kind == LONG_LINE) {
    snprintf(text, size, "[platform]\n[device]\nname = %05000d\n", 0);
  } else {
    /* Alternating libraries: the limits hold for the whole file. */
    int devices = kind == TOO_MANY_DEVICES;
    snprintf(text, size, "[platform]\nicd = a\n");
    for (int i = 0; i < (devices ? 65 : 16) && (len = strlen(text)) + 24 < size; i++)
      snprintf(text + len, size - len, devices ? "[device]\n" : "[platform]\nicd = %c\n", "ba"[i % 2]);
  }
}

ParameterizedTestParameters(fakeicd, oversized_scenarios_are_rejected) {
  static struct generated_case cases[] = {
    {LONG_VALUE, "3: vendor = 000"},
    {LONG_LINE, "3: line longer than"},
    {TOO_MANY_PLATFORMS, "33: more than 16 platforms"},
    {TOO_MANY_DEVICES, "67: more than 64 devices"},
  };
  return cr_make_param_array(struct generated_case, cases, COUNT(cases));
}

ParameterizedTest(struct generated_case *c, fakeicd, oversized_scenarios_are_rejected) {
  char text[8192], path[4096];
  generated_text(c->kind, text, sizeof text);
  use_text_scenario(text, path, sizeof path);
  expect_rejected(path, c->where);
  unlink(path);
}

/* ------------------------------------------------------------------ */
/* ocl-icd's own behaviour, which the discovery code relies on         */
/* ------------------------------------------------------------------ */

static void skip_unless_ocl_icd(void)
{
  if (clGetExtensionFunctionAddress("clGetICDLoaderInfoOCLICD") == NULL)
    cr_skip_test("the loader is not ocl-icd");
}

Test(fakeicd, ocl_icd_skips_a_platform_without_cl_khr_icd) {
  char path[4096];
  cl_platform_id all[MAX_PLATFORMS];
  use_text_scenario("[platform]\nname = No ICD Extension\nextensions = cl_khr_fp64\n[device]\n"
                    "[platform]\nname = Fine\n[device]\n", path, sizeof path);
  skip_unless_ocl_icd();
  unlink(path);
  cr_assert_eq(list_platforms(all), 1);
  platform_named("Fine");
}

/* Copies the .icd file `from` (in the build's vendors directory) to dir/to. */
static void copy_icd(const char *from, const char *dir, const char *to)
{
  char src[4096], dst[4096], line[4096];
  FILE *in, *out;
  snprintf(src, sizeof src, "%s/tests/fakeicd/vendors/%s", env_dir("BANKML_TOP_BUILDDIR"), from);
  snprintf(dst, sizeof dst, "%s/%s", dir, to);
  cr_assert_not_null(in = fopen(src, "r"), "%s", src);
  cr_assert_not_null(fgets(line, sizeof line, in));
  fclose(in);
  cr_assert_not_null(out = fopen(dst, "w"), "%s", dst);
  fputs(line, out);
  cr_assert_eq(fclose(out), 0);
}

Test(fakeicd, ocl_icd_lists_one_library_registered_twice_twice) {
  static const char *const icds[] = {"fake_a.icd", "fake_a_again.icd", "fake_b.icd"};
  const char *tmp = getenv("TMPDIR");
  char dir[4096], path[4200];
  cl_platform_id all[MAX_PLATFORMS], discrete;
  cl_uint n, seen = 0;
  use_scenario("mixed.conf");
  snprintf(dir, sizeof dir, "%s/fakeicd-vendors-XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
  copy_icd("fake_a.icd", dir, icds[0]);
  copy_icd("fake_a.icd", dir, icds[1]);
  copy_icd("fake_b.icd", dir, icds[2]);
  cr_assert_eq(setenv("OCL_ICD_VENDORS", dir, 1), 0);
  skip_unless_ocl_icd();
  n = list_platforms(all);
  for (size_t i = 0; i < COUNT(icds); i++) {
    snprintf(path, sizeof path, "%s/%s", dir, icds[i]);
    unlink(path);
  }
  rmdir(dir);
  cr_assert_eq(n, 6 + 4, "library a's four platforms come twice");
  discrete = NULL;
  for (cl_uint i = 0; i < n; i++) {
    char name[256];
    platform_string(all[i], CL_PLATFORM_NAME, name, sizeof name);
    if (strcmp(name, "Fake Discrete") != 0)
      continue;
    cr_expect(discrete == NULL || discrete == all[i], "the same handle both times");
    discrete = all[i];
    seen++;
  }
  cr_expect_eq(seen, 2);
}
