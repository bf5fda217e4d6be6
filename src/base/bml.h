/* bml.h -- internals shared across libbankml-cl's source files (never installed). */
#ifndef BML_INTERNAL_H
#define BML_INTERNAL_H

#include <config.h>

#include "bankml-cl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BML_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define BML_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BML_PRINTF(f, a)
#endif

/* ---- logging (log.c) ---------------------------------------------------- */
/* Categories for BANKML_DEBUG. */
enum {
  BML_CAT_POOL = 1u << 0,
  BML_CAT_CPU = 1u << 1,
  BML_CAT_DEVICE = 1u << 2,
  BML_CAT_PCI = 1u << 3,
  BML_CAT_BUILD = 1u << 4,
  BML_CAT_ORACLE = 1u << 5,
  BML_CAT_WORKER = 1u << 6,
  BML_CAT_ENV = 1u << 7,
};
void bml__log(bml_log_level level, unsigned cat, const char *fmt, ...) BML_PRINTF(3, 4);
void bml__vlog(bml_log_level level, unsigned cat, const char *fmt, va_list ap) BML_PRINTF(3, 0);
bool bml__debug_on(unsigned cat);
/* Reads BANKML_DEBUG now, once a process, so that a bad value is reported
 * when the work starts (the entry points call it), not at the first
 * debug message, which may never come. */
void bml__debug_load(void);
#define bml__error(cat, ...) bml__log(BML_LOG_ERROR, (cat), __VA_ARGS__)
#define bml__warn(cat, ...) bml__log(BML_LOG_WARN, (cat), __VA_ARGS__)
#define bml__info(cat, ...) bml__log(BML_LOG_INFO, (cat), __VA_ARGS__)
#define bml__debug(cat, ...) \
  do { if (bml__debug_on(cat)) bml__log(BML_LOG_DEBUG, (cat), __VA_ARGS__); } while (0)

/* ---- environment (env.c): every getenv of the library lives there -------- */
/* Each returns 0 when the variable is unset or empty (leaving *out at its
 * default), 0 with *out set for a good value, or BML_EENV for a bad one
 * (after logging an error that names the variable and the value). */
int bml__env_threads(int *out);      /* BANKML_THREADS: 1..BML_POOL_MAX_THREADS */
int bml__env_cpu_path(const char **out); /* BANKML_CPU_PATH: a kernel name, validated by cpu.c */
unsigned bml__env_debug(void);       /* BANKML_DEBUG: categories; junk names warn once */
int bml__env_sysfs_root(const char **out); /* BANKML_SYSFS_ROOT: an absolute path (tests) */
int bml__env_gpu(const char **out);  /* BANKML_GPU, unparsed (registry.c parses it) */
int bml__env_gpu_software(bool *out); /* BANKML_GPU_SOFTWARE: 1 or 0 */
int bml__env_golden_dir(const char **out);
int bml__env_pci_ids(const char **out);
int bml__env_gpu_share(double *out);  /* BANKML_GPU_SHARE, clamped to 0..0.95 */
int bml__env_gpu_limit(double *out);  /* BANKML_GPU_LIMIT, clamped to 0.05..1 */
#define BML_MAX_QUEUES 8
int bml__env_gpu_queues(int *out);    /* BANKML_GPU_QUEUES: 1..BML_MAX_QUEUES */
int bml__env_verify(bool *always);    /* BANKML_VERIFY: always (true) or cached (false) */
/* BANKML_CACHE_DIR, XDG_CACHE_HOME, HOME (each NULL when unset): where the
 * tuning cache goes.  Cannot fail. */
void bml__env_cache_dirs(const char **bankml, const char **xdg, const char **home);    /* BANKML_PCI_IDS: the pci.ids libpci names devices from */ /* BANKML_GOLDEN_DIR: ggml's golden vectors */
/* OCL_ICD_VENDORS, OPENCL_VENDOR_PATH, OCL_ICD_FILENAMES (each NULL when
 * unset): where the ICD loader finds the drivers, read again to say which
 * of them cannot be loaded (icd.c).  Cannot fail. */
void bml__env_icd(const char **vendors, const char **vendor_path, const char **filenames);
/* Strict parsers, shared with the command's option parsing. */
int bml__parse_long(const char *s, long lo, long hi, long *out);
int bml__parse_double(const char *s, double lo, double hi, double *out);

/* ---- halves (exact conversions) ------------------------------------------ */
float bml__half_to_float(uint16_t h);          /* exact, every value incl. inf/NaN */
uint16_t bml__float_to_half(float f);          /* round to nearest even, like F16C */
/* All 65536 halves as floats (256 KiB, built once): a SIMD kernel turns a
 * scale into a broadcast with one load.  Cannot fail. */
const float *bml__half_table(void);

