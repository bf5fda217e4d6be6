/* fakeicdtest.c -- what the fake ICD's tests share (fakeicdtest.h). */
#include "fakeicdtest.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Setup: the environment the loader reads once, on the first call     */
/* ------------------------------------------------------------------ */

const char *env_dir(const char *name)
{
  const char *dir = getenv(name);
  cr_assert(dir != NULL && dir[0] != '\0', "%s is not set: run the suite through `make check'", name);
  return dir;
}

/* conf: a scenario in tests/fakeicd/, an absolute path, or NULL for none. */
void use_scenario(const char *conf)
{
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fakeicd/vendors", env_dir("BANKML_TOP_BUILDDIR"));
  cr_assert_eq(setenv("OCL_ICD_VENDORS", path, 1), 0);
  unsetenv("OCL_ICD_PLATFORM_SORT");
  unsetenv("OCL_ICD_DEFAULT_PLATFORM");
  unsetenv("OPENCL_LAYERS");
  if (conf == NULL) {
    unsetenv("BML_FAKEICD_CONFIG");
    return;
  }
  if (conf[0] == '/')
    snprintf(path, sizeof path, "%s", conf);
  else
    snprintf(path, sizeof path, "%s/tests/fakeicd/%s", env_dir("BANKML_TOP_SRCDIR"), conf);
  cr_assert_eq(setenv("BML_FAKEICD_CONFIG", path, 1), 0);
}

/* Writes text to a fresh file in $TMPDIR and uses it as the scenario;
 * path receives its name (the caller unlinks it). */
void use_text_scenario(const char *text, char *path, size_t size)
{
  const char *tmp = getenv("TMPDIR");
  snprintf(path, size, "%s/fakeicd-XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0, "mkstemp %s", path);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  cr_assert_eq(fputs(text, f) >= 0, 1);
  cr_assert_eq(fclose(f), 0);
  use_scenario(path);
}

/* ------------------------------------------------------------------ */
/* Queries that must succeed                                           */
/* ------------------------------------------------------------------ */

cl_uint list_platforms(cl_platform_id *platforms)
{
  cl_uint n = 0;
  cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &n);
  cr_assert_eq(err, CL_SUCCESS, "clGetPlatformIDs: %d", err);
  cr_assert_leq(n, MAX_PLATFORMS);
  return n;
}

void platform_string(cl_platform_id p, cl_platform_info param, char *buf, size_t size)
{
  size_t len = 0;
  cl_int err = clGetPlatformInfo(p, param, size, buf, &len);
  cr_assert_eq(err, CL_SUCCESS, "clGetPlatformInfo(0x%x): %d", (unsigned)param, err);
  cr_assert_eq(len, strlen(buf) + 1, "a string's size counts its NUL");
}

/* The one platform called name (it must be there exactly once). */
cl_platform_id platform_named(const char *name)
{
  cl_platform_id all[MAX_PLATFORMS], found = NULL;
  cl_uint n = list_platforms(all);
  for (cl_uint i = 0; i < n; i++) {
    char got[256];
    platform_string(all[i], CL_PLATFORM_NAME, got, sizeof got);
    if (strcmp(got, name) != 0)
      continue;
    cr_assert_null(found, "platform \"%s\" is listed twice", name);
    found = all[i];
  }
  cr_assert_not_null(found, "no platform \"%s\"", name);
  return found;
}

cl_device_id only_device(cl_platform_id p)
{
  cl_device_id d = NULL;
  cl_uint n = 0;
  cl_int err = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 1, &d, &n);
  cr_assert_eq(err, CL_SUCCESS, "clGetDeviceIDs: %d", err);
  cr_assert_eq(n, 1);
  cr_assert_not_null(d);
  return d;
}

cl_device_id device_of(const char *platform_name)
{
  return only_device(platform_named(platform_name));
}

/* A fixed-size value: the size answered must be exactly `size`. */
void device_value(cl_device_id d, cl_device_info param, void *out, size_t size)
{
  size_t got = 0;
  cl_int err = clGetDeviceInfo(d, param, size, out, &got);
  cr_assert_eq(err, CL_SUCCESS, "clGetDeviceInfo(0x%x): %d", (unsigned)param, err);
  cr_assert_eq(got, size, "clGetDeviceInfo(0x%x) size", (unsigned)param);
}


bool device_strings_are(cl_device_id d, const struct want_str *want, size_t n)
{
  bool all = true;
  for (size_t i = 0; i < n; i++) {
    char got[2048] = "";
    size_t len = 0;
    cl_int err = clGetDeviceInfo(d, want[i].param, sizeof got, got, &len);
    if (err != CL_SUCCESS || strcmp(got, want[i].value) != 0 || len != strlen(want[i].value) + 1) {
      cr_log_error("param 0x%x: error %d, \"%s\" of %zu bytes, want \"%s\"", (unsigned)want[i].param, err, got,
                   len, want[i].value);
      all = false;
    }
  }
  return all;
}

bool device_numbers_are(cl_device_id d, const struct want_num *want, size_t n)
{
  bool all = true;
  for (size_t i = 0; i < n; i++) {
    cl_uint u32 = 0;
    cl_ulong u64 = 0;
    if (want[i].size == sizeof u32) {
      device_value(d, want[i].param, &u32, sizeof u32);
      u64 = u32;
    } else {
      device_value(d, want[i].param, &u64, sizeof u64);
    }
    if (u64 != want[i].value) {
      cr_log_error("param 0x%x: %llu, want %llu", (unsigned)want[i].param, (unsigned long long)u64,
                   (unsigned long long)want[i].value);
      all = false;
    }
  }
  return all;
}
