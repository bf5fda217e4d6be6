/* opencl.c -- every platform and device through the ICD loader, described by what the driver says. */
#include "base/fork.h"
#include "base/log.h"
#include "base/util.h"
#include "devices/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *bml__cl_error_string(cl_int err, char *buf, size_t len) {
  snprintf(buf, len, "%s (%d)", bml_err_name(err), (int)err);
  return buf;
}

void bml__cl_log_error(unsigned cat, const char *call, cl_int err, const char *file, int line) {
  char e[64];
  bml__debug(cat, "%s: %s at %s:%d", call, bml__cl_error_string(err, e, sizeof e), file, line);
}

bool bml__cl_has_extension(const char *extensions, const char *ext) {
  size_t len = strlen(ext);
  for (const char *p = extensions; p && (p = strstr(p, ext)) != NULL; p += len) {
    bool starts = p == extensions || p[-1] == ' ';
    bool ends = p[len] == '\0' || p[len] == ' ';
    if (starts && ends) return true;
  }
  return false;
}

/* A string query of a platform or device: malloc'd, "" on failure (noted as
 * "<who>: <call>(<what>): CL_ERROR (n)"). */
typedef cl_int (*info_fn)(void *obj, cl_uint param, size_t size, void *value, size_t *ret);

static cl_int platform_info(void *obj, cl_uint p, size_t sz, void *v, size_t *r) {
  return clGetPlatformInfo((cl_platform_id)obj, p, sz, v, r);
}

static cl_int device_info(void *obj, cl_uint p, size_t sz, void *v, size_t *r) {
  return clGetDeviceInfo((cl_device_id)obj, p, sz, v, r);
}

static char *query_string(info_fn fn, void *obj, cl_uint param, const char *what, const char *who,
                          bml__notes *notes) {
  size_t size = 0;
  char e[64];
  cl_int err = fn(obj, param, 0, NULL, &size);
  char *s = err == CL_SUCCESS && size > 0 && size < (1u << 20) ? calloc(1, size + 1) : NULL;
  if (s) err = fn(obj, param, size, s, NULL);
  if (err != CL_SUCCESS || !s) {
    if (err != CL_SUCCESS)
      bml__notes_add(notes, "%s: %s(%s): %s", who,
                     fn == platform_info ? "clGetPlatformInfo" : "clGetDeviceInfo", what,
                     bml__cl_error_string(err, e, sizeof e));
    free(s);
    return strdup("");
  }
  return s;
}

/* Scalar device queries, as a table: the field, its size and its name. */
#define FIELD(member, param) {#param, param, offsetof(bml__cl_info, member), sizeof(((bml__cl_info *)0)->member)}
static const struct {
  const char *name;
  cl_device_info param;
  size_t offset, size;
} scalar_queries[] = {
    FIELD(type, CL_DEVICE_TYPE),
    FIELD(vendor_id, CL_DEVICE_VENDOR_ID),
    FIELD(compute_units, CL_DEVICE_MAX_COMPUTE_UNITS),
    FIELD(clock_mhz, CL_DEVICE_MAX_CLOCK_FREQUENCY),
    FIELD(global_mem, CL_DEVICE_GLOBAL_MEM_SIZE),
    FIELD(max_alloc, CL_DEVICE_MAX_MEM_ALLOC_SIZE),
    FIELD(local_mem, CL_DEVICE_LOCAL_MEM_SIZE),
    FIELD(max_work_group, CL_DEVICE_MAX_WORK_GROUP_SIZE),
    FIELD(host_unified, CL_DEVICE_HOST_UNIFIED_MEMORY),
    FIELD(available, CL_DEVICE_AVAILABLE),
    FIELD(compiler_available, CL_DEVICE_COMPILER_AVAILABLE),
    FIELD(fp32, CL_DEVICE_SINGLE_FP_CONFIG),
};
#undef FIELD

static const struct {
  const char *name;
  cl_device_info param;
  size_t offset;
} string_queries[] = {
    {"CL_DEVICE_NAME", CL_DEVICE_NAME, offsetof(bml__cl_info, name)},
    {"CL_DEVICE_VENDOR", CL_DEVICE_VENDOR, offsetof(bml__cl_info, vendor)},
    {"CL_DEVICE_VERSION", CL_DEVICE_VERSION, offsetof(bml__cl_info, version)},
    {"CL_DEVICE_OPENCL_C_VERSION", CL_DEVICE_OPENCL_C_VERSION, offsetof(bml__cl_info, c_version)},
    {"CL_DRIVER_VERSION", CL_DRIVER_VERSION, offsetof(bml__cl_info, driver_version)},
    {"CL_DEVICE_EXTENSIONS", CL_DEVICE_EXTENSIONS, offsetof(bml__cl_info, extensions)},
    {"CL_DEVICE_PROFILE", CL_DEVICE_PROFILE, offsetof(bml__cl_info, profile)},
};

