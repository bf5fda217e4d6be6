/* test_selection.c -- the choice of devices: BANKML_GPU, the software flag, the options over the environment, and what is refused. */
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

TestSuite(selection, .timeout = 60);

static char logged[8192];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

Test(selection, gpu_choice_off_selects_nothing) {
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

Test(selection, gpu_choice_by_index_and_by_pci_address) {
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
Test(selection, custom_devices_are_listed_not_usable) {
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
Test(selection, the_drivers_pci_address_stands_without_sysfs) {
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
Test(selection, within_a_kind_more_memory_comes_first) {
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
Test(selection, a_refused_sysfs_root_is_an_error) {
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

Test(selection, bad_gpu_choices_are_refused_by_name) {
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

Test(selection, software_flag_makes_software_usable_and_says_so) {
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

Test(selection, options_override_the_environment) {
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
Test(selection, bad_options_are_the_callers_and_named_as_options) {
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
