/* logbuf.h -- the tests' log sinks keep what the library logs in a buffer. */
#ifndef BML_TEST_LOGBUF_H
#define BML_TEST_LOGBUF_H

#include <stddef.h>

/* Appends line and a newline to the string in buf (size bytes), cutting
 * what does not fit: a full buffer stays a string and is never overrun
 * (BANKML_DEBUG=all logs far more than a test's buffer holds). */
void logbuf_append(char *buf, size_t size, const char *line);

#endif
