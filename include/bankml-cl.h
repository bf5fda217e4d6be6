/* bankml-cl.h -- the public interface of libbankml-cl: bit-exact 1-bit (Q1_0) matrix products. */
#ifndef BANKML_CL_H
#define BANKML_CL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(BML_BUILDING_LIBRARY)
#define BML_EXTERN __declspec(dllexport)
#elif defined(__GNUC__) && __GNUC__ >= 4
#define BML_EXTERN __attribute__((visibility("default")))
#else
#define BML_EXTERN
#endif

/* ------------------------------------------------------------------------
 * Version.  The header's version; bml_version_string() is the library's
 * (doc/API.md: what stays stable between versions, and when the library's
 * soname changes).
 * ---------------------------------------------------------------------- */
#define BML_VERSION_MAJOR 0
#define BML_VERSION_MINOR 1
#define BML_VERSION_PATCH 0
/* One number, for #if: 0.1.0 is 100, 1.2.3 is 10203. */
#define BML_VERSION_NUMBER (BML_VERSION_MAJOR * 10000 + BML_VERSION_MINOR * 100 + BML_VERSION_PATCH)

/* ------------------------------------------------------------------------
 * Option structs (bml_discover_options, bml_verify_options,
 * bml_worker_options) begin with their size: their _init sets .size (the
 * struct this header declares) and every other field to its default; then
 * set the fields you mean.  A newer library takes the defaults for fields
 * the caller's struct lacks; an older one refuses (BML_ENOTSUP) members
 * beyond its own that are not zero.  A .size below the first version's is
 * BML_EINVAL.
 * ---------------------------------------------------------------------- */

/* ------------------------------------------------------------------------
 * Errors.  Every fallible call returns 0 or a negative code.  OpenCL's own
 * cl_int codes (-1 .. -72, and the Khronos extensions' from -1000 to -1142)
 * pass through unchanged; bankml-cl's start at -4000.  bml_strerror() and
 * bml_err_name() know both (those of Windows' Direct3D and DX9 sharing
 * extensions are "unknown error").
 * ---------------------------------------------------------------------- */
#define BML_ERRNO_MAP(XX)                                                       \
  XX(EINVAL,   -4000, "invalid argument")                                      \
  XX(ESHAPE,   -4001, "bad shape: not whole blocks, or too large for memory")  \
  XX(ENOMEM,   -4002, "out of memory")                                         \
  XX(EENV,     -4003, "bad value in an environment variable")                  \
  XX(ETHREAD,  -4004, "cannot create a thread")                                \
  XX(EIO,      -4005, "input/output error")                                    \
  XX(EFORMAT,  -4006, "malformed input")                                       \
  XX(ENODEV,   -4007, "no usable OpenCL device")                               \
  XX(EBUILD,   -4008, "OpenCL program build failed")                           \
  XX(EVERIFY,  -4009, "device did not reproduce the CPU kernel's bits")        \
  XX(EBUSY,    -4010, "object is in use by another thread")                    \
  XX(ESTATE,   -4011, "call out of order")                                     \
  XX(ENOTSUP,  -4012, "not supported here")                                    \
  XX(ERETIRED, -4013, "device retired after repeated errors")                  \
  XX(ERANGE,   -4014, "value out of range")

typedef enum {
#define BML_XX_(name, code, msg) BML_##name = (code),
  BML_ERRNO_MAP(BML_XX_)
#undef BML_XX_
  BML_ERR_FIRST_ = -4000
} bml_errno;

/* A message for err (0, a bankml-cl code or an OpenCL cl_int).  Never NULL;
 * the string is static.  Cannot fail. */
BML_EXTERN const char *bml_strerror(int err);
/* The symbolic name of err ("BML_ESHAPE", "CL_DEVICE_NOT_FOUND"), or
 * "unknown error" for a code no one defines.  Static string.  Cannot fail. */
BML_EXTERN const char *bml_err_name(int err);

/* The library's version, "MAJOR.MINOR.PATCH".  Cannot fail. */
BML_EXTERN const char *bml_version_string(void);

/* ------------------------------------------------------------------------
 * Blocks, in ggml's layout byte for byte (half scales stored as IEEE binary16).
 * Like any C object of these types, an array of blocks must be aligned for
 * them (2 bytes, for the uint16_t scale): a block at an odd address is
 * undefined behaviour, as in ggml.
 * ---------------------------------------------------------------------- */
#define BML_Q1_0_BLOCK 128 /* weights per Q1_0 block */
#define BML_Q8_0_BLOCK 32  /* activations per Q8_0 block */

/* 128 weights: element j is +d when bit (j % 8) of qs[j / 8] is set, else -d. */
typedef struct {
  uint16_t d;
  uint8_t qs[16];
} bml_block_q1_0;

