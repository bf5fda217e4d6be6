/* report.c -- the device listing as JSON (jansson), in one place: doc/DEVICES.md is its schema. */
#include "devices/device.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BML_DEVICES_SCHEMA 1

static json_t *hex(uint32_t v, int digits) {
  char buf[16];
  snprintf(buf, sizeof buf, "0x%0*x", digits, v);
  return json_string(buf);
}

/* A string from a driver or the kernel as JSON: bytes that are not UTF-8
 * become '?', so a misbehaving driver cannot drop a device from the report. */
static json_t *text(const char *s) {
  if (!s) s = "";
  json_t *j = json_string(s);
  if (j) return j;
  char *copy = strdup(s);
  if (!copy) return NULL;
  for (char *p = copy; *p; p++)
    if ((unsigned char)*p >= 0x80) *p = '?';
  j = json_string(copy);
  free(copy);
  return j;
}

/* A string, or null when it is empty (the kernel or driver said nothing). */
static json_t *str_or_null(const char *s) { return s && *s ? text(s) : json_null(); }

/* A count of bytes from a driver or the kernel.  JSON's integers here are
 * 64-bit signed: one past INT64_MAX (a driver that says UINT64_MAX) is
 * written as a number with a fraction's precision, not as a negative. */
static json_t *u64(uint64_t v) {
  return v <= (uint64_t)INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

static json_t *u64_or_null(uint64_t v) { return v ? u64(v) : json_null(); }

static json_t *platform_json(const bml__cl_info *ci) {
  return json_pack("{s:o, s:o, s:o}", "name", text(ci->platform_name), "vendor",
                   text(ci->platform_vendor), "version", text(ci->platform_version));
}

static json_t *fp32_json(cl_device_fp_config c) {
  return json_pack("{s:b, s:b, s:b, s:b, s:b}", "fma", (c & CL_FP_FMA) != 0, "denormals",
                   (c & CL_FP_DENORM) != 0, "inf_nan", (c & CL_FP_INF_NAN) != 0,
                   "round_to_nearest", (c & CL_FP_ROUND_TO_NEAREST) != 0,
                   "correctly_rounded_divide_sqrt", (c & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0);
}

/* The extensions that matter to bankml-cl, as booleans. */
static json_t *extensions_json(const char *ext) {
  return json_pack(
      "{s:b, s:b, s:b, s:b, s:b, s:b}", "fp16", bml__cl_has_extension(ext, "cl_khr_fp16"), "fp64",
      bml__cl_has_extension(ext, "cl_khr_fp64"), "subgroups",
      bml__cl_has_extension(ext, "cl_khr_subgroups") || bml__cl_has_extension(ext, "cl_intel_subgroups"),
      "integer_dot_product", bml__cl_has_extension(ext, "cl_khr_integer_dot_product"),
      "pci_bus_info", bml__cl_has_extension(ext, "cl_khr_pci_bus_info"), "uuid",
      bml__cl_has_extension(ext, "cl_khr_device_uuid"));
}

/* Every extension the device names (CL_DEVICE_EXTENSIONS), in its order. */
static json_t *extension_list_json(const char *ext) {
  json_t *a = json_array();
  for (const char *p = ext ? ext : ""; a && *p;) {
    size_t len = strcspn(p, " ");
    if (len > 0) {
      char *word = strndup(p, len);
      if (word) json_array_append_new(a, text(word));
      free(word);
    }
    p += len;
    p += strspn(p, " ");
  }
  return a;
}

static json_t *sub_group_sizes_json(const bml__cl_info *ci) {
  if (ci->nsub_group_sizes == 0) return json_null();
  json_t *a = json_array();
  for (size_t i = 0; i < ci->nsub_group_sizes; i++) json_array_append_new(a, json_integer((json_int_t)ci->sub_group_sizes[i]));
  return a;
}

static json_t *uuid_json(const bml__cl_info *ci) {
  if (!ci->has_uuid) return json_null();
  char buf[40];
  char *p = buf;
  for (int i = 0; i < 16; i++) {
    p += sprintf(p, "%02x", ci->uuid[i]);
    if (i == 3 || i == 5 || i == 7 || i == 9) *p++ = '-';
  }
  return json_string(buf);
}

static json_t *pci_json(const bml__device *d) {
  if (!d->pci_str[0]) return json_null();
  json_t *o = json_pack("{s:s, s:o}", "address", d->pci_str, "source",
                        str_or_null(d->matched_by && strcmp(d->matched_by, "vendor-id") == 0
                                        ? "vendor-id" : d->cl.pci_source));
  if (!d->has_pci_info) return o;
  const bml__pci_info *p = &d->pci_info;
  json_object_set_new(o, "method", json_string(p->method ? p->method : "sysfs"));
  json_object_set_new(o, "vendor_id", hex(p->vendor_id, 4));
  json_object_set_new(o, "device_id", hex(p->device_id, 4));
  json_object_set_new(o, "subsystem_vendor_id", hex(p->subsys_vendor_id, 4));
  json_object_set_new(o, "subsystem_device_id", hex(p->subsys_device_id, 4));
  json_object_set_new(o, "class", hex(p->class_code, 6));
  json_object_set_new(o, "revision", hex(p->revision, 2));
  json_object_set_new(o, "vendor_name", str_or_null(p->vendor_name));
  json_object_set_new(o, "device_name", str_or_null(p->device_name));
  return o;
}

static json_t *bars_json(const uint64_t *bar) {
  json_t *a = json_array();
  for (int i = 0; i < 6; i++) json_array_append_new(a, u64(bar[i]));
  return a;
}

static json_t *sysfs_pci_json(const bml__pci_info *p) {
  return json_pack(
      "{s:o, s:o, s:{s:o, s:o, s:o, s:o}, s:o, s:o, s:o, s:o, s:o}", "driver", str_or_null(p->driver),
      "numa_node", p->numa_node >= 0 ? json_integer(p->numa_node) : json_null(), "link", "speed",
      str_or_null(p->link_speed), "width", p->link_width ? json_integer(p->link_width) : json_null(),
      "max_speed", str_or_null(p->max_link_speed), "max_width",
      p->max_link_width ? json_integer(p->max_link_width) : json_null(), "bar_sizes", bars_json(p->bar_size),
      "vram_total", u64_or_null(p->vram_total), "gtt_total", u64_or_null(p->gtt_total), "lmem_total",
      u64_or_null(p->lmem_total), "drm_card", str_or_null(p->drm_card));
}

static json_t *sysfs_json(const bml__device *d) {
  if (d->has_pci_info) return sysfs_pci_json(&d->pci_info);
  if (!d->has_soc) return json_null();
  return json_pack("{s:o, s:o, s:o, s:o}", "driver", str_or_null(d->soc.driver), "model",
                   str_or_null(d->soc.model), "platform_device", str_or_null(d->soc.path), "drm_card",
                   str_or_null(d->soc.drm_card));
}

static json_t *registrations_json(const bml__device *d) {
  json_t *a = json_array();
  for (size_t i = 0; i < d->nregistrations; i++) json_array_append_new(a, text(d->registrations[i]));
  return a;
}

static json_t *device_json(const bml__device *d) {
  const bml__cl_info *ci = &d->cl;
  json_t *o = json_pack(
      "{s:I, s:s, s:o, s:b, s:o, s:b, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:o, s:o, s:b, "
      "s:b, s:b, s:o, s:o, s:o}",
      "index", (json_int_t)d->pub.index, "kind", bml_device_kind_name(d->pub.kind), "name",
      text(ci->name), "usable", d->pub.usable, "why_not", str_or_null(d->why_not), "selected",
      d->pub.selected, "platform", platform_json(ci), "vendor", text(ci->vendor), "vendor_id",
      hex(ci->vendor_id, 4), "opencl_version", text(ci->version), "opencl_c_version",
      text(ci->c_version), "driver_version", text(ci->driver_version), "compute_units", (json_int_t)ci->compute_units, "clock_mhz",
      (json_int_t)ci->clock_mhz, "global_mem_bytes", u64(ci->global_mem), "max_alloc_bytes",
      u64(ci->max_alloc), "local_mem_bytes", u64(ci->local_mem), "host_unified_memory",
      ci->host_unified != 0, "available", ci->available != 0, "compiler_available",
      ci->compiler_available != 0, "fp32", fp32_json(ci->fp32), "extensions",
      extensions_json(ci->extensions), "uuid", uuid_json(ci));
  if (!o) return NULL;
  json_object_set_new(o, "verified", d->pub.verified < 0 ? json_null() : json_boolean(d->pub.verified));
  json_object_set_new(o, "software", str_or_null(d->software));
  json_object_set_new(o, "pci", pci_json(d));
  json_object_set_new(o, "sysfs", sysfs_json(d));
  json_object_set_new(o, "matched_by", json_string(d->matched_by ? d->matched_by : "none"));
  json_object_set_new(o, "registrations", registrations_json(d));
  /* added after the first release of schema 1 */
  json_object_set_new(o, "profile", str_or_null(ci->profile));
  json_object_set_new(o, "max_work_group_size", json_integer((json_int_t)ci->max_work_group));
  json_object_set_new(o, "sub_group_sizes", sub_group_sizes_json(ci));
  json_object_set_new(o, "sub_group_sizes_source", ci->sub_group_source ? json_string(ci->sub_group_source) : json_null());
  json_object_set_new(o, "il_version", str_or_null(ci->il_version));
  json_object_set_new(o, "extension_list", extension_list_json(ci->extensions));
  return o;
}

/* The ICD loader: the library opened, or why it could not be; what it
 * says of itself (cl_icdl), and the entry points it lacks. */
static json_t *loader_json(const bml__loader_report *r) {
  const bml__cl_loader *s = r->state;
  if (!s) return json_null();
  json_t *missing = json_array();
  for (size_t i = 0; i < s->nmissing; i++) json_array_append_new(missing, json_string(s->missing[i]));
  const bool a = r->answered;
  return json_pack("{s:s, s:b, s:o, s:o, s:o, s:o, s:o, s:o}", "library", s->library, "loaded", s->loaded, "error",
                   str_or_null(s->error), "name", a ? str_or_null(r->name) : json_null(), "vendor",
                   a ? str_or_null(r->vendor) : json_null(), "version", a ? str_or_null(r->version) : json_null(),
                   "opencl_version", a ? str_or_null(r->opencl_version) : json_null(), "missing_entry_points",
                   missing);
}

/* Which work goes where: Q1_0 products on the first selected card that has
 * not failed verification, once it reproduces the CPU's bits (the rest of
 * the rows, and all of them otherwise, on the CPU); everything else on the
 * CPU. */
static json_t *kernels_json(const struct bml_devices *l) {
  json_t *card = json_null();
  for (size_t i = 0; i < l->len && json_is_null(card); i++)
    if (l->dev[i].pub.selected && l->dev[i].pub.verified != 0) card = json_integer((json_int_t)i);
  const char *cpu = bml_cpu_path();
  json_t *q1 = json_pack("{s:s, s:s, s:o, s:s, s:s}", "kernel", "q1_0_mat_vec", "runs_on",
                         json_is_null(card) ? "cpu" : "card+cpu", "card", card, "cpu_path", cpu,
                         "how", json_is_null(card)
                                    ? "every row on the CPU: no card is selected"
                                    : "the card takes a calibrated share of each matrix's rows once it "
                                      "reproduces the CPU kernel's bits (bankml-cl devices --verify); "
                                      "the CPU pool computes the rest, and everything when it does not");
  json_t *q8 = json_pack("{s:s, s:s, s:n, s:s, s:s}", "kernel", "q8_0_quantize", "runs_on", "cpu",
                         "card", "cpu_path", "c", "how", "on the CPU, always");
  return json_pack("[o, o]", q1, q8);
}

static json_t *listing_json(const struct bml_devices *l) {
  json_t *devices = json_array(), *selected = json_array(), *notes = json_array();
  for (size_t i = 0; i < l->len; i++) {
    json_array_append_new(devices, device_json(&l->dev[i]));
    if (l->dev[i].pub.selected) json_array_append_new(selected, json_integer((json_int_t)i));
  }
  for (size_t i = 0; i < l->notes.len; i++) json_array_append_new(notes, text(l->notes.items[i]));
  return json_pack("{s:i, s:s, s:o, s:o, s:o, s:o, s:b, s:o}", "schema", BML_DEVICES_SCHEMA,
                   "bankml_cl_version", bml_version_string(), "devices", devices, "selected", selected,
                   "notes", notes, "kernels", kernels_json(l), "software_allowed", l->software_allowed,
                   "icd_loader", loader_json(&l->loader));
}

char *bml__json_text(const json_t *j, size_t flags) {
  /* json_dumps would take jansson's allocator, which an application may
   * have replaced (json_set_alloc_funcs): the header promises free() */
  const size_t len = json_dumpb(j, NULL, 0, flags);
  char *text = len ? malloc(len + 1) : NULL;
  if (!text || json_dumpb(j, text, len, flags) != len) {
    free(text);
    return NULL;
  }
  text[len] = '\0';
  return text;
}

int bml_devices_report_json(const bml_devices *d, int pretty, char **json) {
  if (!d || !json) return BML_EINVAL;
  *json = NULL;
  json_t *root = listing_json(d);
  if (!root) return BML_ENOMEM;
  *json = bml__json_text(root, (pretty ? JSON_INDENT(2) : JSON_COMPACT) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
  json_decref(root);
  return *json ? 0 : BML_ENOMEM;
}
