/* env.c -- every environment variable libbankml-cl reads (but BANKML_DEBUG: base/log.c), parsed strictly in one place. */
#include "base/env.h"
#include "base/bml.h"
#include "base/log.h"

#include <ctype.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* A number starts with a digit, or a minus and a digit (a '.' too for a
 * decimal): strtol and strtod would also skip any white space (a newline
 * included) and take a plus sign. */
static bool starts_number(const char *s, bool decimal) {
  if (s[0] == '-') s++;
  return isdigit((unsigned char)s[0]) || (decimal && s[0] == '.');
}

int bml__parse_long(const char *s, long lo, long hi, long *out) {
  if (!s || !starts_number(s, false)) return BML_EINVAL;
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0') return BML_EINVAL;
  if (errno == ERANGE || v < lo || v > hi) return BML_ERANGE;
  *out = v;
  return 0;
}

/* strtod with '.' as the decimal point whatever the program's locale: an
 * engine that called setlocale(LC_ALL, "") in a locale with a decimal
 * comma must not have BANKML_GPU_LIMIT=0.5 refused (and 0,5 taken). */
static double c_strtod(const char *s, char **end) {
  locale_t c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
  locale_t old = c ? uselocale(c) : (locale_t)0;
  double v = strtod(s, end);
  if (c) {
    uselocale(old);
    freelocale(c);
  }
  return v;
}

int bml__parse_double(const char *s, double lo, double hi, double *out) {
  if (!s || !starts_number(s, true)) return BML_EINVAL;
  char *end = NULL;
  errno = 0;
  double v = c_strtod(s, &end);
  if (end == s || *end != '\0' || !isfinite(v)) return BML_EINVAL;
  if (errno == ERANGE || v < lo || v > hi) return BML_ERANGE;
  *out = v;
  return 0;
}

/* The value of name, or NULL when unset or empty.  Each one set is said
 * under BANKML_DEBUG=env (BANKML_DEBUG itself is read by base/log.c:
 * reading it is what turns the categories on). */
static const char *env_value(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return NULL;
  bml__debug(BML_CAT_ENV, "%s=\"%s\"", name, v);
  return v;
}

/* A whole number of `unit` from lo to hi in variable name; unset or empty
 * leaves *out; anything else is an error naming it. */
static int env_whole(const char *name, long lo, long hi, const char *unit, long *out) {
  const char *v = env_value(name);
  if (!v) return 0;
  long n;
  int rc = bml__parse_long(v, lo, hi, &n);
  if (rc != 0) {
    bml__error(BML_CAT_ENV, "%s=\"%s\": %s (expected a whole number of %s, %ld to %ld)", name, v,
               rc == BML_ERANGE ? "out of range" : "not a number", unit, lo, hi);
    return BML_EENV;
  }
  *out = n;
  return 0;
}

int bml__env_threads(int *out) {
  long n = *out;
  int rc = env_whole("BANKML_THREADS", 1, BML_POOL_MAX_THREADS, "threads", &n);
  *out = (int)n;
  return rc;
}

int bml__env_pool_wait_ms(unsigned *out) {
  long n = *out;
  int rc = env_whole("BANKML_POOL_WAIT_MS", 0, BML_POOL_MAX_WAIT_MS, "milliseconds", &n);
  *out = (unsigned)n;
  return rc;
}

int bml__env_gpu_queues(int *out) {
  long n = *out;
  int rc = env_whole("BANKML_GPU_QUEUES", 1, BML_MAX_QUEUES, "queues", &n);
  *out = (int)n;
  return rc;
}

int bml__env_cpu_path(const char **out) {
  const char *v = env_value("BANKML_CPU_PATH");
  if (v) *out = v;
  return 0;
}

int bml__env_sysfs_root(const char **out) {
  const char *v = env_value("BANKML_SYSFS_ROOT");
  if (!v) return 0;
  if (v[0] != '/' || strlen(v) >= 512) {
    bml__error(BML_CAT_ENV, "BANKML_SYSFS_ROOT=\"%s\": %s", v,
               v[0] != '/' ? "not an absolute path" : "too long (at most 511 characters)");
    return BML_EENV;
  }
  *out = v;
  return 0;
}

int bml__env_gpu(const char **out) {
  const char *v = env_value("BANKML_GPU");
  if (v) *out = v;
  return 0;
}

int bml__env_gpu_software(bool *out) {
  const char *v = env_value("BANKML_GPU_SOFTWARE");
  if (!v) return 0;
  if (strcmp(v, "1") == 0 || strcmp(v, "0") == 0) {
    *out = v[0] == '1';
    return 0;
  }
  bml__error(BML_CAT_ENV, "BANKML_GPU_SOFTWARE=\"%s\": expected 1 (software devices usable, "
             "for tests and CI) or 0", v);
  return BML_EENV;
}

int bml__env_golden_dir(const char **out) {
  const char *v = env_value("BANKML_GOLDEN_DIR");
  if (v) *out = v;
  return 0;
}

int bml__env_pci_ids(const char **out) {
  const char *v = env_value("BANKML_PCI_IDS");
  if (v) *out = v;
  return 0;
}

/* A decimal from the environment, clamped into [lo, hi] (out-of-range
 * values are clamped, as the variable's documentation says; junk is an
 * error naming it). */
static int env_clamped(const char *name, double lo, double hi, const char *range, double *out) {
  const char *v = env_value(name);
  if (!v) return 0;
  /* past any range, infinities included, is clamped too; junk and NaN are
   * not numbers */
  char *end = NULL;
  double d = isspace((unsigned char)v[0]) ? 0.0 : c_strtod(v, &end);
  if (!end || end == v || *end != '\0' || isnan(d)) {
    bml__error(BML_CAT_ENV, "%s=\"%s\": not a number (expected %s)", name, v, range);
    return BML_EENV;
  }
  *out = d < lo ? lo : d > hi ? hi : d; /* an overflow's ERANGE is clamped like any other */
  return 0;
}

int bml__env_gpu_share(double *out) { return env_clamped("BANKML_GPU_SHARE", 0.0, 0.95, "0 to 0.95", out); }

int bml__env_gpu_limit(double *out) { return env_clamped("BANKML_GPU_LIMIT", 0.05, 1.0, "0.05 to 1", out); }

void bml__env_cache_dirs(const char **bankml, const char **xdg, const char **home) {
  *bankml = env_value("BANKML_CACHE_DIR");
  *xdg = env_value("XDG_CACHE_HOME");
  *home = env_value("HOME");
}

int bml__env_verify(bool *always) {
  const char *v = env_value("BANKML_VERIFY");
  if (!v) return 0;
  if (strcmp(v, "always") == 0 || strcmp(v, "cached") == 0) {
    *always = v[0] == 'a';
    return 0;
  }
  bml__error(BML_CAT_ENV, "BANKML_VERIFY=\"%s\": expected always (verify, check the batches and calibrate at "
             "every open) or cached (a remembered verdict, confirmed by a spot check on the card)", v);
  return BML_EENV;
}

void bml__env_icd(const char **vendors, const char **vendor_path, const char **filenames) {
  *vendors = env_value("OCL_ICD_VENDORS");
  *vendor_path = env_value("OPENCL_VENDOR_PATH");
  *filenames = env_value("OCL_ICD_FILENAMES");
}
