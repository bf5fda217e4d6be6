/* card.h -- one OpenCL card at work: its context, the built kernels, matrices repacked on it, launches. */
#ifndef BML_CARD_H
#define BML_CARD_H

#include "bml.h"
#include "clinc.h"
#include "device.h"

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

/* One build of cl/q1_0.cl. */
typedef struct {
  cl_program program;
  cl_kernel kernel[BML_KERNEL_COUNT];
  cl_kernel probe;
  bool emulated_fma;
  char options[512]; /* the exact options it was built with */
} bml__build;

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
  size_t max_chunk_rows; /* test hook: rows per buffer chunk (0: by max_alloc only) */
  cl_ulong local_mem;
  size_t lrows;          /* q1_0_mat_vec_l's rows per work-group (-DBML_LROWS) */
  size_t lrrows, lrrpt;  /* q1_0_mat_vec_lr's rows per slice and slices (-DBML_LRROWS, -DBML_LRRPT) */
  size_t lr_from;        /* products of this many rows or more run q1_0_mat_vec_lr, the others _l (tune.c) */
} bml__card;

/* Sets the table kernels' shapes for later builds: q1_0_mat_vec_l's rows
 * per work-group, q1_0_mat_vec_lr's rows per slice and slices per
 * work-item.  A work-group is 8 work-items per row of a slice: rows are
 * halved (not below 8) until it fits the device's work-group size; slices
 * are clamped to 1..4.  Cannot fail. */
void bml__card_set_tunables(bml__card *c, size_t lrows, size_t lrrows, size_t lrrpt);

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
void bml__card_close(bml__card *c); /* NULL-safe */

/* Gives c `queues` in-order queues in all (its own and queues - 1 side
 * queues, at most BML_MAX_QUEUES), for launches that may run side by side.
 * Returns 0 or an OpenCL error (the queues made so far stay). */
int bml__card_set_queues(bml__card *c, size_t queues);
/* clFinish on every queue of c; the first error, or 0. */
int bml__card_finish(bml__card *c);

/* Builds cl/q1_0.cl for the card: -cl-fp32-correctly-rounded-divide-sqrt
 * when the device advertises it, never a fast-math option, plus
 * -DBML_EMULATE_FMA=1 when emulate, plus extra (test hooks; may be NULL).
 * Returns 0, or an error with the build log and options in *log (malloc'd,
 * free it; may be set on success too: NULL when there is nothing to say). */
int bml__card_build(bml__card *c, bool emulate, const char *extra, bml__build *b, char **log);
void bml__build_release(bml__build *b); /* NULL-safe, leaves b zeroed */

/* A run of rows of a caller's matrix: the first `rows` rows of w.  A card
 * matrix is one or more of them, concatenated (a group's matrices, fused). */
typedef struct {
  const bml_block_q1_0 *w;
  size_t rows;
} bml__rows_part;

/* Rows of a card matrix held in one pair of buffers. */
typedef struct {
  size_t row0, rows;
  cl_mem bits, d0;
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

/* Repacks the parts (their rows concatenated, all of n columns) and copies
 * them to the card (blocking).  Returns 0 or an error; on error nothing is
 * held. */
int bml__card_matrix_upload(bml__card *c, const bml__rows_part *parts, size_t nparts, size_t n,
                            bml__card_matrix *m);
void bml__card_matrix_free(bml__card_matrix *m); /* NULL-safe, leaves m zeroed */

/* A device buffer with its host staging, grown as needed: the activations
 * of a batch go in one, the results come out of another. */
typedef struct {
  cl_mem buf;
  cl_mem pin;  /* the staging: driver-allocated (pinned) host memory, mapped while b lives */
  void *host;  /* pin's mapping: copies to and from it are DMA, not staged through pageable memory */
  cl_command_queue queue_for_unmap;
  size_t size;
} bml__card_buf;

/* Bytes one repacked activation of n takes (a multiple of 64). */
size_t bml__card_act_bytes(size_t n);
/* Writes the activation as the kernels read it into dst (bml__card_act_bytes(n)). */
void bml__card_act_repack(const bml_block_q8_0 *act, size_t n, void *dst);

/* Makes b hold at least `bytes` (its contents are lost when it grows).
 * Returns 0, BML_ENOMEM or an OpenCL error. */
int bml__card_buf_reserve(bml__card *c, bml__card_buf *b, size_t bytes);
/* Enqueues host -> device (write) or device -> host (read) of the first
 * `bytes`, non-blocking.  Returns 0 or an OpenCL error. */
int bml__card_buf_write(bml__card *c, bml__card_buf *b, size_t bytes);
int bml__card_buf_read(bml__card *c, bml__card_buf *b, size_t bytes);
void bml__card_buf_free(bml__card_buf *b); /* NULL-safe, leaves b zeroed */

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

/* One product on the card alone, start to finish (blocking): for the
 * oracle, the calibration and benchmarks. */
int bml__card_product(bml__card *c, const bml__build *b, bml__kernel_id k, size_t wg,
                      const bml__card_matrix *m, const bml_block_q8_0 *act, bml__card_buf *actbuf,
                      bml__card_buf *outbuf, float *out);

#endif
