/* env.h -- the environment variables the library reads, each parsed strictly (env.c). */
#ifndef BML_ENV_H
#define BML_ENV_H

#include "base/bml.h"

/* Every getenv of the library lives in env.c, but BANKML_DEBUG's (log.c). */
/* Each returns 0 when the variable is unset or empty (leaving *out at its
 * default), 0 with *out set for a good value, or BML_EENV for a bad one
 * (after logging an error that names the variable and the value). */
int bml__env_threads(int *out);      /* BANKML_THREADS: 1..BML_POOL_MAX_THREADS */
int bml__env_pool_wait_ms(unsigned *out); /* BANKML_POOL_WAIT_MS: 0..BML_POOL_MAX_WAIT_MS */
int bml__env_cpu_path(const char **out); /* BANKML_CPU_PATH: a kernel name, validated by cpu.c */
int bml__env_sysfs_root(const char **out); /* BANKML_SYSFS_ROOT: an absolute path (tests) */
int bml__env_gpu(const char **out);  /* BANKML_GPU, unparsed (registry.c parses it) */
int bml__env_gpu_software(bool *out); /* BANKML_GPU_SOFTWARE: 1 or 0 */
int bml__env_golden_dir(const char **out); /* BANKML_GOLDEN_DIR: ggml's golden vectors */
int bml__env_pci_ids(const char **out);    /* BANKML_PCI_IDS: the pci.ids libpci names devices from */
int bml__env_gpu_share(double *out);  /* BANKML_GPU_SHARE, clamped to 0..0.95 */
int bml__env_gpu_limit(double *out);  /* BANKML_GPU_LIMIT, clamped to 0.05..1 */
#define BML_MAX_QUEUES 8
int bml__env_gpu_queues(int *out);    /* BANKML_GPU_QUEUES: 1..BML_MAX_QUEUES */
int bml__env_verify(bool *always);    /* BANKML_VERIFY: always (true) or cached (false) */
/* BANKML_CACHE_DIR, XDG_CACHE_HOME, HOME (each NULL when unset): where the
 * tuning cache goes.  Cannot fail. */
void bml__env_cache_dirs(const char **bankml, const char **xdg, const char **home);
/* OCL_ICD_VENDORS, OPENCL_VENDOR_PATH, OCL_ICD_FILENAMES (each NULL when
 * unset): where the ICD loader finds the drivers, read again to say which
 * of them cannot be loaded (icd.c).  Cannot fail. */
void bml__env_icd(const char **vendors, const char **vendor_path, const char **filenames);
/* Strict parsers, shared with the command's option parsing. */
int bml__parse_long(const char *s, long lo, long hi, long *out);
int bml__parse_double(const char *s, double lo, double hi, double *out);

#endif
