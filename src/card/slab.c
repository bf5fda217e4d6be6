/* slab.c -- a card's matrix memory: a few large buffers, sub-allocated, so one launch can compute many products. */
#include "card/slab.h"
#include "card/card.h"

#include <stdlib.h>
#include <string.h>

/* A slab grows the card's matrix memory by what it already holds, and by
 * BML_SLAB_MIN_BYTES at least (so a model's matrices take a few slabs, not
 * one buffer each: a batched launch per slab), up to this. */
#define SLAB_MAX_BYTES ((size_t)1 << 30)

/* Row-blocks (16 bytes of bits and a float of d0 each) one slab may hold:
 * its bits buffer within CL_DEVICE_MAX_MEM_ALLOC_SIZE, and within
 * SLAB_MAX_BYTES unless one chunk needs more. */
static size_t slab_max_rb(const bml__card *c) {
  size_t by_alloc = (size_t)(c->max_alloc / 16), by_size = SLAB_MAX_BYTES / BML_ROW_BLOCK_BYTES;
  return by_alloc < by_size ? by_alloc : by_size;
}

static size_t slab_bytes(size_t rb) { return rb * BML_ROW_BLOCK_BYTES; }

static size_t total_rb(const bml__card *c) {
  size_t t = 0;
  for (size_t i = 0; i < c->nslabs; i++) t += c->slabs[i].bits ? c->slabs[i].cap : 0;
  return t;
}

/* The capacity of a new slab for a chunk of rb row-blocks, when the card's
 * slabs hold total. */
static size_t new_cap_from(const bml__card *c, size_t total, size_t rb, bool exact) {
  if (exact) return rb;
  size_t grow = total, max = slab_max_rb(c);
  if (grow < BML_SLAB_MIN_BYTES / BML_ROW_BLOCK_BYTES) grow = BML_SLAB_MIN_BYTES / BML_ROW_BLOCK_BYTES;
  if (grow > max) grow = max;
  return grow > rb ? grow : rb;
}

static size_t new_cap(const bml__card *c, size_t rb, bool exact) { return new_cap_from(c, total_rb(c), rb, exact); }

/* The first slab with a free range of rb row-blocks, and the range. */
static bool find_free(const bml__card *c, size_t rb, size_t *slab, size_t *range) {
  for (size_t i = 0; i < c->nslabs; i++) {
    const bml__slab *s = &c->slabs[i];
    for (size_t k = 0; s->bits && k < s->nfree; k++)
      if (s->free[k].len >= rb) {
        *slab = i, *range = k;
        return true;
      }
  }
  return false;
}

uint64_t bml__slab_growth(const bml__card *c, size_t rb, bool exact) {
  size_t slab, range;
  return find_free(c, rb, &slab, &range) ? 0 : slab_bytes(new_cap(c, rb, exact));
}

/* A free range of the simulation below: its slab's slot and its length. */
typedef struct {
  size_t slot, len;
} sim_range;

uint64_t bml__slab_growth_chunks(const bml__card *c, size_t nchunks, size_t rb, size_t rb_last, bool exact) {
  /* bml__slab_alloc's choices, chunk after chunk, on a copy of the free
   * ranges' lengths in its search order (slot, then address): a chunk
   * takes the first range it fits, else a new slab in the first empty
   * slot (or a new one), which grows the total the next slab doubles. */
  size_t n = 0, cap = 8, total = total_rb(c);
  for (size_t i = 0; i < c->nslabs; i++) n += c->slabs[i].bits ? c->slabs[i].nfree : 0;
  cap += n;
  sim_range *r = malloc(cap * sizeof *r);
  if (!r) return UINT64_MAX; /* "does not fit" */
  n = 0;
  for (size_t i = 0; i < c->nslabs; i++)
    for (size_t k = 0; c->slabs[i].bits && k < c->slabs[i].nfree; k++) r[n++] = (sim_range){i, c->slabs[i].free[k].len};
  size_t empty = 0, next_slot = c->nslabs; /* empty slots are taken in order, then new ones */
  uint64_t grow = 0;
  for (size_t ch = 0; ch < nchunks && grow <= c->global_mem; ch++) {
    const size_t need = ch + 1 == nchunks ? rb_last : rb;
    size_t k = 0;
    while (k < n && r[k].len < need) k++;
    if (k < n) {
      r[k].len -= need;
      continue;
    }
    const size_t slab_cap = new_cap_from(c, total, need, exact);
    total += slab_cap, grow += slab_bytes(slab_cap);
    while (empty < c->nslabs && c->slabs[empty].bits) empty++;
    const size_t slot = empty < c->nslabs ? empty++ : next_slot++;
    if (n == cap) {
      sim_range *grown = realloc(r, 2 * cap * sizeof *r);
      if (!grown) {
        free(r);
        return UINT64_MAX;
      }
      r = grown, cap *= 2;
    }
    size_t at = 0;
    while (at < n && r[at].slot < slot) at++;
    memmove(r + at + 1, r + at, (n - at) * sizeof *r);
    r[at] = (sim_range){slot, slab_cap - need};
    n++;
  }
  free(r);
  return grow;
}