/* 32 activations: element j is d * qs[j]. */
typedef struct {
  uint16_t d;
  int8_t qs[32];
} bml_block_q8_0;

#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
_Static_assert(sizeof(bml_block_q1_0) == 18, "bml_block_q1_0 must be 18 bytes (ggml layout)");
_Static_assert(sizeof(bml_block_q8_0) == 34, "bml_block_q8_0 must be 34 bytes (ggml layout)");
#elif defined(__cplusplus) && __cplusplus >= 201103L
static_assert(sizeof(bml_block_q1_0) == 18, "bml_block_q1_0 must be 18 bytes (ggml layout)");
static_assert(sizeof(bml_block_q8_0) == 34, "bml_block_q8_0 must be 34 bytes (ggml layout)");
#endif

/* ------------------------------------------------------------------------
 * CPU kernels.  The bits are ggml's x86 AVX2 kernel's on every machine and
 * every path (the arithmetic contract, doc/ARITHMETIC.md).  They and the
 * quantizer keep no state: any number of threads may call them at once.
 * ---------------------------------------------------------------------- */

/* The dot product of one row of n weights (n/128 blocks) with n activations
 * (n/32 blocks).  n must be a multiple of 128 and the pointers valid; this
 * call cannot report errors: on a NULL pointer or bad n it returns NaN
 * (which a NaN or infinite scale can also give: bml_q1_0_mat_vec with one
 * row tells them apart). */
BML_EXTERN float bml_q1_0_dot(const bml_block_q1_0 *w, const bml_block_q8_0 *a, size_t n);

/* out[r] = dot(row r of w, a) for r < rows, on the calling thread.  w is
 * rows * n/128 blocks, row-major; a is n/32 blocks; out must not overlap w
 * or a.  Returns 0, BML_EINVAL (a NULL pointer, or out overlapping w or a),
 * BML_ESHAPE (n not a positive multiple of 128, or rows or an n whose
 * weights, activation or results could not be in memory) or BML_ENOMEM
 * (no room for the activation's prepared copy, about 2n bytes, where it
 * does not fit in 16 KiB of stack); on error out is not written. */
BML_EXTERN int bml_q1_0_mat_vec(const bml_block_q1_0 *w, size_t rows, size_t n,
                                const bml_block_q8_0 *a, float *out);

/* Quantizes n floats (a positive multiple of 32) into n/32 Q8_0 blocks, bit
 * for bit as ggml's x86 AVX2 quantize_row_q8_0.  out must not overlap x.
 * Returns 0, BML_EINVAL (a NULL pointer, or out overlapping x) or
 * BML_ESHAPE; on error out is not written. */
BML_EXTERN int bml_q8_0_quantize(const float *x, size_t n, bml_block_q8_0 *out);

/* The CPU path the kernels above use: "ref" (portable C), "avx2" or
 * "avx512", chosen at run time for this CPU (BANKML_CPU_PATH forces one the
 * CPU can run).  Static string.  Cannot fail. */
BML_EXTERN const char *bml_cpu_path(void);

/* ------------------------------------------------------------------------
 * The CPU thread pool: persistent workers, each product split into
 * contiguous row chunks.  The results are the single-thread bits for every
 * thread count.  A pool is driven by one thread at a time: a product on it,
 * or a call of a worker opened on it (bml_worker_*), which uses it.
 * ---------------------------------------------------------------------- */
typedef struct bml_pool bml_pool;

#define BML_POOL_MAX_THREADS 1024 /* the most threads a pool takes */

/* Opens a pool of `threads` threads (the caller counts as one), at most
 * BML_POOL_MAX_THREADS (more is BML_EINVAL).  threads <= 0 takes
 * BANKML_THREADS when set (1 to BML_POOL_MAX_THREADS; anything else is
 * BML_EENV, and a message naming it is logged), else the CPUs the process
 * may run on (its affinity: taskset, a container's cpuset; at most
 * BML_POOL_MAX_THREADS).  In a child of fork() a pool opened before the
 * fork is a pool of one thread (bml_pool_threads says 1), idle, with the
 * same bits.  BANKML_POOL_WAIT_MS, where set, is its helpers' wait
 * (bml_pool_set_wait; 0 to BML_POOL_MAX_WAIT_MS, anything else BML_EENV).
 * Returns 0 and *out, or BML_EINVAL, BML_EENV, BML_ENOMEM, BML_ETHREAD.
 * Close with bml_pool_close(). */
BML_EXTERN int bml_pool_open(int threads, bml_pool **out);

