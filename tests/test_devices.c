/* test_devices.c -- discovery through the real ICD loader: the fake ICD's scripted devices on fake sysfs trees, and the real PoCL. */
#include <criterion/criterion.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "logbuf.h"
#include "base/bml.h"

/* Points the loader at the fake ICD with a scenario, and sysfs at a
 * fixture tree (NULL: an empty directory that has nothing). Must run
 * before the process's first OpenCL call. */
static void use_fake(const char *scenario, const char *sysfs) {
  const char *build = getenv("BANKML_TOP_BUILDDIR"), *src = getenv("BANKML_TOP_SRCDIR");
  cr_assert(build && src, "BANKML_TOP_BUILDDIR/BANKML_TOP_SRCDIR not set (run through make check)");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fakeicd/vendors", build);
  setenv("OCL_ICD_VENDORS", path, 1);
  snprintf(path, sizeof path, "%s/tests/fakeicd/%s.conf", src, scenario);
  setenv("BML_FAKEICD_CONFIG", path, 1);
  snprintf(path, sizeof path, "%s/tests/fixtures/sysfs/%s", src, sysfs ? sysfs : "empty");
  setenv("BANKML_SYSFS_ROOT", path, 1);
  /* the fixtures' own pci.ids: names that do not depend on this machine's */
  snprintf(path, sizeof path, "%s/tests/fixtures/pci.ids", src);
  setenv("BANKML_PCI_IDS", path, 1);
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SOFTWARE");
}

static char logged[8192];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

static bml_devices *discover(void) {
  bml_devices *d = NULL;
  int rc = bml_devices_discover(NULL, &d);
  cr_assert_eq(rc, 0, "discover: %s", bml_strerror(rc));
  return d;
}

/* Discovers with the fake ICD reading the scenario text (after use_fake). */
static bml_devices *discover_scenario(const char *text) {
  char path[] = "/tmp/bml-scenario-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0, "mkstemp");
  FILE *f = fdopen(fd, "w");
  cr_assert(f && fputs(text, f) >= 0);
  cr_assert_eq(fclose(f), 0);
  setenv("BML_FAKEICD_CONFIG", path, 1);
  bml_devices *l = NULL;
  int rc = bml_devices_discover(NULL, &l);
  unlink(path); /* before any assertion can end the test */
  cr_assert_eq(rc, 0, "discover: %s", bml_strerror(rc));
  return l;
}

static const bml_device *find(const bml_devices *l, const char *name) {
  for (size_t i = 0; i < bml_devices_count(l); i++)
    if (strcmp(bml_devices_get(l, i)->name, name) == 0) return bml_devices_get(l, i);
  cr_assert_fail("no device named %s", name);
  return NULL;
}

static bool has_note(const bml_devices *l, const char *needle) {
  for (size_t i = 0; i < bml_devices_note_count(l); i++)
    if (strstr(bml_devices_note(l, i), needle)) return true;
  return false;
}

static json_t *report(const bml_devices *l) {
  char *text = NULL;
  cr_assert_eq(bml_devices_report_json(l, 0, &text), 0);
  json_error_t err;
  json_t *root = json_loads(text, 0, &err);
  cr_assert_not_null(root, "report is not JSON: %s", err.text);
  free(text);
  return root;
}

static json_t *device_json(json_t *root, size_t index) {
  json_t *d = json_array_get(json_object_get(root, "devices"), index);
  cr_assert_not_null(d, "no device %zu in the report", index);
  return d;
}

static const char *jstr(json_t *o, const char *path) {
  /* "a.b.c" through nested objects */
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  json_t *cur = o;
  for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, ".")) cur = json_object_get(cur, tok);
  cr_assert(json_is_string(cur), "%s is not a string", path);
  return json_string_value(cur);
}

TestSuite(devices, .timeout = 60);

