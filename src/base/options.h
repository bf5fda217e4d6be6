/* options.h -- a caller's versioned option struct, taken member by member. */
#ifndef BML_OPTIONS_H
#define BML_OPTIONS_H

#include "base/bml.h"

/* Copies the caller's option struct `given` (its first member its size)
 * into local (local_size bytes, already filled with the defaults): the
 * members both know.  min: the size of the struct's first version.
 * Returns 0, BML_EINVAL (a size below min: `what` names the struct in the
 * message) or BML_ENOTSUP (members beyond local_size that are not zero: a
 * newer header's, which this library cannot honour). */
int bml__options_take(const void *given, void *local, size_t local_size, size_t min, const char *what);

#endif
