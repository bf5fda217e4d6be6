/* logbuf.c -- the tests' log sinks keep what the library logs in a buffer. */
#include "logbuf.h"

#include <string.h>

void logbuf_append(char *buf, size_t size, const char *line) {
  size_t used = strnlen(buf, size);
  if (size == 0 || used + 1 >= size) return;
  size_t room = size - used - 1, len = strlen(line);
  size_t n = len < room ? len : room;
  memcpy(buf + used, line, n);
  if (n < room) buf[used + n++] = '\n';
  buf[used + n] = '\0';
}
