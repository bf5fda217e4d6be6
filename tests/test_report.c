/* test_report.c -- the devices' JSON report: driver and kernel facts, extensions and limits, large numbers, and its memory under any allocator. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "logbuf.h"
#include "base/bml.h"
#include "base/util.h"
#include "base/log.h"
#include "base/env.h"
#include "cpu/q1_0.h"
#include "cpu/gen.h"
#include "cpu/pool.h"
#include "devicestest.h"

TestSuite(report, .timeout = 60);

static char logged[8192];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

Test(report, report_carries_driver_and_kernel_facts) {
  use_fake("mixed", "mixed");
  bml_devices *l = discover();
  json_t *root = report(l);
  cr_expect_eq(json_integer_value(json_object_get(root, "schema")), 1);
  cr_expect_str_eq(jstr(root, "bankml_cl_version"), bml_version_string());
  json_t *sel = json_object_get(root, "selected");
  cr_expect_eq(json_array_size(sel), 3);
  json_t *amd = device_json(root, 0);
  cr_expect_str_eq(jstr(amd, "kind"), "discrete");
  cr_expect_str_eq(jstr(amd, "vendor_id"), "0x1002");
  cr_expect_str_eq(jstr(amd, "pci.address"), "0000:03:00.0");
  cr_expect_str_eq(jstr(amd, "pci.source"), "cl_khr_pci_bus_info");
  cr_expect_str_eq(jstr(amd, "pci.vendor_name"), "Fixture Vendor AMD");
  cr_expect_str_eq(jstr(amd, "pci.device_name"), "Fixture Navi 21");
  cr_expect_str_eq(jstr(amd, "sysfs.driver"), "amdgpu");
  cr_expect(json_integer_value(json_object_get(json_object_get(amd, "sysfs"), "vram_total")) > 0);
  cr_expect_str_eq(jstr(amd, "uuid"), "3a0c1e55-7f2b-4d0a-9e61-0b5c2d8f4a17");
  cr_expect(json_is_true(json_object_get(json_object_get(amd, "fp32"), "fma")));
  cr_expect(json_is_true(json_object_get(json_object_get(amd, "extensions"), "pci_bus_info")));
  cr_expect_eq(json_array_size(json_object_get(amd, "registrations")), 2, "both registrations kept");
  json_t *intel = device_json(root, 1);
  cr_expect_str_eq(jstr(intel, "sysfs.driver"), "i915");
  cr_expect(json_is_true(json_object_get(json_object_get(intel, "extensions"), "fp16")));
  json_t *mali = device_json(root, 2);
  cr_expect_str_eq(jstr(mali, "sysfs.driver"), "panfrost");
  cr_expect(json_is_null(json_object_get(mali, "pci")));
  json_t *pocl = device_json(root, 3);
  cr_expect_str_eq(jstr(pocl, "why_not"), "software device (PoCL)");
  cr_expect_str_eq(jstr(pocl, "software"), "PoCL");
  json_t *k0 = json_array_get(json_object_get(root, "kernels"), 0);
  cr_expect_str_eq(jstr(k0, "kernel"), "q1_0_mat_vec");
  cr_expect_eq(json_integer_value(json_object_get(k0, "card")), 0);
  json_decref(root);
  bml_devices_free(l);
}

/* What clinfo users look for: the extension list, the profile, the largest
 * work-group, the sub-group sizes and the IL version (null where the
 * device does not say them, with no note: they are optional). */
