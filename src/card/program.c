/* program.c -- a card's context and queue, and the build of the embedded kernels with exact-arithmetic options. */
#include "card/program.h"
#include "base/env.h"
#include "base/hooks.h"
#include "base/log.h"
#include "base/util.h"
#include "card/cache.h"
#include "card/card.h"
#include "card/slab.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char bml__cl_q1_0_source[];
extern const char bml__cl_nvidia_source[];

const char *bml__kernel_name(bml__kernel_id k) {
  static const char *const names[] = {"q1_0_mat_vec", "q1_0_mat_vec8", "q1_0_mat_vec_l", "q1_0_mat_vec_lr"};
  return (unsigned)k < BML_KERNEL_COUNT ? names[k] : "?";
}

const char *bml__batched_name(bml__batched_id k) {
  static const char *const names[] = {"q1_0_mat_vec_lb", "q1_0_mat_vec_lrb"};
  return (unsigned)k < BML_BATCHED_COUNT ? names[k] : "?";
}

json_t *bml__card_identity(const bml__cl_info *ci) {
  char dev[48] = "";
  if (ci->has_uuid) {
    memcpy(dev, "uuid:", 5);
    bml__uuid_format(ci->uuid, dev + 5);
  } else if (ci->pci.valid) {
    memcpy(dev, "pci:", 4);
    bml__pci_addr_format(ci->pci, dev + 4);
  }
  char source[17];
  const uint64_t h = bml__hash64(bml__cl_nvidia_source, strlen(bml__cl_nvidia_source),
                                 bml__hash64(bml__cl_q1_0_source, strlen(bml__cl_q1_0_source), BML_HASH_SEED));
  snprintf(source, sizeof source, "%016llx", (unsigned long long)h);
  return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "device", dev, "name", ci->name, "platform",
                   ci->platform_name ? ci->platform_name : "", "driver", ci->driver_version, "bankml_cl_version",
                   bml_version_string(), "source", source);
}

/* The hash of the identity's JSON (its keys sorted), 0 when out of memory. */
static uint64_t identity_hash(const bml__cl_info *ci) {
  json_t *id = bml__card_identity(ci);
  char *text = id ? json_dumps(id, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  uint64_t h = text ? bml__hash64(text, strlen(text), BML_HASH_SEED) : 0;
  free(text);
  json_decref(id);
  return h;
}

int bml__card_open(const bml__cl_info *ci, bml__card **out, char *err, size_t errlen) {
  return bml__card_open_on(ci, NULL, NULL, out, err, errlen);
}

/* The engine's context and queue, retained (they stay the engine's), or
 * the card's own. */
static cl_int card_context(bml__card *c, const bml__cl_info *ci, cl_context ctx, cl_command_queue queue, char *err,
                           size_t errlen) {
  char e[64];
  cl_int rc = CL_SUCCESS;
  if (ctx) {
    rc = clRetainContext(ctx);
    if (rc == CL_SUCCESS) c->ctx = ctx, c->engine_context = true;
  } else {
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ci->platform, 0};
    c->ctx = clCreateContext(props, 1, &ci->id, NULL, NULL, &rc);
  }
  if (rc != CL_SUCCESS) {
    snprintf(err, errlen, "%s: %s", ctx ? "clRetainContext" : "clCreateContext", bml__cl_error_string(rc, e, sizeof e));
    return rc;
  }
  if (queue) {
    rc = clRetainCommandQueue(queue);
    if (rc == CL_SUCCESS) c->queue = queue, c->engine_queue = true;
  } else {
    c->queue = clCreateCommandQueue(c->ctx, ci->id, 0, &rc);
  }
  if (rc != CL_SUCCESS)
    snprintf(err, errlen, "%s: %s", queue ? "clRetainCommandQueue" : "clCreateCommandQueue",
             bml__cl_error_string(rc, e, sizeof e));
  return rc;
}

