/* test_devices.c -- discovery through the real ICD loader: the fake ICD's scripted devices on fake sysfs trees, classified, placed on the bus and merged. */
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

TestSuite(devices, .timeout = 60);

static char logged[8192];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

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
