/* test_pci.c -- libpci and sysfs, pointed at the fake sysfs trees in tests/fixtures/sysfs. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/sysfs.h"
#include "base/env.h"
#include "base/util.h"

/* ---- helpers ---------------------------------------------------------------- */

static const char *srcdir(void) {
  const char *top = getenv("BANKML_TOP_SRCDIR");
  cr_assert(top && *top, "BANKML_TOP_SRCDIR is not set (run through make check)");
  return top;
}

/* fs on the fixture tree name, with pci.ids at ids (NULL: libpci's default). */
static void fixture(bml__sysfs *fs, const char *name, const char *ids) {
  char root[512];
  snprintf(root, sizeof root, "%s/tests/fixtures/sysfs/%s", srcdir(), name);
  bml__sysfs_init(fs, root, ids);
}

/* The system's pci.ids that configure found; skips the test without one. */
static const char *system_ids(void) {
  if (!BML_PCI_IDS[0]) cr_skip_test("configure found no pci.ids");
  return BML_PCI_IDS;
}

/* tests/fixtures/pci.ids: names of our own, so a test can tell it was read. */
static const char *fixture_ids(void) {
  static char path[512];
  snprintf(path, sizeof path, "%s/tests/fixtures/pci.ids", srcdir());
  return path;
}

static bml__pci_addr addr(const char *s) {
  bml__pci_addr a = {0};
  cr_assert_eq(bml__pci_addr_parse(s, &a), 0, "cannot parse %s", s);
  return a;
}

/* Looks addr up in the fixture tree name with pci.ids at ids; asserts success. */
static void lookup(const char *name, const char *ids, const char *a, bml__pci_info *info,
                   bml__notes *notes) {
  bml__sysfs fs;
  fixture(&fs, name, ids);
  cr_assert_eq(bml__pci_lookup(&fs, addr(a), info, notes), 0, "%s %s", name, a);
}

/* The number of notes that contain all of needle and also. */
static size_t notes_with(const bml__notes *n, const char *needle, const char *also) {
  size_t count = 0;
  for (size_t i = 0; i < n->len; i++)
    count += strstr(n->items[i], needle) && (!also || strstr(n->items[i], also));
  return count;
}

static char *all_notes(const bml__notes *n) {
  static char buf[4096];
  buf[0] = '\0';
  for (size_t i = 0; i < n->len; i++)
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "[%s] ", n->items[i]);
  return buf;
}

/* The name pci.ids at path gives vendor (device < 0) or vendor:device, or ""
 * where it has none: this file's own reading of the file, to hold libpci's to. */
static void ids_file_name(const char *path, unsigned vendor, int device, char *buf, size_t cap) {
  char line[512];
  bool in_vendor = false;
  unsigned id;
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  buf[0] = '\0';
  while (!buf[0] && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    bool dev_line = line[0] == '\t' && line[1] != '\t';
    const char *p = dev_line ? line + 1 : line;
    if (line[0] == '#' || strlen(p) < 7 || p[4] != ' ' || p[5] != ' ' || sscanf(p, "%4x", &id) != 1)
      continue;
    if (!dev_line && in_vendor) break;
    if (!dev_line) in_vendor = id == vendor;
    if (in_vendor && (dev_line ? (int)id == device : device < 0)) snprintf(buf, cap, "%s", p + 6);
  }
  fclose(f);
}

/* ---- trees made on the spot, for what the fixtures do not hold -------------------- */

typedef struct {
  char root[256];
} tree;

static void tree_new(tree *t) {
  const char *tmp = getenv("TMPDIR");
  snprintf(t->root, sizeof t->root, "%s/bml-test-pci-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  cr_assert_not_null(mkdtemp(t->root));
}

/* Makes the parent directories of root/rel, and returns root/rel. */
static const char *tree_path(tree *t, const char *rel) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s", t->root, rel);
  for (char *s = path + strlen(t->root) + 1; (s = strchr(s, '/')); s++) {
    *s = '\0';
    mkdir(path, 0755);
    *s = '/';
  }
  return path;
}

static void tree_put(tree *t, const char *rel, const char *text) {
  FILE *f = fopen(tree_path(t, rel), "w");
  cr_assert_not_null(f, "cannot write %s", rel);
  fputs(text, f);
  fclose(f);
}

static void tree_link(tree *t, const char *rel, const char *target) {
  cr_assert_eq(symlink(target, tree_path(t, rel)), 0, "cannot link %s", rel);
}

