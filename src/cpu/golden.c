/* golden.c -- reads ggml's golden vectors (for the oracle and the tests) and compares floats bit for bit. */
#include "cpu/golden.h"
#include "base/env.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *bml__golden_default_dir(void) {
  const char *d = NULL;
  bml__env_golden_dir(&d);
  return d ? d : BML_PKGDATADIR "/golden";
}

typedef struct {
  FILE *f;
  const char *path;
  uint64_t left; /* bytes of the file not read yet */
  bool bad, nomem;
  char *err;
  size_t errlen;
} reader;

static bool rd(reader *r, void *dst, size_t size) {
  if (r->bad) return false;
  if (size && fread(dst, 1, size, r->f) != size) {
    snprintf(r->err, r->errlen, "%s: truncated file", r->path);
    r->bad = true;
  }
  r->left -= r->bad ? r->left : size;
  return !r->bad;
}

static uint32_t rd_u32(reader *r) {
  uint8_t b[4] = {0};
  rd(r, b, 4);
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Only after the case's whole size was checked against the bytes left
 * (claims): a length read from the file never sizes an allocation alone. */
static void *rd_alloc(reader *r, size_t size) {
  if (r->bad) return NULL;
  void *p = malloc(size ? size : 1);
  if (!p) {
    snprintf(r->err, r->errlen, "%s: out of memory for %zu bytes", r->path, size);
    r->bad = r->nomem = true;
    return NULL;
  }
  if (!rd(r, p, size)) {
    free(p);
    return NULL;
  }
  return p;
}

/* Whether the file has the `need` bytes a case says it holds; else the
 * reason, naming the case and both sizes. */
static bool claims(reader *r, int i, uint64_t need) {
  if (need <= r->left) return true;
  snprintf(r->err, r->errlen, "%s: case %d: truncated file (the case takes %llu bytes, %llu are left)", r->path, i,
           (unsigned long long)need, (unsigned long long)r->left);
  r->bad = true;
  return false;
}

/* Opens dir/name and checks its header; each case takes at least
 * min_case bytes, so the count is bounded by the file's size.  Returns the
 * case count, or an error. */
static int open_golden(reader *r, const char *dir, const char *name, uint32_t kind, uint64_t min_case, char *path,
                       size_t len) {
  snprintf(path, len, "%s/%s", dir, name);
  r->path = path;
  r->bad = false;
  /* not blocking: a FIFO (or a device) where the file should be would
   * wait for a writer; only a regular file is read */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    snprintf(r->err, r->errlen, "cannot open %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return BML_EIO;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(r->err, r->errlen, "%s: not a regular file", path);
    close(fd);
    return BML_EFORMAT;
  }
  r->left = (uint64_t)st.st_size;
  r->f = fdopen(fd, "rb");
  if (!r->f) {
    snprintf(r->err, r->errlen, "cannot open %s: %s", path, strerror(errno));
    close(fd);
    return BML_EIO;
  }
  char magic[4];
  if (!rd(r, magic, 4) || memcmp(magic, "BMLG", 4) != 0 || rd_u32(r) != 1 || rd_u32(r) != kind) {
    snprintf(r->err, r->errlen, "%s: not a version-1 kind-%u golden file", path, kind);
    fclose(r->f);
    return BML_EFORMAT;
  }
  uint32_t n = rd_u32(r);
  if (r->bad || n == 0 || n > 100000 || n > r->left / min_case) {
    if (r->bad)
      snprintf(r->err, r->errlen, "%s: truncated file (no case count)", path);
    else
      snprintf(r->err, r->errlen, "%s: bad case count %u (1 to 100000, each case at least %llu bytes: %llu are left)",
               path, n, (unsigned long long)min_case, (unsigned long long)r->left);
    fclose(r->f);
    return BML_EFORMAT;
  }
  return (int)n;
}

/* After the last case: the file must end there (more is not a file this
 * reader knows: a count that says fewer cases than it holds). */
static void at_end(reader *r) {
  if (r->bad || fgetc(r->f) == EOF) return;
  snprintf(r->err, r->errlen, "%s: bytes after its last case", r->path);
  r->bad = true;
}

/* The smallest case of each kind: its header and one block's data (Q1_0:
 * 1 row of 128, 4 activation blocks and two results; Q8_0: 32 inputs and
 * two blocks). */
#define Q1_MIN_CASE (12 + sizeof(bml_block_q1_0) + 4 * sizeof(bml_block_q8_0) + 2 * sizeof(float))
#define Q8_MIN_CASE (4 + 32 * sizeof(float) + 2 * sizeof(bml_block_q8_0))

static void read_q1_case(reader *r, bml__golden_q1 *c, int i) {
  c->rows = rd_u32(r);
  c->n = rd_u32(r);
  c->flags = rd_u32(r);
  if (r->bad || c->n % 128 != 0 || c->n == 0 || c->n > (1u << 20) || c->rows == 0 || c->rows > (1u << 20)) {
    if (!r->bad) snprintf(r->err, r->errlen, "%s: case %d: bad shape", r->path, i);
    r->bad = true;
    return;
  }
  /* at most 2^20 rows of 2^13 blocks: 151 GB, which fits 64 bits */
  const uint64_t w = (uint64_t)c->rows * (c->n / 128) * sizeof(bml_block_q1_0),
                 a = (uint64_t)(c->n / 32) * sizeof(bml_block_q8_0), f = (uint64_t)c->rows * sizeof(float);
  if (!claims(r, i, w + a + 2 * f)) return;
  c->w = rd_alloc(r, (size_t)w);
  c->a = rd_alloc(r, (size_t)a);
  c->ref = rd_alloc(r, (size_t)f);
  c->generic = rd_alloc(r, (size_t)f);
}

static void read_q8_case(reader *r, bml__golden_q8 *c, int i) {
  c->n = rd_u32(r);
  if (r->bad || c->n % 32 != 0 || c->n == 0 || c->n > (1u << 24)) {
    if (!r->bad) snprintf(r->err, r->errlen, "%s: case %d: bad n", r->path, i);
    r->bad = true;
    return;
  }
  const uint64_t x = (uint64_t)c->n * sizeof(float), q = (uint64_t)(c->n / 32) * sizeof(bml_block_q8_0);
  if (!claims(r, i, x + 2 * q)) return;
  c->x = rd_alloc(r, (size_t)x);
  c->q = rd_alloc(r, (size_t)q);
  c->qref = rd_alloc(r, (size_t)q);
}

int bml__golden_load_q1(const char *dir, bml__golden_q1 **out, char *err, size_t errlen) {
  char path[4200];
  reader r = {.err = err, .errlen = errlen};
  int n = open_golden(&r, dir, BML__GOLDEN_Q1_FILE, 1, Q1_MIN_CASE, path, sizeof path);
  if (n < 0) return n;
  bml__golden_q1 *c = calloc((size_t)n, sizeof *c);
  if (!c) snprintf(err, errlen, "%s: out of memory for %d cases", path, n);
  for (int i = 0; c && i < n && !r.bad; i++) read_q1_case(&r, &c[i], i);
  at_end(&r);
  int rc = !c || r.nomem ? BML_ENOMEM : r.bad ? BML_EFORMAT : n;
  fclose(r.f);
  if (rc < 0) {
    bml__golden_free_q1(c, n);
    return rc;
  }
  *out = c;
  return n;
}

int bml__golden_load_q8(const char *dir, bml__golden_q8 **out, char *err, size_t errlen) {
  char path[4200];
  reader r = {.err = err, .errlen = errlen};
  int n = open_golden(&r, dir, "q8_0_quantize.golden", 2, Q8_MIN_CASE, path, sizeof path);
  if (n < 0) return n;
  bml__golden_q8 *c = calloc((size_t)n, sizeof *c);
  if (!c) snprintf(err, errlen, "%s: out of memory for %d cases", path, n);
  for (int i = 0; c && i < n && !r.bad; i++) read_q8_case(&r, &c[i], i);
  at_end(&r);
  int rc = !c || r.nomem ? BML_ENOMEM : r.bad ? BML_EFORMAT : n;
  fclose(r.f);
  if (rc < 0) {
    bml__golden_free_q8(c, n);
    return rc;
  }
  *out = c;
  return n;
}

void bml__golden_free_q1(bml__golden_q1 *c, int count) {
  if (!c) return;
  for (int i = 0; i < count; i++) {
    free(c[i].w);
    free(c[i].a);
    free(c[i].ref);
    free(c[i].generic);
  }
  free(c);
}

void bml__golden_free_q8(bml__golden_q8 *c, int count) {
  if (!c) return;
  for (int i = 0; i < count; i++) {
    free(c[i].x);
    free(c[i].q);
    free(c[i].qref);
  }
  free(c);
}

uint32_t bml__float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

bool bml__same_bits(float a, float b) {
  if (isnan(a) && isnan(b)) return true;
  return bml__float_bits(a) == bml__float_bits(b);
}

long bml__first_difference(const float *want, const float *got, size_t rows) {
  for (size_t r = 0; r < rows; r++)
    if (!bml__same_bits(want[r], got[r])) return (long)r;
  return -1;
}