Test(report, report_carries_extensions_profile_work_groups_sub_groups_and_il) {
  use_fake("empty", NULL);
  bml_devices *l = discover_scenario(
      "[platform]\nname = Clinfo Fields\n"
      "[device]\nname = Intel-like\nvendor_id = 0x8086\nprofile = EMBEDDED_PROFILE\n"
      "max_work_group_size = 512\nversion = OpenCL 3.0 fake\nil_version = SPIR-V_1.0 SPIR-V_1.2\n"
      "extensions = cl_khr_fp16  cl_intel_required_subgroup_size cl_khr_il_program\nsub_group_sizes = 8,16,32\n"
      "[device]\nname = NV-like\nvendor_id = 0x10de\nversion = OpenCL 1.2 fake\n"
      "extensions = cl_nv_device_attribute_query\nnv_warp_size = 32\n"
      "[device]\nname = AMD-like\nvendor_id = 0x1002\nversion = OpenCL 2.0 fake\n"
      "extensions = cl_amd_device_attribute_query\namd_wavefront_width = 64\n"
      "[device]\nname = Plain\nversion = OpenCL 3.0 fake\n");
  json_t *root = report(l);
  cr_expect_eq(json_integer_value(json_object_get(root, "schema")), 1, "additions only: still schema 1");
  cr_expect_eq(bml_devices_note_count(l), 0, "an optional property is not a note: %s",
               bml_devices_note_count(l) ? bml_devices_note(l, 0) : "");
  json_t *dev[4];
  for (size_t i = 0; i < 4; i++) {
    json_t *d = device_json(root, i);
    const char *name = jstr(d, "name");
    dev[strcmp(name, "Intel-like") == 0 ? 0 : strcmp(name, "NV-like") == 0 ? 1 : strcmp(name, "AMD-like") == 0 ? 2 : 3] = d;
  }
  json_t *intel = dev[0], *nv = dev[1], *amd = dev[2], *plain = dev[3];
  cr_expect_str_eq(jstr(intel, "profile"), "EMBEDDED_PROFILE");
  cr_expect_eq(json_integer_value(json_object_get(intel, "max_work_group_size")), 512);
  cr_expect_str_eq(jstr(intel, "il_version"), "SPIR-V_1.0 SPIR-V_1.2");
  json_t *ext = json_object_get(intel, "extension_list");
  cr_assert_eq(json_array_size(ext), 3, "two spaces are one separator");
  cr_expect_str_eq(json_string_value(json_array_get(ext, 0)), "cl_khr_fp16");
  cr_expect_str_eq(json_string_value(json_array_get(ext, 2)), "cl_khr_il_program");
  json_t *sg = json_object_get(intel, "sub_group_sizes");
  cr_assert_eq(json_array_size(sg), 3);
  cr_expect(json_integer_value(json_array_get(sg, 0)) == 8 && json_integer_value(json_array_get(sg, 2)) == 32);
  cr_expect_str_eq(jstr(intel, "sub_group_sizes_source"), "cl_intel_required_subgroup_size");
  cr_expect_eq(json_integer_value(json_array_get(json_object_get(nv, "sub_group_sizes"), 0)), 32);
  cr_expect_str_eq(jstr(nv, "sub_group_sizes_source"), "cl_nv_device_attribute_query");
  cr_expect(json_is_null(json_object_get(nv, "il_version")), "OpenCL 1.2 without cl_khr_il_program");
  cr_expect_eq(json_integer_value(json_array_get(json_object_get(amd, "sub_group_sizes"), 0)), 64);
  cr_expect_str_eq(jstr(plain, "profile"), "FULL_PROFILE");
  cr_expect_eq(json_integer_value(json_object_get(plain, "max_work_group_size")), 256);
  cr_expect(json_is_null(json_object_get(plain, "sub_group_sizes")));
  cr_expect(json_is_null(json_object_get(plain, "sub_group_sizes_source")));
  cr_expect(json_is_null(json_object_get(plain, "il_version")), "an OpenCL 3.0 device that does not answer");
  cr_expect_eq(json_array_size(json_object_get(plain, "extension_list")), 0);
  json_decref(root);
  bml_devices_free(l);
}

/* A driver that says 2^64 - 1 bytes: a large number in the report, never a
 * negative one (JSON's integers stop at 2^63 - 1 in jansson). */
Test(report, sizes_past_int64_are_large_numbers_in_json) {
  use_fake("nvidia", "nvidia");
  bml_devices *l = discover_scenario(
      "[platform]\nname = NVIDIA CUDA\nvendor = NVIDIA Corporation\nversion = OpenCL 3.0 CUDA\n"
      "extensions = cl_khr_icd cl_nv_device_attribute_query\nsuffix = NV\n"
      "[device]\ntype = gpu\nname = Boastful\nvendor_id = 0x10de\nhost_unified = 0\n"
      "global_mem = 0xffffffffffffffff\nmax_alloc = 0x8000000000000000\nlocal_mem = 48K\n"
      "extensions = cl_nv_device_attribute_query\nnv_bus = 0x00\nnv_slot = 0x30\nnv_domain = 0\n");
  cr_assert_eq(bml_devices_count(l), 1);
  json_t *root = report(l);
  json_t *dj = device_json(root, 0);
  json_t *g = json_object_get(dj, "global_mem_bytes"), *m = json_object_get(dj, "max_alloc_bytes");
  cr_expect(json_is_number(g) && json_number_value(g) == 18446744073709551615.0, "global_mem_bytes %g",
            json_number_value(g));
  cr_expect(json_is_number(m) && json_number_value(m) == 9223372036854775808.0, "max_alloc_bytes %g",
            json_number_value(m));
  cr_expect(json_is_integer(json_object_get(dj, "local_mem_bytes")));
  cr_expect_eq(json_integer_value(json_object_get(dj, "local_mem_bytes")), 48 * 1024);
  json_decref(root);
  bml_devices_free(l);
}