int bml__card_open_on(const bml__cl_info *ci, cl_context ctx, cl_command_queue queue, bml__card **out, char *err,
                      size_t errlen) {
  /* the oracle's test hook open_nomem: this allocation fails */
  bml__card *c = bml__oracle_get_hooks()->open_nomem ? NULL : calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return BML_ENOMEM;
  }
  c->dev = ci->id;
  snprintf(c->name, sizeof c->name, "%s", ci->name);
  c->global_mem = ci->global_mem;
  c->max_alloc = ci->max_alloc;
  c->max_work_group = ci->max_work_group;
  c->host_unified = ci->host_unified != 0;
  c->cr_divide_sqrt = (ci->fp32 & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
  c->local_mem = ci->local_mem;
  c->max_groups = (size_t)BML_GROUPS_PER_UNIT * ci->compute_units;
  c->ident = identity_hash(ci);
  /* NVIDIA's driver compiles OpenCL C to PTX and takes PTX inline; another
   * implementation of an NVIDIA card (PoCL's CUDA device) may not.  The
   * ring of weights (-DBML_RING=1) was measured there only: it made PoCL
   * slower, so other compilers keep the queue (cl/q1_0_lanes.cl); the scales
   * staged as half2 (-DBML_D0HALF=1) were measured there only too. */
  c->nvidia_driver = ci->vendor_id == 0x10de && ci->platform_vendor && strstr(ci->platform_vendor, "NVIDIA");
  c->nvidia_build = c->nvidia_driver;
  c->nvidia_tma = c->nvidia_build && ci->nv_cc_major >= 9;
  if (c->nvidia_driver && ci->extensions && strstr(ci->extensions, "cl_nv_create_buffer"))
    c->create_buffer_nv = (bml__create_buffer_nv_fn)bml__cl_extension(ci->platform, "clCreateBufferNV");
  bml__card_set_tunables(c, 32, 32, 4, 1);
  c->lr_from = SIZE_MAX;
  cl_int rc = card_context(c, ci, ctx, queue, err, errlen);
  if (rc != CL_SUCCESS) {
    bml__card_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

int bml__card_set_queues(bml__card *c, size_t queues) {
  if (queues > BML_MAX_QUEUES) queues = BML_MAX_QUEUES;
  cl_int rc = CL_SUCCESS;
  while (c->nside + 1 < queues && rc == CL_SUCCESS) {
    cl_command_queue q = clCreateCommandQueue(c->ctx, c->dev, 0, &rc);
    if (rc == CL_SUCCESS) c->side[c->nside++] = q;
  }
  return rc;
}

void bml__card_drop_side_queues(bml__card *c) {
  for (size_t i = 0; i < c->nside; i++) {
    clFinish(c->side[i]);
    clReleaseCommandQueue(c->side[i]);
  }
  c->nside = 0;
}

int bml__card_finish(bml__card *c) {
  cl_int rc = clFinish(c->queue);
  for (size_t i = 0; i < c->nside; i++) {
    cl_int r = clFinish(c->side[i]);
    if (rc == CL_SUCCESS) rc = r;
  }
  return rc;
}

void bml__card_close(bml__card *c) {
  if (!c) return;
  if (c->queue) clFinish(c->queue);
  bml__slab_release_all(c);
  bml__card_drop_side_queues(c);
  if (c->queue) {
    clFinish(c->queue);
    clReleaseCommandQueue(c->queue);
  }
  if (c->ctx) clReleaseContext(c->ctx);
  free(c);
}

/* Rows of a slice whose work-group (8 / lanes work-items a row) fits the
 * device: halved down to a work-group of 64. */
static size_t fit_rows(const bml__card *c, size_t rows, size_t lanes) {
  const size_t least = 8 * lanes;
  if (rows < least) rows = least;
  while (rows > least && rows * 8 / lanes > c->max_work_group) rows /= 2;
  return rows;
}

void bml__card_set_tunables(bml__card *c, size_t lrows, size_t lrrows, size_t lrrpt, size_t lrlpt) {
  c->lrlpt = lrlpt == 2 ? 2 : 1;
  c->lrows = fit_rows(c, lrows, 1);
  c->lrrows = fit_rows(c, lrrows, c->lrlpt);
  c->lrrpt = lrrpt < 1 ? 1 : lrrpt > 4 / c->lrlpt ? 4 / c->lrlpt : lrrpt;
}

size_t bml__card_lr_wg(const bml__card *c) { return 8 / c->lrlpt * c->lrrows; }

/* Whether the kernels build with BML_NVIDIA_TMA_OPTION: it goes with the
 * rest of NVIDIA's build only. */
static bool builds_tma(const bml__card *c) { return c->nvidia_build && c->nvidia_tma; }

/* The local memory of the table kernels: a tile's table is 16 KiB, the
 * scales 2 * 8 * rows floats, the lanes' sums of a group 8 * rows, and
 * the TMA's slots where it builds with them. */
bool bml__card_table_halves2(const bml__card *c) {
  size_t rows = c->lrows > c->lrrows * c->lrrpt ? c->lrows : c->lrrows * c->lrrpt;
  const size_t tma = builds_tma(c) ? BML_TMA_LOCAL_BYTES : 0;
  return 2 * 16384 + 96 * rows + tma + 1024 <= c->local_mem;
}

size_t bml__card_wg8(const bml__card *c) {
  size_t wg8 = c->max_work_group >= 64 ? 64 : c->max_work_group / 8 * 8;
  return wg8 < 8 ? 8 : wg8;
}

/* The options: exact division and square root where offered (the kernels
 * divide nothing today; the option keeps any later use exact), the
 * kernels' shapes, and never -cl-mad-enable, -cl-fast-relaxed-math,
 * -cl-unsafe-math-optimizations or -cl-denorms-are-zero. */
void bml__card_build_options(const bml__card *c, bool emulate, const bml__oracle_hooks *test, char *buf, size_t len) {
  const char *extra = test ? test->extra_options : NULL;
  size_t wg8 = bml__card_wg8(c);
  snprintf(buf, len,
           "-DBML_WG=%zu -DBML_LROWS=%zu -DBML_LRROWS=%zu -DBML_LRRPT=%zu -DBML_LRLPT=%zu -DBML_LHALVES=%d%s%s%s%s%s%s",
           wg8, c->lrows, c->lrrows, c->lrrpt, c->lrlpt, bml__card_table_halves2(c) ? 2 : 1,
           c->cr_divide_sqrt ? " -cl-fp32-correctly-rounded-divide-sqrt" : "", emulate ? " -DBML_EMULATE_FMA=1" : "",
           c->nvidia_build ? " " BML_NVIDIA_OPTIONS : "", builds_tma(c) ? " " BML_NVIDIA_TMA_OPTION : "",
           extra && *extra ? " " : "", extra ? extra : "");
}

/* The program's sources, in order: the device's file (cl/nvidia.cl for
 * NVIDIA's build; a test's in its place), cl/q1_0*.cl, and a test's after
 * it.  Returns their count (at most 3). */
static cl_uint program_sources(const bml__card *c, const bml__oracle_hooks *test, const char *src[3]) {
  cl_uint n = 0;
  const char *device = test && test->device_source ? test->device_source : c->nvidia_build ? bml__cl_nvidia_source : NULL;
  if (device) src[n++] = device;
  src[n++] = bml__cl_q1_0_source;
  if (test && test->source_after) src[n++] = test->source_after;
  return n;
}

uint64_t bml__card_sources_hash(const bml__card *c, const bml__oracle_hooks *test) {
  const char *src[3];
  const cl_uint n = program_sources(c, test, src);
  uint64_t h = BML_HASH_SEED + n;
  for (cl_uint i = 0; i < n; i++) h = bml__hash64(src[i], strlen(src[i]), h);
  return h;
}

/* The build log, or "" when the driver gives none.  malloc'd. */
static char *build_log(const bml__card *c, cl_program p) {
  size_t size = 0;
  if (clGetProgramBuildInfo(p, c->dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) != CL_SUCCESS ||
      size > (16u << 20))
    size = 0;
  char *log = calloc(1, size + 1);
  if (log && size) clGetProgramBuildInfo(p, c->dev, CL_PROGRAM_BUILD_LOG, size, log, NULL);
  return log;
}

static char *describe_failure(const char *what, cl_int rc, const char *options, const char *log) {
  char e[64];
  size_t len = strlen(what) + strlen(options) + (log ? strlen(log) : 0) + 160;
  char *msg = malloc(len);
  if (msg)
    snprintf(msg, len, "%s: %s\noptions: %s\nbuild log:\n%s", what, bml__cl_error_string(rc, e, sizeof e),
             options, log && *log ? log : "(empty)");
  return msg;
}

static int create_kernels(bml__build *b) {
  cl_int rc = CL_SUCCESS;
  for (int k = 0; k < BML_KERNEL_COUNT && rc == CL_SUCCESS; k++)
    b->kernel[k] = clCreateKernel(b->program, bml__kernel_name((bml__kernel_id)k), &rc);
  for (int k = 0; k < BML_BATCHED_COUNT && rc == CL_SUCCESS; k++)
    b->batched[k] = clCreateKernel(b->program, bml__batched_name((bml__batched_id)k), &rc);
  if (rc == CL_SUCCESS) b->token = clCreateKernel(b->program, "q1_0_token", &rc);
  if (rc == CL_SUCCESS) b->probe = clCreateKernel(b->program, "bml_fma_probe", &rc);
  return rc;
}

/* The work-group each kernel is built for (its reqd_work_group_size; 0:
 * any, the launch fits it to the kernel). */
static size_t needed_wg(const bml__card *c, cl_kernel kern, const bml__build *b) {
  if (kern == b->kernel[BML_KERNEL_MAT_VEC8]) return bml__card_wg8(c);
  if (kern == b->kernel[BML_KERNEL_MAT_VEC_L] || kern == b->batched[BML_BATCHED_L]) return 8 * c->lrows;
  if (kern == b->kernel[BML_KERNEL_MAT_VEC_LR] || kern == b->batched[BML_BATCHED_LR] || kern == b->token)
    return bml__card_lr_wg(c);
  return 0;
}

/* A kernel may run fewer work-items a group than the device's maximum (its
 * registers and local memory: CL_KERNEL_WORK_GROUP_SIZE, often below 256
 * on phones' GPUs), and a launch beyond that fails.  Each kernel's limit
 * is kept for the launches, and a build whose fixed work-groups exceed it
 * fails here, naming the kernel, rather than at the first launch:
 * CL_INVALID_WORK_GROUP_SIZE, which the tuning takes as "this shape does
 * not fit" (src/card/tune.c). */
static cl_int check_work_groups(const bml__card *c, bml__build *b, char *why, size_t len) {
  cl_kernel all[BML_KERNEL_COUNT + BML_BATCHED_COUNT + 1];
  for (int k = 0; k < BML_KERNEL_COUNT; k++) all[k] = b->kernel[k];
  for (int k = 0; k < BML_BATCHED_COUNT; k++) all[BML_KERNEL_COUNT + k] = b->batched[k];
  all[BML_KERNEL_COUNT + BML_BATCHED_COUNT] = b->token;
  for (size_t i = 0; i < BML_ARRAY_SIZE(all); i++) {
    size_t max = 0;
    /* a driver that cannot say (an error, or 0) is taken at the device's
     * word, as before this check: its launches say the rest */
    if (clGetKernelWorkGroupInfo(all[i], c->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof max, &max, NULL) != CL_SUCCESS ||
        max == 0)
      max = c->max_work_group;
    if (c->kernel_wg_cap && max > c->kernel_wg_cap) max = c->kernel_wg_cap;
    if (b->emulated_fma && c->kernel_wg_cap_emulated && max > c->kernel_wg_cap_emulated)
      max = c->kernel_wg_cap_emulated;
    if (i < BML_KERNEL_COUNT) b->kernel_wg[i] = max;
    const size_t need = needed_wg(c, all[i], b);
    if (need > max) {
      snprintf(why, len, "%s is built for work-groups of %zu work-items and this device runs at most %zu of it "
               "(CL_KERNEL_WORK_GROUP_SIZE)",
               i < BML_KERNEL_COUNT                     ? bml__kernel_name((bml__kernel_id)i)
               : i < BML_KERNEL_COUNT + BML_BATCHED_COUNT ? bml__batched_name((bml__batched_id)(i - BML_KERNEL_COUNT))
                                                          : "q1_0_token",
               need, max);
      return CL_INVALID_WORK_GROUP_SIZE;
    }
  }
  return CL_SUCCESS;
}

/* The program of c's sources now, built with b->options (set from them):
 * CL_SUCCESS, or the error with b->program kept for its log (NULL where
 * it could not be made: *what says which call failed). */
static cl_int build_program(bml__card *c, bool emulate, const bml__oracle_hooks *test, bml__build *b,
                            const char **what) {
  const char *src[3];
  const cl_uint n = program_sources(c, test, src);
  cl_int rc = CL_SUCCESS;
  bml__card_build_options(c, emulate, test, b->options, sizeof b->options);
  if (b->program) clReleaseProgram(b->program);
  b->program = clCreateProgramWithSource(c->ctx, n, src, NULL, &rc);
  *what = "clCreateProgramWithSource";
  if (rc != CL_SUCCESS) {
    b->program = NULL;
    return rc;
  }
  *what = "clBuildProgram";
  return clBuildProgram(b->program, 1, &c->dev, b->options, NULL, NULL);
}

/* The build refused what (cl/nvidia.cl or an option that *flag adds):
 * said under BANKML_DEBUG=build with the driver's log, *flag cleared, and
 * the program built again without it. */
static cl_int build_without(bml__card *c, bool *flag, const char *what, bool emulate, const bml__oracle_hooks *test,
                            bml__build *b, const char **call) {
  char *text = build_log(c, b->program);
  bml__debug(BML_CAT_BUILD, "\"%s\": no build with %s (%s); building without", c->name, what,
             text && *text ? text : "no log");
  free(text);
  *flag = false;
  return build_program(c, emulate, test, b, call);
}

/* The key of the binary of the program built on c with these options and sources. */
static uint64_t binary_key(const bml__card *c, const char *options, uint64_t sources) {
  return bml__hash64(options, strlen(options), c->ident ^ sources);
}

/* The program from the binary remembered for b->options, built:
 * CL_SUCCESS, or another code (none remembered, or the driver refused it:
 * nothing is left in b). */
static cl_int program_from_binary(bml__card *c, const bml__oracle_hooks *test, bml__build *b) {
  void *bin = NULL;
  size_t len = 0;
  if (!c->ident || bml__cache_binary_read(binary_key(c, b->options, bml__card_sources_hash(c, test)), &bin, &len) != 0)
    return CL_INVALID_BINARY;
  cl_int status = CL_SUCCESS, rc = CL_SUCCESS;
  const unsigned char *p = bin;
  b->program = clCreateProgramWithBinary(c->ctx, 1, &c->dev, &len, &p, &status, &rc);
  if (rc == CL_SUCCESS) rc = status;
  if (rc == CL_SUCCESS) rc = clBuildProgram(b->program, 1, &c->dev, b->options, NULL, NULL);
  free(bin);
  if (rc != CL_SUCCESS) {
    char e[64];
    bml__debug(BML_CAT_BUILD, "\"%s\": the remembered program binary was refused (%s): built from source", c->name,
               bml__cl_error_string(rc, e, sizeof e));
    if (b->program) clReleaseProgram(b->program);
    b->program = NULL;
  }
  return rc;
}

/* Remembers b's program binary under b->binary_key (nothing where the
 * driver gives none).  Called at the build's release, after the open's
 * checks and the work have run its kernels: a driver that compiles a
 * kernel when it first runs (PoCL) puts what it compiled in the binary,
 * so that the next process compiles nothing; taken right after the build,
 * PoCL's binary made the second open 1.3-1.8 s, the third 0.2. */
static void remember_binary(const bml__build *b) {
  size_t len = 0;
  if (clGetProgramInfo(b->program, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) != CL_SUCCESS || len == 0) return;
  unsigned char *bin = malloc(len);
  if (bin && clGetProgramInfo(b->program, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
    bml__cache_binary_write(b->binary_key, bin, len);
  free(bin);
}

/* The program built from c's sources with b->options (NVIDIA's file and
 * options dropped where its compiler refuses them).  CL_SUCCESS, or the
 * error with *log saying it. */
static cl_int program_from_source(bml__card *c, bool emulate, const bml__oracle_hooks *test, bml__build *b,
                                  char **log) {
  const char *call;
  cl_int rc = build_program(c, emulate, test, b, &call);
  /* NVIDIA's build refused: first the TMA's PTX (a driver whose PTX is
   * older than 8.0), then cl/nvidia.cl at all (cl/q1_0*.cl's plain
   * formulations, the queue and float scales); the same bits either way */
  if (rc == CL_BUILD_PROGRAM_FAILURE && builds_tma(c))
    rc = build_without(c, &c->nvidia_tma, BML_NVIDIA_TMA_OPTION, emulate, test, b, &call);
  if (rc == CL_BUILD_PROGRAM_FAILURE && c->nvidia_build)
    rc = build_without(c, &c->nvidia_build, "cl/nvidia.cl and " BML_NVIDIA_OPTIONS, emulate, test, b, &call);
  if (rc != CL_SUCCESS) {
    char *text = b->program ? build_log(c, b->program) : NULL;
    *log = describe_failure(call, rc, b->options, text);
    free(text);
  }
  return rc;
}

static int build(bml__card *c, bool emulate, const bml__oracle_hooks *test, bool cached, bml__build *b, char **log,
                 bool *from_binary) {
  memset(b, 0, sizeof *b);
  *log = NULL;
  b->emulated_fma = emulate;
  bml__card_build_options(c, emulate, test, b->options, sizeof b->options);
  *from_binary = cached && program_from_binary(c, test, b) == CL_SUCCESS;
  cl_int rc = *from_binary ? CL_SUCCESS : program_from_source(c, emulate, test, b, log);
  if (rc != CL_SUCCESS) goto fail;
  rc = create_kernels(b);
  if (rc != CL_SUCCESS) {
    *log = describe_failure("clCreateKernel", rc, b->options, NULL);
    goto fail;
  }
  char why[256];
  rc = check_work_groups(c, b, why, sizeof why);
  if (rc != CL_SUCCESS) {
    *log = describe_failure(why, rc, b->options, NULL);
    goto fail;
  }
  if (cached && !*from_binary && c->ident) { /* remembered at its release: remember_binary */
    b->remember = true;
    b->binary_key = binary_key(c, b->options, bml__card_sources_hash(c, test));
  }
  bml__debug(BML_CAT_BUILD, "built %scl/q1_0*.cl for \"%s\"%s with: %s", c->nvidia_build ? "cl/nvidia.cl and " : "", c->name,
             *from_binary ? " from its remembered binary" : "", b->options);
  return 0;
fail:
  if (rc == CL_INVALID_WORK_GROUP_SIZE) /* a shape the tuning tries and drops: said by whoever asked */
    bml__debug(BML_CAT_BUILD, "\"%s\": %s", c->name, *log ? *log : "work-groups too large");
  else
    bml__error(BML_CAT_BUILD, "\"%s\": %s", c->name, *log ? *log : "cannot build the kernels");
  bml__build_release(b);
  return rc == CL_BUILD_PROGRAM_FAILURE ? BML_EBUILD : rc;
}

int bml__card_build(bml__card *c, bool emulate, const bml__oracle_hooks *test, bml__build *b, char **log) {
  bool from_binary;
  return build(c, emulate, test, false, b, log, &from_binary);
}

int bml__card_build_cached(bml__card *c, bool emulate, const bml__oracle_hooks *test, bml__build *b, char **log,
                           bool *from_binary) {
  return build(c, emulate, test, true, b, log, from_binary);
}

void bml__build_release(bml__build *b) {
  if (!b) return;
  for (int k = 0; k < BML_KERNEL_COUNT; k++)
    if (b->kernel[k]) clReleaseKernel(b->kernel[k]);
  for (int k = 0; k < BML_BATCHED_COUNT; k++)
    if (b->batched[k]) clReleaseKernel(b->batched[k]);
  if (b->token) clReleaseKernel(b->token);
  if (b->probe) clReleaseKernel(b->probe);
  if (b->program && b->remember) remember_binary(b);
  if (b->program) clReleaseProgram(b->program);
  memset(b, 0, sizeof *b);
}