/* The number of threads of p (the caller included).  Cannot fail. */
BML_EXTERN int bml_pool_threads(const bml_pool *p);

/* bml_q1_0_mat_vec on the pool.  Returns what bml_q1_0_mat_vec returns, or
 * BML_EBUSY when another thread is driving p. */
BML_EXTERN int bml_pool_q1_0_mat_vec(bml_pool *p, const bml_block_q1_0 *w, size_t rows,
                                     size_t n, const bml_block_q8_0 *a, float *out);

/* How long p's helper threads stay awake after a job before they sleep in
 * the kernel: ms milliseconds, 0 to BML_POOL_MAX_WAIT_MS (more, or a NULL
 * p, is BML_EINVAL).  Unset (and without BANKML_POOL_WAIT_MS when the pool
 * opened), the wait follows the caller's cadence: 1 ms, but where each of
 * the last two to four gaps between products was at most 250 ms, 1.5 times the
 * longest of them, so that a decode's products after its gaps find the
 * helpers awake; one gap past 250 ms (the products stopped) takes it back
 * to 1 ms.  Once set, the wait stays as set.  Awake, a helper yields its
 * CPU to any other thread that wants it but takes a CPU that nothing else
 * wants: up to a whole CPU per helper for the wait after each job.  A
 * product that finds the helpers awake starts on every thread at once; one
 * that finds them asleep waits for the kernel to wake them: tens of
 * microseconds on a machine's own CPUs, 140 us and more on a virtual
 * machine whose idle CPUs are halted (doc/PERFORMANCE.md), so that there,
 * after an idle gap, a product of a few hundred microseconds runs on the
 * calling thread alone.  An engine that wants no CPU spent between its
 * products sets a short wait (0 or 1); one whose gaps are irregular or
 * longer sets the wait above them.  Takes effect at once, for helpers
 * already waiting too.  The bits do not depend on it. */
#define BML_POOL_MAX_WAIT_MS 10000
BML_EXTERN int bml_pool_set_wait(bml_pool *p, unsigned ms);

/* Stops and frees the pool.  NULL-safe. */
BML_EXTERN void bml_pool_close(bml_pool *p);

/* ------------------------------------------------------------------------
 * Devices: every OpenCL device the ICD loader finds, cross-checked against
 * what the kernel says (libpci, sysfs), classified, ordered (by kind:
 * discrete, integrated, accelerator, other, remote, cpu; then device-local
 * memory, largest first) and selected.
 * ---------------------------------------------------------------------- */
typedef enum {
  BML_KIND_DISCRETE = 0,   /* a GPU with its own memory */
  BML_KIND_INTEGRATED = 1, /* a GPU sharing host memory */
  BML_KIND_CPU = 2,        /* a CPU device, or any software device (PoCL, llvmpipe, ...) */
  BML_KIND_ACCELERATOR = 3,
  BML_KIND_REMOTE = 4,     /* reserved for a device on another machine: not produced, since
                              PoCL-Remote gives such a device its own machine's identity */
  BML_KIND_OTHER = 5
} bml_device_kind;

/* "discrete", "integrated", "cpu", "accelerator", "remote", "other".  Static. */
BML_EXTERN const char *bml_device_kind_name(bml_device_kind kind);

/* One device.  Strings belong to the list and live until bml_devices_free. */
typedef struct {
  size_t index;              /* its position in the listing (BANKML_GPU=0,2 uses these) */
  bml_device_kind kind;
  const char *name;          /* CL_DEVICE_NAME */
  const char *vendor;        /* CL_DEVICE_VENDOR */
  const char *platform;      /* CL_PLATFORM_NAME */
  int usable;                /* 1: bankml-cl may compute on it once it passes verification */
  const char *why_not;       /* why it is not usable; NULL when usable */
  int selected;              /* 1: chosen (all usable devices, or BANKML_GPU's choice) */
  const char *pci_address;   /* "0000:03:00.0", or NULL when it has none */
  const char *matched_by;    /* "pci-bus-info", "vendor-id", "drm" or "none" */
  uint64_t global_mem_bytes; /* CL_DEVICE_GLOBAL_MEM_SIZE */
  uint64_t max_alloc_bytes;  /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
  int host_unified_memory;   /* CL_DEVICE_HOST_UNIFIED_MEMORY */
  int verified;              /* 1: passed bml_devices_verify, 0: failed it, -1: not verified */
  void *cl_platform;         /* its cl_platform_id, for an engine that shares the device */
  void *cl_device;           /* its cl_device_id (a root device: not reference-counted, valid
                                while the ICD loader is loaded, after bml_devices_free too) */
  const char *uuid;          /* cl_khr_device_uuid's, "8-4-4-4-12" hex digits; NULL: not said */
} bml_device;