uint64_t bml__card_slab_bytes(const bml__card *c) { return slab_bytes(total_rb(c)); }

static void release_slab(bml__slab *s) {
  if (s->bits) clReleaseMemObject(s->bits);
  if (s->d0) clReleaseMemObject(s->d0);
  free(s->free);
  memset(s, 0, sizeof *s);
}

/* A new slab of cap row-blocks in a free slot. */
static int make_slab(bml__card *c, size_t cap, size_t *slot) {
  size_t i = 0;
  while (i < c->nslabs && c->slabs[i].bits) i++;
  if (i == c->nslabs) {
    bml__slab *grown = realloc(c->slabs, (c->nslabs + 1) * sizeof *grown);
    if (!grown) return BML_ENOMEM;
    c->slabs = grown;
    memset(&c->slabs[c->nslabs++], 0, sizeof *grown);
  }
  bml__slab *s = &c->slabs[i];
  cl_mem_flags flags = CL_MEM_READ_ONLY | (c->host_unified ? CL_MEM_ALLOC_HOST_PTR : 0);
  cl_int rc = CL_SUCCESS;
  s->free = malloc(sizeof *s->free);
  if (!s->free) return BML_ENOMEM;
  s->bits = clCreateBuffer(c->ctx, flags, cap * 16, NULL, &rc);
  if (rc == CL_SUCCESS) s->d0 = clCreateBuffer(c->ctx, flags, cap * sizeof(float), NULL, &rc);
  if (rc != CL_SUCCESS) {
    release_slab(s);
    return rc;
  }
  s->cap = cap;
  s->free[0] = (bml__range){0, cap};
  s->nfree = 1, s->free_cap = 1;
  *slot = i;
  return 0;
}

int bml__slab_alloc(bml__card *c, size_t rb, bool exact, size_t *slab, size_t *off) {
  size_t range;
  if (!find_free(c, rb, slab, &range)) {
    int rc = make_slab(c, new_cap(c, rb, exact), slab);
    if (rc != 0) return rc;
    range = 0;
  }
  bml__slab *s = &c->slabs[*slab];
  bml__range *r = &s->free[range];
  *off = r->off;
  r->off += rb, r->len -= rb;
  if (r->len == 0) {
    memmove(r, r + 1, (s->nfree - range - 1) * sizeof *r);
    s->nfree--;
  }
  s->used += rb;
  return 0;
}

void bml__slab_free(bml__card *c, size_t slab, size_t off, size_t rb) {
  if (slab >= c->nslabs || !c->slabs[slab].bits || rb == 0) return;
  bml__slab *s = &c->slabs[slab];
  s->used -= rb;
  if (s->used == 0) { /* an empty slab goes back to the driver */
    release_slab(s);
    return;
  }
  /* insert in address order, merging with the neighbours */
  size_t k = 0;
  while (k < s->nfree && s->free[k].off < off) k++;
  bool before = k > 0 && s->free[k - 1].off + s->free[k - 1].len == off;
  bool after = k < s->nfree && off + rb == s->free[k].off;
  if (before && after) {
    s->free[k - 1].len += rb + s->free[k].len;
    memmove(&s->free[k], &s->free[k + 1], (s->nfree - k - 1) * sizeof *s->free);
    s->nfree--;
  } else if (before) {
    s->free[k - 1].len += rb;
  } else if (after) {
    s->free[k].off = off, s->free[k].len += rb;
  } else {
    if (s->nfree == s->free_cap) {
      size_t cap = s->free_cap * 2;
      bml__range *grown = realloc(s->free, cap * sizeof *grown);
      if (!grown) return; /* the range is lost to this slab until it empties: never wrong, only wasteful */
      s->free = grown, s->free_cap = cap;
    }
    memmove(&s->free[k + 1], &s->free[k], (s->nfree - k) * sizeof *s->free);
    s->free[k] = (bml__range){off, rb};
    s->nfree++;
  }
}

void bml__slab_release_all(bml__card *c) {
  for (size_t i = 0; i < c->nslabs; i++) release_slab(&c->slabs[i]);
  free(c->slabs);
  c->slabs = NULL;
  c->nslabs = 0;
}
