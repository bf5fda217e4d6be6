/* devicestest.h -- what the suites of discovery share: the fake ICD's scenarios, a discovery and its report. */
#ifndef BML_TEST_DEVICESTEST_H
#define BML_TEST_DEVICESTEST_H

#include <jansson.h>
#include <stdbool.h>

#include "base/bml.h"
#include "base/util.h"
#include "base/log.h"
#include "base/env.h"
#include "cpu/q1_0.h"
#include "cpu/gen.h"
#include "cpu/pool.h"

/* Points the loader at the fake ICD with a scenario, and sysfs at a
 * fixture tree (NULL: an empty directory that has nothing). Must run
 * before the process's first OpenCL call. */
void use_fake(const char *scenario, const char *sysfs);

bml_devices *discover(void);

/* Discovers with the fake ICD reading the scenario text (after use_fake). */
bml_devices *discover_scenario(const char *text);

const bml_device *find(const bml_devices *l, const char *name);

bool has_note(const bml_devices *l, const char *needle);

json_t *report(const bml_devices *l);

json_t *device_json(json_t *root, size_t index);

const char *jstr(json_t *o, const char *path);

#endif