static void query_scalars(bml__cl_info *ci, const char *who, bml__notes *notes) {
  char e[64];
  for (size_t i = 0; i < BML_ARRAY_SIZE(scalar_queries); i++) {
    cl_int err = clGetDeviceInfo(ci->id, scalar_queries[i].param, scalar_queries[i].size,
                                 (char *)ci + scalar_queries[i].offset, NULL);
    if (err != CL_SUCCESS)
      bml__notes_add(notes, "%s: clGetDeviceInfo(%s): %s", who, scalar_queries[i].name,
                     bml__cl_error_string(err, e, sizeof e));
  }
}

static void query_strings(bml__cl_info *ci, const char *who, bml__notes *notes) {
  for (size_t i = 0; i < BML_ARRAY_SIZE(string_queries); i++)
    *(char **)((char *)ci + string_queries[i].offset) =
        query_string(device_info, ci->id, string_queries[i].param, string_queries[i].name, who, notes);
}

/* A PCI address as a driver's topology query gives it (wider than PCI's). */
typedef struct {
  cl_uint domain, bus, dev, fn;
} raw_pci;

/* The PCI address from the first vendor topology query that answers:
 * cl_khr_pci_bus_info, then AMD's topology, then NVIDIA's bus/slot ids. */
static bool pci_from_khr(const bml__cl_info *ci, raw_pci *r) {
  cl_device_pci_bus_info_khr info;
  if (!bml__cl_has_extension(ci->extensions, "cl_khr_pci_bus_info") ||
      clGetDeviceInfo(ci->id, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof info, &info, NULL) != CL_SUCCESS)
    return false;
  *r = (raw_pci){info.pci_domain, info.pci_bus, info.pci_device, info.pci_function};
  return true;
}

static bool pci_from_amd(const bml__cl_info *ci, raw_pci *r) {
  cl_device_topology_amd t;
  if (clGetDeviceInfo(ci->id, CL_DEVICE_TOPOLOGY_AMD, sizeof t, &t, NULL) != CL_SUCCESS ||
      t.raw.type != CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD)
    return false;
  *r = (raw_pci){0, (cl_uint)(unsigned char)t.pcie.bus, (cl_uint)(unsigned char)t.pcie.device,
                 (cl_uint)(unsigned char)t.pcie.function};
  return true;
}

static bool pci_from_nv(const bml__cl_info *ci, raw_pci *r) {
  cl_uint bus, slot, domain = 0;
  if (clGetDeviceInfo(ci->id, BML_CL_DEVICE_PCI_BUS_ID_NV, sizeof bus, &bus, NULL) != CL_SUCCESS ||
      clGetDeviceInfo(ci->id, BML_CL_DEVICE_PCI_SLOT_ID_NV, sizeof slot, &slot, NULL) != CL_SUCCESS)
    return false;
  /* the domain query is newer than the others: 0 when the driver lacks it */
  if (clGetDeviceInfo(ci->id, BML_CL_DEVICE_PCI_DOMAIN_ID_NV, sizeof domain, &domain, NULL) != CL_SUCCESS)
    domain = 0;
  *r = (raw_pci){domain, bus, slot >> 3, slot & 7};
  return true;
}

static const struct {
  const char *source;
  bool (*query)(const bml__cl_info *ci, raw_pci *r);
} pci_queries[] = {
    {"cl_khr_pci_bus_info", pci_from_khr},
    {"amd-topology", pci_from_amd},
    {"nv-pci-ids", pci_from_nv},
};

/* The first query that answers gives the address, when it is one (bus
 * 0..0xff, device 0..0x1f, function 0..7): else a note, and none. */
static void query_pci(bml__cl_info *ci, const char *who, bml__notes *notes) {
  raw_pci r;
  for (size_t i = 0; i < BML_ARRAY_SIZE(pci_queries); i++) {
    if (!pci_queries[i].query(ci, &r)) continue;
    if (r.bus > 0xff || r.dev > 0x1f || r.fn > 7) {
      bml__notes_add(notes, "%s: %s says domain 0x%x bus 0x%x device 0x%x function 0x%x, not a PCI address: "
                     "not used", who, pci_queries[i].source, r.domain, r.bus, r.dev, r.fn);
      return;
    }
    ci->pci = (bml__pci_addr){true, r.domain, (uint8_t)r.bus, (uint8_t)r.dev, (uint8_t)r.fn};
    ci->pci_source = pci_queries[i].source;
    return;
  }
}

static void query_uuid(bml__cl_info *ci) {
  if (bml__cl_has_extension(ci->extensions, "cl_khr_device_uuid") &&
      clGetDeviceInfo(ci->id, CL_DEVICE_UUID_KHR, sizeof ci->uuid, ci->uuid, NULL) == CL_SUCCESS)
    ci->has_uuid = true;
}

