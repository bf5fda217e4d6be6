/* kernels.c -- matrices and activations repacked for the card, and the launches of the Q1_0 kernels. */
#include "card/kernels.h"
#include "base/log.h"
#include "cpu/half.h"
#include "card/card.h"
#include "card/program.h"
#include "card/slab.h"

#include <stdlib.h>
#include <string.h>

/* Blocks of a row as stored: whole tiles of eight (cl/q1_0.cl). */
static size_t padded_blocks(size_t n) { return (n / BML_Q1_0_BLOCK + 7) / 8 * 8; }

size_t bml__card_matrix_bytes(size_t rows, size_t n) { return rows * padded_blocks(n) * BML_ROW_BLOCK_BYTES; }

/* Rows per chunk: the bits buffer (16 bytes a block) is the largest. */
static size_t chunk_rows(const bml__card *c, size_t n) {
  size_t per_row = padded_blocks(n) * 16;
  size_t rows = c->max_alloc / per_row;
  if (c->max_chunk_rows && rows > c->max_chunk_rows) rows = c->max_chunk_rows;
  return rows ? rows : 1;
}

/* The block of row r of the concatenated parts. */
static const bml_block_q1_0 *part_row(const bml__rows_part *parts, size_t r, size_t nb) {
  while (r >= parts->rows) r -= parts++->rows;
  return parts->w + r * nb;
}

/* (kernels.h) */
void bml__card_repack(const bml__rows_part *parts, size_t row0, size_t rows, size_t nb, uint32_t *bits, float *d0) {
  const float *half = bml__half_table();
  const size_t pb = (nb + 7) / 8 * 8;
  memset(bits, 0, rows * pb * 16);
  memset(d0, 0, rows * pb * sizeof *d0);
  for (size_t r = 0; r < rows; r++) {
    const bml_block_q1_0 *row = part_row(parts, row0 + r, nb);
    for (size_t b = 0; b < nb; b++) {
      uint32_t wk[4];
      memcpy(wk, row[b].qs, sizeof wk); /* little-endian host and card: bit j of word k is element j of sub-block k */
      uint32_t *tile = bits + (b / 8) * 8 * rows * 4;
      const unsigned shift = 16 * (b % 2), word = (unsigned)(b % 8) / 2;
      for (unsigned l = 0; l < 8; l++) {
        uint32_t f = 0;
        for (unsigned k = 0; k < 4; k++) f |= ((wk[k] >> (4 * l)) & 15u) << (4 * k);
        tile[(l * rows + r) * 4 + word] |= f << shift;
      }
      d0[b * rows + r] = half[row[b].d];
    }
  }
}

static cl_mem create_buffer(bml__card *c, cl_mem_flags flags, size_t size, cl_int *rc) {
  return clCreateBuffer(c->ctx, flags, size ? size : 4, NULL, rc);
}

/* On a card that shares host memory (integrated GPUs, PoCL), the slabs are
 * allocated by the driver in host memory and the repack writes straight
 * into them, mapped: no staging copy of the matrix. */
static int upload_unified(bml__card *c, const bml__rows_part *parts, size_t nb, const bml__card_chunk *ch) {
  cl_int rc = CL_SUCCESS;
  void *bits = NULL, *d0 = NULL;
  const bml__slab *s = &c->slabs[ch->slab];
  const cl_map_flags map = CL_MAP_WRITE_INVALIDATE_REGION;
  BML_CL_TRY(BML_CAT_WORKER, rc, (bits = clEnqueueMapBuffer(c->queue, s->bits, CL_TRUE, map, ch->off * 16, ch->rb * 16,
                                                            0, NULL, NULL, &rc), rc));
  BML_CL_TRY(BML_CAT_WORKER, rc, (d0 = clEnqueueMapBuffer(c->queue, s->d0, CL_TRUE, map, ch->off * sizeof(float),
                                                          ch->rb * sizeof(float), 0, NULL, NULL, &rc), rc));
  bml__card_repack(parts, ch->row0, ch->rows, nb, bits, d0);
fail:;
  /* an unmap that fails leaves the slab mapped, which a launch may not
   * read (OpenCL leaves it undefined): the upload has failed */
  cl_int unmapped = bits ? clEnqueueUnmapMemObject(c->queue, s->bits, bits, 0, NULL, NULL) : CL_SUCCESS;
  const cl_int unmapped_d0 = d0 ? clEnqueueUnmapMemObject(c->queue, s->d0, d0, 0, NULL, NULL) : CL_SUCCESS;
  if (unmapped == CL_SUCCESS) unmapped = unmapped_d0;
  const cl_int done = clFinish(c->queue);
  return rc != CL_SUCCESS ? rc : unmapped != CL_SUCCESS ? unmapped : done;
}

