/* slab.h -- a card's matrix memory: slabs of row-blocks, sub-allocated first-fit (slab.c). */
#ifndef BML_SLAB_H
#define BML_SLAB_H

#include "card/card.h"

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

#endif
