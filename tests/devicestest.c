/* devicestest.c -- what the suites of discovery share: the fake ICD's scenarios, a discovery and its report. */
#include "devicestest.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* Points the loader at the fake ICD with a scenario, and sysfs at a
 * fixture tree (NULL: an empty directory that has nothing). Must run
 * before the process's first OpenCL call. */
void use_fake(const char *scenario, const char *sysfs) {
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

bml_devices *discover(void) {
  bml_devices *d = NULL;
  int rc = bml_devices_discover(NULL, &d);
  cr_assert_eq(rc, 0, "discover: %s", bml_strerror(rc));
  return d;
}

/* Discovers with the fake ICD reading the scenario text (after use_fake). */
bml_devices *discover_scenario(const char *text) {
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

const bml_device *find(const bml_devices *l, const char *name) {
  for (size_t i = 0; i < bml_devices_count(l); i++)
    if (strcmp(bml_devices_get(l, i)->name, name) == 0) return bml_devices_get(l, i);
  cr_assert_fail("no device named %s", name);
  return NULL;
}

bool has_note(const bml_devices *l, const char *needle) {
  for (size_t i = 0; i < bml_devices_note_count(l); i++)
    if (strstr(bml_devices_note(l, i), needle)) return true;
  return false;
}

json_t *report(const bml_devices *l) {
  char *text = NULL;
  cr_assert_eq(bml_devices_report_json(l, 0, &text), 0);
  json_error_t err;
  json_t *root = json_loads(text, 0, &err);
  cr_assert_not_null(root, "report is not JSON: %s", err.text);
  free(text);
  return root;
}

json_t *device_json(json_t *root, size_t index) {
  json_t *d = json_array_get(json_object_get(root, "devices"), index);
  cr_assert_not_null(d, "no device %zu in the report", index);
  return d;
}

const char *jstr(json_t *o, const char *path) {
  /* "a.b.c" through nested objects */
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  json_t *cur = o;
  for (char *tok = strtok(buf, "."); tok && cur; tok = strtok(NULL, ".")) cur = json_object_get(cur, tok);
  cr_assert(json_is_string(cur), "%s is not a string", path);
  return json_string_value(cur);
}