/* A discrete card: repack into host memory, then one copy each. */
static int upload_discrete(bml__card *c, const bml__rows_part *parts, size_t nb, const bml__card_chunk *ch) {
  uint32_t *bits = malloc(ch->rb * 16);
  float *d0 = malloc(ch->rb * sizeof(float));
  const bml__slab *s = &c->slabs[ch->slab];
  cl_int rc = CL_SUCCESS;
  if (!bits || !d0) {
    rc = BML_ENOMEM;
    goto fail;
  }
  bml__card_repack(parts, ch->row0, ch->rows, nb, bits, d0);
  BML_CL_TRY(BML_CAT_WORKER, rc,
             clEnqueueWriteBuffer(c->queue, s->bits, CL_FALSE, ch->off * 16, ch->rb * 16, bits, 0, NULL, NULL));
  BML_CL_TRY(BML_CAT_WORKER, rc, clEnqueueWriteBuffer(c->queue, s->d0, CL_FALSE, ch->off * sizeof(float),
                                                      ch->rb * sizeof(float), d0, 0, NULL, NULL));
  BML_CL_TRY(BML_CAT_WORKER, rc, clFinish(c->queue));
fail:
  /* a copy enqueued before an error still reads bits (non-blocking): it
   * ends before they are freed */
  if (rc != CL_SUCCESS && bits && d0) clFinish(c->queue);
  free(bits);
  free(d0);
  return rc;
}

size_t bml__card_matrix_chunks(const bml__card *c, size_t rows, size_t n) {
  const size_t per = chunk_rows(c, n);
  return rows / per + (rows % per != 0);
}

uint64_t bml__card_matrix_growth(const bml__card *c, size_t rows, size_t n, bool exact) {
  const size_t per = chunk_rows(c, n), nchunks = bml__card_matrix_chunks(c, rows, n);
  if (nchunks == 0) return 0;
  const size_t last = rows - (nchunks - 1) * per;
  return bml__slab_growth_chunks(c, nchunks, per * padded_blocks(n), last * padded_blocks(n), exact);
}

int bml__card_matrix_upload(bml__card *c, const bml__rows_part *parts, size_t nparts, size_t n, bool exact,
                            bml__card_matrix *m) {
  memset(m, 0, sizeof *m);
  size_t rows = 0;
  for (size_t i = 0; i < nparts; i++) rows += parts[i].rows;
  const size_t nb = n / BML_Q1_0_BLOCK, per = chunk_rows(c, n);
  m->rows = rows;
  m->n = n;
  m->nchunks = (rows + per - 1) / per;
  m->chunks = calloc(m->nchunks ? m->nchunks : 1, sizeof *m->chunks);
  if (!m->chunks) return BML_ENOMEM;
  int rc = 0;
  size_t done = 0;
  for (size_t i = 0; i < m->nchunks && rc == 0; i++) {
    bml__card_chunk *ch = &m->chunks[i];
    ch->row0 = i * per;
    ch->rows = rows - ch->row0 < per ? rows - ch->row0 : per;
    ch->rb = ch->rows * padded_blocks(n);
    rc = bml__slab_alloc(c, ch->rb, exact, &ch->slab, &ch->off);
    if (rc != 0) break;
    done = i + 1;
    rc = c->host_unified ? upload_unified(c, parts, nb, ch) : upload_discrete(c, parts, nb, ch);
  }
  if (rc != 0) {
    m->nchunks = done; /* what was allocated goes back */
    bml__card_matrix_free(c, m);
    return rc;
  }
  m->bytes = bml__card_matrix_bytes(rows, n);
  return 0;
}

