/* icd.c -- the fake ICD's entry points: what ocl-icd looks up, and the working members of its dispatch table. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fakeicd.h"

#ifndef FAKEICD_ID
#error "build with -DFAKEICD_ID=\"a\" or \"b\": the library's name in scenario files"
#endif

#define NO_FLAG ((size_t)-1)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Read once, on the loader's first call, and never changed after. */
static struct fake_model model;
static struct _cl_icd_dispatch dispatch;
static pthread_once_t loaded = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------ */
/* Objects and the OpenCL size rules                                   */
/* ------------------------------------------------------------------ */

static struct _cl_platform_id *find_platform(cl_platform_id p)
{
  for (size_t i = 0; i < model.num_platforms; i++)
    if (p == &model.platforms[i])
      return p;
  return NULL;
}

static struct _cl_device_id *find_device(cl_device_id d)
{
  for (size_t i = 0; i < model.num_devices; i++)
    if (d == &model.devices[i])
      return d;
  return NULL;
}

/* param_value NULL: the size only; too small: CL_INVALID_VALUE. */
static cl_int answer(const void *src, size_t size, size_t value_size, void *value, size_t *size_ret)
{
  if (value != NULL && value_size < size)
    return CL_INVALID_VALUE;
  if (value != NULL)
    memcpy(value, src, size);
  if (size_ret != NULL)
    *size_ret = size;
  return CL_SUCCESS;
}

/* One queryable property: a NUL-terminated string or a fixed-size value in
 * the object, answered only where its has-flag (if any) is set. */
struct info {
  cl_uint param;
  bool is_string;
  size_t off;
  size_t size;
  size_t has_off;
};

#define STR(T, param, f) {param, true, offsetof(T, f), 0, NO_FLAG}
#define VAL(T, param, f) {param, false, offsetof(T, f), sizeof(((T *)0)->f), NO_FLAG}
#define OPT(T, param, f, has) {param, false, offsetof(T, f), sizeof(((T *)0)->f), offsetof(T, has)}
#define OSTR(T, param, f, has) {param, true, offsetof(T, f), 0, offsetof(T, has)}

static cl_int answer_info(const struct info *table, size_t n, const void *object, cl_uint param,
                          size_t value_size, void *value, size_t *size_ret)
{
  const char *base = object;
  for (size_t i = 0; i < n; i++) {
    const struct info *e = &table[i];
    if (e->param != param)
      continue;
    if (e->has_off != NO_FLAG && !*(const bool *)(base + e->has_off))
      return CL_INVALID_VALUE;
    size_t size = e->is_string ? strlen(base + e->off) + 1 : e->size;
    return answer(base + e->off, size, value_size, value, size_ret);
  }
  return CL_INVALID_VALUE;
}

/* ------------------------------------------------------------------ */
/* Platforms                                                           */
/* ------------------------------------------------------------------ */

#define P struct _cl_platform_id
static const struct info platform_info[] = {
  STR(P, CL_PLATFORM_PROFILE, profile),
  STR(P, CL_PLATFORM_VERSION, version),
  STR(P, CL_PLATFORM_NAME, name),
  STR(P, CL_PLATFORM_VENDOR, vendor),
  STR(P, CL_PLATFORM_EXTENSIONS, extensions),
  STR(P, CL_PLATFORM_ICD_SUFFIX_KHR, suffix),
  OPT(P, CL_PLATFORM_NUMERIC_VERSION, numeric_version, has_numeric_version),
  VAL(P, CL_PLATFORM_HOST_TIMER_RESOLUTION, host_timer_resolution),
};
#undef P

static void load(void);

static cl_int CL_API_CALL get_platform_ids(cl_uint num_entries, cl_platform_id *platforms,
                                           cl_uint *num_platforms)
{
  pthread_once(&loaded, load);
  if ((num_entries == 0 && platforms != NULL) || (platforms == NULL && num_platforms == NULL))
    return CL_INVALID_VALUE;
  if (num_platforms != NULL)
    *num_platforms = (cl_uint)model.num_platforms;
  if (model.num_platforms == 0)
    return CL_PLATFORM_NOT_FOUND_KHR;
  for (size_t i = 0; platforms != NULL && i < num_entries && i < model.num_platforms; i++)
    platforms[i] = &model.platforms[i];
  return CL_SUCCESS;
}

