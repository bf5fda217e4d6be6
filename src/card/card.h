/* card.h -- one OpenCL card at work, its types: the kernels, a build, a slab, the card itself, the batches' limits. */
#ifndef BML_CARD_H
#define BML_CARD_H

#include "base/bml.h"
#include "base/env.h"
#include "devices/clinc.h"
#include "devices/device.h"

/* The kernels of cl/q1_0*.cl that compute products. */
typedef enum {
  BML_KERNEL_MAT_VEC = 0,    /* a work-item per row, the reference order written out plainly */
  BML_KERNEL_MAT_VEC8 = 1,   /* a work-item per (row, lane) */
  BML_KERNEL_MAT_VEC_L = 2,  /* a work-item per (row, lane), products tabulated in local memory */
  BML_KERNEL_MAT_VEC_LR = 3, /* the same, a work-item per (several rows, lane): for big products */
  BML_KERNEL_COUNT
} bml__kernel_id;

/* The batched table kernels: many products of one slab in one launch. */
typedef enum {
  BML_BATCHED_L = 0,  /* q1_0_mat_vec_lb: q1_0_mat_vec_l's shape */
  BML_BATCHED_LR = 1, /* q1_0_mat_vec_lrb: q1_0_mat_vec_lr's */
  BML_BATCHED_COUNT
} bml__batched_id;

/* A product of a batched launch (cl/q1_0_batch.cl, BML_DESC_WORDS words). */
typedef struct {
  uint32_t first_group, rows, nb, bits_off, d0_off, act_off, out_off;
  uint32_t wgs; /* its work-groups: each takes every wgs-th of its groups of rows */
} bml__desc;

/* One build of cl/q1_0*.cl. */
typedef struct {
  cl_program program;
  cl_kernel kernel[BML_KERNEL_COUNT];
  cl_kernel batched[BML_BATCHED_COUNT];
  cl_kernel token; /* q1_0_token: a decode's token resident on the card (token.c) */
  cl_kernel probe;
  size_t kernel_wg[BML_KERNEL_COUNT]; /* CL_KERNEL_WORK_GROUP_SIZE of each kernel: what it may run */
  bool emulated_fma;
  bool remember;        /* built from source: its binary is remembered at its release (program.c) */
  uint64_t binary_key;  /* the key it is remembered under */
  char options[512]; /* the exact options it was built with */
} bml__build;

/* A free run of row-blocks of a slab. */
typedef struct {
  size_t off, len;
} bml__range;

/* Part of a card's matrix memory: a pair of buffers of `cap` row-blocks
 * (16 bytes of bits and one float of d0 each), sub-allocated first-fit. */
typedef struct {
  cl_mem bits, d0; /* NULL: an empty slot */
  size_t cap, used;
  bml__range *free;
  size_t nfree, free_cap;
} bml__slab;

/* NVIDIA's own compiler's build: cl/nvidia.cl ahead of cl/q1_0.cl (the
 * table kernels' lookups by PTX's byte permute, q1_0_token's fences and
 * clock by PTX) and these options: the weights in a ring, the staged scales
 * of two-lane work-items as half2.  Each was measured on the H200
 * (doc/PERFORMANCE.md); the bits are the same with or without them. */
#define BML_NVIDIA_OPTIONS "-DBML_RING=1 -DBML_D0HALF=1"
/* On NVIDIA's build for compute capability 9.0 and later (Hopper's TMA):
 * the table's activation values copied into local memory by
 * cp.async.bulk (cl/nvidia.cl); 2320 bytes more of local memory a work-group. */
#define BML_NVIDIA_TMA_OPTION "-DBML_NVIDIA_TMA=1"
#define BML_TMA_LOCAL_BYTES 2320

/* cl_nv_create_buffer: a buffer placed (CL_MEM_LOCATION_HOST_NV) and pinned
 * (CL_MEM_PINNED_NV) in host memory, which NVIDIA's kernels read and write
 * over the bus.  (NVIDIA's CL_MEM_ALLOC_HOST_PTR buffers are not that:
 * its kernels use a copy on the card, and the mapping sees none of their
 * writes -- seen on the H200.) */
