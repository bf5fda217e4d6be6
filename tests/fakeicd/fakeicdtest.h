/* fakeicdtest.h -- what the fake ICD's tests share: the scenario chosen, queries that must succeed, tables of answers. */
#ifndef BML_FAKEICDTEST_H
#define BML_FAKEICDTEST_H

#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS /* clGetExtensionFunctionAddress */
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <stdbool.h>
#include <stddef.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_PLATFORMS 32

/* The directory the environment variable name gives (make check sets it). */
const char *env_dir(const char *name);
/* conf: a scenario in tests/fakeicd/, an absolute path, or NULL for none. */
void use_scenario(const char *conf);
/* Writes text to a fresh file in $TMPDIR and uses it as the scenario;
 * path receives its name (the caller unlinks it). */
void use_text_scenario(const char *text, char *path, size_t size);

/* Queries that must succeed (each asserts it did). */
cl_uint list_platforms(cl_platform_id *platforms);
void platform_string(cl_platform_id p, cl_platform_info param, char *buf, size_t size);
/* The one platform called name (it must be there exactly once). */
cl_platform_id platform_named(const char *name);
cl_device_id only_device(cl_platform_id p);
cl_device_id device_of(const char *platform_name);
/* A fixed-size value: the size answered must be exactly `size`. */
void device_value(cl_device_id d, cl_device_info param, void *out, size_t size);

struct want_str {
  cl_uint param;
  const char *value;
};

/* A number of `size` bytes (4: cl_uint/cl_bool, 8: cl_ulong/bitfields/size_t). */
struct want_num {
  cl_uint param;
  size_t size;
  cl_ulong value;
};

/* Compare a table of wanted answers, log each one that differs, and say
 * whether all matched: the tests assert on that. */
bool device_strings_are(cl_device_id d, const struct want_str *want, size_t n);
bool device_numbers_are(cl_device_id d, const struct want_num *want, size_t n);

#endif