static cl_int CL_API_CALL get_platform_info(cl_platform_id platform, cl_platform_info param,
                                            size_t value_size, void *value, size_t *size_ret)
{
  const struct _cl_platform_id *p;
  pthread_once(&loaded, load);
  if ((p = find_platform(platform)) == NULL)
    return CL_INVALID_PLATFORM;
  return answer_info(platform_info, COUNT(platform_info), p, param, value_size, value, size_ret);
}

/* ------------------------------------------------------------------ */
/* Devices                                                             */
/* ------------------------------------------------------------------ */

#define D struct _cl_device_id
static const struct info device_info[] = {
  VAL(D, CL_DEVICE_TYPE, type),
  STR(D, CL_DEVICE_NAME, name),
  STR(D, CL_DEVICE_VENDOR, vendor),
  VAL(D, CL_DEVICE_VENDOR_ID, vendor_id),
  STR(D, CL_DEVICE_VERSION, version),
  STR(D, CL_DEVICE_OPENCL_C_VERSION, opencl_c_version),
  STR(D, CL_DRIVER_VERSION, driver_version),
  STR(D, CL_DEVICE_PROFILE, profile),
  STR(D, CL_DEVICE_EXTENSIONS, extensions),
  VAL(D, CL_DEVICE_MAX_COMPUTE_UNITS, compute_units),
  VAL(D, CL_DEVICE_MAX_CLOCK_FREQUENCY, clock_mhz),
  VAL(D, CL_DEVICE_ADDRESS_BITS, address_bits),
  VAL(D, CL_DEVICE_GLOBAL_MEM_SIZE, global_mem),
  VAL(D, CL_DEVICE_MAX_MEM_ALLOC_SIZE, max_alloc),
  VAL(D, CL_DEVICE_LOCAL_MEM_SIZE, local_mem),
  VAL(D, CL_DEVICE_MAX_WORK_GROUP_SIZE, max_work_group_size),
  VAL(D, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, work_item_dims),
  VAL(D, CL_DEVICE_MAX_WORK_ITEM_SIZES, work_item_sizes),
  VAL(D, CL_DEVICE_HOST_UNIFIED_MEMORY, host_unified),
  VAL(D, CL_DEVICE_AVAILABLE, available),
  VAL(D, CL_DEVICE_COMPILER_AVAILABLE, compiler_available),
  VAL(D, CL_DEVICE_ENDIAN_LITTLE, endian_little),
  VAL(D, CL_DEVICE_SINGLE_FP_CONFIG, fp32_config),
  VAL(D, CL_DEVICE_DOUBLE_FP_CONFIG, fp64_config),
  VAL(D, CL_DEVICE_PLATFORM, platform),
  OPT(D, CL_DEVICE_NUMERIC_VERSION, numeric_version, has_numeric_version),
  OPT(D, CL_DEVICE_PCI_BUS_INFO_KHR, pci, has_pci),
  OPT(D, CL_DEVICE_UUID_KHR, uuid, has_uuid),
  OPT(D, CL_DEVICE_TOPOLOGY_AMD, amd_topology, has_amd_topology),
  OPT(D, CL_DEVICE_PCI_BUS_ID_NV, nv_bus, has_nv_bus),
  OPT(D, CL_DEVICE_PCI_SLOT_ID_NV, nv_slot, has_nv_slot),
  OPT(D, CL_DEVICE_PCI_DOMAIN_ID_NV, nv_domain, has_nv_domain),
  OSTR(D, CL_DEVICE_IL_VERSION_KHR, il_version, has_il_version),
  OPT(D, CL_DEVICE_WARP_SIZE_NV, nv_warp_size, has_nv_warp_size),
  OPT(D, CL_DEVICE_WAVEFRONT_WIDTH_AMD, amd_wavefront_width, has_amd_wavefront_width),
};
#undef D

static const cl_device_type known_types =
    CL_DEVICE_TYPE_DEFAULT | CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_GPU |
    CL_DEVICE_TYPE_ACCELERATOR | CL_DEVICE_TYPE_CUSTOM;