/* A PCI function at a ("0000:03:00.0") with its id files and bus/pci link. */
static void tree_pci_fn(tree *t, const char *a, unsigned vendor, unsigned device, unsigned cls) {
  const char *files[] = {"vendor", "device", "class"};
  unsigned values[] = {vendor, device, cls};
  char rel[128], text[16];
  for (int i = 0; i < 3; i++) {
    snprintf(rel, sizeof rel, "devices/pci0000:00/%s/%s", a, files[i]);
    snprintf(text, sizeof text, i == 2 ? "0x%06x\n" : "0x%04x\n", values[i]);
    tree_put(t, rel, text);
  }
  snprintf(rel, sizeof rel, "bus/pci/devices/%s", a);
  char target[96];
  snprintf(target, sizeof target, "../../../devices/pci0000:00/%s", a);
  tree_link(t, rel, target);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void tree_free(tree *t) { nftw(t->root, remove_one, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- addresses ---------------------------------------------------------------- */

Test(pci, addresses_round_trip_through_parse_and_format) {
  const char *good[][2] = {
      {"0000:03:00.0", "0000:03:00.0"}, {"ffff:ff:1f.7", "ffff:ff:1f.7"},
      {"03:00.0", "0000:03:00.0"},      {"0001:0A:1F.3", "0001:0a:1f.3"},
      {"0000:00:06.0", "0000:00:06.0"}, {"10000:00:02.0", "10000:00:02.0"},
      {"ffffffff:ff:1f.7", "ffffffff:ff:1f.7"}, {"1A2B3:05:00.1", "1a2b3:05:00.1"},
  };
  char buf[BML__PCI_ADDR_SIZE];
  for (size_t i = 0; i < BML_ARRAY_SIZE(good); i++) {
    bml__pci_addr a = addr(good[i][0]);
    cr_expect(a.valid);
    bml__pci_addr_format(a, buf);
    cr_expect_str_eq(buf, good[i][1]);
    cr_expect_eq(bml__pci_addr_parse(buf, &a), 0);
  }
  bml__pci_addr a = addr("0002:20:1e.5");
  cr_expect(a.domain == 2 && a.bus == 0x20 && a.dev == 0x1e && a.fn == 5);
  a = addr("10000:00:02.0");
  cr_expect(a.domain == 0x10000 && a.bus == 0 && a.dev == 2 && a.fn == 0, "domain %x", a.domain);
}

Test(pci, bad_addresses_are_refused_and_not_stored) {
  const char *bad[] = {
      "",              "0000:03:00",     "0000:03:00.8",   "0000:03:20.0",  "00000:03:00.0",
      "0000:003:00.0", " 0000:03:00.0",  "0000:03:00.0 ",  "0000:03:00.00", "g000:03:00.0",
      "0000-03-00.0",  "+000:03:00.0",   "0000:03:0.0",    "3:00.0",        "pci:0000:03:00.0",
      "0000:03:00.0\n", "0000:03:00.-1", "0000:0x:00.0", "000010000:00:02.0", "100000000:00:02.0",
      "01000:00:02.0", "0001000:00:02.0", "10000:0:02.0",  "10000:000:02.0",
  };
  bml__pci_addr a = {.valid = true, .domain = 7};
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++)
    cr_expect_eq(bml__pci_addr_parse(bad[i], &a), BML_EINVAL, "\"%s\" was accepted", bad[i]);
  cr_expect_eq(bml__pci_addr_parse(NULL, &a), BML_EINVAL);
  cr_expect(a.valid && a.domain == 7, "a refused address must not be stored");
}

Test(pci, an_invalid_address_formats_empty) {
  char buf[BML__PCI_ADDR_SIZE] = "junk";
  bml__pci_addr_format((bml__pci_addr){.valid = false, .bus = 3}, buf);
  cr_expect_str_eq(buf, "");
}

/* ---- the root ------------------------------------------------------------------- */

Test(pci, root_comes_from_the_argument_then_the_environment_then_sys) {
  bml__sysfs fs;
  setenv("BANKML_SYSFS_ROOT", "/from/env", 1);
  bml__sysfs_init(&fs, "/from/arg", "/ids");
  cr_expect_str_eq(fs.root, "/from/arg");
  cr_expect_str_eq(fs.pci_ids, "/ids");
  unsetenv("BANKML_PCI_IDS");
  bml__sysfs_init(&fs, NULL, NULL);
  cr_expect_str_eq(fs.root, "/from/env");
  /* pci.ids: the one configure found when it is readable, else libpci's default */
  cr_expect_str_eq(fs.pci_ids, access(BML_PCI_IDS, R_OK) == 0 ? BML_PCI_IDS : "");
  setenv("BANKML_PCI_IDS", "/ids/from/env", 1);
  bml__sysfs_init(&fs, NULL, NULL);
  cr_expect_str_eq(fs.pci_ids, "/ids/from/env", "BANKML_PCI_IDS comes first");
  unsetenv("BANKML_PCI_IDS");
  setenv("BANKML_SYSFS_ROOT", "", 1);
  bml__sysfs_init(&fs, NULL, NULL);
  cr_expect_str_eq(fs.root, "/sys", "empty means unset");
  unsetenv("BANKML_SYSFS_ROOT");
  bml__sysfs_init(&fs, NULL, NULL);
  cr_expect_str_eq(fs.root, "/sys");
}

Test(pci, a_relative_sysfs_root_in_the_environment_is_refused, .init = cr_redirect_stderr) {
  bml__sysfs fs;
  const char *v = NULL;
  setenv("BANKML_SYSFS_ROOT", "tests/fixtures", 1);
  cr_expect_eq(bml__env_sysfs_root(&v), BML_EENV);
  cr_expect_null(v);
  bml__sysfs_init(&fs, NULL, NULL);
  /* nothing is found, rather than this machine's /sys in place of the tree meant */
  cr_expect_str_eq(fs.root, "/dev/null");
  unsetenv("BANKML_SYSFS_ROOT");
  fflush(stderr);
  cr_expect_stderr_neq_str("", "the refusal names the variable on stderr");
}

Test(pci, the_environment_root_reaches_a_lookup) {
  char root[512];
  bml__sysfs fs;
  bml__pci_info info;
  bml__notes notes = {0};
  snprintf(root, sizeof root, "%s/tests/fixtures/sysfs/nvidia", srcdir());
  setenv("BANKML_SYSFS_ROOT", root, 1);
  bml__sysfs_init(&fs, NULL, fixture_ids());
  unsetenv("BANKML_SYSFS_ROOT");
  cr_assert_eq(bml__pci_lookup(&fs, addr("0000:00:06.0"), &info, &notes), 0);
  cr_expect_eq(info.device_id, 0x2335);
  bml__notes_free(&notes);
}

/* ---- lookups on the fixtures ---------------------------------------------------- */

Test(pci, amdgpu_card_every_field_through_libpci) {
  bml__pci_info i;
  bml__notes notes = {0};
  char want[256];
  lookup("amdgpu", system_ids(), "0000:03:00.0", &i, &notes);
  cr_expect_str_eq(i.method, "libpci");
  cr_expect_eq(i.vendor_id, 0x1002);
  cr_expect_eq(i.device_id, 0x73bf);
  cr_expect_eq(i.subsys_vendor_id, 0x1002);
  cr_expect_eq(i.subsys_device_id, 0x0e3a);
  cr_expect_eq(i.class_code, 0x030000);
  cr_expect_eq(i.revision, 0xc0);
  cr_expect_str_eq(i.vendor_name, "Advanced Micro Devices, Inc. [AMD/ATI]");
  ids_file_name(system_ids(), 0x1002, 0x73bf, want, sizeof want);
  cr_expect_str_eq(i.device_name, want);
  cr_expect_str_neq(i.device_name, "", "pci.ids has known Navi 21 since 2020");
  cr_expect_str_eq(i.driver, "amdgpu");
  cr_expect_eq(i.numa_node, 0);
  cr_expect_str_eq(i.link_speed, "16.0 GT/s PCIe");
  cr_expect_str_eq(i.max_link_speed, "16.0 GT/s PCIe");
  cr_expect_eq(i.link_width, 16);
  cr_expect_eq(i.max_link_width, 16);
  const uint64_t bars[6] = {UINT64_C(16) << 30, 0, UINT64_C(256) << 20, 0, 256, UINT64_C(1) << 20};
  for (int b = 0; b < 6; b++) cr_expect_eq(i.bar_size[b], bars[b], "BAR %d", b);
  cr_expect_eq(i.vram_total, UINT64_C(17163091968));
  cr_expect_eq(i.gtt_total, UINT64_C(33554432000));
  cr_expect_eq(i.lmem_total, 0);
  cr_expect_str_eq(i.drm_card, "card0");
  cr_expect_eq(notes.len, 0, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
}

Test(pci, intel_igpu_finds_its_own_drm_card_not_the_framebuffer) {
  bml__pci_info i;
  bml__notes notes = {0};
  char want[256];
  lookup("i915", system_ids(), "0000:00:02.0", &i, &notes);
  cr_expect_str_eq(i.method, "libpci");
  cr_expect_eq(i.vendor_id, 0x8086);
  cr_expect_eq(i.device_id, 0x46a6);
  cr_expect_eq(i.subsys_vendor_id, 0x17aa);
  cr_expect_eq(i.subsys_device_id, 0x22e6);
  cr_expect_eq(i.class_code, 0x030000);
  cr_expect_eq(i.revision, 0x0c);
  cr_expect_str_eq(i.vendor_name, "Intel Corporation");
  ids_file_name(system_ids(), 0x8086, 0x46a6, want, sizeof want);
  cr_expect_str_eq(i.device_name, want);
  cr_expect_str_eq(i.driver, "i915");
  cr_expect_eq(i.numa_node, -1);
  cr_expect_str_eq(i.link_speed, "", "an iGPU has no PCIe link");
  cr_expect_eq(i.link_width, 0);
  cr_expect_eq(i.bar_size[0], UINT64_C(16) << 20);
  cr_expect_eq(i.bar_size[2], UINT64_C(256) << 20);
  cr_expect_eq(i.bar_size[4], 64);
  cr_expect_eq(i.vram_total, 0);
  cr_expect_eq(i.lmem_total, 0);
  cr_expect_str_eq(i.drm_card, "card1");
  cr_expect_eq(notes.len, 0, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
}

Test(pci, nvidia_card_without_drm_node) {
  bml__pci_info i;
  bml__notes notes = {0};
  char want[256];
  lookup("nvidia", system_ids(), "0000:00:06.0", &i, &notes);
  cr_expect_str_eq(i.method, "libpci");
  cr_expect_eq(i.vendor_id, 0x10de);
  cr_expect_eq(i.device_id, 0x2335);
  cr_expect_eq(i.subsys_vendor_id, 0x10de);
  cr_expect_eq(i.subsys_device_id, 0x18be);
  cr_expect_eq(i.class_code, 0x030200);
  cr_expect_eq(i.revision, 0xa1);
  cr_expect_str_eq(i.vendor_name, "NVIDIA Corporation");
  /* Whatever this pci.ids says of 10de:2335 (H200), exactly; older files
   * (Debian 12's 2023.04.10) have no entry, and then the name is "". */
  ids_file_name(system_ids(), 0x10de, 0x2335, want, sizeof want);
  cr_expect_str_eq(i.device_name, want);
  cr_expect_str_eq(i.driver, "nvidia");
  cr_expect_eq(i.numa_node, 0);
  cr_expect_str_eq(i.link_speed, "32.0 GT/s PCIe");
  cr_expect_eq(i.link_width, 16);
  const uint64_t bars[6] = {UINT64_C(16) << 20, UINT64_C(256) << 30, 0, UINT64_C(32) << 20, 0, 0};
  for (int b = 0; b < 6; b++) cr_expect_eq(i.bar_size[b], bars[b], "BAR %d", b);
  cr_expect_eq(i.vram_total, 0);
  cr_expect_str_eq(i.drm_card, "", "no DRM node, and no /sys/class/drm at all");
  cr_expect_eq(notes.len, 0, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
}

Test(pci, names_come_from_the_pci_ids_file_given) {
  bml__pci_info i;
  bml__notes notes = {0};
  lookup("amdgpu", fixture_ids(), "0000:03:00.0", &i, &notes);
  cr_expect_str_eq(i.vendor_name, "Fixture Vendor AMD");
  cr_expect_str_eq(i.device_name, "Fixture Navi 21");
  lookup("nvidia", fixture_ids(), "0000:00:06.0", &i, &notes);
  cr_expect_str_eq(i.vendor_name, "Fixture Vendor NVIDIA");
  cr_expect_str_eq(i.device_name, "Fixture H200");
  lookup("amdgpu", fixture_ids(), "0000:03:00.1", &i, &notes);
  cr_expect_str_eq(i.vendor_name, "Fixture Vendor AMD");
  cr_expect_str_eq(i.device_name, "", "a device pci.ids does not know has no name");
  cr_expect_eq(i.class_code, 0x040300);
  cr_expect_eq(notes.len, 0, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
}

Test(pci, a_missing_pci_ids_gives_no_names_and_a_note) {
  bml__pci_info i;
  bml__notes notes = {0};
  lookup("amdgpu", "/nonexistent/pci.ids", "0000:03:00.0", &i, &notes);
  cr_expect_str_eq(i.method, "libpci");
  cr_expect_eq(i.vendor_id, 0x1002);
  cr_expect_str_eq(i.vendor_name, "");
  cr_expect_str_eq(i.device_name, "");
  cr_expect_eq(notes_with(&notes, "libpci: ", "/nonexistent/pci.ids"), 1, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
}

Test(pci, a_missing_root_is_notes_and_enodev_never_an_exit, .init = cr_redirect_stderr) {
  bml__sysfs fs;
  bml__pci_info i;
  bml__notes notes = {0};
  bml__sysfs_init(&fs, "/nonexistent/bankml-sysfs", fixture_ids());
  cr_expect_eq(bml__pci_lookup(&fs, addr("0000:03:00.0"), &i, &notes), BML_ENODEV);
  cr_expect_null(i.method);
  cr_expect_eq(notes_with(&notes, "libpci: ", "/nonexistent/bankml-sysfs/bus/pci/devices/0000:03:00.0"), 1,
               "notes: %s", all_notes(&notes));
  cr_expect_eq(notes_with(&notes, "sysfs: ", "no such PCI function"), 1, "notes: %s", all_notes(&notes));
  fflush(stderr);
  cr_expect_stderr_eq_str("", "libpci must not print");
  bml__notes_free(&notes);
}

Test(pci, a_function_that_is_not_there_is_enodev) {
  bml__sysfs fs;
  bml__pci_info i;
  bml__notes notes = {0};
  fixture(&fs, "amdgpu", fixture_ids());
  cr_expect_eq(bml__pci_lookup(&fs, addr("0000:09:00.0"), &i, &notes), BML_ENODEV);
  cr_expect_eq(bml__pci_lookup(&fs, (bml__pci_addr){.valid = false}, &i, &notes), BML_EINVAL);
  bml__notes_free(&notes);
}

Test(pci, sysfs_method_takes_over_when_libpci_fails, .init = cr_redirect_stderr) {
  bml__pci_info i;
  bml__notes notes = {0};
  /* config-only: no vendor/device/class files, which libpci's sysfs access
   * requires; its config space is there. */
  lookup("config-only", fixture_ids(), "0000:01:00.0", &i, &notes);
  cr_expect_str_eq(i.method, "sysfs");
  cr_expect_eq(notes_with(&notes, "libpci: ", "vendor"), 1, "notes: %s", all_notes(&notes));
  cr_expect_eq(i.vendor_id, 0x10de);
  cr_expect_eq(i.device_id, 0x2335);
  cr_expect_eq(i.class_code, 0x030200);
  cr_expect_eq(i.revision, 0xa1);
  cr_expect_eq(i.subsys_vendor_id, 0x10de);
  cr_expect_eq(i.subsys_device_id, 0x18be);
  cr_expect_str_eq(i.vendor_name, "Fixture Vendor NVIDIA", "names still come from pci.ids");
  cr_expect_str_eq(i.device_name, "Fixture H200");
  cr_expect_str_eq(i.driver, "nvidia");
  cr_expect_str_eq(i.drm_card, "card2", "found through /sys/class/drm/card2/device");
  fflush(stderr);
  cr_expect_stderr_eq_str("", "libpci must not print");
  bml__notes_free(&notes);
}

Test(pci, libpci_warnings_are_notes_not_stderr, .init = cr_redirect_stderr) {
  tree t;
  bml__sysfs fs;
  bml__pci_info i;
  bml__notes notes = {0};
  tree_new(&t); /* no subsystem files and no config space: libpci warns, twice */
  tree_pci_fn(&t, "0000:03:00.0", 0x1002, 0x73bf, 0x030000);
  bml__sysfs_init(&fs, t.root, fixture_ids());
  cr_expect_eq(bml__pci_lookup(&fs, addr("0000:03:00.0"), &i, &notes), 0);
  cr_expect_str_eq(i.method, "libpci");
  cr_expect_eq(i.device_id, 0x73bf);
  cr_expect_eq(i.subsys_vendor_id, 0);
  cr_expect_eq(notes_with(&notes, "libpci: warning: ", "config"), 1, "notes: %s", all_notes(&notes));
  fflush(stderr);
  cr_expect_stderr_eq_str("", "libpci must not print");
  tree_free(&t);
  bml__notes_free(&notes);
}

Test(pci, garbage_files_are_notes_and_unknown_values) {
  bml__pci_info i;
  bml__notes notes = {0};
  lookup("garbage", fixture_ids(), "0000:03:00.0", &i, &notes);
  cr_expect_str_eq(i.method, "libpci");
  cr_expect_eq(i.vendor_id, 0x1002);
  cr_expect_str_eq(i.driver, "amdgpu");
  cr_expect_eq(i.numa_node, -1);
  cr_expect_eq(notes_with(&notes, "numa_node", "banana"), 1, "notes: %s", all_notes(&notes));
  cr_expect_eq(i.link_width, 0);
  cr_expect_eq(notes_with(&notes, "current_link_width", "sixteen"), 1);
  cr_expect_str_eq(i.link_speed, "", "an empty file says nothing");
  cr_expect_eq(i.max_link_width, 0);
  cr_expect_eq(i.vram_total, 0);
  cr_expect_eq(notes_with(&notes, "mem_info_vram_total", "lots"), 1);
  cr_expect_eq(i.gtt_total, 0);
  cr_expect_eq(notes_with(&notes, "mem_info_gtt_total", "-5"), 1);
  cr_expect_eq(i.bar_size[0], UINT64_C(16) << 30, "the good lines still count");
  cr_expect_eq(i.bar_size[2], 0);
  cr_expect_eq(notes_with(&notes, "resource", "not a resource line"), 1);
  cr_expect_eq(notes.len, 5, "notes: %s", all_notes(&notes));
  cr_expect_str_eq(i.drm_card, "");
  bml__notes_free(&notes);
}

Test(pci, intel_local_memory_from_xe_tiles_and_i915_cards) {
  tree t;
  bml__sysfs fs;
  bml__pci_info i;
  bml__notes notes = {0};
  tree_new(&t);
  tree_pci_fn(&t, "0000:03:00.0", 0x8086, 0xe20b, 0x030000); /* xe: two tiles */
  tree_put(&t, "devices/pci0000:00/0000:03:00.0/tile0/physical_vram_size_bytes", "12884901888\n");
  tree_put(&t, "devices/pci0000:00/0000:03:00.0/tile1/physical_vram_size_bytes", "4294967296\n");
  tree_pci_fn(&t, "0000:04:00.0", 0x8086, 0x56a0, 0x030000); /* i915 backport: on the card */
  tree_put(&t, "devices/pci0000:00/0000:04:00.0/drm/card3/lmem_total_bytes", "17179869184\n");
  tree_link(&t, "class/drm/card3", "../../devices/pci0000:00/0000:04:00.0/drm/card3");
  bml__sysfs_init(&fs, t.root, fixture_ids());
  cr_expect_eq(bml__pci_lookup(&fs, addr("0000:03:00.0"), &i, &notes), 0);
  cr_expect_eq(i.lmem_total, UINT64_C(16) << 30);
  cr_expect_eq(bml__pci_lookup(&fs, addr("0000:04:00.0"), &i, &notes), 0);
  cr_expect_eq(i.lmem_total, UINT64_C(16) << 30);
  cr_expect_str_eq(i.drm_card, "card3");
  cr_expect_eq(i.vram_total, 0);
  tree_free(&t);
  bml__notes_free(&notes);
}

/* ---- display functions -------------------------------------------------------------- */

static size_t find(const char *name, uint16_t vendor, bml__pci_addr *out, size_t cap) {
  bml__sysfs fs;
  size_t n = 99;
  fixture(&fs, name, NULL);
  cr_assert_eq(bml__pci_find_display(&fs, vendor, out, cap, &n), 0);
  return n;
}

Test(pci, display_functions_of_each_fixture) {
  bml__pci_addr a[4];
  char buf[BML__PCI_ADDR_SIZE];
  cr_expect_eq(find("amdgpu", 0x1002, a, 4), 1, "the HDMI audio function is not a display");
  bml__pci_addr_format(a[0], buf);
  cr_expect_str_eq(buf, "0000:03:00.0");
  cr_expect_eq(find("amdgpu", 0x10de, a, 4), 0);
  cr_expect_eq(find("i915", 0x8086, a, 4), 1, "the host bridge is not a display");
  bml__pci_addr_format(a[0], buf);
  cr_expect_str_eq(buf, "0000:00:02.0");
  cr_expect_eq(find("nvidia", 0x10de, a, 4), 1, "class 0x0302 (3D controller) is a display");
  bml__pci_addr_format(a[0], buf);
  cr_expect_str_eq(buf, "0000:00:06.0");
  cr_expect_eq(find("config-only", 0x10de, a, 4), 1, "ids from config space count too");
  cr_expect_eq(find("panfrost", 0x1d87, a, 4), 0, "a PCIe root port is not a display");
  cr_expect_eq(find("panfrost", 0x13b5, a, 4), 0);
  cr_expect_eq(find("kbase", 0x13b5, a, 4), 0, "no bus/pci at all");
}

Test(pci, display_functions_come_in_address_order_up_to_cap) {
  tree t;
  bml__sysfs fs;
  bml__pci_addr a[8];
  size_t n = 0;
  char buf[BML__PCI_ADDR_SIZE];
  const char *made[] = {"0001:00:00.0", "0000:41:00.0", "10000:00:00.0", "0000:03:00.1", "0000:03:00.0",
                        "0000:21:00.0"};
  tree_new(&t);
  for (size_t i = 0; i < BML_ARRAY_SIZE(made); i++) tree_pci_fn(&t, made[i], 0x1002, 0x74a1, 0x038000);
  tree_pci_fn(&t, "0000:00:01.0", 0x1002, 0x14b8, 0x060400);
  tree_pci_fn(&t, "0000:05:00.0", 0x10de, 0x2335, 0x030200);
  tree_put(&t, "bus/pci/devices/not-an-address", "");
  bml__sysfs_init(&fs, t.root, NULL);
  cr_assert_eq(bml__pci_find_display(&fs, 0x1002, a, 8, &n), 0);
  cr_assert_eq(n, 6);
  const char *want[] = {"0000:03:00.0", "0000:03:00.1", "0000:21:00.0", "0000:41:00.0", "0001:00:00.0",
                        "10000:00:00.0"};
  for (size_t i = 0; i < n; i++) {
    bml__pci_addr_format(a[i], buf);
    cr_expect_str_eq(buf, want[i], "position %zu", i);
  }
  a[2] = (bml__pci_addr){true, 0xdead, 1, 2, 3};
  cr_assert_eq(bml__pci_find_display(&fs, 0x1002, a, 2, &n), 0);
  cr_expect_eq(n, 6, "the count is of them all");
  bml__pci_addr_format(a[1], buf);
  cr_expect_str_eq(buf, "0000:03:00.1", "the first ones in address order");
  cr_expect_eq(a[2].domain, 0xdead, "no more than cap written");
  cr_assert_eq(bml__pci_find_display(&fs, 0x1002, a, 0, &n), 0);
  cr_expect_eq(n, 6);
  tree_free(&t);
}

/* libpci keeps what fits of an id file that is no id (0x1234567 as
 * vendor 0x4567): such files are refused, with a note, and the plain
 * sysfs method's verdict stands. */
Test(pci, id_files_that_do_not_parse_are_not_truncated_by_libpci) {
  tree t;
  bml__sysfs fs;
  bml__pci_info i;
  bml__notes notes = {0};
  tree_new(&t);
  tree_pci_fn(&t, "0000:03:00.0", 0x1002, 0x73bf, 0x030000);
  tree_put(&t, "devices/pci0000:00/0000:03:00.0/vendor", "0x1234567\n");
  tree_pci_fn(&t, "0000:04:00.0", 0x1002, 0x73bf, 0x030000);
  tree_put(&t, "devices/pci0000:00/0000:04:00.0/class", "0x12345678\n");
  bml__sysfs_init(&fs, t.root, NULL);
  cr_expect_neq(bml__pci_lookup(&fs, (bml__pci_addr){true, 0, 3, 0, 0}, &i, &notes), 0,
                "vendor 0x%04x from a file that says 0x1234567", i.vendor_id);
  cr_expect_eq(notes_with(&notes, "libpci: not used", "0000:03:00.0"), 1, "notes: %s", all_notes(&notes));
  cr_expect_eq(notes_with(&notes, "0x1234567", "not a number"), 1, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
  notes = (bml__notes){0};
  cr_expect_eq(bml__pci_lookup(&fs, (bml__pci_addr){true, 0, 4, 0, 0}, &i, &notes), 0);
  cr_expect_neq(i.class_code, 0x345678, "the class file's low bytes taken");
  cr_expect_eq(notes_with(&notes, "0x12345678", "not a number"), 1, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
  tree_free(&t);
}

/* A FIFO where a sysfs file should be (a test tree's mistake, or a
 * hostile one) is not read, by bankml-cl (numa_node) nor by libpci (the
 * id files it opens blocking: revision, subsystem_vendor): the lookup
 * returns, that value unknown. */
Test(pci, a_fifo_in_the_tree_does_not_hang_a_lookup) {
  static const char *const fifos[] = {"numa_node", "revision", "subsystem_vendor"};
  tree t;
  bml__sysfs fs;
  bml__pci_info i;
  tree_new(&t);
  for (unsigned k = 0; k < BML_ARRAY_SIZE(fifos); k++) {
    char a[16], rel[96];
    snprintf(a, sizeof a, "0000:0%u:00.0", 3 + k);
    tree_pci_fn(&t, a, 0x1002, 0x73bf, 0x030000);
    snprintf(rel, sizeof rel, "devices/pci0000:00/%s/%s", a, fifos[k]);
    cr_assert_eq(mkfifo(tree_path(&t, rel), 0644), 0);
  }
  bml__sysfs_init(&fs, t.root, NULL);
  for (unsigned k = 0; k < BML_ARRAY_SIZE(fifos); k++) {
    bml__notes notes = {0};
    cr_expect_eq(bml__pci_lookup(&fs, (bml__pci_addr){true, 0, (uint8_t)(3 + k), 0, 0}, &i, &notes), 0, "%s",
                 fifos[k]);
    if (k == 0) cr_expect_eq(i.numa_node, -1);
    if (k == 1) cr_expect_eq(i.revision, 0);
    bml__notes_free(&notes);
  }
  tree_free(&t);
}

Test(pci, no_root_no_display_functions) {
  bml__sysfs fs;
  bml__pci_addr a[2];
  size_t n = 99;
  bml__sysfs_init(&fs, "/nonexistent/bankml-sysfs", NULL);
  cr_expect_eq(bml__pci_find_display(&fs, 0x1002, a, 2, &n), 0);
  cr_expect_eq(n, 0);
}

/* ---- SoC GPUs -------------------------------------------------------------------- */

static int soc(const char *name, uint32_t vendor, const char *cl_name, bml__soc_info *out) {
  bml__sysfs fs;
  bml__notes notes = {0};
  fixture(&fs, name, NULL);
  int rc = bml__soc_gpu_lookup(&fs, vendor, cl_name, out, &notes);
  cr_expect_eq(notes.len, 0, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
  return rc;
}

Test(pci, panfrost_mali_is_found_by_vendor_id_and_by_name) {
  bml__soc_info s;
  cr_assert_eq(soc("panfrost", 0x13b5, "Mali-G610 (Panfrost)", &s), 0);
  cr_expect_str_eq(s.driver, "panfrost");
  cr_expect_str_eq(s.model, "arm,mali-valhall-csf", "the first string of of_node/compatible");
  cr_expect_str_eq(s.path, "devices/platform/fb000000.gpu");
  cr_expect_str_eq(s.drm_card, "card0");
  cr_assert_eq(soc("panfrost", 0x10005, "Mali-G610 r0p0", &s), 0, "a Mali under another vendor id");
  cr_expect_str_eq(s.driver, "panfrost");
  cr_expect_eq(soc("panfrost", 0x5143, "Adreno 635", &s), BML_ENODEV, "an Adreno is not a Mali");
  cr_expect_str_eq(s.driver, "", "nothing is left in out");
}

Test(pci, mali_kbase_and_adreno_kgsl_are_found) {
  bml__soc_info s;
  cr_assert_eq(soc("kbase", 0x13b5, "Mali-G610", &s), 0);
  cr_expect_str_eq(s.driver, "mali");
  cr_expect_str_eq(s.model, "Mali-G610 4 cores r0p0 0xA867", "kbase's gpuinfo");
  cr_expect_str_eq(s.path, "devices/platform/fb000000.gpu");
  cr_expect_str_eq(s.drm_card, "");
  cr_assert_eq(soc("kgsl", 0x5143, "QUALCOMM Adreno(TM) 635", &s), 0);
  cr_expect_str_eq(s.driver, "kgsl-3d");
  cr_expect_str_eq(s.model, "Adreno635v2", "kgsl's gpu_model");
  cr_expect_str_eq(s.path, "devices/platform/3d00000.gpu");
  cr_expect_eq(soc("kgsl", 0x13b5, "Mali-G610", &s), BML_ENODEV);
}

Test(pci, pci_gpus_and_other_drm_cards_are_not_soc_gpus) {
  bml__soc_info s;
  cr_expect_eq(soc("amdgpu", 0x13b5, "Mali-G610", &s), BML_ENODEV, "card0 is a PCI device");
  cr_expect_eq(soc("i915", 0x13b5, "Mali-G610", &s), BML_ENODEV, "simpledrm's card0 is no GPU");
  cr_expect_eq(soc("nvidia", 0x13b5, "Mali-G610", &s), BML_ENODEV, "no /sys/class/drm");
  cr_expect_eq(soc("panfrost", 0x10de, "NVIDIA H200", &s), BML_ENODEV, "not a SoC maker");
  cr_expect_eq(soc("panfrost", 0, NULL, &s), BML_ENODEV, "no vendor id, no name");
}

Test(pci, soc_lookup_on_a_missing_root_is_a_note) {
  bml__sysfs fs;
  bml__soc_info s;
  bml__notes notes = {0};
  bml__sysfs_init(&fs, "/nonexistent/bankml-sysfs", NULL);
  cr_expect_eq(bml__soc_gpu_lookup(&fs, 0x13b5, "Mali", &s, &notes), BML_ENODEV);
  cr_expect_eq(notes_with(&notes, "/nonexistent/bankml-sysfs", NULL), 1, "notes: %s", all_notes(&notes));
  bml__notes_free(&notes);
}

/* ---- threads --------------------------------------------------------------------- */

/* The fixture's pci.ids path, made before the threads start: fixture_ids()
 * writes a static buffer, which four threads wrote at once (one of them
 * now and then read it half written, and names came from the system's
 * pci.ids: a failure about one run in thirty). */
static const char *thread_ids;

static void *lookups(void *arg) {
  bml__sysfs good, bad;
  bml__pci_info i;
  long *failures = arg;
  fixture(&good, "amdgpu", thread_ids);
  bml__sysfs_init(&bad, "/nonexistent/bankml-sysfs", NULL);
  for (int k = 0; k < 25; k++) {
    bml__notes notes = {0};
    *failures += bml__pci_lookup(&good, addr("0000:03:00.0"), &i, &notes) != 0 || i.device_id != 0x73bf ||
                 strcmp(i.method, "libpci") != 0 || strcmp(i.device_name, "Fixture Navi 21") != 0;
    *failures += bml__pci_lookup(&bad, addr("0000:03:00.0"), &i, &notes) != BML_ENODEV ||
                 notes_with(&notes, "libpci: ", NULL) != 1;
    bml__notes_free(&notes);
  }
  return NULL;
}

Test(pci, lookups_from_several_threads_keep_their_errors_apart) {
  pthread_t th[4];
  long failures[4] = {0};
  thread_ids = fixture_ids();
  for (int t = 0; t < 4; t++) cr_assert_eq(pthread_create(&th[t], NULL, lookups, &failures[t]), 0);
  for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
  for (int t = 0; t < 4; t++) cr_expect_eq(failures[t], 0, "thread %d", t);
}