Test(devices, mixed_machine_is_classified_ordered_and_cross_checked) {
  use_fake("mixed", "mixed");
  bml_devices *l = discover();
  cr_assert_eq(bml_devices_count(l), 4, "the duplicate is listed once and the broken platform has none");
  const bml_device *amd = bml_devices_get(l, 0), *intel = bml_devices_get(l, 1);
  const bml_device *mali = bml_devices_get(l, 2), *pocl = bml_devices_get(l, 3);
  cr_expect_str_eq(amd->name, "gfx1030");
  cr_expect_eq(amd->kind, BML_KIND_DISCRETE);
  cr_expect_str_eq(amd->pci_address, "0000:03:00.0");
  cr_expect_str_eq(amd->matched_by, "pci-bus-info");
  cr_expect(amd->usable && amd->selected);
  cr_expect_str_eq(intel->name, "Intel(R) UHD Graphics 770");
  cr_expect_eq(intel->kind, BML_KIND_INTEGRATED);
  cr_expect_str_eq(intel->matched_by, "pci-bus-info");
  cr_expect(intel->usable && intel->selected);
  cr_expect_str_eq(mali->name, "Mali-G610 r0p0");
  cr_expect_eq(mali->kind, BML_KIND_INTEGRATED);
  cr_expect_str_eq(mali->matched_by, "drm");
  cr_expect_null(mali->pci_address);
  cr_expect(mali->usable, "Mali: %s", mali->why_not ? mali->why_not : "");
  cr_expect_eq(pocl->kind, BML_KIND_CPU);
  cr_expect(!pocl->usable && !pocl->selected);
  cr_expect_str_eq(pocl->why_not, "software device (PoCL)");
  cr_expect(has_note(l, "platform \"Broken Platform\": clGetDeviceIDs: CL_OUT_OF_HOST_MEMORY (-6)"),
            "the failed platform is not a note");
  cr_expect(has_note(l, "registered twice"), "the duplicate is not noted");
  bml_devices_free(l);
}

/* A pci.ids that libpci cannot read: libpci is set up for each PCI card
 * and says so each time, but a listing says each finding once. */
Test(devices, a_finding_is_noted_once_however_often_it_is_met) {
  use_fake("mixed", "mixed");
  setenv("BANKML_PCI_IDS", "/nonexistent/pci.ids", 1);
  bml_devices *l = discover();
  size_t said = 0;
  for (size_t i = 0; i < bml_devices_note_count(l); i++) {
    const char *a = bml_devices_note(l, i);
    said += strstr(a, "/nonexistent/pci.ids") != NULL;
    for (size_t k = 0; k < i; k++)
      cr_expect_str_neq(a, bml_devices_note(l, k), "notes %zu and %zu are the same", k, i);
  }
  cr_expect_eq(said, 1, "the unreadable pci.ids was noted %zu times", said);
  bml_devices_free(l);
}

/* BANKML_PCI_IDS naming a FIFO: libpci would open it blocking and wait
 * for a writer for ever; it is refused by name and no names are found. */
Test(devices, a_pci_ids_that_is_not_a_file_is_refused_at_once) {
  use_fake("mixed", "mixed");
  char dir[] = "/tmp/bml-ids-XXXXXX", path[64];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/pci.ids", dir);
  cr_assert_eq(mkfifo(path, 0600), 0);
  setenv("BANKML_PCI_IDS", path, 1);
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  bml_devices *l = discover();
  bml_log_set_sink(NULL, NULL);
  unlink(path);
  rmdir(dir);
  cr_expect(strstr(logged, "is not a regular file; no names will be found") != NULL, "%s", logged);
  json_t *root = report(l);
  json_t *name = json_object_get(json_object_get(device_json(root, 0), "pci"), "vendor_name");
  cr_expect(!json_is_string(name) || !*json_string_value(name), "a name was found: %s",
            json_is_string(name) ? json_string_value(name) : "");
  json_decref(root);
  bml_devices_free(l);
}