typedef struct bml_devices bml_devices;

/* Settings of a discovery.  bml_discover_options_init sets every field to
 * "from the environment". */
typedef struct {
  size_t size;            /* sizeof(bml_discover_options): set by bml_discover_options_init */
  const char *sysfs_root; /* NULL: $BANKML_SYSFS_ROOT, else "/sys" */
  const char *pci_ids;    /* NULL: $BANKML_PCI_IDS, else the pci.ids configure found, else
                             libpci's default */
  const char *gpu;        /* NULL: $BANKML_GPU; "off"/"none"/"cpu", "0,2", "pci:0000:03:00.0",
                             "uuid:" and a device's uuid */
  int software;           /* -1: $BANKML_GPU_SOFTWARE; 0: refuse software devices; 1: allow them */
} bml_discover_options;

/* Fills o with the defaults above.  Cannot fail. */
BML_EXTERN void bml_discover_options_init(bml_discover_options *o);

/* Finds, describes, classifies, orders and selects every OpenCL device.
 * o may be NULL (the defaults; "Option structs": its size).  Never fails
 * because a driver misbehaves: a platform or query that fails becomes a
 * note.  Returns 0 and *out, or
 * BML_EENV (a bad BANKML_GPU, BANKML_GPU_SOFTWARE or BANKML_SYSFS_ROOT; a
 * message names it), BML_EINVAL (also a bad gpu or software option, named
 * in the message), BML_ENOMEM.  Free with bml_devices_free(). */
BML_EXTERN int bml_devices_discover(const bml_discover_options *o, bml_devices **out);

/* The number of devices listed.  Cannot fail (0 for NULL). */
BML_EXTERN size_t bml_devices_count(const bml_devices *d);

/* Device i (0 <= i < count), or NULL.  Owned by d.  Several threads may
 * read one listing at once (count, get, notes, report); bml_devices_verify
 * changes it, so it wants the listing to itself. */
BML_EXTERN const bml_device *bml_devices_get(const bml_devices *d, size_t i);

/* The notes of the listing (failed platforms and queries, disagreements
 * between OpenCL and the kernel, duplicates).  Owned by d. */
BML_EXTERN size_t bml_devices_note_count(const bml_devices *d);
BML_EXTERN const char *bml_devices_note(const bml_devices *d, size_t i);

/* The whole listing as one JSON object (doc/DEVICES.md has the schema),
 * indented when pretty is nonzero.  Returns 0 and *json (free() it), or
 * BML_EINVAL, BML_ENOMEM. */
BML_EXTERN int bml_devices_report_json(const bml_devices *d, int pretty, char **json);

/* Frees the listing.  NULL-safe. */
BML_EXTERN void bml_devices_free(bml_devices *d);

/* ------------------------------------------------------------------------
 * Verification: a card computes only after it has reproduced, on the card,
 * the CPU kernel's bits on every row of every check (doc/ORACLE.md).
 * ---------------------------------------------------------------------- */

/* One check of a verification. */
typedef struct {
  size_t device;           /* report index of the device */
  const char *device_name;
  const char *check;       /* "open", "build", "fma probe", "golden", or a kernel's name:
                              "q1_0_mat_vec", "q1_0_mat_vec8", "q1_0_mat_vec_l",
                              "q1_0_mat_vec_lr", "q1_0_mat_vec_lb", "q1_0_mat_vec_lrb" */
  const char *fma;         /* "native" or "emulated": which fma the build uses ("native and
                              emulated": the probe kernel, which runs both, could not run) */
  size_t rows, n;          /* the shape (0 for the probe and builds) */
  const char *regime;      /* "random", "layer", "infinite", "golden", "probe" (or "") */
  size_t exact, total;     /* rows (probe: cases) equal to the CPU's bits, of how many */
  int ok;
  long first_bad;          /* the first row or case that differs, or -1 */
  uint32_t cpu_bits, card_bits; /* its bits on the CPU and on the card */
  double ms;               /* the card's wall-clock time for the check (batched: the batch's) */
  const char *detail;      /* why it failed (an OpenCL error, a build log), or NULL; an ok
                              "build" line: why that fma's build was left out (its compiler
                              refused it; the card is checked with the other fma alone) */
  int batched;             /* 1: checked in one launch with the other batched kernels */
} bml_verify_line;

/* line and its strings are valid during the call only. */
typedef void (*bml_verify_fn)(void *ctx, const bml_verify_line *line);

