/* registry.c -- the device listing: cross-check with the kernel, classify, dedupe, order, select. */
#include "base/env.h"
#include "base/log.h"
#include "base/options.h"
#include "base/util.h"
#include "devices/device.h"

#include <ctype.h>
#include <stdatomic.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- BANKML_GPU ----------------------------------------------------------- */

/* name: where the value came from ("BANKML_GPU", or the discovery's option) */
static int gpu_choice_error(const char *name, const char *value, const char *why) {
  bml__error(BML_CAT_ENV, "%s=\"%s\": %s (expected off, none, cpu, report indices "
             "such as 0,2, pci:0000:03:00.0, or uuid: and a device's uuid)", name, value, why);
  return BML_EENV;
}

static int parse_indices(const char *name, const char *value, bml__gpu_choice *out) {
  for (const char *p = value;;) {
    if (!isdigit((unsigned char)*p)) return gpu_choice_error(name, value, "not a list of indices");
    char *end;
    unsigned long v = strtoul(p, &end, 10);
    if (v > 4096) return gpu_choice_error(name, value, "index out of range");
    if (out->nindices == BML_ARRAY_SIZE(out->indices)) {
      char why[48];
      snprintf(why, sizeof why, "more than %zu indices", BML_ARRAY_SIZE(out->indices));
      return gpu_choice_error(name, value, why);
    }
    out->indices[out->nindices++] = (size_t)v;
    if (*end == '\0') return 0;
    if (*end != ',') return gpu_choice_error(name, value, "not a list of indices");
    p = end + 1;
  }
}

/* 32 hex digits, dashes anywhere between them (cl_khr_device_uuid's
 * 8-4-4-4-12 as the listing writes it, or none). */
static int parse_uuid(const char *s, uint8_t uuid[16]) {
  size_t digits = 0;
  for (; *s && digits < 32; s++) {
    if (*s == '-') continue;
    if (!isxdigit((unsigned char)*s)) return BML_EINVAL;
    unsigned v = isdigit((unsigned char)*s) ? (unsigned)(*s - '0') : (unsigned)(tolower((unsigned char)*s) - 'a' + 10);
    uuid[digits / 2] = (uint8_t)(digits % 2 ? uuid[digits / 2] | v : v << 4);
    digits++;
  }
  return digits == 32 && *s == '\0' ? 0 : BML_EINVAL;
}

int bml__gpu_choice_parse(const char *name, const char *value, bml__gpu_choice *out) {
  memset(out, 0, sizeof *out);
  out->mode = BML_GPU_ALL;
  if (!value || !*value) return 0;
  if (strcmp(value, "off") == 0 || strcmp(value, "none") == 0 || strcmp(value, "cpu") == 0) {
    out->mode = BML_GPU_OFF;
    return 0;
  }
  if (strncmp(value, "pci:", 4) == 0) {
    out->mode = BML_GPU_PCI;
    if (bml__pci_addr_parse(value + 4, &out->pci) != 0)
      return gpu_choice_error(name, value, "not a PCI address");
    return 0;
  }
  if (strncmp(value, "uuid:", 5) == 0) {
    out->mode = BML_GPU_UUID;
    if (parse_uuid(value + 5, out->uuid) != 0) return gpu_choice_error(name, value, "not a uuid (32 hex digits)");
    return 0;
  }
  out->mode = BML_GPU_INDICES;
  return parse_indices(name, value, out);
}

/* ---- cross-check ------------------------------------------------------------ */

static void match_pci(bml__device *d, const bml__sysfs *fs, bml__notes *notes) {
  bml__pci_addr_format(d->cl.pci, d->pci_str);
  int rc = bml__pci_lookup(fs, d->cl.pci, &d->pci_info, notes);
  if (rc != 0) {
    bml__notes_add(notes, "device \"%s\": the driver says PCI %s (%s), but the kernel has no such "
                   "device", d->cl.name, d->pci_str, d->cl.pci_source);
    return;
  }
  d->has_pci_info = true;
  d->pci = d->cl.pci;
  d->matched_by = "pci-bus-info";
  unsigned base = d->pci_info.class_code >> 16;
  if (base != 0x03 && base != 0x12) /* display controller, processing accelerator */
    bml__notes_add(notes, "device \"%s\" at %s: the kernel's class 0x%06x there is not a display "
                   "controller", d->cl.name, d->pci_str, d->pci_info.class_code);
  if (d->pci_info.vendor_id != d->cl.vendor_id)
    bml__notes_add(notes, "device \"%s\" at %s: OpenCL says vendor id 0x%04x, the kernel says 0x%04x; "
                   "both are kept", d->cl.name, d->pci_str, d->cl.vendor_id, d->pci_info.vendor_id);
}