/* The platform's default device: the first typed "default", else the
 * first that is not custom. */
static const struct _cl_device_id *default_device(const struct _cl_platform_id *p)
{
  const struct _cl_device_id *first = &model.devices[p->first_device];
  const struct _cl_device_id *fallback = NULL;
  for (size_t i = 0; i < p->num_devices; i++) {
    if (first[i].type & CL_DEVICE_TYPE_DEFAULT)
      return &first[i];
    if (fallback == NULL && !(first[i].type & CL_DEVICE_TYPE_CUSTOM))
      fallback = &first[i];
  }
  return fallback;
}

/* CL_DEVICE_TYPE_ALL leaves custom devices out, as the specification says. */
static bool type_matches(const struct _cl_device_id *d, cl_device_type want)
{
  if (want == CL_DEVICE_TYPE_ALL)
    return !(d->type & CL_DEVICE_TYPE_CUSTOM);
  if ((want & CL_DEVICE_TYPE_DEFAULT) && d == default_device(d->platform))
    return true;
  return (want & d->type & ~(cl_device_type)CL_DEVICE_TYPE_DEFAULT) != 0;
}

static cl_int CL_API_CALL get_device_ids(cl_platform_id platform, cl_device_type type,
                                         cl_uint num_entries, cl_device_id *devices,
                                         cl_uint *num_devices)
{
  const struct _cl_platform_id *p = find_platform(platform);
  cl_uint found = 0;
  if (p == NULL)
    return CL_INVALID_PLATFORM;
  if (type != CL_DEVICE_TYPE_ALL && (type == 0 || (type & ~known_types) != 0))
    return CL_INVALID_DEVICE_TYPE;
  if ((num_entries == 0 && devices != NULL) || (devices == NULL && num_devices == NULL))
    return CL_INVALID_VALUE;
  if (p->get_device_ids_error != CL_SUCCESS)
    return p->get_device_ids_error;
  for (size_t i = 0; i < p->num_devices; i++) {
    struct _cl_device_id *d = &model.devices[p->first_device + i];
    if (!type_matches(d, type))
      continue;
    if (devices != NULL && found < num_entries)
      devices[found] = d;
    found++;
  }
  if (num_devices != NULL)
    *num_devices = found;
  return found > 0 ? CL_SUCCESS : CL_DEVICE_NOT_FOUND;
}

static cl_int CL_API_CALL get_device_info(cl_device_id device, cl_device_info param,
                                          size_t value_size, void *value, size_t *size_ret)
{
  const struct _cl_device_id *d = find_device(device);
  if (d == NULL)
    return CL_INVALID_DEVICE;
  if (param == CL_DEVICE_SUB_GROUP_SIZES_INTEL && d->has_sub_group_sizes)  /* a list of its own length */
    return answer(d->sub_group_sizes.sizes, d->sub_group_sizes.count * sizeof(size_t), value_size, value, size_ret);
  return answer_info(device_info, COUNT(device_info), d, param, value_size, value, size_ret);
}

static cl_int CL_API_CALL retain_device(cl_device_id device)
{
  return find_device(device) != NULL ? CL_SUCCESS : CL_INVALID_DEVICE;
}

/* ------------------------------------------------------------------ */
/* Contexts: never created; each answer is the scenario's error.       */
/* ------------------------------------------------------------------ */

static cl_context fail_context(cl_int code, cl_int *errcode_ret)
{
  if (errcode_ret != NULL)
    *errcode_ret = code;
  return NULL;
}

static cl_context CL_API_CALL create_context(const cl_context_properties *properties, cl_uint num_devices,
                                             const cl_device_id *devices,
                                             void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *),
                                             void *user_data, cl_int *errcode_ret)
{
  const struct _cl_device_id *first;
  (void)properties, (void)notify, (void)user_data;
  if (devices == NULL || num_devices == 0)
    return fail_context(CL_INVALID_VALUE, errcode_ret);
  for (cl_uint i = 0; i < num_devices; i++)
    if (find_device(devices[i]) == NULL)
      return fail_context(CL_INVALID_DEVICE, errcode_ret);
  first = devices[0];
  return fail_context(first->create_context_error, errcode_ret);
}

