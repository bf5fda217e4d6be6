/* card.h -- one OpenCL card at work: its context, the built kernels, matrices repacked on it, launches. */
#ifndef BML_CARD_H
#define BML_CARD_H

#include "base/bml.h"
#include "devices/clinc.h"
#include "devices/device.h"

/* The kernels of cl/q1_0.cl that compute products. */
typedef enum {
  BML_KERNEL_MAT_VEC = 0,    /* a work-item per row, the reference order written out plainly */
  BML_KERNEL_MAT_VEC8 = 1,   /* a work-item per (row, lane) */
  BML_KERNEL_MAT_VEC_L = 2,  /* a work-item per (row, lane), products tabulated in local memory */
  BML_KERNEL_MAT_VEC_LR = 3, /* the same, a work-item per (several rows, lane): for big products */
  BML_KERNEL_COUNT
} bml__kernel_id;

/* "q1_0_mat_vec", "q1_0_mat_vec8", "q1_0_mat_vec_l", "q1_0_mat_vec_lr". */
const char *bml__kernel_name(bml__kernel_id k);

/* The batched table kernels: many products of one slab in one launch. */
typedef enum {
  BML_BATCHED_L = 0,  /* q1_0_mat_vec_lb: q1_0_mat_vec_l's shape */
  BML_BATCHED_LR = 1, /* q1_0_mat_vec_lrb: q1_0_mat_vec_lr's */
  BML_BATCHED_COUNT
} bml__batched_id;

/* "q1_0_mat_vec_lb", "q1_0_mat_vec_lrb". */
const char *bml__batched_name(bml__batched_id k);

/* A product of a batched launch (cl/q1_0.cl, BML_DESC_WORDS words). */
typedef struct {
  uint32_t first_group, rows, nb, bits_off, d0_off, act_off, out_off;
  uint32_t wgs; /* its work-groups: each takes every wgs-th of its groups of rows */
} bml__desc;

