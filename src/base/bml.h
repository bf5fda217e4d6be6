/* bml.h -- where every file of the library starts: config.h, the public header, the C types, two macros. */
#ifndef BML_INTERNAL_H
#define BML_INTERNAL_H

#include <config.h>

#include "bankml-cl.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BML_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define BML_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BML_PRINTF(f, a)
#endif

#endif /* BML_INTERNAL_H */