typedef struct {
  size_t size;             /* sizeof(bml_verify_options): set by bml_verify_options_init */
  bml_verify_fn on_line;   /* called for every check as it completes (may be NULL) */
  void *ctx;
  const char *golden_dir;  /* ggml's golden vectors: NULL = $BANKML_GOLDEN_DIR, else the
                              installed copy; "" = none.  A named directory (here or
                              in the variable) without them fails the verification */
  int quick;               /* 1: the small shapes only (the full list is the default) */
} bml_verify_options;

/* Fills o with the defaults.  Cannot fail. */
BML_EXTERN void bml_verify_options_init(bml_verify_options *o);

/* Verifies device i of d on the card, always in full (the worker's
 * remembered verdicts are its own): the fma probe, then every kernel (six,
 * each with the native and the emulated fma) on random data with -128
 * quants and special scales, on layer-shaped data, on shapes from 64x128
 * to 12288x4096, and on every case of ggml's golden file (a line says when
 * no copy is installed; a named or installed one that cannot be read
 * fails); every row is compared with the CPU kernel, bit for bit (NaN
 * equals NaN).  Sets d's device i verified to 1 or 0 (one not usable keeps
 * -1).  Returns 0 (verified), BML_EVERIFY (a check failed or could not
 * run: the card must not be used), BML_ENODEV (not usable), another error
 * (the card could not be set up: not verified either), or BML_EINVAL or
 * BML_ENOTSUP for the options' size. */
BML_EXTERN int bml_devices_verify(bml_devices *d, size_t i, const bml_verify_options *o);

/* ------------------------------------------------------------------------
 * The worker: a verified card takes a calibrated share of each product's
 * rows while the CPU pool computes the rest (doc/WORKER.md).  The results
 * are the CPU kernel's bits on every row; a row whose result is NaN is NaN
 * on both, but its sign and payload may differ (the card and the CPU meet
 * NaN and infinite scales in their own order; doc/ARITHMETIC.md).
 * A product's results must not overlap its weights or its activation
 * (BML_EINVAL); in a batch they must not overlap another product's
 * weights, activation or results either (that is not checked: such
 * results would depend on the order the card and the CPU took).
 *
 * One thread drives a worker at a time: begin, the caller's CPU rows,
 * finish.  A call from a second thread while one is running returns
 * BML_EBUSY.  While a bml_worker_mat_vec computes its CPU rows, the calls
 * that would start or end a product (begin, finish, mat_vec, a batch,
 * set_share) return BML_EBUSY too, and bml_worker_status_json,
 * bml_worker_set_limit and bml_worker_release run (the product keeps its
 * matrices and results).  A begin while a product begun by
 * bml_worker_begin is in flight returns BML_ESTATE, rather than corrupting
 * anything.
 *
 * In a child of fork(), a worker opened before the fork leaves the card to
 * the parent: its products run on the CPU, and release and close free only
 * its own memory; a child of a process that used OpenCL opens no worker
 * with a card (doc/WORKER.md: a product in flight at the fork, and another
 * thread inside a call then, which leaves the child's copy BML_EBUSY).
 * ---------------------------------------------------------------------- */
typedef struct bml_worker bml_worker;

/* How a worker's open trusts a card's verdict. */
typedef enum {
  BML_VERIFY_DEFAULT = 0, /* $BANKML_VERIFY ("always" or "cached"), else cached */
  BML_VERIFY_CACHED = 1,  /* a verdict remembered for this very card, driver, bankml-cl version,
                             kernel source and build options is used, once a spot check on the
                             card (milliseconds) confirms it; else the whole verification */
  BML_VERIFY_ALWAYS = 2   /* the whole verification, the batch checks and the calibration at
                             every open (what is found is still remembered) */
} bml_verify_policy;

/* Settings of a worker's open.  bml_worker_options_init sets .size and
 * every field to "unset": an unset field takes its environment variable,
 * else the default; a field the caller sets wins over the variable. */
typedef struct {
  size_t size;          /* sizeof(bml_worker_options): set by bml_worker_options_init */
  const char *device;   /* the card: NULL: $BANKML_GPU's first selected device; else as
                           bml_discover_options.gpu: "2" (an index of bml_devices_discover's
                           listing), "pci:0000:03:00.0", "uuid:<its uuid>" */
  int software;         /* -1: $BANKML_GPU_SOFTWARE; 1: software devices may be used (tests) */
  double share;         /* < 0: $BANKML_GPU_SHARE, else calibrated; 0..1: the card's share of
                           every product's rows, fixed (as bml_worker_set_share) */
  double limit;         /* < 0: $BANKML_GPU_LIMIT, else 0.8; 0.05..1 (as bml_worker_set_limit) */
  int queues;           /* 0: $BANKML_GPU_QUEUES, else the card's default; 1..8 */
  bml_verify_policy verify; /* BML_VERIFY_DEFAULT: $BANKML_VERIFY, else BML_VERIFY_CACHED */
  void *cl_context;     /* NULL: the worker creates its own context; else the engine's cl_context
                           (retained while the worker lives): the worker creates none, its card
                           is the context's device (device, when set, chooses among several) */
  void *cl_queue;       /* NULL: the worker's own queue (on cl_context when given); else the
                           engine's in-order cl_command_queue (retained): the worker's main queue,
                           so its copies and launches are ordered with the engine's own; its
                           context is cl_context's (or becomes it, when cl_context is NULL) */
} bml_worker_options;