/* One build of cl/q1_0.cl. */
typedef struct {
  cl_program program;
  cl_kernel kernel[BML_KERNEL_COUNT];
  cl_kernel batched[BML_BATCHED_COUNT];
  cl_kernel token; /* q1_0_token: a decode's token resident on the card (token.c) */
  cl_kernel probe;
  size_t kernel_wg[BML_KERNEL_COUNT]; /* CL_KERNEL_WORK_GROUP_SIZE of each kernel: what it may run */
  bool emulated_fma;
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

/* NVIDIA's own compiler's build options (cl/q1_0.cl): the table kernels'
 * lookups by PTX's byte permute, their weights in a ring, the staged scales
 * of two-lane work-items as half2.  Each was measured on the H200
 * (doc/PERFORMANCE.md); the bits are the same with or without them. */
#define BML_NVIDIA_OPTIONS "-DBML_PRMT=1 -DBML_RING=1 -DBML_D0HALF=1 -DBML_SYSFENCE_PTX=1"
/* On NVIDIA's build for compute capability 9.0 and later (Hopper's TMA):
 * the table's activation values copied into local memory by
 * cp.async.bulk; 2320 bytes more of local memory a work-group. */
#define BML_NVIDIA_TMA_OPTION "-DBML_TMA_SRC=1"
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
  bool nvidia_build;   /* NVIDIA's own compiler: BML_NVIDIA_OPTIONS */
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

/* Bytes of new slabs an allocation of rb row-blocks would create (0: it
 * fits in a free range); exact: a slab of just rb, else one that doubles
 * the card's matrix memory, of BML_SLAB_MIN_BYTES at least (up to 1 GiB
 * and the device's allocation limit). */
#define BML_SLAB_MIN_BYTES ((size_t)64 << 20)
/* A row-block on the card: 16 bytes of bits and a float of d0. */
#define BML_ROW_BLOCK_BYTES 20
uint64_t bml__slab_growth(const bml__card *c, size_t rb, bool exact);
/* The same for nchunks chunks allocated one after the other (rb row-blocks
 * each, the last rb_last): what bml__slab_alloc will create for them, each
 * chunk taking what the ones before it left (UINT64_MAX when the estimate
 * cannot be made).  Past the card's memory, some sum above it. */
uint64_t bml__slab_growth_chunks(const bml__card *c, size_t nchunks, size_t rb, size_t rb_last, bool exact);
/* Allocates rb row-blocks: *slab and *off (in row-blocks).  Returns 0,
 * BML_ENOMEM or an OpenCL error. */
int bml__slab_alloc(bml__card *c, size_t rb, bool exact, size_t *slab, size_t *off);
/* Frees them; a slab left empty goes back to the driver. */
void bml__slab_free(bml__card *c, size_t slab, size_t off, size_t rb);
void bml__slab_release_all(bml__card *c);
/* Bytes the card's slabs hold. */
uint64_t bml__card_slab_bytes(const bml__card *c);

/* Sets the table kernels' shapes for later builds: q1_0_mat_vec_l's rows
 * per work-group, q1_0_mat_vec_lr's rows per slice, slices per work-item
 * and lanes per work-item.  A work-group is 8 / lanes work-items per row of
 * a slice: rows are halved (not below a work-group of 64) until it fits the
 * device's work-group size; lanes other than 2 are 1, and slices are
 * clamped to 1..4 / lanes.  Cannot fail. */
void bml__card_set_tunables(bml__card *c, size_t lrows, size_t lrrows, size_t lrrpt, size_t lrlpt);
/* q1_0_mat_vec_lr's work-group size. */
size_t bml__card_lr_wg(const bml__card *c);

/* Whether the table kernels double-buffer their table (32 KiB of local
 * memory and the scales): on a card with less, one buffer and a second
 * barrier per tile. */
bool bml__card_table_halves2(const bml__card *c);

/* The work-group size of q1_0_mat_vec8 on this card (-DBML_WG): 64, or the
 * largest multiple of 8 the device allows.  Cannot fail. */
size_t bml__card_wg8(const bml__card *c);

/* Creates a context and an in-order queue on the device.  Returns 0, or the
 * OpenCL error with why written into err. */
int bml__card_open(const bml__cl_info *ci, bml__card **out, char *err, size_t errlen);
/* The same on an engine's context (retained; NULL: one of its own) and
 * queue (retained, an in-order queue of ctx and the device; NULL: one of
 * its own on ctx).  The card's close releases what it retained. */
int bml__card_open_on(const bml__cl_info *ci, cl_context ctx, cl_command_queue queue, bml__card **out, char *err,
                      size_t errlen);

/* What the cache knows a device by: {"device": "uuid:..." (cl_khr_device_uuid),
 * else "pci:0000:03:00.0", else "", "name", "platform", "driver",
 * "bankml_cl_version", "source": the hash of cl/q1_0.cl}.  NULL when out of
 * memory. */
struct json_t *bml__card_identity(const bml__cl_info *ci);
void bml__card_close(bml__card *c); /* NULL-safe */

/* Gives c `queues` in-order queues in all (its own and queues - 1 side
 * queues, at most BML_MAX_QUEUES), for launches that may run side by side.
 * Returns 0 or an OpenCL error (the queues made so far stay). */
int bml__card_set_queues(bml__card *c, size_t queues);
/* Finishes and releases c's side queues: it has its own queue alone. */
void bml__card_drop_side_queues(bml__card *c);
/* clFinish on every queue of c; the first error, or 0. */
int bml__card_finish(bml__card *c);

/* Builds cl/q1_0.cl for the card: -cl-fp32-correctly-rounded-divide-sqrt
 * when the device advertises it, never a fast-math option, plus
 * -DBML_EMULATE_FMA=1 when emulate, NVIDIA's options when c->nvidia_build
 * (a build that fails with them is tried once without, and clears the
 * flag for the card's later builds), plus extra (test hooks; may be NULL).
 * Returns 0, or an error with the build log and options in *log (malloc'd,
 * free it; may be set on success too: NULL when there is nothing to say). */
int bml__card_build(bml__card *c, bool emulate, const char *extra, bml__build *b, char **log);
/* The same, the program taken from the binary remembered for the card and
 * these options where there is one the driver takes (*from_binary set),
 * else built from source and its binary remembered (cache.c).  A binary
 * only saves the compile: what the program computes is checked as any. */
int bml__card_build_cached(bml__card *c, bool emulate, const char *extra, bml__build *b, char **log,
                           bool *from_binary);
/* The key of the binary of a program built on c with these options. */
uint64_t bml__card_binary_key(const bml__card *c, const char *options);
/* The options bml__card_build would use now (b->options' size). */
void bml__card_build_options(const bml__card *c, bool emulate, const char *extra, char *buf, size_t len);
void bml__build_release(bml__build *b); /* NULL-safe, leaves b zeroed */

/* A run of rows of a caller's matrix: the first `rows` rows of w.  A card
 * matrix is one or more of them, concatenated (a group's matrices, fused). */
typedef struct {
  const bml_block_q1_0 *w;
  size_t rows;
} bml__rows_part;

/* Rows of a card matrix held in one slab, from row-block `off`. */
typedef struct {
  size_t row0, rows;
  size_t slab, off, rb;
} bml__card_chunk;

/* A matrix's rows on the card, repacked (cl/q1_0.cl says how), in chunks of
 * rows that keep every buffer within CL_DEVICE_MAX_MEM_ALLOC_SIZE. */
typedef struct {
  size_t rows, n;
  size_t nchunks;
  bml__card_chunk *chunks;
  size_t bytes; /* device memory held */
} bml__card_matrix;

/* Bytes rows x n weights take on the card: 20 per 128 weights. */
size_t bml__card_matrix_bytes(size_t rows, size_t n);

/* The lane-tile layout of cl/q1_0.cl for rows [row0, row0 + rows) of the
 * parts (their rows concatenated, nb blocks each): lane l's four bits of
 * sub-block k of block b (bits 4l..4l+3 of the block's word k) become bits
 * 4k..4k+3 of half-word b % 8 of the uint4 of tile b / 8 and lane l;
 * d0[b * rows + r] is the block's scale.  bits holds rows x ceil(nb / 8) x
 * 8 uint4s, d0 as many floats per row as blocks of whole tiles; both are
 * zeroed first: the padding of a last partial tile stays zero. */
void bml__card_repack(const bml__rows_part *parts, size_t row0, size_t rows, size_t nb, uint32_t *bits, float *d0);

/* Repacks the parts (their rows concatenated, all of n columns) and copies
 * them to the card's slabs (blocking); exact: new slabs of just what is
 * needed.  Returns 0 or an error; on error nothing is held. */
int bml__card_matrix_upload(bml__card *c, const bml__rows_part *parts, size_t nparts, size_t n, bool exact,
                            bml__card_matrix *m);
/* Bytes of new slabs uploading rows x n would create (bml__slab_growth); past
 * the card's memory, some sum above it. */
uint64_t bml__card_matrix_growth(const bml__card *c, size_t rows, size_t n, bool exact);
/* The chunks a matrix of rows x n is cut into on c (each within its largest buffer). */
size_t bml__card_matrix_chunks(const bml__card *c, size_t rows, size_t n);
void bml__card_matrix_free(bml__card *c, bml__card_matrix *m); /* NULL-safe, leaves m zeroed */

/* A buffer the card reads or writes and the host fills or reads, grown as
 * needed: the activations of a batch go in one, the results come out of
 * another.  Staged (the default): a device buffer and its host staging,
 * copied by commands.  Zero-copy: one buffer in driver-allocated host memory
 * that the kernels use directly and the host reads and writes through its
 * mapping, kept mapped while b lives -- no copy commands at all (on
 * NVIDIA's driver a cl_nv_create_buffer buffer in host memory, elsewhere
 * CL_MEM_ALLOC_HOST_PTR).  OpenCL
 * leaves a mapped buffer used by a kernel undefined, so zero-copy is used
 * only where the worker has checked it on the card (doc/WORKER.md). */
typedef struct {
  cl_mem buf;  /* what kernels use: a device buffer, or (zero_copy) the host-allocated one */
  cl_mem pin;  /* the staging: driver-allocated (pinned) host memory, mapped while b lives; NULL when zero_copy */
  void *host;  /* the mapping (of pin, or of buf): copies to and from it are DMA, not staged through pageable memory */
  cl_command_queue queue_for_unmap;
  size_t size;
  bool zero_copy; /* the mode: set before the first reserve; kept by free */
} bml__card_buf;

/* Bytes one repacked activation of n takes (a multiple of 64). */
size_t bml__card_act_bytes(size_t n);
/* Writes the activation as the kernels read it into dst (bml__card_act_bytes(n)). */
void bml__card_act_repack(const bml_block_q8_0 *act, size_t n, void *dst);

/* Makes b hold at least `bytes` (its contents are lost when it grows), in
 * its mode.  Returns 0, BML_ENOMEM or an OpenCL error. */
int bml__card_buf_reserve(bml__card *c, bml__card_buf *b, size_t bytes);
/* The size bml__card_buf_reserve gives a buffer asked for bytes (whole 4 KiB pages). */
uint64_t bml__card_buf_size(uint64_t bytes);
/* Enqueues host -> device (write) or device -> host (read) of `bytes` from
 * byte `at` on queue q, non-blocking, with an event in *ev when ev is not
 * NULL; a zero-copy buffer needs no copy: nothing is enqueued (and *ev is
 * NULL).  Returns 0 or an OpenCL error. */
int bml__card_buf_write_on(cl_command_queue q, bml__card_buf *b, size_t at, size_t bytes, cl_event *ev);
int bml__card_buf_read_on(cl_command_queue q, bml__card_buf *b, size_t at, size_t bytes, cl_event *ev);
/* The same for the first `bytes` on c's own queue, with no event. */
int bml__card_buf_write(bml__card *c, bml__card_buf *b, size_t bytes);
int bml__card_buf_read(bml__card *c, bml__card_buf *b, size_t bytes);
void bml__card_buf_free(bml__card_buf *b); /* NULL-safe, leaves b empty in its mode */
/* Fills the first `bytes` (a multiple of 4) of b on the card with FLT_MAX
 * and its staging with -FLT_MAX, finished on return: a kernel that writes
 * nothing, or a read that never happens, then shows (the oracle).
 * Returns 0 or an OpenCL error. */
int bml__card_buf_poison(bml__card *c, bml__card_buf *b, size_t bytes);

/* Enqueues kernel k over every chunk of m, reading the activation at byte
 * act_off of act and writing the results at float out_off of out
 * (non-blocking).  wg: the work-group size of q1_0_mat_vec (0: 64).
 * Returns 0 or an OpenCL error. */
int bml__card_mat_vec_enqueue(bml__card *c, const bml__build *b, bml__kernel_id k, size_t wg,
                              const bml__card_matrix *m, const bml__card_buf *act, size_t act_off,
                              const bml__card_buf *out, size_t out_off);
/* The same on queue q (c->queue or one of c->side). */
int bml__card_mat_vec_enqueue_on(bml__card *c, cl_command_queue q, const bml__build *b, bml__kernel_id k, size_t wg,
                                 const bml__card_matrix *m, const bml__card_buf *act, size_t act_off,
                                 const bml__card_buf *out, size_t out_off);

/* Enqueues batched kernel k on queue q over ndesc products of one slab,
 * whose records are at byte desc_off of act (copied in with the
 * activations) and need `groups` work-groups in all (bml__card_groups),
 * with the launch's event in *ev when ev is not NULL.  Returns 0 or an
 * OpenCL error. */
int bml__card_batched_enqueue(bml__card *c, cl_command_queue q, const bml__build *b, bml__batched_id k, size_t slab,
                              const bml__card_buf *act, size_t desc_off, size_t ndesc, size_t groups,
                              const bml__card_buf *out, cl_event *ev);
/* Work-groups batched kernel k needs for `rows` rows. */
size_t bml__card_groups(const bml__card *c, bml__batched_id k, size_t rows);

/* A product of a batch, as its caller sees it. */
typedef struct {
  const bml__card_matrix *m;
  bml__batched_id kind;
  size_t act_off;  /* bytes, in the activations' buffer */
  size_t out_off;  /* floats, in the results' buffer */
} bml__batch_item;

/* One launch of a planned batch: records [first, first + count) of its
 * table, all of one slab and one kernel, and its work-groups. */
typedef struct {
  size_t slab, first, count, groups;
  bml__batched_id kind;
} bml__batch_run;

/* A record while the batch is planned. */
typedef struct {
  size_t slab, order, groups;
  bml__batched_id kind;
  bool starts; /* a launch starts at this record */
  bml__desc d;
} bml__batch_rec;

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

/* Records a batch of items takes: a record per chunk. */
size_t bml__batch_records(const bml__batch_item *items, size_t n);
/* Plans the items: their records, sorted so that each (slab, kernel) run is
 * one launch (cut every BML_RUN_BYTES of weights, or c->run_bytes, the last one halved down
 * to BML_TAIL_BYTES) and their work-groups numbered within it (a record of
 * N groups gets N, or, where the launch's groups are more than
 * c->max_groups, fewer that each take about as many tiles: kernels.c),
 * into desc; the launches into runs
 * (each room for bml__batch_records records; scratch as well).  Returns the
 * number of runs.  Cannot fail. */
size_t bml__batch_plan(const bml__card *c, const bml__batch_item *items, size_t n, bml__batch_rec *scratch,
                       bml__desc *desc, bml__batch_run *runs);

/* One product on the card alone, start to finish (blocking): for the
 * oracle, the calibration and benchmarks. */
int bml__card_product(bml__card *c, const bml__build *b, bml__kernel_id k, size_t wg,
                      const bml__card_matrix *m, const bml_block_q8_0 *act, bml__card_buf *actbuf,
                      bml__card_buf *outbuf, float *out);

#endif