/* NVIDIA's compute capability, where its extension says it (the TMA the
 * table kernels use on NVIDIA's build is 9.0's: program.c). */
static void query_nv_cc(bml__cl_info *ci) {
  cl_uint major = 0;
  if (bml__cl_has_extension(ci->extensions, "cl_nv_device_attribute_query") &&
      clGetDeviceInfo(ci->id, BML_CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) == CL_SUCCESS)
    ci->nv_cc_major = major;
}

/* Whether "OpenCL major.minor ..." names at least major.minor. */
static bool version_at_least(const char *version, unsigned major, unsigned minor) {
  unsigned a = 0, b = 0;
  if (!version || sscanf(version, "OpenCL %u.%u", &a, &b) != 2) return false;
  return a > major || (a == major && b >= minor);
}

/* The IL versions (SPIR-V) the device takes, where it says them: OpenCL
 * 2.1's query, or cl_khr_il_program's (the same number).  An optional
 * property: a device that does not answer has none, and no note. */
static void query_il_version(bml__cl_info *ci) {
  if (!version_at_least(ci->version, 2, 1) && !bml__cl_has_extension(ci->extensions, "cl_khr_il_program")) return;
  size_t size = 0;
  if (clGetDeviceInfo(ci->id, CL_DEVICE_IL_VERSION_KHR, 0, NULL, &size) != CL_SUCCESS || size < 2 ||
      size > 4096 || !(ci->il_version = calloc(1, size + 1)))
    return;
  if (clGetDeviceInfo(ci->id, CL_DEVICE_IL_VERSION_KHR, size, ci->il_version, NULL) != CL_SUCCESS ||
      !ci->il_version[0]) {
    free(ci->il_version);
    ci->il_version = NULL;
  }
}

/* The sub-group sizes, from the first vendor query that answers:
 * cl_intel_required_subgroup_size's list, NVIDIA's warp size, AMD's
 * wavefront width.  Optional, as the IL version. */
static void query_sub_groups(bml__cl_info *ci) {
  size_t size = 0;
  if (bml__cl_has_extension(ci->extensions, "cl_intel_required_subgroup_size") &&
      clGetDeviceInfo(ci->id, CL_DEVICE_SUB_GROUP_SIZES_INTEL, 0, NULL, &size) == CL_SUCCESS && size > 0 &&
      size % sizeof(size_t) == 0 && size <= sizeof ci->sub_group_sizes &&
      clGetDeviceInfo(ci->id, CL_DEVICE_SUB_GROUP_SIZES_INTEL, size, ci->sub_group_sizes, NULL) == CL_SUCCESS) {
    ci->nsub_group_sizes = size / sizeof(size_t);
    ci->sub_group_source = "cl_intel_required_subgroup_size";
    return;
  }
  static const struct {
    const char *extension;
    cl_device_info param;
  } widths[] = {
      {"cl_nv_device_attribute_query", CL_DEVICE_WARP_SIZE_NV},
      {"cl_amd_device_attribute_query", CL_DEVICE_WAVEFRONT_WIDTH_AMD},
  };
  for (size_t i = 0; i < BML_ARRAY_SIZE(widths); i++) {
    cl_uint w = 0;
    if (bml__cl_has_extension(ci->extensions, widths[i].extension) &&
        clGetDeviceInfo(ci->id, widths[i].param, sizeof w, &w, NULL) == CL_SUCCESS && w > 0) {
      ci->sub_group_sizes[0] = w;
      ci->nsub_group_sizes = 1;
      ci->sub_group_source = widths[i].extension;
      return;
    }
  }
}

static void describe_device(bml__cl_info *ci, bml__notes *notes) {
  char who[160];
  snprintf(who, sizeof who, "platform \"%s\" device %p", ci->platform_name, (void *)ci->id);
  query_strings(ci, who, notes);
  snprintf(who, sizeof who, "platform \"%s\" device \"%s\"", ci->platform_name, ci->name);
  query_scalars(ci, who, notes);
  query_pci(ci, who, notes);
  query_uuid(ci);
  query_nv_cc(ci);
  query_il_version(ci);
  query_sub_groups(ci);
}

void bml__cl_info_free(bml__cl_info *ci) {
  if (!ci) return;
  char **strings[] = {&ci->platform_name, &ci->platform_vendor, &ci->platform_version, &ci->name,
                      &ci->vendor, &ci->version, &ci->c_version, &ci->driver_version, &ci->extensions,
                      &ci->profile, &ci->il_version};
  for (size_t i = 0; i < BML_ARRAY_SIZE(strings); i++) {
    free(*strings[i]);
    *strings[i] = NULL;
  }
}