/* Fills o with the defaults above.  Cannot fail. */
BML_EXTERN void bml_worker_options_init(bml_worker_options *o);

/* Opens a worker on a card after its verification and a calibration of
 * the share: one 4096x4096 product on the pool and on the card, best of
 * three each, share = card rate / (card rate + CPU rate), where each shape
 * (of single products) and each kind of batch starts, then learns its own
 * from the card's and the CPU's times.  A fixed share (o->share, else
 * BANKML_GPU_SHARE, clamped to 0..0.95) replaces it.
 *
 * The verification: the fma probe, the oracle (doc/ORACLE.md) and the
 * worker's own batches on the card.  What it finds, and the calibration
 * (for the same threads and CPU path), are remembered (BANKML_CACHE_DIR;
 * bml_verify_policy; doc/WORKER.md): a spot check is every kernel on a
 * small random product, every row compared with the CPU, and a card that
 * fails it is verified in full.  A remembered refusal (a row that
 * differed) refuses the card until BML_VERIFY_ALWAYS or a change of key.
 *
 * Returns 0 and *out; 0 and *out = NULL when no card is used (no usable
 * card, verification failed, the calibration's product failed on the card,
 * or a calibrated share below 0.02: each logged once as "GPU not used:
 * <why>"); BML_EINVAL (a bad option, named in the message; an
 * out-of-order queue; a queue not of cl_context), BML_ENOTSUP and
 * BML_EINVAL for the options' size ("Option structs"), BML_ERANGE (share,
 * limit or queues out of range), BML_EENV (a bad environment value, named
 * in the message), BML_ENOMEM, BML_EBUSY (another thread drove the pool
 * during the calibration, which times it: open the worker before sharing
 * the pool), or the OpenCL error of a query of the engine's context or
 * queue.  o may be NULL (the defaults).  The pool, context and queue (the
 * worker retains both) must outlive the worker.  Close: bml_worker_close. */
BML_EXTERN int bml_worker_open_with(bml_pool *pool, const bml_worker_options *o, bml_worker **out);

/* bml_worker_open_with(pool, NULL, out): every setting from the
 * environment, else its default. */
BML_EXTERN int bml_worker_open(bml_pool *pool, bml_worker **out);

/* Checks the variables bml_worker_open reads of its own (BANKML_GPU_SHARE,
 * BANKML_GPU_LIMIT, BANKML_GPU_QUEUES, BANKML_VERIFY) without opening
 * anything.  Returns 0 or BML_EENV (the variable named in the message). */
BML_EXTERN int bml_worker_check_env(void);

/* Checks every variable libbankml-cl refuses a bad value of, without
 * opening anything: BANKML_THREADS, BANKML_POOL_WAIT_MS, BANKML_GPU (its
 * form: an index past the list or an address no device has is known only
 * to discovery), BANKML_GPU_SOFTWARE, BANKML_GPU_SHARE, BANKML_GPU_LIMIT,
 * BANKML_GPU_QUEUES and BANKML_SYSFS_ROOT.  Returns 0 or BML_EENV (each bad
 * one named in a message). */
BML_EXTERN int bml_env_check(void);

/* Starts a product: the card's share of the rows of wts (rows x n) against
 * act, enqueued without waiting.  *card_rows receives how many of the first
 * rows the card took (0: all on the CPU); the caller computes rows
 * [*card_rows, rows) itself, e.g. with bml_pool_q1_0_mat_vec, then calls
 * bml_worker_finish.  A matrix is known by (name, wts, rows, n): its card
 * rows are repacked and copied on first use, so its weights must not change
 * while the worker knows it: call bml_worker_release before changing or
 * freeing them (or reusing their memory for other weights), or the card
 * keeps computing with the old ones.  wts and act must stay valid and
 * unchanged until bml_worker_finish returns: an error on the card gives
 * its rows to the CPU, which computes them from both.  The time until
 * bml_worker_finish is the caller's, so such a product teaches its shape
 * no share (its calibration, card or CPU alone, times begin to finish).
 * Returns 0, BML_EINVAL, BML_ESHAPE, BML_ESTATE (a product is already in
 * flight), BML_EBUSY, BML_ENOMEM (the worker's bookkeeping; none in flight). */
