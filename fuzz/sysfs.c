/* sysfs.c -- fuzzes what bankml-cl reads of sysfs and pci.ids (src/devices/sysfs.c, src/devices/pci.c, libpci's reading of pci.ids).
 *
 * Copies of two fixture trees (tests/fixtures/sysfs: an amdgpu card on
 * PCI and a panfrost GPU on a platform device) are made once; the input
 * is the text of their files, cut at each 0xff byte, in the order of
 * `files` below, then an OpenCL device name for the SoC lookup and an
 * address to look up.  BML_FIXTURES is the fixtures' directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "devices/sysfs.h"
#include "base/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CARD "amdgpu/devices/pci0000:00/0000:03:00.0/"
static const char *const files[] = {
    CARD "vendor",         CARD "device",           CARD "class",
    CARD "revision",       CARD "subsystem_vendor", CARD "subsystem_device",
    CARD "config",         CARD "resource",         CARD "numa_node",
    CARD "current_link_speed", CARD "current_link_width", CARD "max_link_speed",
    CARD "max_link_width", CARD "mem_info_vram_total", CARD "mem_info_gtt_total",
    "pci.ids",             "panfrost/firmware/devicetree/base/gpu@fb000000/compatible",
};
#define NFILES (sizeof files / sizeof files[0])

static void copy_fixtures(void) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "cp -R '%s/sysfs/amdgpu' '%s/sysfs/panfrost' '%s/'", BML_FIXTURES, BML_FIXTURES, fuzz_dir());
  if (system(cmd) != 0) {
    fprintf(stderr, "fuzz sysfs: cannot copy the fixtures: %s\n", cmd);
    exit(1);
  }
  fuzz_quiet();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int started;
  if (!started++) copy_fixtures();
  const uint8_t *at[NFILES + 2];
  size_t len[NFILES + 2];
  char path[1024], root[600], ids[600], name[256], where[64];
  fuzz_split(data, size, 0xff, at, len, NFILES + 2);
  for (size_t i = 0; i < NFILES; i++) fuzz_write(files[i], at[i], len[i], path, sizeof path);
  snprintf(name, sizeof name, "%.*s", (int)len[NFILES], (const char *)at[NFILES]);
  snprintf(where, sizeof where, "%.*s", (int)len[NFILES + 1], (const char *)at[NFILES + 1]);
  snprintf(root, sizeof root, "%s/amdgpu", fuzz_dir());
  snprintf(ids, sizeof ids, "%s/pci.ids", fuzz_dir());
  bml__sysfs fs;
  bml__sysfs_init(&fs, root, ids);
  bml__notes notes = {0};
  bml__pci_info info;
  bml__pci_addr addr, found[4];
  size_t count = 0;
  bml__pci_addr_parse("0000:03:00.0", &addr);
  bml__pci_lookup(&fs, addr, &info, &notes);
  if (bml__pci_addr_parse(where, &addr) == 0) bml__pci_lookup(&fs, addr, &info, &notes);
  bml__pci_find_display(&fs, 0x1002, found, 4, &count);
  snprintf(root, sizeof root, "%s/panfrost", fuzz_dir());
  bml__sysfs_init(&fs, root, ids);
  bml__soc_info soc;
  bml__soc_gpu_lookup(&fs, 0x13b5, name, &soc, &notes);
  bml__notes_free(&notes);
  return 0;
}