static int grow(bml__device **devs, size_t len, size_t more) {
  bml__device *d = realloc(*devs, (len + more) * sizeof *d);
  if (!d) return BML_ENOMEM;
  memset(d + len, 0, more * sizeof *d);
  *devs = d;
  return 0;
}

/* Appends the devices of one platform. */
static int enumerate_platform(cl_platform_id p, bml__device **devs, size_t *len, bml__notes *notes) {
  char *name = query_string(platform_info, p, CL_PLATFORM_NAME, "CL_PLATFORM_NAME", "platform", notes);
  char who[160], e[64];
  snprintf(who, sizeof who, "platform \"%s\"", name);
  /* CL_DEVICE_TYPE_ALL leaves custom devices out (the specification says
   * so): they are asked for on their own, and listed (not usable) */
  cl_uint n = 0, nc = 0;
  cl_int err = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, &n);
  if (clGetDeviceIDs(p, CL_DEVICE_TYPE_CUSTOM, 0, NULL, &nc) != CL_SUCCESS) nc = 0; /* none, or too old */
  if (err != CL_SUCCESS) n = 0;
  cl_device_id *ids = n + nc > 0 ? calloc(n + nc, sizeof *ids) : NULL;
  if (ids && n > 0) {
    err = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, ids, NULL);
    if (err != CL_SUCCESS) n = 0;
  }
  if (ids && nc > 0 && clGetDeviceIDs(p, CL_DEVICE_TYPE_CUSTOM, nc, ids + n, NULL) != CL_SUCCESS) nc = 0;
  if (err != CL_SUCCESS && !(err == CL_DEVICE_NOT_FOUND && nc > 0))
    bml__notes_add(notes, "%s: clGetDeviceIDs: %s", who, bml__cl_error_string(err, e, sizeof e));
  n += nc;
  int rc = 0;
  if (n > 0 && (!ids || grow(devs, *len, n) != 0)) {
    rc = BML_ENOMEM;
    n = 0;
  }
  for (cl_uint i = 0; i < n; i++) {
    bml__cl_info *ci = &(*devs)[*len + i].cl;
    ci->platform = p;
    ci->id = ids[i];
    ci->platform_name = strdup(name);
    ci->platform_vendor = query_string(platform_info, p, CL_PLATFORM_VENDOR, "CL_PLATFORM_VENDOR", who, notes);
    ci->platform_version = query_string(platform_info, p, CL_PLATFORM_VERSION, "CL_PLATFORM_VERSION", who, notes);
    describe_device(ci, notes);
    (*devs)[*len + i].order = *len + i;
  }
  *len += n;
  free(ids);
  free(name);
  return rc;
}

int bml__cl_enumerate(bml__device **devs, size_t *len, bml__notes *notes) {
  cl_uint n = 0;
  char e[64];
  const bml__cl_loader *loader = bml__cl_loader_state();
  bml__icd_loader_notes(loader, notes);
  if (!loader->loaded) return 0; /* the note says what to install; the CPU does everything */
  if (bml__opencl_forked()) { /* the driver's state is the parent's (fork.c): not a call to it */
    bml__notes_add(notes, "this process is a child of fork() of one that used OpenCL: the driver cannot be used "
                          "here, and no device is listed");
    return 0;
  }
  bml__opencl_used(); /* a child of a later fork() leaves the driver alone (fork.c) */
  cl_int err = clGetPlatformIDs(0, NULL, &n);
  if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && n == 0)) {
    bml__icd_driver_notes(0, notes); /* what is missing, and what to install */
    return 0;
  }
  if (err != CL_SUCCESS) {
    bml__notes_add(notes, "clGetPlatformIDs: %s", bml__cl_error_string(err, e, sizeof e));
    return 0;
  }
  cl_platform_id *ps = calloc(n, sizeof *ps);
  if (!ps) return BML_ENOMEM;
  err = clGetPlatformIDs(n, ps, NULL);
  int rc = 0;
  if (err != CL_SUCCESS)
    bml__notes_add(notes, "clGetPlatformIDs: %s", bml__cl_error_string(err, e, sizeof e));
  for (cl_uint i = 0; err == CL_SUCCESS && rc == 0 && i < n; i++)
    rc = enumerate_platform(ps[i], devs, len, notes);
  free(ps);
  bml__icd_driver_notes(n, notes); /* a driver registered beside these that cannot be loaded */
  return rc;
}

void bml__cl_loader_describe(bml__loader_report *r) {
  memset(r, 0, sizeof *r);
  r->state = bml__cl_loader_state();
  if (r->state->loaded && !bml__opencl_forked())
    r->answered = bml__cl_loader_info(r->name, r->vendor, r->version, r->opencl_version, sizeof r->name);
}
