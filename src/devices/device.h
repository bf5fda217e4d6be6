/* device.h -- the internal record of one OpenCL device: what the driver says, what the kernel says, and the verdict. */
#ifndef BML_DEVICE_H
#define BML_DEVICE_H

#include "base/bml.h"
#include "base/util.h"
#include "devices/clinc.h"
#include "devices/sysfs.h"

/* What the OpenCL driver says (every string malloc'd, never NULL after a
 * successful query; "" when the query failed, with a note). */
typedef struct {
  cl_platform_id platform;
  cl_device_id id;
  char *platform_name, *platform_vendor, *platform_version;
  char *name, *vendor, *version, *c_version, *driver_version, *extensions, *profile;
  char *il_version;            /* CL_DEVICE_IL_VERSION(_KHR); NULL where the device does not say */
  cl_device_type type;
  cl_uint vendor_id, compute_units, clock_mhz;
  cl_ulong global_mem, max_alloc, local_mem;
  size_t max_work_group;
  cl_bool host_unified, available, compiler_available;
  cl_device_fp_config fp32;
  cl_uint nv_cc_major; /* NVIDIA's compute capability (cl_nv_device_attribute_query); 0: not said */
  size_t sub_group_sizes[16]; /* the sub-group (warp, wavefront) sizes the device says, if any */
  size_t nsub_group_sizes;
  const char *sub_group_source; /* the query that said them, or NULL */
  bool has_uuid;
  uint8_t uuid[16];
  bml__pci_addr pci;      /* from the first topology query that answered */
  const char *pci_source; /* "cl_khr_pci_bus_info", "amd-topology", "nv-pci-ids" or NULL */
} bml__cl_info;

/* One device of a listing: the driver's view, the kernel's, the verdict. */
typedef struct {
  bml__cl_info cl;
  bool has_pci_info, has_soc;
  bool pci_ambiguous;         /* no address from the driver, and several display devices of its vendor */
  bml__pci_info pci_info;
  bml__soc_info soc;
  const char *matched_by;     /* "pci-bus-info", "vendor-id", "drm", "none" */
  bml__pci_addr pci;          /* the address used to match (may come from vendor-id) */
  char pci_str[BML__PCI_ADDR_SIZE];
  char uuid_str[37];          /* cl_khr_device_uuid's, 8-4-4-4-12 ("" when not said) */
  const char *software;       /* why it is software ("PoCL", "llvmpipe", ...), or NULL */
  char why_not[256];          /* "" when usable */
  char **registrations;       /* platform names it was registered under (duplicates) */
  size_t nregistrations;
  size_t order;               /* enumeration order, the last sort key */
  bml_device pub;             /* the public view, filled last */
} bml__device;

/* The ICD loader, as the listing reports it (report.c: icd_loader). */
typedef struct {
  const bml__cl_loader *state; /* opened or not, and the entry points it lacks */
  bool answered;               /* it answered clGetICDLoaderInfoOCLICD */
  char name[128], vendor[128], version[128], opencl_version[128];
} bml__loader_report;

struct bml_devices {
  bml__device *dev;
  size_t len;
  bml__notes notes;
  bml__loader_report loader;
  bool software_allowed;
  char gpu_setting[128];  /* BANKML_GPU as given ("" unset) */
  const char *gpu_source; /* where it came from: "BANKML_GPU" or the discovery's option */
  int gpu_error;          /* a bad one: BML_EENV (the variable) or BML_EINVAL (the option) */
};

/* ---- opencl.c: enumeration through the ICD loader ------------------------ */
/* Appends every device of every platform to *devs (grown with realloc); a
 * platform or query that fails becomes a note naming the call and the error.
 * Returns 0 or BML_ENOMEM. */
int bml__cl_enumerate(bml__device **devs, size_t *len, bml__notes *notes);
/* Frees the strings of one record.  NULL-safe. */
void bml__cl_info_free(bml__cl_info *ci);
/* The loader's state and its own description (not asked in a child of
 * fork() of a process that used OpenCL).  Cannot fail. */
void bml__cl_loader_describe(bml__loader_report *r);
/* True when the space-separated extension list has ext. */
bool bml__cl_has_extension(const char *extensions, const char *ext);
/* "CL_DEVICE_NOT_FOUND (-1)" into buf. */
const char *bml__cl_error_string(cl_int err, char *buf, size_t len);

/* ---- report.c ----------------------------------------------------------------- */
/* j as JSON text (json_dumpb's flags) in memory of malloc's, which the
 * caller free()s whatever allocator jansson was given; NULL when out of
 * memory (report.c). */
struct json_t;
char *bml__json_text(const struct json_t *j, size_t flags);

/* ---- icd.c: what the loader could not give, and what to install --------- */
/* The note for no loader at all (what is missing, and the packages for
 * each vendor family), or for entry points it lacks.  Cannot fail. */
void bml__icd_loader_notes(const bml__cl_loader *ld, bml__notes *notes);
/* A note for each .icd file (or OCL_ICD_FILENAMES library) whose library
 * cannot be loaded, with dlerror()'s words; with no platform found, one
 * more that says what is missing and what to install.  Cannot fail. */
void bml__icd_driver_notes(cl_uint platforms, bml__notes *notes);

/* ---- registry.c: cross-check, classify, dedupe, order, select ------------ */
/* The selection BANKML_GPU asks for. */
typedef struct {
  enum { BML_GPU_ALL, BML_GPU_OFF, BML_GPU_INDICES, BML_GPU_PCI, BML_GPU_UUID } mode;
  size_t indices[64];
  size_t nindices;
  bml__pci_addr pci;
  uint8_t uuid[16];
} bml__gpu_choice;

/* Parses a BANKML_GPU value (NULL or "" = all usable devices) that came
 * from `name` (the variable or the discovery's option).  Returns 0 or
 * BML_EENV after logging an error that names it and the value. */
int bml__gpu_choice_parse(const char *name, const char *value, bml__gpu_choice *out);

/* bml_devices_discover, the selection (o->gpu) named `gpu_name` in its
 * messages where it is not NULL ("bml_worker_options.device"). */
int bml__devices_discover(const bml_discover_options *o, const char *gpu_name, bml_devices **out);

#endif
