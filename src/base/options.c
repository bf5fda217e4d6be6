/* options.c -- a caller's versioned option struct (its first member its size), taken member by member. */
#include "base/options.h"
#include "base/log.h"

#include <string.h>

int bml__options_take(const void *given, void *local, size_t local_size, size_t min, const char *what) {
  size_t size;
  memcpy(&size, given, sizeof size);
  if (size < min) {
    bml__error(BML_CAT_ENV, "%s.size=%zu: below the first version's %zu (fill the options with %s_init)", what, size,
               min, what);
    return BML_EINVAL;
  }
  const unsigned char *p = given;
  for (size_t i = local_size; i < size; i++)
    if (p[i] != 0) {
      bml__error(BML_CAT_ENV, "%s: the caller's header sets members this library (%s, %zu bytes of options) does "
                 "not know (%zu bytes)", what, bml_version_string(), local_size, size);
      return BML_ENOTSUP;
    }
  memcpy(local, given, size < local_size ? size : local_size);
  memcpy(local, &local_size, sizeof local_size); /* the size is now the local copy's */
  return 0;
}
