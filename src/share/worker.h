/* worker.h -- the worker's internals that the tests reach: fault injection and the limiter's state. */
#ifndef BML_WORKER_H
#define BML_WORKER_H

#include "share/limiter.h"
#include "card/oracle.h"

const bml__limiter *bml__worker_limiter(const bml_worker *w);
/* The rows the card holds of the matrix called `name` (the first member of
 * its group), 0 when none. */
size_t bml__worker_held_rows(const bml_worker *w, const char *name);
/* The queues a card gets: BANKML_GPU_QUEUES's (asked, 0 when unset), else 4
 * on NVIDIA's driver and 1 elsewhere; always 1 on a software device. */
int bml__worker_queues(int asked, bool nvidia_driver, bool software);
/* The open's share from one product's seconds on the card and on the CPU:
 * card rate / (card rate + CPU rate). */
double bml__calibrated_share(double card_s, double cpu_s);
#endif
