/* cpu.c -- picks the CPU kernel at run time (the best path this CPU runs, or one forced for tests) and runs the public products on it. */
#include "base/bml.h"
#include "base/hooks.h"
#include "base/env.h"
#include "base/log.h"
#include "cpu/q1_0.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static const bml__q1_0_kernel *const kernels[] = {
    &bml__q1_0_ref,
#ifdef BML_HAVE_AVX2
    &bml__q1_0_avx2,
#endif
#ifdef BML_HAVE_AVX512
    &bml__q1_0_avx512,
#endif
#ifdef BML_HAVE_NEON
    &bml__q1_0_neon,
    &bml__q1_0_neon_dot,
#endif
    NULL,
};

static const bml__q1_0_kernel *forced;
static const bml__q1_0_kernel *automatic;
static pthread_once_t auto_once = PTHREAD_ONCE_INIT;

const bml__q1_0_kernel *const *bml__q1_0_kernels(void) { return kernels; }

static const bml__q1_0_kernel *find(const char *name) {
  for (size_t i = 0; kernels[i]; i++)
    if (strcmp(kernels[i]->name, name) == 0) return kernels[i];
  return NULL;
}

/* The best supported kernel, unless BANKML_CPU_PATH names another.  A bad
 * BANKML_CPU_PATH is logged and ignored: a product must not fail for it. */
static void choose_automatic(void) {
  for (size_t i = 0; kernels[i]; i++)
    if (kernels[i]->supported()) automatic = kernels[i];
  const char *want = NULL;
  bml__env_cpu_path(&want);
  if (want) {
    const bml__q1_0_kernel *k = find(want);
    if (!k)
      bml__warn(BML_CAT_CPU, "BANKML_CPU_PATH=\"%s\": no such CPU path in this build; using %s",
                 want, automatic->name);
    else if (!k->supported())
      bml__warn(BML_CAT_CPU, "BANKML_CPU_PATH=\"%s\": this CPU cannot run it; using %s", want,
                 automatic->name);
    else
      automatic = k;
  }
  bml__debug(BML_CAT_CPU, "CPU path: %s", automatic->name);
}

const bml__q1_0_kernel *bml__q1_0_kernel_active(void) {
  if (forced) return forced;
  pthread_once(&auto_once, choose_automatic);
  return automatic;
}

int bml__q1_0_kernel_force(const char *name) {
  if (!name) {
    forced = NULL;
    return 0;
  }
  const bml__q1_0_kernel *k = find(name);
  if (!k) return BML_EINVAL;
  if (!k->supported()) return BML_ENOTSUP;
  forced = k;
  return 0;
}

const char *bml_cpu_path(void) { return bml__q1_0_kernel_active()->name; }

/* The public products, on the kernel in use. */
float bml_q1_0_dot(const bml_block_q1_0 *w, const bml_block_q8_0 *a, size_t n) {
  float out = NAN; /* always written on success */
  if (bml__q1_0_check(w, 1, n, a, &out) != 0) return NAN;
  if (bml__q1_0_run(bml__q1_0_kernel_active(), w, 1, n, a, &out) != 0) return NAN;
  return out;
}

int bml_q1_0_mat_vec(const bml_block_q1_0 *w, size_t rows, size_t n, const bml_block_q8_0 *a,
                     float *out) {
  int rc = bml__q1_0_check(w, rows, n, a, out);
  if (rc != 0 || rows == 0) return rc;
  return bml__q1_0_run(bml__q1_0_kernel_active(), w, rows, n, a, out);
}