/* A GPU without a PCI address: a SoC GPU the kernel knows, else the only
 * display device of its vendor on PCI. */
static void match_without_address(bml__device *d, const bml__sysfs *fs, bml__notes *notes) {
  if (bml__soc_gpu_lookup(fs, d->cl.vendor_id, d->cl.name, &d->soc, notes) == 0) {
    d->has_soc = true;
    d->matched_by = "drm";
    return;
  }
  if (d->cl.vendor_id > 0xffff) return;
  bml__pci_addr found[4];
  size_t count = 0;
  if (bml__pci_find_display(fs, (uint16_t)d->cl.vendor_id, found, BML_ARRAY_SIZE(found), &count) != 0)
    return;
  if (count > 1) {
    d->pci_ambiguous = true;
    bml__notes_add(notes, "device \"%s\" has no PCI address and %zu display devices of vendor 0x%04x "
                   "are on PCI: not matched", d->cl.name, count, d->cl.vendor_id);
    return;
  }
  if (count == 1 && bml__pci_lookup(fs, found[0], &d->pci_info, notes) == 0) {
    d->has_pci_info = true;
    d->pci = found[0];
    bml__pci_addr_format(found[0], d->pci_str);
    d->matched_by = "vendor-id";
  }
}

/* Software implementations, known by a platform or device name. */
static const struct {
  bool platform; /* match the platform name (else the device name) */
  const char *needle;
  const char *what;
} software_names[] = {
    {true, "Portable Computing Language", "PoCL"},
    {true, "Oclgrind", "oclgrind"},
    {false, "llvmpipe", "llvmpipe"},
    {false, "softpipe", "softpipe"},
    {false, "SwiftShader", "SwiftShader"},
    {false, "oclgrind", "oclgrind"},
};

/* The software a device's own name says it is, or NULL. */
static const char *named_software(const bml__device *d) {
  for (size_t i = 0; i < BML_ARRAY_SIZE(software_names); i++)
    if (!software_names[i].platform && strstr(d->cl.name, software_names[i].needle)) return software_names[i].what;
  return NULL;
}

static void cross_check(bml__device *d, const bml__sysfs *fs, bml__notes *notes) {
  d->matched_by = "none";
  /* nothing on PCI or in the SoC is llvmpipe, whatever vendor id it gives */
  if ((d->cl.type & CL_DEVICE_TYPE_CPU) || named_software(d)) return;
  if (d->cl.pci.valid)
    match_pci(d, fs, notes);
  else
    match_without_address(d, fs, notes);
}

/* ---- classification ---------------------------------------------------------- */

static const char *software_kind(const bml__device *d, bool sysfs_readable) {
  const char *named = named_software(d);
  if (named) return named;
  /* A platform's name says less: PoCL also drives real cards (its CUDA and
   * Level Zero devices), and a GPU the kernel knows is not software,
   * whoever drives it. */
  bool real_gpu = (d->cl.type & CL_DEVICE_TYPE_GPU) && (d->has_pci_info || d->has_soc || d->pci_ambiguous);
  for (size_t i = 0; i < BML_ARRAY_SIZE(software_names); i++)
    if (software_names[i].platform && strstr(d->cl.platform_name, software_names[i].needle) && !real_gpu)
      return software_names[i].what;
  if ((d->cl.type & CL_DEVICE_TYPE_GPU) && !real_gpu && sysfs_readable)
    return "a GPU with no PCI or platform device behind it";
  return NULL;
}

static bml_device_kind classify(const bml__device *d) {
  if (d->software || (d->cl.type & CL_DEVICE_TYPE_CPU)) return BML_KIND_CPU;
  if (d->cl.type & CL_DEVICE_TYPE_GPU) return d->cl.host_unified ? BML_KIND_INTEGRATED : BML_KIND_DISCRETE;
  if (d->cl.type & CL_DEVICE_TYPE_ACCELERATOR) return BML_KIND_ACCELERATOR;
  return BML_KIND_OTHER;
}

/* Whether "PREFIX major.minor ..." names at least 1.2; a string that does
 * not parse is taken as new enough (the driver's own checks then speak). */