/* ---- CPU kernels (cpu.c dispatches) ------------------------------------- */
/* One implementation of the Q1_0 x Q8_0 mat-vec.  prep() turns the
 * activation into whatever the path wants (once per product, shared by every
 * thread); rows() computes a run of rows from it.  Both get n already
 * checked (a positive multiple of 128). */
typedef struct bml__q1_0_kernel {
  const char *name;                      /* "ref", "avx2", "avx512", "neon", "neon-dot" */
  bool (*supported)(void);               /* does this CPU run it? */
  size_t (*prep_size)(size_t n);         /* scratch bytes for prep (64-byte aligned) */
  void (*prep)(const bml_block_q8_0 *a, size_t n, void *scratch);
  void (*rows)(const bml_block_q1_0 *w, size_t rows, size_t n, const bml_block_q8_0 *a,
               const void *scratch, float *out);
} bml__q1_0_kernel;

/* The kernels compiled into this build, best last; NULL-terminated. */
const bml__q1_0_kernel *const *bml__q1_0_kernels(void);
/* The kernel in use: the one forced by bml__q1_0_kernel_force() or
 * BANKML_CPU_PATH, else the best this CPU supports.  Never NULL. */
const bml__q1_0_kernel *bml__q1_0_kernel_active(void);
/* Forces a kernel by name for tests and benchmarks (NULL: back to automatic).
 * Returns 0, BML_EINVAL (no such kernel in this build) or BML_ENOTSUP (this
 * CPU cannot run it).  Not thread-safe against running products. */
int bml__q1_0_kernel_force(const char *name);

extern const bml__q1_0_kernel bml__q1_0_ref;
#ifdef BML_HAVE_AVX2
extern const bml__q1_0_kernel bml__q1_0_avx2;
#endif
#ifdef BML_HAVE_AVX512
extern const bml__q1_0_kernel bml__q1_0_avx512;
#endif
#ifdef BML_HAVE_NEON
extern const bml__q1_0_kernel bml__q1_0_neon;     /* AArch64 Advanced SIMD */
extern const bml__q1_0_kernel bml__q1_0_neon_dot; /* with ARMv8.2's dot product (SDOT) */
#endif

/* The activation as the SIMD paths read it: n quants, their
 * 8-bit negations (-(-128) = -128), then the n/32 scales as floats
 * (bml__q1_0_act_split_size(n) bytes).  Cannot fail. */
size_t bml__q1_0_act_split_size(size_t n);
void bml__q1_0_act_split(const bml_block_q8_0 *a, size_t n, void *dst);

/* The portable reference dot product of one row (nb = n/128 blocks). */
float bml__q1_0_dot_ref(const bml_block_q1_0 *w, const bml_block_q8_0 *a, size_t nb);

/* Checks the arguments every mat-vec entry point shares: BML_EINVAL for a
 * NULL pointer or results that overlap the weights or the activation,
 * BML_ESHAPE for n not a positive multiple of 128 or rows whose weights or
 * results could not be in memory. */
int bml__q1_0_check(const void *w, size_t rows, size_t n, const void *a, const void *out);
/* The same without the results (NULL pointers and shape only). */
int bml__q1_0_check_shape(const void *w, size_t rows, size_t n, const void *a);

/* Runs kernel k over rows [0, rows) on the calling thread, with its own scratch. */
int bml__q1_0_run(const bml__q1_0_kernel *k, const bml_block_q1_0 *w, size_t rows, size_t n,
                  const bml_block_q8_0 *a, float *out);

/* Runs fn(ctx, tid, nthreads) once for each tid of 0 .. nthreads-1 (the
 * pool's size) and returns when all are done: tid 0 on the caller, each
 * other on whichever thread takes it first (a helper thread, or the caller
 * after its own when the helpers are late: never two at once on one
 * thread, but not always on distinct ones).  While another thread drives
 * the pool, fn(ctx, 0, 1) on the caller alone.  For work other than
 * products, such as copying a batch's results out: fn must do all of it
 * for any nthreads, and no tid may wait for another. */
void bml__pool_run(bml_pool *p, void (*fn)(void *ctx, int tid, int nthreads), void *ctx);
/* The pool's wake-up cost in seconds: the median of the last 15 delays
 * from the start of a job to the arrival of a helper thread that was
 * asleep in the kernel when it started (a job of a pool whose helpers
 * spin or yield has none); 0 before any, and for a pool of one thread.
 * While helpers are arriving, the caller computes the rows alone. */
double bml__pool_wake_seconds(const bml_pool *p);
/* The helper threads asleep in the kernel now (after about 1 ms idle): a
 * job started now waits about bml__pool_wake_seconds for them. */
int bml__pool_asleep(const bml_pool *p);
/* For tests: while held, the helper threads join no job, as if
 * descheduled (each waits once it has noticed a job); the caller computes
 * every row.  Not for two tests at once on one pool. */