/* The header says free() the report: that holds when the application gave
 * jansson its own allocator (here one whose blocks start 16 bytes into
 * malloc's, so free() of one of them would fail).  The report came from
 * json_dumps, in the application's allocator's memory. */
static size_t offset_allocs;
static void *offset_malloc(size_t n) {
  char *p = malloc(n + 16);
  offset_allocs++;
  return p ? p + 16 : NULL;
}
static void offset_free(void *p) {
  if (p) free((char *)p - 16);
}

Test(report, reports_are_free_able_whatever_allocator_jansson_has) {
  use_fake("mixed", "mixed");
  json_set_alloc_funcs(offset_malloc, offset_free);
  bml_devices *l = discover();
  char *text = NULL;
  cr_assert_eq(bml_devices_report_json(l, 1, &text), 0);
  cr_expect(offset_allocs > 0, "jansson did not use the application's allocator");
  cr_expect_eq(text[0], '{');
  free(text); /* malloc's memory, not the allocator's */
  bml_devices_free(l);
  json_set_alloc_funcs(malloc, free);
}

/* bankml-cl calls OpenCL 1.2's API (clEnqueueFillBuffer, markers with wait
 * lists) and builds OpenCL C 1.2: an older device was judged usable and
 * then failed (or, with a loader that lacks the entry point, crashed) in
 * the oracle.  It is not usable now, and says why. */
Test(report, devices_older_than_opencl_1_2_are_not_usable) {
  use_fake("old", "mixed");
  bml_devices *l = discover();
  const bml_device *d = find(l, "Old 1.1 GPU");
  cr_expect(!d->usable && !d->selected);
  cr_expect_str_eq(d->why_not, "OpenCL 1.1 old-1.0 / OpenCL C 1.1: bankml-cl needs OpenCL 1.2 and OpenCL C 1.2");
  d = find(l, "Old C 1.1 GPU");
  cr_expect(!d->usable);
  cr_expect(d->why_not && strstr(d->why_not, "OpenCL C 1.1: bankml-cl needs") != NULL, "%s", d->why_not);
  d = find(l, "New enough GPU");
  cr_expect(d->usable && d->selected, "%s", d->why_not ? d->why_not : "");
  bml_devices_free(l);
}

Test(report, accessors_are_null_safe) {
  cr_expect_eq(bml_devices_count(NULL), 0);
  cr_expect_null(bml_devices_get(NULL, 0));
  cr_expect_null(bml_devices_note(NULL, 0));
  cr_expect_eq(bml_devices_discover(NULL, NULL), BML_EINVAL);
  char *j = NULL;
  cr_expect_eq(bml_devices_report_json(NULL, 0, &j), BML_EINVAL);
  cr_expect_str_eq(bml_device_kind_name(BML_KIND_INTEGRATED), "integrated");
  bml_devices_free(NULL);
}

/* The real thing: the PoCL platform installed on this machine (CI installs
 * pocl-opencl-icd).  Skips, visibly, where there is none. */
static const bml_device *real_pocl(bml_devices *l) {
  for (size_t i = 0; i < bml_devices_count(l); i++)
    if (strstr(bml_devices_get(l, i)->platform, "Portable Computing Language")) return bml_devices_get(l, i);
  return NULL;
}

Test(report, real_pocl_is_cpu_and_not_selected) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SOFTWARE");
  unsetenv("BANKML_SYSFS_ROOT");
  bml_devices *l = discover();
  const bml_device *d = real_pocl(l);
  if (!d) {
    bml_devices_free(l);
    cr_skip_test("no PoCL platform here (apt-get install pocl-opencl-icd)");
  }
  cr_expect_eq(d->kind, BML_KIND_CPU);
  cr_expect(!d->usable && !d->selected);
  cr_expect_str_eq(d->why_not, "software device (PoCL)");
  bml_devices_free(l);
}

Test(report, real_pocl_is_selected_with_the_software_flag) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_SYSFS_ROOT");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  bml_log_set_sink(capture, NULL);
  bml_devices *l = discover();
  const bml_device *d = real_pocl(l);
  if (!d) {
    bml_devices_free(l);
    cr_skip_test("no PoCL platform here (apt-get install pocl-opencl-icd)");
  }
  cr_expect(d->usable && d->selected);
  bml_devices_free(l);
  bml_log_set_sink(NULL, NULL);
}

/* ---- boards: GPUs without PCI, and drivers with nothing optional ---------------- */

/* A board's one GPU, from scenario on the sysfs tree: listed once,
 * integrated (host-unified), usable and selected though its driver has
 * no PCI information and none of OpenCL's optional features, described
 * from sysfs and the device tree; its report as JSON in *root. */