static bool at_least_1_2(const char *version, const char *prefix) {
  unsigned major = 0, minor = 0;
  const size_t len = strlen(prefix);
  if (!version || strncmp(version, prefix, len) != 0 || sscanf(version + len, "%u.%u", &major, &minor) != 2)
    return true;
  return major > 1 || (major == 1 && minor >= 2);
}

static void judge(bml__device *d, bool software_allowed) {
  bml_device_kind k = d->pub.kind;
  const char *why = NULL;
  char buf[200];
  if (d->software && !software_allowed) {
    snprintf(buf, sizeof buf, "software device (%s)", d->software);
    why = buf;
  } else if (k == BML_KIND_CPU && !software_allowed) {
    why = "CPU device: bankml-cl runs on the CPU itself";
  } else if (k == BML_KIND_ACCELERATOR) {
    why = "accelerator: bankml-cl's kernels are for GPUs";
  } else if (k == BML_KIND_REMOTE) {
    why = "remote device: listed only";
  } else if (k == BML_KIND_OTHER) {
    why = "custom device type: bankml-cl's kernels are for GPUs";
  } else if (!d->cl.available) {
    why = "not available (CL_DEVICE_AVAILABLE is false)";
  } else if (!d->cl.compiler_available) {
    why = "no OpenCL C compiler (CL_DEVICE_COMPILER_AVAILABLE is false)";
  } else if (!at_least_1_2(d->cl.version, "OpenCL ") || !at_least_1_2(d->cl.c_version, "OpenCL C ")) {
    /* the host code calls 1.2's clEnqueueFillBuffer and markers, the kernels are OpenCL C 1.2 */
    snprintf(buf, sizeof buf, "%s / %s: bankml-cl needs OpenCL 1.2 and OpenCL C 1.2",
             d->cl.version ? d->cl.version : "no OpenCL version", d->cl.c_version ? d->cl.c_version : "no OpenCL C version");
    why = buf;
  }
  snprintf(d->why_not, sizeof d->why_not, "%s", why ? why : "");
  d->pub.usable = why == NULL;
}

/* ---- duplicates --------------------------------------------------------------- */

static bool same_addr(const bml__pci_addr *p, const bml__pci_addr *q) { /* field by field: the struct has padding */
  return p->valid && q->valid && p->domain == q->domain && p->bus == q->bus && p->dev == q->dev && p->fn == q->fn;
}

/* Whether two records say they are in one place: two driver addresses
 * decide alone (drivers that give every card one UUID, or a zero one, do
 * not make two cards one); else two UUIDs, unless zero; else, once the
 * kernel was asked (examined), the device each was matched to. */
static bool same_place(const bml__device *a, const bml__device *b, bool examined) {
  static const uint8_t zero[16];
  if (a->cl.pci.valid && b->cl.pci.valid) return same_addr(&a->cl.pci, &b->cl.pci);
  if (a->cl.has_uuid && b->cl.has_uuid && memcmp(a->cl.uuid, zero, sizeof zero) != 0 &&
      memcmp(b->cl.uuid, zero, sizeof zero) != 0)
    return memcmp(a->cl.uuid, b->cl.uuid, sizeof a->cl.uuid) == 0;
  if (!examined || a->cl.pci.valid || b->cl.pci.valid) return false;
  if (a->has_soc && b->has_soc) return strcmp(a->soc.path, b->soc.path) == 0;
  return a->has_pci_info && b->has_pci_info && same_addr(&a->pci, &b->pci);
}

/* Two records are one device registered twice when they are the same handle
 * (ocl-icd loads one library named by two .icd files once, and lists its
 * platform twice), or when the same driver (name, driver version, vendor id)
 * says it is in the same place (same_place) from two libraries. */
static bool same_device(const bml__device *a, const bml__device *b, bool examined) {
  if (a->cl.id == b->cl.id) return true; /* one library named by two .icd files */
  return a->cl.vendor_id == b->cl.vendor_id && strcmp(a->cl.name, b->cl.name) == 0 &&
         strcmp(a->cl.driver_version, b->cl.driver_version) == 0 && same_place(a, b, examined);
}

static int add_registration(bml__device *d, const char *platform) {
  char **r = realloc(d->registrations, (d->nregistrations + 1) * sizeof *r);
  if (!r) return BML_ENOMEM;
  d->registrations = r;
  if (!(r[d->nregistrations] = strdup(platform))) return BML_ENOMEM;
  d->nregistrations++;
  return 0;
}

static void free_record(bml__device *d) {
  bml__cl_info_free(&d->cl);
  for (size_t i = 0; i < d->nregistrations; i++) free(d->registrations[i]);
  free(d->registrations);
  d->registrations = NULL;
  d->nregistrations = 0;
}