void bml__card_matrix_free(bml__card *c, bml__card_matrix *m) {
  if (!m) return;
  for (size_t i = 0; m->chunks && i < m->nchunks; i++) bml__slab_free(c, m->chunks[i].slab, m->chunks[i].off, m->chunks[i].rb);
  free(m->chunks);
  memset(m, 0, sizeof *m);
}

/* ---- activations and results ------------------------------------------------------ */

size_t bml__card_act_bytes(size_t n) { return (n + n / BML_Q8_0_BLOCK * sizeof(float) + 63) / 64 * 64; }

/* The quants, then the scales converted exactly to float (cl/q1_0.cl). */
void bml__card_act_repack(const bml_block_q8_0 *a, size_t n, void *dst) {
  const float *half = bml__half_table();
  int8_t *q = dst;
  float *d1 = (float *)(q + n);
  for (size_t k = 0; k < n / BML_Q8_0_BLOCK; k++) {
    memcpy(q + BML_Q8_0_BLOCK * k, a[k].qs, BML_Q8_0_BLOCK);
    d1[k] = half[a[k].d];
  }
}

uint64_t bml__card_buf_size(uint64_t bytes) { return (bytes + 4095) / 4096 * 4096; }

int bml__card_buf_reserve(bml__card *c, bml__card_buf *b, size_t bytes) {
  if (bytes <= b->size) return 0;
  bml__card_buf_free(b);
  bytes = (size_t)bml__card_buf_size(bytes);
  cl_int rc = CL_SUCCESS;
  if (b->zero_copy && c->create_buffer_nv) {
    BML_CL_TRY(BML_CAT_WORKER, rc, (b->buf = c->create_buffer_nv(c->ctx, CL_MEM_READ_WRITE,
                                                                  BML_MEM_LOCATION_HOST_NV | BML_MEM_PINNED_NV, bytes,
                                                                  NULL, &rc), rc));
  } else if (b->zero_copy) {
    BML_CL_TRY(BML_CAT_WORKER, rc, (b->buf = create_buffer(c, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, &rc), rc));
  } else {
    BML_CL_TRY(BML_CAT_WORKER, rc, (b->buf = create_buffer(c, CL_MEM_READ_WRITE, bytes, &rc), rc));
    BML_CL_TRY(BML_CAT_WORKER, rc, (b->pin = create_buffer(c, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, &rc), rc));
  }
  b->queue_for_unmap = c->queue;
  BML_CL_TRY(BML_CAT_WORKER, rc, (b->host = clEnqueueMapBuffer(c->queue, b->zero_copy ? b->buf : b->pin, CL_TRUE,
                                                                CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &rc),
                                  rc));
  b->size = bytes;
  return 0;
fail:
  bml__card_buf_free(b);
  return rc;
}

int bml__card_buf_write_on(cl_command_queue q, bml__card_buf *b, size_t at, size_t bytes, cl_event *ev) {
  if (ev) *ev = NULL;
  if (b->zero_copy) return 0;
  return clEnqueueWriteBuffer(q, b->buf, CL_FALSE, at, bytes, (char *)b->host + at, 0, NULL, ev);
}

int bml__card_buf_read_on(cl_command_queue q, bml__card_buf *b, size_t at, size_t bytes, cl_event *ev) {
  if (ev) *ev = NULL;
  if (b->zero_copy) return 0;
  return clEnqueueReadBuffer(q, b->buf, CL_FALSE, at, bytes, (char *)b->host + at, 0, NULL, ev);
}