BML_EXTERN int bml_worker_begin(bml_worker *w, const char *name, const bml_block_q1_0 *wts,
                                size_t rows, size_t n, const bml_block_q8_0 *act,
                                size_t *card_rows);

/* Waits for the card and writes its rows into out[0 .. card_rows); follows
 * every successful bml_worker_begin.  An OpenCL error on the card gives its
 * rows to the CPU pool: out is complete and exact whatever the card did.
 * Returns 0, BML_EINVAL, BML_ESTATE (no product in flight), BML_EBUSY
 * (another thread is inside a call, or its bml_worker_mat_vec's product is
 * in flight: that call finishes it), BML_ENOMEM. */
BML_EXTERN int bml_worker_finish(bml_worker *w, float *out);

/* begin, the CPU's rows on the pool, finish: one product, out[0 .. rows).
 * It never leaves a product in flight: a finish that meets another thread's
 * call is tried again.  While another thread drives the pool, the CPU's
 * rows (here and in a batch) run on the calling thread alone. */
BML_EXTERN int bml_worker_mat_vec(bml_worker *w, const char *name, const bml_block_q1_0 *wts,
                                  size_t rows, size_t n, const bml_block_q8_0 *act, float *out);

/* One product of a batch: out[0 .. rows) = the rows x n matrix wts (known
 * by name and pointer, as in bml_worker_begin) times act. */
typedef struct {
  const char *name;
  const bml_block_q1_0 *wts;
  size_t rows, n;
  const bml_block_q8_0 *act;
  float *out;
} bml_product;

/* Runs count products as one submission, in order: the card's shares of all
 * of them are enqueued back to back (batched launches: one per slab of the
 * card's matrix memory and 256 MiB of weights), the activations copied in
 * as the launches need them and each launch's results read back, then
 * (once the pool's rows are done) copied out while the card computes the
 * next; neighbours that share one activation (the same act pointer and n:
 * Q, K and V; gate and up) are one group, computed over their concatenated
 * card rows; the CPU pool computes the other rows meanwhile.  The bits are
 * those of count calls of bml_worker_mat_vec.  A batch uses the share its
 * kind (its count, first shape and sums of rows and weights) has learnt,
 * not the per-shape ones of single products, and teaches no shape.
 * Returns 0 or what bml_worker_mat_vec returns for the first product that
 * is refused (then nothing was computed). */
BML_EXTERN int bml_worker_mat_vec_batch(bml_worker *w, const bml_product *products, size_t count);

/* ------------------------------------------------------------------------
 * A decode's token: a decode runs a token's products in groups, each after
 * the host's work on the group before (norm, attention, the next
 * activation quantized), so each group is a round trip to the card.  A
 * token prepares those groups once: a run of a group then costs no launch
 * and no copy command where the card keeps the token resident
 * (doc/WORKER.md), and is a batch elsewhere.  The bits are
 * bml_worker_mat_vec_batch's.
 * ---------------------------------------------------------------------- */
typedef struct bml_token bml_token;

/* Prepares count products, in decode order, as a token on w: neighbours
 * that share an activation (the same act pointer and n; at most 16) are
 * one group (Q, K and V; gate and up).  The token keeps its own copy of
 * the products: their weights must stay valid and unchanged until
 * bml_token_close (as bml_worker_begin asks of a matrix); each run of a
 * group reads its products' act and writes their out.  A product's out
 * may be NULL: the token then keeps its results, where the card wrote
 * them when the group ran resident (nothing copied), and bml_token_out
 * gives them.  The token's matrices go to the card at its first run (and
 * count against the worker's limit; where they do not fit, the groups run
 * as batches).
 * Returns 0 and *out, or BML_EINVAL, BML_ESHAPE (a product's arguments,
 * as bml_worker_mat_vec_batch checks them), BML_EBUSY, BML_ENOMEM.  Close
 * every token of a worker before the worker. */
BML_EXTERN int bml_worker_token_open(bml_worker *w, const bml_product *products, size_t count, bml_token **out);

/* The number of groups of t, and the first product of group g (g == the
 * number of groups: the count of products).  0 for NULL.  Cannot fail. */
BML_EXTERN size_t bml_token_groups(const bml_token *t);
BML_EXTERN size_t bml_token_group_first(const bml_token *t, size_t g);

/* 1 when t's groups run resident on the card, 0 when they run as the
 * worker's batches (no card, a card that cannot keep it, or an error on
 * the card, which sends the rest of its runs to batches).  Cannot fail. */
BML_EXTERN int bml_token_resident(const bml_token *t);