/* Merges the records of one device: before the kernel is asked (by the
 * drivers' handles, addresses and UUIDs; each record's own registration is
 * recorded then), and again after (examined: a SoC GPU or a GPU matched by
 * its vendor, whose driver gives neither address nor UUID). */
static int dedupe(struct bml_devices *l, bool examined) {
  size_t kept = 0;
  for (size_t i = 0; i < l->len; i++) {
    bml__device *d = &l->dev[i];
    if (!examined && add_registration(d, d->cl.platform_name) != 0) return BML_ENOMEM;
    size_t j = 0;
    while (j < kept && !same_device(&l->dev[j], d, examined)) j++;
    if (j < kept) {
      bml__notes_add(&l->notes, "device \"%s\" is registered twice (platforms \"%s\" and \"%s\", "
                     "two ICD files for one driver): listed once", d->cl.name,
                     l->dev[j].cl.platform_name, d->cl.platform_name);
      int rc = 0; /* every registration it holds (after the first pass, those merged into it) */
      for (size_t r = 0; rc == 0 && r < d->nregistrations; r++) rc = add_registration(&l->dev[j], d->registrations[r]);
      free_record(d);
      if (rc != 0) return rc;
      continue;
    }
    if (kept != i) {
      l->dev[kept] = *d;
      memset(d, 0, sizeof *d); /* moved: an error later frees every record, and this one once */
    }
    kept++;
  }
  l->len = kept;
  return 0;
}

/* ---- order and selection -------------------------------------------------------- */

static int kind_rank(bml_device_kind k) {
  static const int rank[] = {[BML_KIND_DISCRETE] = 0, [BML_KIND_INTEGRATED] = 1,
                             [BML_KIND_ACCELERATOR] = 2, [BML_KIND_OTHER] = 3,
                             [BML_KIND_REMOTE] = 4, [BML_KIND_CPU] = 5};
  return rank[k];
}

/* Discrete first, then device-local memory, largest first; ties keep the
 * loader's order. */
static int compare_devices(const void *pa, const void *pb) {
  const bml__device *a = pa, *b = pb;
  int ra = kind_rank(a->pub.kind), rb = kind_rank(b->pub.kind);
  if (ra != rb) return ra - rb;
  if (a->cl.global_mem != b->cl.global_mem) return a->cl.global_mem > b->cl.global_mem ? -1 : 1;
  return a->order < b->order ? -1 : a->order > b->order;
}

static void select_device(struct bml_devices *l, size_t i) {
  bml__device *d = &l->dev[i];
  if (d->pub.usable)
    d->pub.selected = 1;
  else
    bml__notes_add(&l->notes, "%s=\"%s\" names device %zu (\"%s\"), which is not usable: %s", l->gpu_source,
                   l->gpu_setting, i, d->cl.name, d->why_not);
}

static int apply_choice(struct bml_devices *l, const bml__gpu_choice *c) {
  if (c->mode == BML_GPU_ALL) {
    for (size_t i = 0; i < l->len; i++) l->dev[i].pub.selected = l->dev[i].pub.usable;
  } else if (c->mode == BML_GPU_OFF) {
    bml__notes_add(&l->notes, "%s=\"%s\": no device selected; everything runs on the CPU",
                   l->gpu_source, l->gpu_setting);
  } else if (c->mode == BML_GPU_INDICES) {
    for (size_t k = 0; k < c->nindices; k++) {
      size_t seen = 0;
      while (seen < k && c->indices[seen] != c->indices[k]) seen++;
      if (seen < k) continue; /* named twice: selected (or noted) once */
      if (c->indices[k] >= l->len) {
        bml__error(BML_CAT_ENV, "%s=\"%s\": there is no device %zu (%zu listed)", l->gpu_source,
                   l->gpu_setting, c->indices[k], l->len);
        return l->gpu_error;
      }
      select_device(l, c->indices[k]);
    }
  } else if (c->mode == BML_GPU_UUID) {
    size_t i = 0;
    while (i < l->len && !(l->dev[i].cl.has_uuid && memcmp(l->dev[i].cl.uuid, c->uuid, sizeof c->uuid) == 0)) i++;
    if (i == l->len) {
      bml__error(BML_CAT_ENV, "%s=\"%s\": no device has this uuid (cl_khr_device_uuid)", l->gpu_source,
                 l->gpu_setting);
      return l->gpu_error;
    }
    select_device(l, i);
  } else {
    char want[BML__PCI_ADDR_SIZE];
    bml__pci_addr_format(c->pci, want);
    size_t i = 0;
    while (i < l->len && strcmp(l->dev[i].pci_str, want) != 0) i++;
    if (i == l->len) {
      bml__error(BML_CAT_ENV, "%s=\"%s\": no device at PCI address %s", l->gpu_source, l->gpu_setting, want);
      return l->gpu_error;
    }
    select_device(l, i);
  }
  return 0;
}

