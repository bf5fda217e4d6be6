/* kernels.h -- matrices repacked onto a card, its buffers, launches and batches planned (kernels.c). */
#ifndef BML_KERNELS_H
#define BML_KERNELS_H

#include "card/card.h"

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
