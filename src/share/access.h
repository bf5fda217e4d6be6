/* access.h -- the worker's state that the tests read: the limiter's, and the rows held (its test hooks: base/hooks.h). */
#ifndef BML_ACCESS_H
#define BML_ACCESS_H

#include "share/limiter.h"

const bml__limiter *bml__worker_limiter(const bml_worker *w);
/* The rows the card holds of the matrix called `name` (the first member of
 * its group), 0 when none. */
size_t bml__worker_held_rows(const bml_worker *w, const char *name);

#endif
