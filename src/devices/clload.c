/* clload.c -- opens the OpenCL ICD loader at run time and fills the table of its entry points (clload.h). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#define BML_CL_DIRECT /* this file fills the table: the names are the header's here */
#include "devices/clload.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"

/* The soname of the ICD loader: ocl-icd's and the Khronos loader's, and
 * what a vendor's libOpenCL.so.1 (Mali, Adreno boards) is installed as. */
#define LOADER_SONAME "libOpenCL.so.1"

static bml__cl_api api;
static bml__cl_loader state;
static void *handle;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* ---- stand-ins for the entry points a loader lacks -------------------------- */

/* Their parameters are the list's, named and unused. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define STAND_IN_I(name, params) \
  static cl_int CL_API_CALL missing_##name params { return BML_ENOTSUP; }
#define STAND_IN_O(type, name, params)            \
  static type CL_API_CALL missing_##name params { \
    if (errcode_ret) *errcode_ret = BML_ENOTSUP;  \
    return NULL;                                  \
  }
BML_CL_ENTRY_POINTS(STAND_IN_I, STAND_IN_O)
#undef STAND_IN_I
#undef STAND_IN_O
#pragma GCC diagnostic pop

/* ---- opening ---------------------------------------------------------------------- */

/* An entry point: the process's own definition first when the loader is
 * the real one (a program or a preloaded tracer that wraps the loader's
 * functions is called, as it was when the library was linked to the
 * loader; the loader was opened RTLD_GLOBAL, so this finds its symbols
 * too), else the loader's. */
static void *lookup(const char *name, bool process_first) {
  void *p = process_first ? dlsym(RTLD_DEFAULT, name) : NULL;
  return p ? p : dlsym(handle, name);
}

/* Sets member to the loader's entry point, or to the stand-in and records
 * the name as missing. */
#define RESOLVE(member, stand_in, name)                                        \
  do {                                                                         \
    void *p_ = handle ? lookup(name, process_first) : NULL;                    \
    if (p_) {                                                                  \
      (member) = (__typeof__(member))p_;                                       \
    } else {                                                                   \
      (member) = (stand_in);                                                   \
      if (handle) state.missing[state.nmissing++] = (name);                    \
    }                                                                          \
  } while (0)
#define RESOLVE_I(name, params) RESOLVE(api.name, missing_##name, #name);
#define RESOLVE_O(type, name, params) RESOLVE(api.name, missing_##name, #name);

static void open_loader(void) {
  /* The tests' way to play a machine without the loader (a name that does
   * not exist): read here, not in env.c, because the command compiles this
   * file too.  Documented in the README as the tests'. */
  const char *test = getenv("BANKML_TEST_OPENCL_LOADER");
  const bool process_first = !(test && *test);
  state.library = process_first ? LOADER_SONAME : test;
  dlerror();
  handle = dlopen(state.library, RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char *e = dlerror();
    snprintf(state.error, sizeof state.error, "%s", e ? e : "dlopen failed");
  }
  state.loaded = handle != NULL;
  BML_CL_ENTRY_POINTS(RESOLVE_I, RESOLVE_O)
}

const bml__cl_api *bml__cl(void) {
  pthread_once(&once, open_loader);
  return &api;
}

void *bml__cl_extension(cl_platform_id p, const char *name) {
  pthread_once(&once, open_loader);
  void *(CL_API_CALL *get)(cl_platform_id, const char *) = NULL;
  void *f = handle ? dlsym(handle, "clGetExtensionFunctionAddressForPlatform") : NULL;
  memcpy(&get, &f, sizeof get);
  return get ? get(p, name) : NULL;
}

const bml__cl_loader *bml__cl_loader_state(void) {
  pthread_once(&once, open_loader);
  return &state;
}

/* ---- the loader's own description (the cl_icdl extension) ----------------------- */

/* cl_icdl's query and its parameters (no header defines them). */
typedef cl_int(CL_API_CALL *icdl_info_fn)(cl_uint param, size_t size, void *value, size_t *size_ret);
enum { ICDL_OCL_VERSION = 1, ICDL_VERSION = 2, ICDL_NAME = 3, ICDL_VENDOR = 4 };

static void icdl_string(icdl_info_fn fn, cl_uint param, char *buf, size_t len) {
  buf[0] = '\0';
  if (fn(param, len - 1, buf, NULL) != CL_SUCCESS) buf[0] = '\0';
  buf[len - 1] = '\0';
}

bool bml__cl_loader_info(char *name, char *vendor, char *version, char *opencl_version, size_t len) {
  name[0] = vendor[0] = version[0] = opencl_version[0] = '\0';
  if (!bml__cl_loader_state()->loaded) return false;
  /* clGetExtensionFunctionAddress, deprecated since 1.1, is the only
   * call that reaches the loader itself rather than a platform: looked
   * up here alone, not part of the table */
  void *(CL_API_CALL *get_address)(const char *) = (void *(CL_API_CALL *)(const char *))dlsym(handle,
                                                                                "clGetExtensionFunctionAddress");
  icdl_info_fn fn = get_address ? (icdl_info_fn)get_address("clGetICDLoaderInfoOCLICD") : NULL;
  if (!fn) return false;
  icdl_string(fn, ICDL_NAME, name, len);
  icdl_string(fn, ICDL_VENDOR, vendor, len);
  icdl_string(fn, ICDL_VERSION, version, len);
  icdl_string(fn, ICDL_OCL_VERSION, opencl_version, len);
  return name[0] || vendor[0] || version[0] || opencl_version[0];
}
