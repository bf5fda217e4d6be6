/* golden.c -- the golden-vector reader shared by the test suites. */
#include "golden.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *golden_dir(void) {
  static char buf[4096];
  const char *d = getenv("BANKML_GOLDEN_DIR");
  if (d && *d) return d;
  const char *top = getenv("BANKML_TOP_SRCDIR");
  if (top && *top) {
    snprintf(buf, sizeof buf, "%s/tests/golden", top);
    return buf;
  }
  return "tests/golden";
}

typedef struct {
  FILE *f;
  const char *path;
  bool bad;
} reader;

static bool rd(reader *r, void *dst, size_t size) {
  if (r->bad) return false;
  if (size && fread(dst, 1, size, r->f) != size) {
    fprintf(stderr, "golden: %s: truncated file\n", r->path);
    r->bad = true;
  }
  return !r->bad;
}

static uint32_t rd_u32(reader *r) {
  uint8_t b[4] = {0};
  rd(r, b, 4);
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void *rd_alloc(reader *r, size_t size) {
  void *p = malloc(size ? size : 1);
  if (!p) {
    r->bad = true;
    return NULL;
  }
  if (!rd(r, p, size)) {
    free(p);
    return NULL;
  }
  return p;
}

static int open_golden(reader *r, const char *name, uint32_t kind, char *path, size_t len) {
  snprintf(path, len, "%s/%s", golden_dir(), name);
  r->path = path;
  r->bad = false;
  r->f = fopen(path, "rb");
  if (!r->f) {
    fprintf(stderr, "golden: cannot open %s: %s (set BANKML_GOLDEN_DIR)\n", path, strerror(errno));
    return -1;
  }
  char magic[4];
  if (!rd(r, magic, 4) || memcmp(magic, "BMLG", 4) != 0 || rd_u32(r) != 1 || rd_u32(r) != kind) {
    fprintf(stderr, "golden: %s: not a version-1 kind-%u golden file\n", path, kind);
    fclose(r->f);
    return -1;
  }
  uint32_t n = rd_u32(r);
  if (r->bad || n == 0 || n > 100000) {
    fprintf(stderr, "golden: %s: bad case count\n", path);
    fclose(r->f);
    return -1;
  }
  return (int)n;
}

int golden_load_q1(golden_q1_case **out) {
  char path[4200];
  reader r;
  int n = open_golden(&r, "q1_0_x_q8_0.golden", 1, path, sizeof path);
  if (n < 0) return -1;
  golden_q1_case *c = calloc((size_t)n, sizeof *c);
  for (int i = 0; c && i < n && !r.bad; i++) {
    c[i].rows = rd_u32(&r);
    c[i].n = rd_u32(&r);
    c[i].flags = rd_u32(&r);
    if (r.bad || c[i].n % 128 != 0 || c[i].n == 0 || c[i].rows == 0 || c[i].rows > (1u << 20)) {
      fprintf(stderr, "golden: %s: case %d: bad shape\n", path, i);
      r.bad = true;
      break;
    }
    c[i].w = rd_alloc(&r, (size_t)c[i].rows * (c[i].n / 128) * sizeof(bml_block_q1_0));
    c[i].a = rd_alloc(&r, (size_t)(c[i].n / 32) * sizeof(bml_block_q8_0));
    c[i].ref = rd_alloc(&r, (size_t)c[i].rows * sizeof(float));
    c[i].generic = rd_alloc(&r, (size_t)c[i].rows * sizeof(float));
  }
  bool bad = r.bad || !c;
  fclose(r.f);
  if (bad) {
    golden_free_q1(c, n);
    return -1;
  }
  *out = c;
  return n;
}

int golden_load_q8(golden_q8_case **out) {
  char path[4200];
  reader r;
  int n = open_golden(&r, "q8_0_quantize.golden", 2, path, sizeof path);
  if (n < 0) return -1;
  golden_q8_case *c = calloc((size_t)n, sizeof *c);
  for (int i = 0; c && i < n && !r.bad; i++) {
    c[i].n = rd_u32(&r);
    if (r.bad || c[i].n % 32 != 0 || c[i].n == 0 || c[i].n > (1u << 24)) {
      fprintf(stderr, "golden: %s: case %d: bad n\n", path, i);
      r.bad = true;
      break;
    }
    c[i].x = rd_alloc(&r, (size_t)c[i].n * sizeof(float));
    c[i].q = rd_alloc(&r, (size_t)(c[i].n / 32) * sizeof(bml_block_q8_0));
    c[i].qref = rd_alloc(&r, (size_t)(c[i].n / 32) * sizeof(bml_block_q8_0));
  }
  bool bad = r.bad || !c;
  fclose(r.f);
  if (bad) {
    golden_free_q8(c, n);
    return -1;
  }
  *out = c;
  return n;
}

void golden_free_q1(golden_q1_case *c, int count) {
  if (!c) return;
  for (int i = 0; i < count; i++) {
    free(c[i].w);
    free(c[i].a);
    free(c[i].ref);
    free(c[i].generic);
  }
  free(c);
}

void golden_free_q8(golden_q8_case *c, int count) {
  if (!c) return;
  for (int i = 0; i < count; i++) {
    free(c[i].x);
    free(c[i].q);
    free(c[i].qref);
  }
  free(c);
}

uint32_t golden_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

bool golden_same_bits(float a, float b) {
  if (isnan(a) && isnan(b)) return true;
  return golden_bits(a) == golden_bits(b);
}

long golden_first_difference(const float *want, const float *got, size_t rows) {
  for (size_t r = 0; r < rows; r++)
    if (!golden_same_bits(want[r], got[r])) return (long)r;
  return -1;
}
