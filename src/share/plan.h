/* plan.h -- the worker's pure decisions: values in (products, shares, held rows, measured seconds), a plan out;
 * no OpenCL, no clock, no threads (share/limiter.h holds the limiter, the balances and the shapes' calibration). */
#ifndef BML_PLAN_H
#define BML_PLAN_H

#include "base/bml.h"

/* The card's rows of a product of `rows` rows at share `share` (rounded to
 * the nearest, at most rows). */
size_t bml__plan_card_rows(double share, size_t rows);

/* Products in a group at most: neighbours with one activation are one
 * group of a submission (one activation copied in, one record per chunk). */
#define BML_PLAN_GROUP_MOST 16
/* The end of the group that starts at product i of p[0..count): the
 * products after it with its activation and n, up to BML_PLAN_GROUP_MOST. */
size_t bml__plan_group_end(const bml_product *p, size_t count, size_t i);

/* A held matrix's history of moves (uploads again with another split). */
typedef struct {
  int strikes;       /* products in a row whose balance asked for a split far from the held one */
  unsigned moves;    /* times the balance moved it (uploaded it again with another split) */
  int last_dir;      /* the last move's direction: +1 the card's part grew, -1 it shrank */
  size_t since_move; /* products planned since it was uploaded */
  double upload_s;   /* seconds its last upload took, its card buffers freed and made again (0: not known) */
} bml__moves;

/* Whether a group of count products p (p[i].rows rows each), whose matrix
 * the card holds with held[i] card rows of each, moves to the balance's
 * wish want[i] now (true), or keeps the rows held (false): a wish close
 * to the held rows keeps them, one far (or not close several products in
 * a row) moves them, but a move back waits longer after each move, and
 * leaving the card alone (every row held) waits until the split's
 * predicted saving, gain seconds a product, over the products planned
 * since the last upload repays an upload's seconds.  One product more
 * planned on h, whose strikes it counts. */
bool bml__plan_move(bml__moves *h, const bml_product *p, const size_t *held, const size_t *want, size_t count,
                    double gain);

/* The queues a card gets: BANKML_GPU_QUEUES's (asked, 0 when unset), else 4
 * on NVIDIA's driver and 1 elsewhere; always 1 on a software device. */
int bml__worker_queues(int asked, bool nvidia_driver, bool software);
/* The open's share from one product's seconds on the card and on the CPU:
 * card rate / (card rate + CPU rate). */
double bml__calibrated_share(double card_s, double cpu_s);

#endif
