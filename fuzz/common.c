/* common.c -- the fuzz targets' scratch directory, input files and fields. */
#define _GNU_SOURCE
#include "common.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static char dir[512];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void remove_dir(void) {
  if (dir[0]) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fuzz_dir(void) {
  if (dir[0]) return dir;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/bml-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror(dir);
    exit(1);
  }
  atexit(remove_dir);
  return dir;
}

void fuzz_write(const char *name, const void *data, size_t size, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", fuzz_dir(), name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || (size > 0 && write(fd, data, size) != (ssize_t)size) || close(fd) != 0) {
    perror(path);
    exit(1);
  }
}

size_t fuzz_split(const uint8_t *data, size_t size, uint8_t sep, const uint8_t **at, size_t *len, size_t max) {
  size_t n = 0, start = 0;
  for (size_t i = 0; i <= size && n < max; i++) {
    if (i < size && data[i] != sep) continue;
    at[n] = data + start;
    len[n++] = i - start;
    start = i + 1;
  }
  for (size_t i = n; i < max; i++) at[i] = data, len[i] = 0;
  return n;
}

size_t fuzz_fields(const uint8_t *data, size_t size, uint8_t sep, char **fields, size_t max) {
  const uint8_t *at[64];
  size_t len[64], n = fuzz_split(data, size, sep, at, len, max < 64 ? max : 64);
  for (size_t i = 0; i < max; i++)
    if (!(fields[i] = strndup(i < 64 ? (const char *)at[i] : "", i < 64 ? len[i] : 0))) abort();
  return n;
}

void fuzz_fields_free(char **fields, size_t max) {
  for (size_t i = 0; i < max; i++) free(fields[i]);
}