int bml__card_buf_write(bml__card *c, bml__card_buf *b, size_t bytes) {
  return bml__card_buf_write_on(c->queue, b, 0, bytes, NULL);
}

int bml__card_buf_read(bml__card *c, bml__card_buf *b, size_t bytes) {
  return bml__card_buf_read_on(c->queue, b, 0, bytes, NULL);
}

int bml__card_buf_poison(bml__card *c, bml__card_buf *b, size_t bytes) {
  const uint32_t on_card = 0x7f7fffffu, staged = 0xff7fffffu; /* FLT_MAX, -FLT_MAX */
  /* zero-copy: one memory, which the card writes and the host reads */
  const uint32_t host = b->zero_copy ? on_card : staged;
  for (size_t i = 0; i < bytes / 4; i++) memcpy((char *)b->host + 4 * i, &host, 4);
  if (b->zero_copy) return 0;
  cl_int rc = clEnqueueFillBuffer(c->queue, b->buf, &on_card, sizeof on_card, 0, bytes, 0, NULL, NULL);
  return rc == CL_SUCCESS ? clFinish(c->queue) : rc;
}

/* Needs the queue of the card that made b: the worker and the oracle free
 * their buffers before they close the card. */
void bml__card_buf_free(bml__card_buf *b) {
  if (!b) return;
  cl_mem mapped = b->zero_copy ? b->buf : b->pin;
  if (b->host && b->queue_for_unmap) {
    clEnqueueUnmapMemObject(b->queue_for_unmap, mapped, b->host, 0, NULL, NULL);
    clFinish(b->queue_for_unmap);
  }
  if (b->pin) clReleaseMemObject(b->pin);
  if (b->buf) clReleaseMemObject(b->buf);
  const bool zero_copy = b->zero_copy;
  memset(b, 0, sizeof *b);
  b->zero_copy = zero_copy;
}

/* ---- launches ----------------------------------------------------------------------- */

static size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

/* The table kernels' work-group: 8 work-items per row of a slice (8 /
 * -DBML_LRLPT for _lr), and the rows one work-group takes (-DBML_LROWS, or
 * -DBML_LRROWS x -DBML_LRRPT). */
static size_t table_local(const bml__card *c, bool lr) { return lr ? bml__card_lr_wg(c) : 8 * c->lrows; }
static size_t table_rows(const bml__card *c, bool lr) { return lr ? c->lrrows * c->lrrpt : c->lrows; }
/* The work-groups a table kernel's launch of `groups` groups runs: each
 * takes the launch's groups in turn (cl/q1_0_lanes.cl, bml_lanes). */
static size_t table_groups(const bml__card *c, size_t groups) {
  return c->max_groups && groups > c->max_groups ? c->max_groups : groups;
}

/* Global and local sizes of kernel k over rows; the global size is padded to
 * a multiple of the work-group size (the kernels ignore the padding). */
static void launch_sizes(const bml__card *c, bml__kernel_id k, size_t wg, size_t kmax, size_t rows,
                         size_t *global, size_t *local) {
  if (k == BML_KERNEL_MAT_VEC8) {
    *local = bml__card_wg8(c); /* as -DBML_WG */
    *global = round_up(rows * 8, *local);
  } else if (k == BML_KERNEL_MAT_VEC_L || k == BML_KERNEL_MAT_VEC_LR) {
    const bool lr = k == BML_KERNEL_MAT_VEC_LR;
    *local = table_local(c, lr);
    *global = table_groups(c, (rows + table_rows(c, lr) - 1) / table_rows(c, lr)) * *local;
  } else {
    *local = wg ? wg : 64;
    if (*local > c->max_work_group) *local = c->max_work_group;
    if (kmax && *local > kmax) *local = kmax; /* what this kernel may run (CL_KERNEL_WORK_GROUP_SIZE) */
    *global = round_up(rows, *local);
  }
}