void bml__pool_hold_helpers(bml_pool *p, bool hold);
/* ---- fork() (fork.c) ------------------------------------------------------- */
/* An open object's hook for a child of fork(): fn(ctx) runs in the child
 * before anything else there (single-threaded, in a pthread_atfork
 * handler: no locks, no logging). */
typedef struct bml__fork_watch {
  struct bml__fork_watch *prev, *next;
  void (*in_child)(void *ctx);
  void *ctx;
} bml__fork_watch;
void bml__fork_watch_add(bml__fork_watch *w, void (*fn)(void *ctx), void *ctx);
void bml__fork_watch_remove(bml__fork_watch *w); /* a watch never added: nothing */
/* How many times this process forked since the handlers were set up (by a
 * first watch or OpenCL call; a child sees its parent's count plus one). */
unsigned bml__forks(void);
/* Records the process's first OpenCL call; bml__opencl_forked: OpenCL was
 * used before the last fork, so this process (a child) must not use it. */
void bml__opencl_used(void);
bool bml__opencl_forked(void);
void bml__log_in_child(void); /* log.c: its lock made anew in a child */

/* Jobs the pool has run on more than one thread (for tests). */
unsigned long bml__pool_runs(bml_pool *p);
/* Rows of one product for bml__pool_mat_vec_many: rows [0, rows) of w
 * against a, into out. */
typedef struct {
  const bml_block_q1_0 *w;
  size_t rows, n;
  const bml_block_q8_0 *a;
  float *out;
} bml__cpu_piece;
/* The calling thread's tick of bml__pool_mat_vec_many comes at least every
 * this many weights that it computes. */
#define BML__POOL_TICK_WEIGHTS (1u << 18)
/* The pieces' rows in one run of the pool, the threads taking chunks of
 * (piece, rows) in order from one counter (the same bits as a product
 * each: a row is always one thread's); tick(tick_ctx), when given, runs on
 * the calling thread only: once first, then before any step of its rows
 * that would take it past BML__POOL_TICK_WEIGHTS weights since the last
 * (a step: at most that many weights, or one row).  While another thread
 * drives the pool, or without the memory for every thread's scratch, the
 * calling thread computes them alone (the same bits: a submission never
 * stops half done with BML_EBUSY), ticking before each step, and says so
 * in *alone (may be NULL): its time is then no measure of the pool's.  0,
 * the error bml_q1_0_mat_vec gives a piece's arguments (before any is
 * computed) or BML_ENOMEM. */
int bml__pool_mat_vec_many(bml_pool *p, const bml__cpu_piece *pc, size_t count, void (*tick)(void *ctx),
                           void *tick_ctx, bool *alone);

/* Aligned scratch (64 bytes).  Free with bml__aligned_free (NULL-safe). */
void *bml__aligned_alloc(size_t size);
void bml__aligned_free(void *p);

/* j as JSON text (json_dumpb's flags) in memory of malloc's, which the
 * caller free()s whatever allocator jansson was given; NULL when out of
 * memory (report.c). */
struct json_t;
char *bml__json_text(const struct json_t *j, size_t flags);

/* ---- deterministic data (gen.c) for the oracle and the tests ----------- */
uint64_t bml__xorshift64(uint64_t *state); /* x ^= x<<13; x ^= x>>7; x ^= x<<17 */
/* rows x n random weights: random-sign scales in [2^-10, 4) with the special
 * scales +0, -0, 0x0001 and 0x7bff among them; or, layer-shaped, 0.01..0.05. */
void bml__gen_q1_0(uint64_t *state, bml_block_q1_0 *w, size_t rows, size_t n, bool layer);
/* n activations: random quants with all -128 and all +127 blocks among them;
 * or, layer-shaped, gaussians scaled per block by 2^U(-8,8), quantized.
 * Returns 0 or BML_ENOMEM. */
int bml__gen_q8_0(uint64_t *state, bml_block_q8_0 *a, size_t n, bool layer);

/* ---- notes: the non-fatal findings a listing carries (util.c) ------------ */
typedef struct {
  char **items;
  size_t len, cap;
} bml__notes;
/* Appends a formatted note, unless the same note is there already; on
 * memory exhaustion the note is dropped.
 * Cannot fail. */
void bml__notes_add(bml__notes *n, const char *fmt, ...) BML_PRINTF(2, 3);
void bml__notes_free(bml__notes *n); /* NULL-safe; leaves n empty */

/* MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read. */
uint64_t bml__mem_available(void);

/* A uuid as cl_khr_device_uuid's users write it, 8-4-4-4-12 hex digits. */
void bml__uuid_format(const uint8_t uuid[16], char buf[37]);

/* Monotonic clock in seconds. */
double bml__now(void);

/* One step of a spin loop: the CPU's pause hint, where it has one. */
static inline void bml__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

#endif /* BML_INTERNAL_H */