static void fill_public(bml__device *d, size_t index) {
  bml_device *p = &d->pub;
  p->index = index;
  p->name = d->cl.name;
  p->vendor = d->cl.vendor;
  p->platform = d->cl.platform_name;
  p->why_not = p->usable ? NULL : d->why_not;
  p->pci_address = d->pci_str[0] ? d->pci_str : NULL;
  p->matched_by = d->matched_by;
  p->global_mem_bytes = d->cl.global_mem;
  p->max_alloc_bytes = d->cl.max_alloc;
  p->host_unified_memory = d->cl.host_unified != 0;
  p->verified = -1;
  p->cl_platform = d->cl.platform;
  p->cl_device = d->cl.id;
  if (d->cl.has_uuid) bml__uuid_format(d->cl.uuid, d->uuid_str);
  p->uuid = d->uuid_str[0] ? d->uuid_str : NULL;
}

/* ---- the listing ------------------------------------------------------------------ */

void bml_discover_options_init(bml_discover_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->sysfs_root = NULL;
  o->pci_ids = NULL;
  o->gpu = NULL;
  o->software = -1;
}

/* The settings, each from the options or else the environment; *root:
 * the sysfs root to read (NULL: "/sys"). */
static int read_settings(const bml_discover_options *o, const char *gpu_name, struct bml_devices *l,
                         bml__gpu_choice *choice, const char **root) {
  const char *gpu = o->gpu;
  if (!gpu) bml__env_gpu(&gpu);
  snprintf(l->gpu_setting, sizeof l->gpu_setting, "%s", gpu ? gpu : "");
  /* a bad option is the caller's argument (BML_EINVAL), a bad variable the environment's */
  l->gpu_source = o->gpu ? gpu_name : "BANKML_GPU";
  l->gpu_error = o->gpu ? BML_EINVAL : BML_EENV;
  int rc = bml__gpu_choice_parse(l->gpu_source, gpu, choice);
  if (rc != 0) return l->gpu_error;
  if (o->software < -1 || o->software > 1) {
    bml__error(BML_CAT_DEVICE, "bml_discover_options.software=%d: expected -1 (the environment), 0 or 1",
               o->software);
    return BML_EINVAL;
  }
  *root = o->sysfs_root; /* a bad BANKML_SYSFS_ROOT is an error, as any variable (bankml-cl(1)) */
  if (!*root && (rc = bml__env_sysfs_root(root)) != 0) return rc;
  bool software = false;
  if (o->software >= 0)
    software = o->software != 0;
  else if ((rc = bml__env_gpu_software(&software)) != 0)
    return rc;
  l->software_allowed = software;
  static atomic_flag said = ATOMIC_FLAG_INIT;
  if (software && !atomic_flag_test_and_set(&said))
    bml__warn(BML_CAT_DEVICE, "BANKML_GPU_SOFTWARE=1: software devices are usable (for tests and CI only)");
  if (software) {
    bml__notes_add(&l->notes, "BANKML_GPU_SOFTWARE=1: software and CPU devices are usable (for tests and CI only)");
  }
  return 0;
}

static bool readable_dir(const char *path) {
  DIR *dir = opendir(path);
  if (dir) closedir(dir);
  return dir != NULL;
}

static void examine(struct bml_devices *l, const bml__sysfs *fs) {
  bool sysfs_readable = readable_dir(fs->root);
  if (!sysfs_readable)
    bml__notes_add(&l->notes, "%s is not readable: devices are not cross-checked with the kernel", fs->root);
  for (size_t i = 0; i < l->len; i++) {
    bml__device *d = &l->dev[i];
    if (sysfs_readable) {
      cross_check(d, fs, &l->notes);
    } else {
      d->matched_by = "none";
      /* the driver's own address stands (and BANKML_GPU=pci: selects by it) */
      if (d->cl.pci.valid && !(d->cl.type & CL_DEVICE_TYPE_CPU) && !named_software(d))
        bml__pci_addr_format(d->cl.pci, d->pci_str);
    }
    d->software = software_kind(d, sysfs_readable);
    d->pub.kind = classify(d);
    judge(d, l->software_allowed);
    bml__debug(BML_CAT_DEVICE, "\"%s\" (platform \"%s\"): %s, matched by %s%s%s, %s%s", d->cl.name,
               d->cl.platform_name, bml_device_kind_name(d->pub.kind), d->matched_by, d->pci_str[0] ? " at " : "",
               d->pci_str, d->pub.usable ? "usable" : "not usable: ", d->pub.usable ? "" : d->why_not);
  }
}