static int enqueue_chunk(bml__card *c, cl_command_queue q, cl_kernel kern, bml__kernel_id k, size_t wg,
                         size_t kmax, const bml__card_chunk *ch, size_t nb, const bml__card_buf *act,
                         size_t act_off, const bml__card_buf *out, size_t out_off) {
  cl_int rc = CL_SUCCESS;
  const bml__slab *s = &c->slabs[ch->slab];
  cl_uint rows = (cl_uint)ch->rows, nbu = (cl_uint)nb, aoff = (cl_uint)act_off, ooff = (cl_uint)(out_off + ch->row0),
          off = (cl_uint)ch->off;
  size_t global, local;
  launch_sizes(c, k, wg, kmax, ch->rows, &global, &local);
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 0, sizeof(cl_mem), &s->bits));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 1, sizeof(cl_mem), &s->d0));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 2, sizeof(cl_mem), &act->buf));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 3, sizeof aoff, &aoff));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 4, sizeof rows, &rows));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 5, sizeof nbu, &nbu));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 6, sizeof(cl_mem), &out->buf));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 7, sizeof ooff, &ooff));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 8, sizeof off, &off)); /* bits, in uint4s */
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 9, sizeof off, &off)); /* d0, in floats */
  BML_CL_TRY(BML_CAT_WORKER, rc, clEnqueueNDRangeKernel(q, kern, 1, NULL, &global, &local, 0, NULL, NULL));
fail:
  return rc;
}

size_t bml__card_groups(const bml__card *c, bml__batched_id k, size_t rows) {
  size_t per = table_rows(c, k == BML_BATCHED_LR);
  return (rows + per - 1) / per;
}

size_t bml__batch_records(const bml__batch_item *items, size_t n) {
  size_t r = 0;
  for (size_t i = 0; i < n; i++) r += items[i].m->nchunks;
  return r;
}

static bool same_run(const bml__batch_rec *a, const bml__batch_rec *b) { return a->slab == b->slab && a->kind == b->kind; }

/* Bytes of weights a record's launch reads. */
static size_t rec_bytes(const bml__batch_rec *r) {
  return bml__card_matrix_bytes(r->d.rows, (size_t)r->d.nb * BML_Q1_0_BLOCK);
}

/* A record's steps (its groups times the tiles of a row), and its
 * work-groups where each computes about k steps (at most its groups). */
static size_t rec_steps(const bml__batch_rec *r) { return r->groups * (((size_t)r->d.nb + 7) / 8); }
static size_t rec_wgs(const bml__batch_rec *r, size_t k) {
  const size_t w = (rec_steps(r) + k - 1) / k;
  return w < r->groups ? w : r->groups;
}

static int rec_cmp(const void *pa, const void *pb) {
  const bml__batch_rec *a = pa, *b = pb;
  if (a->slab != b->slab) return a->slab < b->slab ? -1 : 1;
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  return a->order < b->order ? -1 : a->order > b->order;
}