/* The platform named by CL_CONTEXT_PLATFORM, or NULL. */
static const cl_context_properties *context_platform(const cl_context_properties *properties)
{
  for (size_t i = 0; properties != NULL && properties[i] != 0; i += 2)
    if (properties[i] == CL_CONTEXT_PLATFORM)
      return &properties[i + 1];
  return NULL;
}

static cl_context CL_API_CALL create_context_from_type(const cl_context_properties *properties,
                                                       cl_device_type type,
                                                       void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *),
                                                       void *user_data, cl_int *errcode_ret)
{
  const cl_context_properties *named = context_platform(properties);
  const struct _cl_platform_id *p;
  cl_uint n;
  (void)notify, (void)user_data;
  if (named == NULL)  /* ocl-icd chose its default platform: unknown here */
    return fail_context(CL_DEVICE_NOT_AVAILABLE, errcode_ret);
  if ((p = find_platform((cl_platform_id)*named)) == NULL)
    return fail_context(CL_INVALID_PLATFORM, errcode_ret);
  cl_int err = get_device_ids((cl_platform_id)p, type, 0, NULL, &n);
  return fail_context(err != CL_SUCCESS ? err : p->create_context_error, errcode_ret);
}

/* ------------------------------------------------------------------ */
/* Extension functions and the table                                   */
/* ------------------------------------------------------------------ */

static void *CL_API_CALL get_extension_function_address(const char *name)
{
  if (name != NULL && strcmp(name, "clIcdGetPlatformIDsKHR") == 0)
    return (void *)get_platform_ids;
  return NULL;
}

static void *CL_API_CALL get_extension_function_address_for_platform(cl_platform_id platform,
                                                                     const char *name)
{
  return find_platform(platform) != NULL ? get_extension_function_address(name) : NULL;
}

static void fill_dispatch(struct _cl_icd_dispatch *d)
{
  fake_fill_stubs(d);
  d->clGetPlatformIDs = get_platform_ids;
  d->clGetPlatformInfo = get_platform_info;
  d->clGetDeviceIDs = get_device_ids;
  d->clGetDeviceInfo = get_device_info;
  d->clRetainDevice = retain_device;
  d->clReleaseDevice = retain_device;
  d->clCreateContext = create_context;
  d->clCreateContextFromType = create_context_from_type;
  d->clGetExtensionFunctionAddress = get_extension_function_address;
  d->clGetExtensionFunctionAddressForPlatform = get_extension_function_address_for_platform;
}

/* No BML_FAKEICD_CONFIG, or a bad file: no platforms. */
static void load(void)
{
  const char *path = getenv("BML_FAKEICD_CONFIG");
  fill_dispatch(&dispatch);
  if (path == NULL || path[0] == '\0' || fake_config_load(path, FAKEICD_ID, &model) != 0)
    return;
  for (size_t i = 0; i < model.num_platforms; i++)
    model.platforms[i].dispatch = &dispatch;
  for (size_t i = 0; i < model.num_devices; i++)
    model.devices[i].dispatch = &dispatch;
}

/* ------------------------------------------------------------------ */
/* Exported: the three symbols ocl-icd looks up with dlsym.  They only */
/* forward, so calls inside this library never bind to the loader's    */
/* functions of the same names.                                        */
/* ------------------------------------------------------------------ */

CL_API_ENTRY void *CL_API_CALL clGetExtensionFunctionAddress(const char *func_name)
{
  return get_extension_function_address(func_name);
}

CL_API_ENTRY cl_int CL_API_CALL clIcdGetPlatformIDsKHR(cl_uint num_entries, cl_platform_id *platforms,
                                                       cl_uint *num_platforms)
{
  return get_platform_ids(num_entries, platforms, num_platforms);
}

CL_API_ENTRY cl_int CL_API_CALL clGetPlatformInfo(cl_platform_id platform, cl_platform_info param_name,
                                                  size_t param_value_size, void *param_value,
                                                  size_t *param_value_size_ret)
{
  return get_platform_info(platform, param_name, param_value_size, param_value, param_value_size_ret);
}