static const bml_device *board_gpu(const char *scenario, const char *sysfs, bml_devices **l, json_t **root) {
  use_fake(scenario, sysfs);
  *l = discover();
  cr_assert_eq(bml_devices_count(*l), 1);
  const bml_device *d = bml_devices_get(*l, 0);
  cr_expect_eq(d->kind, BML_KIND_INTEGRATED);
  cr_expect(d->usable && d->selected, "%s: %s", d->name, d->why_not ? d->why_not : "not selected");
  cr_expect_null(d->pci_address);
  cr_expect_str_eq(d->matched_by, "drm", "a SoC GPU, matched through its platform device");
  *root = report(*l);
  json_t *dj = device_json(*root, 0), *ext = json_object_get(dj, "extensions");
  cr_expect(json_is_null(json_object_get(dj, "pci")));
  cr_expect(json_is_false(json_object_get(ext, "fp64")) && json_is_false(json_object_get(ext, "fp16")) &&
                json_is_false(json_object_get(ext, "subgroups")),
            "the scenario's device has no optional feature");
  cr_expect_eq(json_integer_value(json_object_get(json_object_get(*root, "selected"), 0)), 0);
  return d;
}

/* ARM's kbase driver: no DRM node, the GPU found as /sys/class/misc/mali0
 * and its platform device, the model from kbase's gpuinfo; libmali's
 * OpenCL 3.0 without any optional feature, its largest buffer a quarter
 * of the memory. */
Test(report, a_mali_under_kbase_without_optional_features_is_a_usable_integrated_gpu) {
  bml_devices *l;
  json_t *root;
  board_gpu("mali-kbase", "kbase", &l, &root);
  json_t *dj = device_json(root, 0);
  cr_expect_str_eq(jstr(dj, "sysfs.driver"), "mali");
  cr_expect_str_eq(jstr(dj, "sysfs.model"), "Mali-G610 4 cores r0p0 0xA867");
  cr_expect_str_eq(jstr(dj, "sysfs.platform_device"), "devices/platform/fb000000.gpu");
  cr_expect(json_is_null(json_object_get(json_object_get(dj, "sysfs"), "drm_card")), "kbase has no DRM card");
  cr_expect_str_eq(jstr(dj, "opencl_version"), "OpenCL 3.0 v1.g6p0-01eac.f2b3a3f6c1d9ab0a42c9da17cd4a8b15");
  const json_int_t global = json_integer_value(json_object_get(dj, "global_mem_bytes"));
  cr_expect_eq(json_integer_value(json_object_get(dj, "max_alloc_bytes")), global / 4);
  json_decref(root);
  bml_devices_free(l);
}

/* Qualcomm's kgsl driver: the GPU found as /sys/class/kgsl/kgsl-3d0, the
 * model from its gpu_model; an OpenCL 1.2 driver with nothing optional. */
Test(report, an_adreno_under_kgsl_with_opencl_1_2_only_is_a_usable_integrated_gpu) {
  bml_devices *l;
  json_t *root;
  board_gpu("adreno-kgsl", "kgsl", &l, &root);
  json_t *dj = device_json(root, 0);
  cr_expect_str_eq(jstr(dj, "sysfs.driver"), "kgsl-3d");
  cr_expect_str_eq(jstr(dj, "sysfs.model"), "Adreno635v2");
  cr_expect_str_eq(jstr(dj, "sysfs.platform_device"), "devices/platform/3d00000.gpu");
  cr_expect_str_eq(jstr(dj, "opencl_c_version"), "OpenCL C 1.2 Adreno(TM) 635");
  json_decref(root);
  bml_devices_free(l);
}

/* The same Mali with Mesa's drivers (panfrost, rusticl): found through its
 * DRM card and the device tree's compatible. */
Test(report, a_mali_under_panfrost_is_described_from_the_device_tree) {
  use_fake("mixed", "panfrost");
  bml_devices *l = discover_scenario("[platform]\nicd = a\nname = rusticl\nvendor = Mesa/X.org\nextensions = cl_khr_icd\n"
                                     "[device]\ntype = gpu\nname = Mali-G610 (Panfrost)\nvendor = Mesa\n"
                                     "vendor_id = 0x13b5\nversion = OpenCL 3.0\nhost_unified = 1\n");
  cr_assert_eq(bml_devices_count(l), 1);
  const bml_device *d = bml_devices_get(l, 0);
  cr_expect(d->usable, "%s", d->why_not ? d->why_not : "");
  json_t *root = report(l), *dj = device_json(root, 0);
  cr_expect_str_eq(jstr(dj, "sysfs.driver"), "panfrost");
  cr_expect_str_eq(jstr(dj, "sysfs.model"), "arm,mali-valhall-csf", "the device tree's first compatible");
  cr_expect_str_eq(jstr(dj, "sysfs.drm_card"), "card0");
  json_decref(root);
  bml_devices_free(l);
}