size_t bml__batch_plan(const bml__card *c, const bml__batch_item *items, size_t n, bml__batch_rec *scratch,
                       bml__desc *desc, bml__batch_run *runs) {
  size_t nrec = 0;
  for (size_t i = 0; i < n; i++) {
    const bml__card_matrix *m = items[i].m;
    for (size_t k = 0; k < m->nchunks; k++, nrec++) {
      const bml__card_chunk *ch = &m->chunks[k];
      bml__batch_rec *r = &scratch[nrec];
      r->slab = ch->slab, r->order = nrec, r->kind = items[i].kind;
      r->groups = bml__card_groups(c, items[i].kind, ch->rows);
      r->d = (bml__desc){0, (uint32_t)ch->rows, (uint32_t)(m->n / BML_Q1_0_BLOCK), (uint32_t)ch->off,
                         (uint32_t)ch->off, (uint32_t)items[i].act_off, (uint32_t)(items[i].out_off + ch->row0), 0};
    }
  }
  qsort(scratch, nrec, sizeof *scratch, rec_cmp);
  /* where launches start: a new slab or kernel, every BML_RUN_BYTES ... */
  const size_t cut = c->run_bytes ? c->run_bytes : BML_RUN_BYTES;
  size_t bytes = 0, last = 0;
  for (size_t i = 0; i < nrec; i++) {
    scratch[i].starts = i == 0 || !same_run(&scratch[i - 1], &scratch[i]) || bytes >= cut;
    if (scratch[i].starts) bytes = 0, last = i;
    bytes += rec_bytes(&scratch[i]);
  }
  /* ... and the last launch halved, then its second half, ... while the
   * half is BML_TAIL_BYTES or more: what the card computes after the last
   * read has started is small */
  while (nrec - last >= 2 && bytes >= 2 * BML_TAIL_BYTES) {
    size_t i = last, half = 0;
    while (i + 1 < nrec && 2 * (half + rec_bytes(&scratch[i])) <= bytes) half += rec_bytes(&scratch[i++]);
    if (i == last) half += rec_bytes(&scratch[i++]); /* a first record of more than half */
    if (i >= nrec) break;
    scratch[i].starts = true;
    last = i, bytes -= half;
  }
  size_t nruns = 0;
  for (size_t i = 0; i < nrec; i++) {
    if (scratch[i].starts) runs[nruns++] = (bml__batch_run){scratch[i].slab, i, 0, 0, scratch[i].kind};
    runs[nruns - 1].count++;
  }
  /* each launch's work-groups: a work-group per group of rows, or where
   * the launch's groups would be more than max_groups (the work-groups past
   * what the card holds at once would be a second wave), ceil(steps / k)
   * for a record of `steps` tiles of groups (groups x tiles a row; at most
   * its groups), k the least that keeps the launch within max_groups: each
   * work-group then computes about k tiles, whatever its record's width.  A
   * launch with a record of fewer than k steps keeps a work-group per group:
   * that record's work-groups would end early and the launch's be uneven,
   * where the card's own scheduling of many work-groups evens them out.
   * A launch of more records than max_groups (a model's token on a card of
   * few compute units, or on PoCL's 4) cannot keep within it, a work-group
   * a record at least: it runs in waves whatever is planned.  Its
   * work-groups take k steps each (a record's last one fewer), k the
   * launch's steps over BML_PLAN_WAVES times max_groups, or the fewest steps
   * of a record where that is less: the waves are then many enough for the
   * card's scheduling to even them out, and each work-group still starts
   * once for several groups (a work-group per group, as such a launch had,
   * left PoCL's bonsai-1.7b token 30 % slower than the kernel before the
   * stream: doc/PERFORMANCE.md). */
  for (size_t r = 0; r < nruns; r++) {
    bml__batch_run *run = &runs[r];
    size_t k = 0, groups = 0, steps = 0, most = 0, least = SIZE_MAX;
    for (size_t i = run->first; i < run->first + run->count; i++) {
      const size_t st = rec_steps(&scratch[i]);
      groups += scratch[i].groups, steps += st;
      if (st > most) most = st;
      if (st < least) least = st;
    }
    if (c->max_groups && groups > c->max_groups && run->count > c->max_groups) {
      const size_t waves = (steps + BML_PLAN_WAVES * c->max_groups - 1) / (BML_PLAN_WAVES * c->max_groups);
      k = waves < least ? waves : least;
    } else if (c->max_groups && groups > c->max_groups) {
      for (k = (steps + c->max_groups - 1) / c->max_groups;; k += (k + 15) / 16) {
        size_t wgs = 0;
        for (size_t i = run->first; i < run->first + run->count; i++) wgs += rec_wgs(&scratch[i], k);
        if (wgs <= c->max_groups) break; /* (at the latest at k = most: a work-group a record) */
      }
      if (k > most) k = most;
      if (least < k) k = 0; /* a record too small to share */
    }
    for (size_t i = run->first; i < run->first + run->count; i++) {
      const size_t wgs = k ? rec_wgs(&scratch[i], k) : scratch[i].groups;
      scratch[i].d.first_group = (uint32_t)run->groups;
      scratch[i].d.wgs = (uint32_t)wgs;
      run->groups += wgs;
      desc[i] = scratch[i].d;
    }
  }
  return nruns;
}