/* The last member of the options' first version: its size stays this. */
#define DISCOVER_OPTIONS_V1 (offsetof(bml_discover_options, software) + sizeof(int))

int bml_devices_discover(const bml_discover_options *opt, bml_devices **out) {
  return bml__devices_discover(opt, "bml_discover_options.gpu", out);
}

int bml__devices_discover(const bml_discover_options *opt, const char *gpu_name, bml_devices **out) {
  if (!out) return BML_EINVAL;
  *out = NULL;
  bml__debug_load();
  bml_discover_options o;
  bml_discover_options_init(&o);
  int rc = opt ? bml__options_take(opt, &o, sizeof o, DISCOVER_OPTIONS_V1, "bml_discover_options") : 0;
  if (rc != 0) return rc;
  struct bml_devices *l = calloc(1, sizeof *l);
  if (!l) return BML_ENOMEM;
  bml__gpu_choice choice;
  const char *root = NULL;
  rc = read_settings(&o, gpu_name, l, &choice, &root);
  if (rc == 0) rc = bml__cl_enumerate(&l->dev, &l->len, &l->notes);
  if (rc == 0) bml__cl_loader_describe(&l->loader);
  if (rc == 0) rc = dedupe(l, false);
  if (rc == 0) {
    bml__sysfs fs;
    bml__sysfs_init(&fs, root ? root : "/sys", o.pci_ids); /* the root read once, above */
    examine(l, &fs);
    rc = dedupe(l, true);
  }
  if (rc == 0) {
    if (l->len > 1) qsort(l->dev, l->len, sizeof *l->dev, compare_devices);
    rc = apply_choice(l, &choice);
  }
  if (rc != 0) {
    bml_devices_free(l);
    return rc;
  }
  for (size_t i = 0; i < l->len; i++) fill_public(&l->dev[i], i);
  *out = l;
  return 0;
}

size_t bml_devices_count(const bml_devices *d) { return d ? d->len : 0; }

const bml_device *bml_devices_get(const bml_devices *d, size_t i) {
  return d && i < d->len ? &d->dev[i].pub : NULL;
}

size_t bml_devices_note_count(const bml_devices *d) { return d ? d->notes.len : 0; }

const char *bml_devices_note(const bml_devices *d, size_t i) {
  return d && i < d->notes.len ? d->notes.items[i] : NULL;
}

void bml_devices_free(bml_devices *d) {
  if (!d) return;
  for (size_t i = 0; i < d->len; i++) free_record(&d->dev[i]);
  free(d->dev);
  bml__notes_free(&d->notes);
  free(d);
}

const char *bml_device_kind_name(bml_device_kind kind) {
  static const char *const names[] = {"discrete", "integrated", "cpu", "accelerator", "remote", "other"};
  return (unsigned)kind < BML_ARRAY_SIZE(names) ? names[kind] : "other";
}

/* Every variable of the library, each parsed (BANKML_GPU here, the others in base/env.c). */
int bml_env_check(void) {
  int threads = 0, queues = 0;
  unsigned wait_ms = 0;
  bool software;
  double share, limit;
  const char *gpu = NULL, *root = NULL;
  bml__gpu_choice choice;
  /* each one, so that every bad variable is named, not only the first */
  int rc = bml__env_threads(&threads);
  if (bml__env_pool_wait_ms(&wait_ms) != 0) rc = BML_EENV;
  if (bml__env_gpu(&gpu) == 0 && bml__gpu_choice_parse("BANKML_GPU", gpu, &choice) != 0) rc = BML_EENV;
  if (bml__env_gpu_software(&software) != 0) rc = BML_EENV;
  if (bml__env_gpu_share(&share) != 0) rc = BML_EENV;
  if (bml__env_gpu_limit(&limit) != 0) rc = BML_EENV;
  if (bml__env_gpu_queues(&queues) != 0) rc = BML_EENV;
  if (bml__env_sysfs_root(&root) != 0) rc = BML_EENV;
  return rc;
}