typedef cl_mem(CL_API_CALL *bml__create_buffer_nv_fn)(cl_context ctx, cl_mem_flags flags, cl_bitfield flags_nv,
                                                      size_t size, void *host_ptr, cl_int *rc);
#define BML_MEM_LOCATION_HOST_NV ((cl_bitfield)1 << 0)
#define BML_MEM_PINNED_NV ((cl_bitfield)1 << 1)

typedef struct bml__card {
  cl_context ctx;
  cl_command_queue queue;
  cl_command_queue side[BML_MAX_QUEUES - 1]; /* more in-order queues, for a batch's independent launches */
  size_t nside;
  cl_device_id dev;
  char name[256];
  cl_ulong global_mem, max_alloc;
  size_t max_work_group;
  bool host_unified;
  bool cr_divide_sqrt; /* CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT advertised */
  bool nvidia_build;   /* NVIDIA's own compiler: cl/nvidia.cl and BML_NVIDIA_OPTIONS */
  bool nvidia_driver;  /* NVIDIA's own driver (nvidia_build may be dropped, this stays) */
  bool nvidia_tma;     /* with nvidia_build: BML_NVIDIA_TMA_OPTION (compute capability 9.0 or later) */
  bml__create_buffer_nv_fn create_buffer_nv; /* cl_nv_create_buffer's entry point, or NULL */
  size_t max_chunk_rows; /* test hook: rows per buffer chunk (0: by max_alloc only) */
  cl_ulong local_mem;
  size_t kernel_wg_cap;  /* test hook: each kernel's CL_KERNEL_WORK_GROUP_SIZE at most this (0: none) */
  size_t kernel_wg_cap_emulated; /* test hook: the same for the emulated fma's build only (0: none) */
  size_t lrows;          /* q1_0_mat_vec_l's rows per work-group (-DBML_LROWS) */
  size_t lrrows, lrrpt;  /* q1_0_mat_vec_lr's rows per slice and slices (-DBML_LRROWS, -DBML_LRRPT) */
  size_t lrlpt;          /* q1_0_mat_vec_lr's lanes per work-item (-DBML_LRLPT: 1 or 2) */
  size_t lr_from;        /* products of this many rows or more run q1_0_mat_vec_lr, the others _l (tune.c) */
  size_t max_groups;     /* a table kernel's launch runs at most this many work-groups, each taking the
                            launch's groups of rows in turn (0: a work-group per group); set at open to
                            BML_GROUPS_PER_UNIT per compute unit */
  size_t run_bytes;      /* a batch's launches are cut every this many bytes of weights (0: BML_RUN_BYTES);
                            the worker's check at open sets it small, for a launch per record */
  bml__slab *slabs;      /* the matrices' memory (slab.c) */
  size_t nslabs;
  bool engine_context;   /* ctx is the engine's (retained, not created) */
  bool engine_queue;     /* queue is the engine's (retained, not created) */
  uint64_t ident;        /* the hash of the device's identity (bml__card_identity): program binaries are
                            remembered under it and their options */
} bml__card;

/* A launch of a batch is cut after the record that takes the weights it
 * reads to this many bytes (about 0.1 ms of a big card's time): each
 * launch's results are read back as soon as it finishes, so the reads of
 * a long batch overlap the launches after them. */
#define BML_RUN_BYTES ((size_t)256 << 20)
/* A table kernel's launch runs at most this many work-groups per compute
 * unit (c->max_groups); each takes every max_groups-th group of rows, so it
 * starts once and streams the next group's weights in while it ends one.
 * On the H200 two (the work-groups its registers let an SM hold) were as
 * fast as a work-group per group alone and faster side by side on several
 * queues (doc/PERFORMANCE.md); on a card that holds fewer, the rest wait
 * as a second wave of the same work would. */
#ifndef BML_GROUPS_PER_UNIT
#define BML_GROUPS_PER_UNIT 2
#endif
/* A launch of more records than max_groups runs in waves; its
 * work-groups take about as many steps as make this many (kernels.c). */
#define BML_PLAN_WAVES 8
/* The last launch of a batch is halved (by its weights' bytes), then its
 * second half, ..., while the half to come is this many bytes or more:
 * what the card computes after the last read starts is then small. */
#define BML_TAIL_BYTES ((size_t)16 << 20)

#endif