Test(devices, report_carries_driver_and_kernel_facts) {
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
Test(devices, report_carries_extensions_profile_work_groups_sub_groups_and_il) {
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

Test(devices, no_platform_is_an_empty_list_with_a_note) {
  use_fake("empty", NULL);
  bml_devices *l = discover();
  cr_expect_eq(bml_devices_count(l), 0);
  cr_expect(has_note(l, "OCL_ICD_VENDORS") && has_note(l, "/etc/OpenCL/vendors"),
            "the note does not say how the loader looks for drivers");
  json_t *root = report(l);
  cr_expect_eq(json_array_size(json_object_get(root, "devices")), 0);
  json_decref(root);
  bml_devices_free(l);
}

Test(devices, nvidia_bus_slot_queries_give_the_pci_address) {
  use_fake("nvidia", "nvidia");
  bml_devices *l = discover();
  cr_assert_eq(bml_devices_count(l), 1);
  const bml_device *d = bml_devices_get(l, 0);
  cr_expect_eq(d->kind, BML_KIND_DISCRETE);
  cr_expect_str_eq(d->pci_address, "0000:00:06.0");
  cr_expect_str_eq(d->matched_by, "pci-bus-info");
  json_t *root = report(l);
  json_t *dj = device_json(root, 0);
  cr_expect_str_eq(jstr(dj, "pci.source"), "nv-pci-ids");
  cr_expect_str_eq(jstr(dj, "sysfs.driver"), "nvidia");
  cr_expect_str_eq(jstr(dj, "pci.device_name"), "Fixture H200", "libpci named it from BANKML_PCI_IDS");
  cr_expect(json_is_null(json_object_get(json_object_get(dj, "sysfs"), "drm_card")),
            "the NVIDIA card has no DRM node");
  json_decref(root);
  bml_devices_free(l);
}

/* Two cards a 16-bit domain would confuse: both listed, each by its own
 * address, and each selectable by it. */
Test(devices, pci_domains_past_ffff_are_kept_whole) {
  use_fake("vmd", NULL);
  setenv("BANKML_SYSFS_ROOT", "/nonexistent-sysfs", 1); /* no sysfs to say: the driver's addresses stand */
  const char *want[] = {"0000:01:00.0", "10000:01:00.0"};
  for (size_t pick = 0; pick < 2; pick++) {
    char choice[32];
    snprintf(choice, sizeof choice, "pci:%s", want[pick]);
    setenv("BANKML_GPU", choice, 1);
    bml_devices *l = discover();
    cr_assert_eq(bml_devices_count(l), 2, "one of the two cards was taken for the other");
    for (size_t i = 0; i < 2; i++) {
      const bml_device *d = bml_devices_get(l, i);
      cr_assert(d->pci_address != NULL, "device %zu has no address", i);
      const size_t k = strcmp(d->pci_address, want[0]) == 0 ? 0 : 1;
      cr_expect_str_eq(d->pci_address, want[k]);
      cr_expect_eq(d->selected, k == pick, "%s: selected %d under %s", d->pci_address, d->selected, choice);
    }
    bml_devices_free(l);
  }
}

/* A driver that says 2^64 - 1 bytes: a large number in the report, never a
 * negative one (JSON's integers stop at 2^63 - 1 in jansson). */
Test(devices, sizes_past_int64_are_large_numbers_in_json) {
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

Test(devices, amd_topology_gives_the_pci_address) {
  use_fake("amd-topology", "amdgpu");
  bml_devices *l = discover();
  cr_assert_eq(bml_devices_count(l), 1);
  const bml_device *d = bml_devices_get(l, 0);
  cr_expect_str_eq(d->pci_address, "0000:03:00.0");
  cr_expect_str_eq(d->matched_by, "pci-bus-info");
  cr_expect_eq(d->kind, BML_KIND_DISCRETE);
  bml_devices_free(l);
}

Test(devices, llvmpipe_claiming_gpu_is_software) {
  use_fake("llvmpipe", NULL);
  bml_devices *l = discover();
  cr_assert_eq(bml_devices_count(l), 1);
  const bml_device *d = bml_devices_get(l, 0);
  cr_expect_eq(d->kind, BML_KIND_CPU);
  cr_expect(!d->usable);
  cr_expect_str_eq(d->why_not, "software device (llvmpipe)");
  bml_devices_free(l);
}

/* A software device named for what it is stays software even when its
 * vendor id is a real card's: the Intel iGPU found by that id is not it. */
Test(devices, llvmpipe_with_a_real_vendor_id_is_still_software) {
  use_fake("llvmpipe", "i915");
  bml_devices *l = discover_scenario(
      "[platform]\nname = rusticl\nvendor = Mesa/X.org\nversion = OpenCL 3.0\nextensions = cl_khr_icd\n"
      "suffix = MESA\n[device]\ntype = gpu\nname = llvmpipe (LLVM 15.0.7, 256 bits)\nvendor_id = 0x8086\n"
      "host_unified = 1\n");
  cr_assert_eq(bml_devices_count(l), 1);
  const bml_device *d = bml_devices_get(l, 0);
  cr_expect_eq(d->kind, BML_KIND_CPU, "kind %s", bml_device_kind_name(d->kind));
  cr_expect(!d->usable);
  cr_expect_str_eq(d->why_not ? d->why_not : "(none)", "software device (llvmpipe)");
  cr_expect_str_eq(d->matched_by, "none", "llvmpipe was taken for the iGPU on PCI");
  cr_expect(d->pci_address == NULL, "llvmpipe was given the iGPU's address %s", d->pci_address);
  bml_devices_free(l);
}

Test(devices, gpu_with_no_device_behind_it_is_software) {
  use_fake("mixed", NULL); /* an empty sysfs: nothing is behind any of the GPUs */
  bml_devices *l = discover();
  const bml_device *mali = find(l, "Mali-G610 r0p0");
  cr_expect_eq(mali->kind, BML_KIND_CPU);
  cr_expect(strstr(mali->why_not, "no PCI or platform device") != NULL, "%s", mali->why_not);
  bml_devices_free(l);
}

/* One GPU of a scenario: `name`, the AMD vendor id, and `extra` lines. */
#define TWIN(extra)                                                                                              \
  "[device]\ntype = gpu\nname = Twin GPU\nvendor_id = 0x1002\ndriver_version = 1.0\nopencl_c_version = OpenCL C 1.2\n" \
  "extensions = cl_khr_pci_bus_info cl_khr_device_uuid\n" extra

/* Two cards of one driver at two PCI addresses, with one UUID from the
 * driver: two devices (the addresses decide).  One scenario a process:
 * the ICD loader reads its platforms once. */
static void two_cards_with_uuid(const char *uuid) {
  use_fake("mixed", "amdgpu");
  char text[2048];
  snprintf(text, sizeof text,
           "[platform]\nicd = a\nname = Twin\nextensions = cl_khr_icd\n" TWIN("pci = 0000:03:00.0\nuuid = %s\n")
               TWIN("pci = 0000:04:00.0\nuuid = %s\n"),
           uuid, uuid);
  bml_devices *l = discover_scenario(text);
  cr_expect_eq(bml_devices_count(l), 2, "uuid %s: two cards listed as %zu", uuid, bml_devices_count(l));
  cr_expect(!has_note(l, "registered twice"), "uuid %s", uuid);
  bml_devices_free(l);
}

Test(devices, two_cards_at_two_addresses_with_a_zero_uuid_are_two) {
  two_cards_with_uuid("00000000000000000000000000000000");
}

Test(devices, two_cards_at_two_addresses_with_one_uuid_are_two) {
  two_cards_with_uuid("0123456789abcdef0123456789abcdef");
}

/* One UUID and no addresses, from two ICD files: one device. */
Test(devices, one_uuid_without_addresses_is_one_device) {
  use_fake("mixed", "amdgpu");
  bml_devices *l = discover_scenario("[platform]\nicd = a\nname = Twin\nextensions = cl_khr_icd\n" TWIN(
      "uuid = 0123456789abcdef0123456789abcdef\n") "[platform]\nicd = b\nname = Twin\nextensions = cl_khr_icd\n" TWIN(
      "uuid = 0123456789abcdef0123456789abcdef\n"));
  cr_expect_eq(bml_devices_count(l), 1);
  cr_expect(has_note(l, "registered twice"));
  bml_devices_free(l);
}

/* A SoC GPU (no PCI address, no UUID) whose driver two ICD files name is
 * one device: both records were matched to one platform device. */
Test(devices, a_soc_gpu_registered_twice_is_listed_once) {
  use_fake("mixed", "panfrost");
  static const char mali[] = "[device]\ntype = gpu\nname = Mali-G610 r0p0\nvendor = ARM\nvendor_id = 0x13b5\n"
                             "driver_version = 3.0\nopencl_c_version = OpenCL C 3.0\nhost_unified = 1\n";
  char text[2048];
  snprintf(text, sizeof text, "[platform]\nicd = a\nname = Fake Mali\nextensions = cl_khr_icd\n%s"
           "[platform]\nicd = b\nname = Fake Mali\nextensions = cl_khr_icd\n%s", mali, mali);
  bml_devices *l = discover_scenario(text);
  cr_expect_eq(bml_devices_count(l), 1, "listed %zu times", bml_devices_count(l));
  cr_expect(has_note(l, "registered twice"));
  cr_expect_str_eq(bml_devices_get(l, 0)->matched_by, "drm");
  bml_devices_free(l);
}

/* Two records of one SoC GPU, one with a zero UUID (which decides
 * nothing) and one with a real one: one device, whichever the loader lists
 * first (a zero UUID on the second record kept them apart). */
static void mali_with_uuids(const char *first, const char *second) {
  use_fake("mixed", "panfrost");
  static const char mali[] = "[device]\ntype = gpu\nname = Mali-G610 r0p0\nvendor = ARM\nvendor_id = 0x13b5\n"
                             "driver_version = 3.0\nopencl_c_version = OpenCL C 3.0\nhost_unified = 1\n"
                             "extensions = cl_khr_device_uuid\n";
  char text[4096];
  snprintf(text, sizeof text, "[platform]\nicd = a\nname = Fake Mali\nextensions = cl_khr_icd\n%suuid = %s\n"
           "[platform]\nicd = b\nname = Fake Mali\nextensions = cl_khr_icd\n%suuid = %s\n", mali, first, mali, second);
  bml_devices *l = discover_scenario(text);
  cr_expect_eq(bml_devices_count(l), 1, "uuids %s, %s: listed %zu times", first, second, bml_devices_count(l));
  bml_devices_free(l);
}

Test(devices, a_zero_uuid_first_decides_nothing) {
  mali_with_uuids("00000000000000000000000000000000", "0123456789abcdef0123456789abcdef");
}

Test(devices, a_zero_uuid_second_decides_nothing) {
  mali_with_uuids("0123456789abcdef0123456789abcdef", "00000000000000000000000000000000");
}

/* Three records of one SoC GPU: two merged by their UUID, the third by
 * the platform device all three were matched to.  The device lists all
 * three registrations (the second merge kept only the last one's). */
Test(devices, every_registration_of_a_device_merged_twice_is_kept) {
  use_fake("mixed", "panfrost");
  static const char mali[] = "[device]\ntype = gpu\nname = Mali-G610 r0p0\nvendor = ARM\nvendor_id = 0x13b5\n"
                             "driver_version = 3.0\nopencl_c_version = OpenCL C 3.0\nhost_unified = 1\n";
  char text[4096];
  snprintf(text, sizeof text, /* B listed first (the loader takes icd b's first): A1 and A2, merged, merge into it */
           "[platform]\nicd = b\nname = Mali B\nextensions = cl_khr_icd\n%s"
           "[platform]\nicd = a\nname = Mali A1\nextensions = cl_khr_icd\n%sextensions = cl_khr_device_uuid\n"
           "uuid = 0123456789abcdef0123456789abcdef\n"
           "[platform]\nicd = a\nname = Mali A2\nextensions = cl_khr_icd\n%sextensions = cl_khr_device_uuid\n"
           "uuid = 0123456789abcdef0123456789abcdef\n",
           mali, mali, mali);
  bml_devices *l = discover_scenario(text);
  cr_assert_eq(bml_devices_count(l), 1, "listed %zu times", bml_devices_count(l));
  cr_expect(has_note(l, "(platforms \"Mali B\" and \"Mali A"), "the merged pair was not merged into B: the test "
            "does not test what it says");
  json_t *root = report(l);
  json_t *regs = json_object_get(device_json(root, 0), "registrations");
  cr_expect_eq(json_array_size(regs), 3, "registrations: %zu", json_array_size(regs));
  const char *want[] = {"Mali A1", "Mali A2", "Mali B"};
  for (size_t w = 0; w < 3; w++) {
    bool seen = false;
    for (size_t i = 0; i < json_array_size(regs); i++)
      seen |= strcmp(json_string_value(json_array_get(regs, i)), want[w]) == 0;
    cr_expect(seen, "%s is not among the registrations", want[w]);
  }
  json_decref(root);
  bml_devices_free(l);
}

/* The nvidia fixture with `more` more NVIDIA display functions (00:07.0
 * on), in a directory of its own (dir: a mkdtemp template). */
static void nvidia_tree(char *dir, int more) {
  const char *src = getenv("BANKML_TOP_SRCDIR");
  cr_assert_not_null(mkdtemp(dir));
  char cmd[8192];
  int at = snprintf(cmd, sizeof cmd, "cp -a '%s/tests/fixtures/sysfs/nvidia/.' '%s'", src, dir);
  for (int i = 0; i < more; i++)
    at += snprintf(cmd + at, sizeof cmd - (size_t)at,
                   " && cp -a '%s/devices/pci0000:00/0000:00:06.0' '%s/devices/pci0000:00/0000:00:%02x.0'"
                   " && ln -s ../../../devices/pci0000:00/0000:00:%02x.0 '%s/bus/pci/devices/0000:00:%02x.0'",
                   dir, dir, 7 + i, 7 + i, dir, 7 + i);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void remove_tree(const char *dir) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
}

/* A GPU whose driver gives no address, with five display functions of its
 * vendor on PCI: not matched (the note counts all five), and still a GPU,
 * not a software device. */
Test(devices, a_gpu_its_vendor_id_cannot_place_is_still_a_gpu) {
  char dir[] = "/tmp/bml-test-nv5-XXXXXX";
  nvidia_tree(dir, 4);
  use_fake("nvidia", NULL);
  setenv("BANKML_SYSFS_ROOT", dir, 1);
  bml_devices *l = discover_scenario("[platform]\nicd = a\nname = NVIDIA CUDA\nextensions = cl_khr_icd\n"
                                     "[device]\ntype = gpu\nname = NVIDIA GeForce RTX 3060\nvendor_id = 0x10de\n"
                                     "driver_version = 535.104.05\nopencl_c_version = OpenCL C 1.2\n");
  remove_tree(dir);
  cr_assert_eq(bml_devices_count(l), 1);
  const bml_device *d = bml_devices_get(l, 0);
  cr_expect_eq(d->kind, BML_KIND_DISCRETE, "kind %s: %s", bml_device_kind_name(d->kind), d->why_not ? d->why_not : "");
  cr_expect(d->usable);
  cr_expect_str_eq(d->matched_by, "none");
  cr_expect(has_note(l, "5 display devices of vendor 0x10de"));
  bml_devices_free(l);
}

/* NVIDIA's bus and slot ids past PCI's ranges are no address (bus 0x100
 * is not bus 0, slot 0x130 not device 0x26): a note, and the card is
 * matched by its vendor id instead. */
static void nvidia_ids(const char *ids) {
  use_fake("nvidia", "nvidia");
  char text[2048];
  snprintf(text, sizeof text, "[platform]\nicd = a\nname = NVIDIA CUDA\nextensions = cl_khr_icd\n"
           "[device]\ntype = gpu\nname = NVIDIA GeForce RTX 3060\nvendor_id = 0x10de\n"
           "driver_version = 535.104.05\nopencl_c_version = OpenCL C 1.2\n"
           "extensions = cl_nv_device_attribute_query\n%s", ids);
  bml_devices *l = discover_scenario(text);
  cr_assert_eq(bml_devices_count(l), 1);
  const bml_device *d = bml_devices_get(l, 0);
  cr_expect(has_note(l, "not a PCI address"), "%s", ids);
  cr_expect_str_eq(d->matched_by, "vendor-id", "%s", ids);
  cr_expect_str_eq(d->pci_address, "0000:00:06.0", "%s", ids);
  bml_devices_free(l);
}

Test(devices, a_bus_id_past_0xff_is_not_an_address) { nvidia_ids("nv_bus = 0x100\nnv_slot = 0x30\n"); }

Test(devices, a_slot_id_past_pcis_devices_is_not_an_address) { nvidia_ids("nv_bus = 0\nnv_slot = 0x130\n"); }

Test(devices, gpu_choice_off_selects_nothing) {
  static const char *off[] = {"off", "none", "cpu"};
  use_fake("mixed", "mixed");
  for (size_t i = 0; i < BML_ARRAY_SIZE(off); i++) {
    setenv("BANKML_GPU", off[i], 1);
    bml_devices *l = discover();
    cr_assert_eq(bml_devices_count(l), 4, "BANKML_GPU=%s: off lists every device and selects none", off[i]);
    for (size_t k = 0; k < bml_devices_count(l); k++)
      cr_expect(!bml_devices_get(l, k)->selected, "BANKML_GPU=%s selected device %zu", off[i], k);
    bml_devices_free(l);
  }
}

Test(devices, gpu_choice_by_index_and_by_pci_address) {
  use_fake("mixed", "mixed");
  setenv("BANKML_GPU", "2,0", 1);
  bml_devices *l = discover();
  cr_expect(bml_devices_get(l, 0)->selected && !bml_devices_get(l, 1)->selected &&
            bml_devices_get(l, 2)->selected);
  bml_devices_free(l);
  setenv("BANKML_GPU", "pci:0000:00:02.0", 1);
  l = discover();
  cr_expect(!bml_devices_get(l, 0)->selected && bml_devices_get(l, 1)->selected &&
            !bml_devices_get(l, 2)->selected);
  bml_devices_free(l);
  setenv("BANKML_GPU", "3", 1); /* PoCL: named, not usable, so not selected, and a note */
  l = discover();
  cr_expect(!bml_devices_get(l, 3)->selected);
  cr_expect(has_note(l, "not usable"));
  bml_devices_free(l);
  setenv("BANKML_GPU", "3,0,3", 1); /* named twice: one note */
  l = discover();
  size_t notes = 0;
  for (size_t i = 0; i < bml_devices_note_count(l); i++) notes += strstr(bml_devices_note(l, i), "not usable") != NULL;
  cr_expect_eq(notes, 1, "a device named twice is noted %zu times", notes);
  cr_expect(bml_devices_get(l, 0)->selected);
  bml_devices_free(l);
  setenv("BANKML_GPU", "", 1); /* empty: the default, every usable device */
  l = discover();
  cr_expect(bml_devices_get(l, 0)->selected && bml_devices_get(l, 1)->selected);
  bml_devices_free(l);
}

/* A custom device (which CL_DEVICE_TYPE_ALL leaves out) is listed, as kind
 * other, not usable. */
Test(devices, custom_devices_are_listed_not_usable) {
  use_fake("kinds", "i915");
  bml_devices *l = discover();
  const bml_device *d = find(l, "Fake Custom Block");
  cr_expect_eq(d->kind, BML_KIND_OTHER);
  cr_expect(!d->usable);
  cr_expect(d->why_not && strstr(d->why_not, "custom device type") != NULL, "%s", d->why_not);
  bml_devices_free(l);
}

/* An unreadable sysfs root: the driver's own PCI address is still listed and
 * selects the device. */
Test(devices, the_drivers_pci_address_stands_without_sysfs) {
  use_fake("mixed", "mixed");
  setenv("BANKML_SYSFS_ROOT", "/nonexistent-sysfs", 1);
  setenv("BANKML_GPU", "pci:0000:03:00.0", 1);
  bml_devices *l = discover();
  const bml_device *d = find(l, "gfx1030");
  cr_expect_str_eq(d->pci_address ? d->pci_address : "(none)", "0000:03:00.0");
  cr_expect(d->selected, "BANKML_GPU=pci:0000:03:00.0 did not select it");
  cr_expect_str_eq(d->matched_by, "none");
  cr_expect(has_note(l, "is not readable"));
  bml_devices_free(l);
}

/* Within a kind, the device with more memory comes first, whatever order
 * the drivers list them in (sysfs unreadable: nothing cross-checked, so
 * the kinds are the drivers' word). */
Test(devices, within_a_kind_more_memory_comes_first) {
  use_fake("mixed", "mixed");
  setenv("BANKML_SYSFS_ROOT", "/nonexistent-sysfs", 1);
  bml_devices *l = discover_scenario(
      "[platform]\nicd = a\nname = Two\nextensions = cl_khr_icd\n"
      "[device]\ntype = gpu\nname = Small\nvendor_id = 0x8086\nhost_unified = 1\nglobal_mem = 2G\n"
      "[device]\ntype = gpu\nname = Large\nvendor_id = 0x8086\nhost_unified = 1\nglobal_mem = 16G\n"
      "[device]\ntype = gpu\nname = Discrete\nvendor_id = 0x1002\nhost_unified = 0\nglobal_mem = 1G\n");
  cr_assert_eq(bml_devices_count(l), 3);
  cr_expect_str_eq(bml_devices_get(l, 0)->name, "Discrete", "discrete first, whatever its memory");
  cr_expect_str_eq(bml_devices_get(l, 1)->name, "Large");
  cr_expect_str_eq(bml_devices_get(l, 2)->name, "Small");
  bml_devices_free(l);
}

/* A refused BANKML_SYSFS_ROOT is an error that names it, as any bad
 * variable: the discovery fails rather than reading this machine's /sys in
 * place of the test's tree, or nothing (it listed the devices unchecked,
 * and the command exited 0 under an "error:" line). */
Test(devices, a_refused_sysfs_root_is_an_error) {
  static const char *const bad[] = {"tests/fixtures/sysfs/mixed", "sys"};
  use_fake("mixed", "mixed");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("BANKML_SYSFS_ROOT", bad[i], 1);
    logged[0] = '\0';
    bml_log_set_sink(capture, NULL);
    bml_devices *l = (bml_devices *)1;
    int rc = bml_devices_discover(NULL, &l);
    bml_log_set_sink(NULL, NULL);
    cr_expect_eq(rc, BML_EENV, "\"%s\": %d", bad[i], rc);
    cr_expect_null(l, "\"%s\"", bad[i]);
    cr_expect(strstr(logged, "BANKML_SYSFS_ROOT") != NULL && strstr(logged, "not an absolute path") != NULL, "%s",
              logged);
  }
}

Test(devices, bad_gpu_choices_are_refused_by_name) {
  static const char *bad[] = {"junk", "0,", ",1", "1;2", "-1", "pci:", "pci:zz:00.0", "9", "pci:0000:09:00.0", "99999"};
  use_fake("mixed", "mixed");
  bml_log_set_sink(capture, NULL);
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++) {
    logged[0] = '\0';
    setenv("BANKML_GPU", bad[i], 1);
    bml_devices *l = (bml_devices *)0x1;
    cr_expect_eq(bml_devices_discover(NULL, &l), BML_EENV, "BANKML_GPU=\"%s\" accepted", bad[i]);
    cr_expect_null(l);
    cr_expect(strstr(logged, "BANKML_GPU") && strstr(logged, bad[i]), "message for \"%s\": %s", bad[i], logged);
  }
  /* 65 valid indices: the list is too long, not an index out of range */
  char many[200] = "0";
  for (int i = 1; i < 65; i++) strcat(many, ",0");
  setenv("BANKML_GPU", many, 1);
  logged[0] = '\0';
  bml_devices *l = NULL;
  cr_expect_eq(bml_devices_discover(NULL, &l), BML_EENV);
  cr_expect(strstr(logged, "more than 64 indices") != NULL, "%s", logged);
  bml_log_set_sink(NULL, NULL);
}

Test(devices, software_flag_makes_software_usable_and_says_so) {
  use_fake("mixed", "mixed");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  bml_log_set_sink(capture, NULL);
  logged[0] = '\0';
  bml_devices *l = discover();
  cr_expect(strstr(logged, "BANKML_GPU_SOFTWARE=1") != NULL, "no message: %s", logged);
  const bml_device *pocl = find(l, "pthread-skylake-avx512");
  cr_expect(pocl->usable && pocl->selected);
  cr_expect_eq(pocl->kind, BML_KIND_CPU, "still kind cpu");
  bml_devices_free(l);
  setenv("BANKML_GPU_SOFTWARE", "yes", 1);
  l = (bml_devices *)0x1;
  cr_expect_eq(bml_devices_discover(NULL, &l), BML_EENV);
  cr_expect(strstr(logged, "BANKML_GPU_SOFTWARE=\"yes\"") != NULL, "%s", logged);
  bml_log_set_sink(NULL, NULL);
}

Test(devices, options_override_the_environment) {
  use_fake("mixed", NULL);
  setenv("BANKML_GPU", "junk", 1);
  bml_discover_options o;
  bml_discover_options_init(&o);
  char root[4096];
  snprintf(root, sizeof root, "%s/tests/fixtures/sysfs/mixed", getenv("BANKML_TOP_SRCDIR"));
  o.sysfs_root = root;
  o.gpu = "1";
  o.software = 0;
  bml_devices *l = NULL;
  cr_assert_eq(bml_devices_discover(&o, &l), 0);
  cr_expect(!bml_devices_get(l, 0)->selected && bml_devices_get(l, 1)->selected);
  cr_expect_str_eq(bml_devices_get(l, 0)->matched_by, "pci-bus-info");
  bml_devices_free(l);
}

/* A bad option is the caller's argument: BML_EINVAL, and the message names
 * the option, not BANKML_GPU (which said the environment was wrong). */
Test(devices, bad_options_are_the_callers_and_named_as_options) {
  use_fake("mixed", "mixed");
  static const char *const bad[] = {"junk", "9", "pci:0000:09:00.0"};
  bml_discover_options o;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    bml_discover_options_init(&o);
    o.gpu = bad[i];
    logged[0] = '\0';
    bml_log_set_sink(capture, NULL);
    bml_devices *l = NULL;
    cr_expect_eq(bml_devices_discover(&o, &l), BML_EINVAL, "gpu \"%s\"", bad[i]);
    bml_log_set_sink(NULL, NULL);
    cr_expect_null(l);
    cr_expect(strstr(logged, "bml_discover_options.gpu=") != NULL && strstr(logged, "BANKML_GPU") == NULL, "%s",
              logged);
  }
  bml_discover_options_init(&o);
  o.software = 7;
  bml_devices *l = NULL;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  cr_expect_eq(bml_devices_discover(&o, &l), BML_EINVAL, "software = 7 taken as 'allow'");
  bml_log_set_sink(NULL, NULL);
  cr_expect_null(l);
  cr_expect(strstr(logged, "bml_discover_options.software=7") != NULL, "%s", logged);
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

Test(devices, reports_are_free_able_whatever_allocator_jansson_has) {
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
Test(devices, devices_older_than_opencl_1_2_are_not_usable) {
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

Test(devices, accessors_are_null_safe) {
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

Test(devices, real_pocl_is_cpu_and_not_selected) {
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

Test(devices, real_pocl_is_selected_with_the_software_flag) {
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
Test(devices, a_mali_under_kbase_without_optional_features_is_a_usable_integrated_gpu) {
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
Test(devices, an_adreno_under_kgsl_with_opencl_1_2_only_is_a_usable_integrated_gpu) {
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
Test(devices, a_mali_under_panfrost_is_described_from_the_device_tree) {
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