/* 1 while t still learns where its groups run, 0 once each group's place
 * is settled for good (and where the worker's share is fixed, the token
 * is not resident, or t is NULL).  A group's first runs are timed on the
 * card and on the CPU pool in turn; once all have decided, some for the
 * CPU, whole tokens run as decided and with every group on the card in
 * turn, and the faster stays (doc/WORKER.md).  Only whole tokens (every
 * group once, in order) count for that check.  An engine's or a
 * benchmark's timing of tokens starts once this is 0.  Cannot fail. */
BML_EXTERN int bml_token_learning(const bml_token *t);

/* Runs group g of t: reads its products' activation now, writes their
 * results before it returns.  The card keeps the token resident while its
 * groups come in order (0, 1, ..., the last; then 0 again for the next
 * token); any other order, or the worker's own products in between, cost
 * a new launch, never other bits.  Returns 0, BML_EINVAL (no such group),
 * BML_EBUSY (another thread is inside a call of the worker's), BML_ESTATE
 * (the worker was closed), or what bml_worker_mat_vec_batch returns. */
BML_EXTERN int bml_token_run(bml_token *t, size_t g);

/* The results of t's product i, whose out was NULL, from the last
 * bml_token_run of t, which ran its group: its rows floats, valid until
 * the next bml_token_run of t or bml_token_close, for reading only.  NULL
 * where t is NULL, i is not a product of t, its out was not NULL, the last
 * run was another group's, or it failed.  Cannot fail otherwise. */
BML_EXTERN const float *bml_token_out(const bml_token *t, size_t i);

/* Frees t and what it holds on the card.  NULL-safe. */
BML_EXTERN void bml_token_close(bml_token *t);

/* The worker's state as one JSON object: its card, limit and share, its
 * memory, where its products ran and why, the shares its shapes and
 * batches learnt, how its open went (doc/WORKER.md names every member).
 * free() the string.  Returns 0, BML_EINVAL, BML_EBUSY, BML_ENOMEM. */
BML_EXTERN int bml_worker_status_json(bml_worker *w, char **json);

/* Sets the share of rows the card takes (0..1) for every later product and
 * stops the per-shape calibration and the learnt shares: every shape and
 * batch then uses exactly this share (1: the card alone).  For benchmarks
 * and tests.  Returns 0, BML_EINVAL,
 * BML_ERANGE, BML_EBUSY, BML_ESTATE. */
BML_EXTERN int bml_worker_set_share(bml_worker *w, double share);

/* Sets the limit L (0.05..1) of the card's memory and time, as
 * BANKML_GPU_LIMIT does, for what is allocated from now on: matrices the
 * card already holds stay (bml_worker_release frees them).  Returns 0,
 * BML_EINVAL, BML_ERANGE, BML_EBUSY. */
BML_EXTERN int bml_worker_set_limit(bml_worker *w, double limit);

/* Frees every card buffer now and forgets the matrices (an engine unloading
 * a model); later products upload again.  NULL-safe; waits for a product in
 * flight. */
BML_EXTERN void bml_worker_release(bml_worker *w);

/* Releases and closes.  NULL-safe. */
BML_EXTERN void bml_worker_close(bml_worker *w);

/* ------------------------------------------------------------------------
 * Logging.  Messages go to stderr with a "bankml-cl: " prefix unless a sink
 * is set.  BANKML_DEBUG=all (or 1) or a comma-separated list of
 * categories (pool,cpu,device,pci,build,oracle,worker,env) turns on debug
 * messages, read by the first bml_pool_open, bml_devices_discover or
 * bml_worker_open.
 * msg and category are valid during the sink's call only.  A message may quote
 * a driver's strings (device names, build logs): on stderr their control
 * characters other than newline and tab print as '?'; a sink gets msg as
 * it was.  A sink must not call fork(): the library may be inside a call
 * that holds its locks (doc/WORKER.md, fork).
 * ---------------------------------------------------------------------- */
typedef enum { BML_LOG_ERROR = 0, BML_LOG_WARN = 1, BML_LOG_INFO = 2, BML_LOG_DEBUG = 3 } bml_log_level;
typedef void (*bml_log_fn)(void *ctx, bml_log_level level, const char *category, const char *msg);

/* Sets the sink for every later message (NULL restores stderr).  Safe
 * while other threads log: each message reaches the old sink (with its
 * ctx) or the new one.  A sink may still be called once after it was
 * replaced, by a message that read it just before: keep ctx alive until
 * the threads that may log have stopped. */
BML_EXTERN void bml_log_set_sink(bml_log_fn fn, void *ctx);

#ifdef __cplusplus
}
#endif
#endif /* BANKML_CL_H */