int bml__card_batched_enqueue(bml__card *c, cl_command_queue q, const bml__build *b, bml__batched_id k, size_t slab,
                              const bml__card_buf *act, size_t desc_off, size_t ndesc, size_t groups,
                              const bml__card_buf *out, cl_event *ev) {
  cl_int rc = CL_SUCCESS;
  cl_kernel kern = b->batched[k];
  const bml__slab *s = &c->slabs[slab];
  cl_uint doff = (cl_uint)desc_off, nd = (cl_uint)ndesc;
  size_t local = table_local(c, k == BML_BATCHED_LR), global = groups * local; /* as planned */
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 0, sizeof(cl_mem), &s->bits));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 1, sizeof(cl_mem), &s->d0));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 2, sizeof(cl_mem), &act->buf));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 3, sizeof doff, &doff));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 4, sizeof nd, &nd));
  BML_CL_TRY(BML_CAT_WORKER, rc, clSetKernelArg(kern, 5, sizeof(cl_mem), &out->buf));
  BML_CL_TRY(BML_CAT_WORKER, rc, clEnqueueNDRangeKernel(q, kern, 1, NULL, &global, &local, 0, NULL, ev));
fail:
  return rc;
}

int bml__card_mat_vec_enqueue_on(bml__card *c, cl_command_queue q, const bml__build *b, bml__kernel_id k, size_t wg,
                                 const bml__card_matrix *m, const bml__card_buf *act, size_t act_off,
                                 const bml__card_buf *out, size_t out_off) {
  const size_t nb = m->n / BML_Q1_0_BLOCK;
  for (size_t i = 0; i < m->nchunks; i++) {
    int rc = enqueue_chunk(c, q, b->kernel[k], k, wg, b->kernel_wg[k], &m->chunks[i], nb, act, act_off, out, out_off);
    if (rc != 0) return rc;
  }
  return 0;
}

int bml__card_mat_vec_enqueue(bml__card *c, const bml__build *b, bml__kernel_id k, size_t wg,
                              const bml__card_matrix *m, const bml__card_buf *act, size_t act_off,
                              const bml__card_buf *out, size_t out_off) {
  return bml__card_mat_vec_enqueue_on(c, c->queue, b, k, wg, m, act, act_off, out, out_off);
}

int bml__card_product(bml__card *c, const bml__build *b, bml__kernel_id k, size_t wg, const bml__card_matrix *m,
                      const bml_block_q8_0 *act, bml__card_buf *actbuf, bml__card_buf *outbuf, float *out) {
  size_t abytes = bml__card_act_bytes(m->n);
  int rc = bml__card_buf_reserve(c, actbuf, abytes);
  if (rc == 0) rc = bml__card_buf_reserve(c, outbuf, m->rows * sizeof(float));
  if (rc != 0) return rc;
  bml__card_act_repack(act, m->n, actbuf->host);
  rc = bml__card_buf_write(c, actbuf, abytes);
  if (rc == 0) rc = bml__card_mat_vec_enqueue(c, b, k, wg, m, actbuf, 0, outbuf, 0);
  if (rc == 0) rc = bml__card_buf_read(c, outbuf, m->rows * sizeof(float));
  if (rc == 0) rc = clFinish(c->queue);
  if (rc == 0) memcpy(out, outbuf->host, m->rows * sizeof(float));
  return rc;
}
