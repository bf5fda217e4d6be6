/* test_oracle.c -- the on-card oracle on a real OpenCL implementation (a GPU where there is one, else PoCL): it passes, and it can fail. */
#include <criterion/criterion.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logbuf.h"
#include "golden.h"
#include "base/hooks.h"
#include "card/oracle.h"
#include "card/tune.h"
#include "cpu/q1_0.h"
#include "cpu/gen.h"
#include "card/card.h"
#include "card/slab.h"
#include "card/program.h"
#include "card/kernels.h"

/* What a verification reported. */
typedef struct {
  bml_verify_line lines[256];
  char details[256][512];
  size_t n;
} collected;

static void collect(void *ctx, const bml_verify_line *l) {
  collected *c = ctx;
  cr_assert(c->n < BML_ARRAY_SIZE(c->lines), "too many lines");
  c->lines[c->n] = *l;
  if (l->detail) {
    snprintf(c->details[c->n], sizeof c->details[0], "%s", l->detail);
    c->lines[c->n].detail = c->details[c->n];
  }
  c->n++;
}

/* The card under test: the first real GPU bankml-cl would use (an NVIDIA
 * H200, say), else the PoCL device allowed as a software device (CI).
 * Skips, visibly, where there is neither. */
static bml_devices *card_under_test(size_t *index) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_SYSFS_ROOT");
  bml_discover_options o;
  bml_discover_options_init(&o);
  o.software = 1;
  bml_devices *l = NULL;
  cr_assert_eq(bml_devices_discover(&o, &l), 0);
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < bml_devices_count(l); i++) {
      const bml_device *d = bml_devices_get(l, i);
      bool wanted = pass == 0 ? d->kind != BML_KIND_CPU : strstr(d->platform, "Portable Computing Language") != NULL;
      if (d->usable && wanted) {
        *index = i;
        cr_log_info("card under test: %s (%s)", d->name, d->platform);
        return l;
      }
    }
  bml_devices_free(l);
  cr_skip_test("no OpenCL GPU and no PoCL device here: the card tests need one (apt-get install pocl-opencl-icd)");
  return NULL;
}

/* Options whose lines are collected in c. */
static bml_verify_options collecting(collected *c) {
  bml_verify_options o;
  bml_verify_options_init(&o);
  o.on_line = collect;
  o.ctx = c;
  return o;
}

static int verify(bml_devices *l, size_t i, collected *c, int quick) {
  bml_verify_options o = collecting(c);
  o.quick = quick;
  return bml_devices_verify(l, i, &o);
}

/* Verifies device i under hooks h, keeping the card and the build in use. */
static int verify_keeping(bml_devices *l, size_t i, const bml__oracle_hooks *h, collected *c, bml__card **card,
                          bml__build *use) {
  bml__oracle_set_hooks(h);
  bml_verify_options o = collecting(c);
  return bml__oracle_verify(&l->dev[i], i, &o, card, use);
}

static const bml_verify_line *find_line(const collected *c, const char *check, const char *fma, size_t rows,
                                        size_t n, const char *regime) {
  for (size_t i = 0; i < c->n; i++) {
    const bml_verify_line *l = &c->lines[i];
    if (strcmp(l->check, check) == 0 && strcmp(l->fma, fma) == 0 && l->rows == rows && l->n == n &&
        strcmp(l->regime, regime) == 0)
      return l;
  }
  return NULL;
}

static void no_hooks(void) { bml__oracle_set_hooks(NULL); }

TestSuite(oracle, .init = no_hooks, .fini = no_hooks, .timeout = 600);

/* The kernels' source is ASCII, and OpenCL C follows C99's inline: a plain `inline` definition makes no
 * callable copy, so a call a compiler does not inline links to nothing
 * (clang at -O2 for SPIR-V and AMD leaves bml_lanes undefined: the build
 * fails and the card is refused).  PoCL and NVIDIA inline everything, so
 * only the source can show it: every helper is `static inline` (or
 * `static BML_INLINE`, which is `inline` where the compiler is not clang). */
Test(oracle, kernel_helpers_are_static_inline) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cl/q1_0.cl", getenv("BANKML_TOP_SRCDIR"));
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  char line[1024];
  int helpers = 0;
  for (int n = 1; fgets(line, sizeof line, f); n++) {
    cr_expect(strncmp(line, "inline ", 7) != 0 && strncmp(line, "BML_INLINE ", 11) != 0,
              "%s:%d: a plain inline definition: %s", path, n, line);
    /* the source is embedded as a char array: a byte past ASCII overflows a signed char */
    for (const char *p = line; *p; p++) cr_expect((unsigned char)*p < 0x80, "%s:%d: not ASCII: %s", path, n, line);
    helpers += strncmp(line, "static inline ", 14) == 0 || strncmp(line, "static BML_INLINE ", 18) == 0;
  }
  fclose(f);
  cr_expect_gt(helpers, 10, "the helpers were not found (%d)", helpers);
}

/* cl/q1_0.cl without its comments, in a buffer the caller frees. */
static char *kernel_source_code(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cl/q1_0.cl", getenv("BANKML_TOP_SRCDIR"));
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  static char text[1 << 17];
  const size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  cr_assert_lt(len, sizeof text - 1, "cl/q1_0.cl is larger than the test reads");
  text[len] = '\0';
  char *code = calloc(1, len + 1), *o = code;
  cr_assert_not_null(code);
  for (const char *p = text; *p;) {
    if (p[0] == '/' && p[1] == '*') {
      const char *e = strstr(p + 2, "*/");
      p = e ? e + 2 : p + strlen(p);
    } else if (p[0] == '/' && p[1] == '/') {
      while (*p && *p != '\n') p++;
    } else {
      *o++ = *p++;
    }
  }
  return code;
}

/* Boards' drivers are often OpenCL 1.2, or 3.0 with none of its optional
 * features: no fp64, no fp16, no subgroups.  The kernels need none of
 * them: no subgroup built-in, `half` only as the type of the pointers
 * vload_half and vstore_half take (core OpenCL C 1.2), and `double` and
 * cl_khr_fp64 only in the test-only build that fakes a twice-rounded fma
 * (-DBML_TEST_DOUBLE_ROUNDED_FMA=1).  The host side is compiled for
 * OpenCL 1.2's API (CL_TARGET_OPENCL_VERSION 120, src/devices/clinc.h) and the
 * build asks for no -cl-std (OpenCL C 1.2, the default). */
Test(oracle, the_kernels_need_no_optional_feature_of_opencl) {
  char *code = kernel_source_code();
  int depth = 0, test_only_at = -1, halves = 0;
  char *save = NULL;
  for (char *line = strtok_r(code, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    while (*line == ' ') line++;
    if (strncmp(line, "#if", 3) == 0) {
      depth++;
      if (strstr(line, "defined(BML_TEST_DOUBLE_ROUNDED_FMA)") && strncmp(line, "#if defined", 11) == 0)
        test_only_at = depth;
    } else if (strncmp(line, "#endif", 6) == 0) {
      if (test_only_at == depth) test_only_at = -1;
      depth--;
    } else if ((strncmp(line, "#else", 5) == 0 || strncmp(line, "#elif", 5) == 0) && test_only_at == depth) {
      test_only_at = -1;
    }
    cr_expect_null(strstr(line, "sub_group"), "a subgroup built-in: %s", line);
    cr_expect_null(strstr(line, "cl_khr_fp16"), "cl_khr_fp16: %s", line);
    if (test_only_at < 0) {
      cr_expect_null(strstr(line, "cl_khr_fp64"), "cl_khr_fp64 outside the test-only build: %s", line);
      for (const char *p = line; (p = strstr(p, "double")) != NULL; p += 6)
        cr_expect((p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) || isalnum((unsigned char)p[6]) ||
                      p[6] == '_',
                  "double outside the test-only build: %s", line);
    }
    for (const char *p = line; (p = strstr(p, "half")) != NULL; p += 4) {
      if ((p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) || isalnum((unsigned char)p[4]) || p[4] == '_')
        continue; /* vload_half2, half2, bml_d0half: not the type */
      const char *q = p + 4;
      while (*q == ' ') q++;
      cr_expect_eq(*q, '*', "half used as a value, which needs cl_khr_fp16: %s", line);
      halves++;
    }
  }
  cr_expect_eq(depth, 0, "the #if blocks did not balance");
  cr_expect_gt(halves, 0, "no half pointer found: the test no longer reads what it means to");
  free(code);
}

Test(oracle, both_kernels_and_the_emulated_fma_pass_every_regime_on_the_card) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  static collected c;
  int rc = verify(l, i, &c, 0);
  for (size_t k = 0; k < c.n; k++)
    cr_expect(c.lines[k].ok, "line %zu failed: %s %s %zux%zu %s: %zu/%zu row %ld %s", k, c.lines[k].check,
              c.lines[k].fma, c.lines[k].rows, c.lines[k].n, c.lines[k].regime, c.lines[k].exact,
              c.lines[k].total, c.lines[k].first_bad, c.lines[k].detail ? c.lines[k].detail : "");
  cr_expect_eq(rc, 0, "%s", bml_strerror(rc));
  cr_expect_eq(bml_devices_get(l, i)->verified, 1);
  static const char *const kernels[] = {"q1_0_mat_vec",   "q1_0_mat_vec8",   "q1_0_mat_vec_l",
                                        "q1_0_mat_vec_lr", "q1_0_mat_vec_lb", "q1_0_mat_vec_lrb"};
  static const char *const fmas[] = {"native", "emulated"};
  static const size_t shapes[][2] = {{64, 128},   {7, 256},   {1, 4096},    {257, 1024},
                                     {301, 5120}, {100, 2688}, {4096, 4096}, {12288, 4096}};
  for (size_t k = 0; k < BML_ARRAY_SIZE(kernels); k++)
    for (int f = 0; f < 2; f++) {
      for (size_t s = 0; s < BML_ARRAY_SIZE(shapes); s++)
        for (int layer = 0; layer < 2; layer++) {
          const bml_verify_line *x = find_line(&c, kernels[k], fmas[f], shapes[s][0], shapes[s][1], layer ? "layer" : "random");
          cr_expect(x && x->ok && x->exact == shapes[s][0] && x->total == shapes[s][0], "%s %s %zux%zu %s missing or wrong",
                    kernels[k], fmas[f], shapes[s][0], shapes[s][1], layer ? "layer" : "random");
        }
      /* an infinite activation scale: most rows NaN, some infinite */
      const bml_verify_line *inf = find_line(&c, kernels[k], fmas[f], 2048, 256, "infinite");
      cr_expect(inf && inf->ok && inf->exact == 2048 && inf->total == 2048, "%s %s: the infinite scale missing or wrong",
                kernels[k], fmas[f]);
      const bml_verify_line *g = find_line(&c, kernels[k], fmas[f], 0, 0, "golden");
      cr_expect(g && g->ok && g->total == 2988 && g->exact == g->total,
                "%s %s: ggml's golden cases (18 of 2988 rows in all) not all checked", kernels[k], fmas[f]);
    }
  for (size_t k = 0; k < c.n; k++) { /* the batched kernels' lines, and only theirs, say their time is a batch's */
    const char *ck = c.lines[k].check;
    bool batched = strcmp(ck, "q1_0_mat_vec_lb") == 0 || strcmp(ck, "q1_0_mat_vec_lrb") == 0;
    cr_expect_eq(c.lines[k].batched, batched, "line %zu (%s %s): batched %d", k, ck, c.lines[k].regime,
                 c.lines[k].batched);
  }
  cr_expect(find_line(&c, "fma probe", "native", 0, 0, "probe") != NULL);
  const bml_verify_line *pe = find_line(&c, "fma probe", "emulated", 0, 0, "probe");
  cr_expect(pe && pe->ok && pe->total >= 40, "the emulated fma was not probed on enough cases");
  bml_devices_free(l);
}

/* Verifies the card under test, quickly, with extra build options: the
 * lines in c, the device's verified flag in *verified.  Returns the
 * verification's result. */
static int verify_built_with(const char *options, collected *c, int *verified) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  bml__oracle_hooks h = {.extra_options = options, .quick = true};
  bml__oracle_set_hooks(&h);
  int rc = verify(l, i, c, 1);
  *verified = bml_devices_get(l, i)->verified;
  bml_devices_free(l);
  return rc;
}

Test(oracle, an_unfused_outer_fma_is_refused_with_the_row_named) {
  static collected c;
  int verified;
  cr_expect_eq(verify_built_with("-DBML_TEST_UNFUSED_OUTER=1", &c, &verified), BML_EVERIFY);
  cr_expect_eq(verified, 0);
  /* single-block rows cannot tell (the first fma adds zero): they pass */
  const bml_verify_line *single = find_line(&c, "q1_0_mat_vec", "native", 64, 128, "random");
  cr_expect(single && single->ok, "a single-block shape failed: it cannot tell the fma from mul+add");
  /* multi-block rows must catch it, naming a row and both bit patterns */
  size_t refused = 0;
  for (size_t k = 0; k < c.n; k++) {
    const bml_verify_line *x = &c.lines[k];
    if (x->ok) continue;
    refused++;
    cr_expect_str_eq(x->fma, "native", "the emulated build does not use the outer fma switch");
    cr_expect(x->n > 128, "a single-block shape refused");
    cr_expect(x->first_bad >= 0 && x->cpu_bits != x->card_bits, "no differing row named");
  }
  cr_expect(refused > 0, "the oracle passed a kernel without the fused outer fma");
}

/* An fma that rounds twice (in double, then to float) agrees with a fused one
 * on every case where fused and unfused differ, and on all the oracle's
 * data: the probe's cases near rounding midpoints must find it, and the
 * emulation must then be the build in use. */
Test(oracle, a_double_rounding_fma_is_found_by_the_probe) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  if (!bml__cl_has_extension(l->dev[i].cl.extensions, "cl_khr_fp64")) {
    bml_devices_free(l);
    cr_skip_test("the card under test has no cl_khr_fp64 to round twice with");
  }
  bml__oracle_hooks h = {.extra_options = "-DBML_TEST_DOUBLE_ROUNDED_FMA=1", .quick = true};
  bml__card *card = NULL;
  bml__build use;
  static collected c;
  cr_assert_eq(verify_keeping(l, i, &h, &c, &card, &use), 0);
  const bml_verify_line *pn = find_line(&c, "fma probe", "native", 0, 0, "probe");
  cr_expect(pn && !pn->ok, "the probe took an fma that rounds twice for a fused one");
  cr_expect(use.emulated_fma, "the build in use is not the emulated one");
  bml__build_release(&use);
  bml__card_close(card);
  bml_devices_free(l);
}

/* Verifies device i of l with the quick oracle against the golden cases
 * of dir (NULL: the default), its lines into c (emptied first). */
static int verify_quick_golden(bml_devices *l, size_t i, collected *c, const char *dir) {
  bml__oracle_hooks h = {.quick = true};
  bml__oracle_set_hooks(&h);
  c->n = 0;
  bml_verify_options o = collecting(c);
  o.golden_dir = dir;
  return bml_devices_verify(l, i, &o);
}

/* ggml's golden cases: a named directory without them refuses the card; a
 * default copy that was never installed (this build tree) is a note. */
Test(oracle, golden_cases_named_but_unreadable_refuse_and_absent_ones_are_a_note) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  static collected c;
  char dir[] = "/tmp/bankml-golden-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  int rc = verify_quick_golden(l, i, &c, dir);
  rmdir(dir);
  cr_expect_eq(rc, BML_EVERIFY, "an empty --golden directory passed: %s", bml_err_name(rc));
  const bml_verify_line *g = find_line(&c, "golden", "", 0, 0, "golden");
  cr_expect(g && !g->ok && g->detail && strstr(g->detail, "cannot be read"), "%s", g && g->detail ? g->detail : "no line");

  unsetenv("BANKML_GOLDEN_DIR");
  if (access(bml__golden_default_dir(), F_OK) == 0) {
    bml_devices_free(l);
    cr_skip_test("a copy is installed in %s: the absent case is for a build tree", bml__golden_default_dir());
  }
  cr_expect_eq(verify_quick_golden(l, i, &c, NULL), 0);
  g = find_line(&c, "golden", "", 0, 0, "golden");
  cr_expect(g && g->ok && g->detail && strstr(g->detail, "not checked") && strstr(g->detail, "BANKML_GOLDEN_DIR"), "%s",
            g && g->detail ? g->detail : "no line");
  bml_devices_free(l);
}

/* A golden file whose reference is not this build's CPU kernel's (one bit
 * of case 1's first result flipped in a copy): the card is refused by a
 * line that blames the file, naming the case, the row and both values,
 * and no kernel is checked against the file (it would blame the card). */
Test(oracle, a_golden_file_that_is_not_the_cpus_is_blamed_not_the_card) {
  char src[4200], dir[] = "/tmp/bankml-golden-XXXXXX", file[4200];
  snprintf(src, sizeof src, "%s/%s", golden_dir(), BML__GOLDEN_Q1_FILE);
  cr_assert_not_null(mkdtemp(dir));
  snprintf(file, sizeof file, "%s/%s", dir, BML__GOLDEN_Q1_FILE);
  FILE *f = fopen(src, "rb");
  cr_assert_not_null(f, "%s", src);
  static unsigned char bytes[8u << 20];
  size_t len = fread(bytes, 1, sizeof bytes, f);
  fclose(f);
  cr_assert(len > 28 && len < sizeof bytes);
  uint32_t rows, n; /* case 1: rows, n, flags after the 16-byte header, then w, a, the reference */
  memcpy(&rows, bytes + 16, 4), memcpy(&n, bytes + 20, 4);
  const size_t ref = 28 + (size_t)rows * (n / 128) * 18 + (size_t)n / 32 * 34;
  cr_assert(rows > 0 && ref + 4 <= len);
  bytes[ref] ^= 1; /* the lowest bit of row 0's result */
  f = fopen(file, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(bytes, 1, len, f), len);
  cr_assert_eq(fclose(f), 0);
  size_t i;
  bml_devices *l = card_under_test(&i);
  static collected c;
  int rc = verify_quick_golden(l, i, &c, dir);
  unlink(file);
  rmdir(dir);
  cr_expect_eq(rc, BML_EVERIFY, "a golden file that is not the CPU's passed: %s", bml_err_name(rc));
  const bml_verify_line *g = find_line(&c, "golden", "", 0, 0, "golden");
  cr_expect(g && !g->ok && g->detail && strstr(g->detail, "are not this build's CPU kernel's: case 1 (") &&
                strstr(g->detail, ") row 0 is 0x"),
            "%s", g && g->detail ? g->detail : "no line");
  size_t against = 0, refused = 0;
  for (size_t k = 0; k < c.n; k++) {
    against += strcmp(c.lines[k].regime, "golden") == 0 && strcmp(c.lines[k].check, "golden") != 0;
    refused += !c.lines[k].ok;
  }
  cr_expect_eq(against, 0, "%zu kernels were checked against the file", against);
  cr_expect_eq(refused, 1, "%zu lines refused: only the file's should", refused);
  bml_devices_free(l);
}

/* A batched kernel that writes nothing (the test switch below) must not pass
 * on results another kernel left in the buffers: the oracle fills them
 * before each check, and each kernel's cases are its own. */
Test(oracle, a_kernel_that_writes_nothing_is_refused) {
  static collected c;
  int verified;
  cr_expect_eq(verify_built_with("-DBML_TEST_SKIP_LRB=1", &c, &verified), BML_EVERIFY);
  cr_expect_eq(verified, 0);
  size_t refused = 0, lrb = 0;
  for (size_t k = 0; k < c.n; k++) {
    const bml_verify_line *x = &c.lines[k];
    const bool is_lrb = strcmp(x->check, "q1_0_mat_vec_lrb") == 0;
    lrb += is_lrb;
    if (x->ok) continue;
    refused++;
    cr_expect(is_lrb, "%s %s %zux%zu refused: only the kernel that writes nothing should be", x->check,
              x->regime, x->rows, x->n);
  }
  cr_expect(lrb > 0, "no line of q1_0_mat_vec_lrb");
  cr_expect_eq(refused, lrb, "%zu of %zu lines of q1_0_mat_vec_lrb refused: every one must be", refused, lrb);
}

/* Every line of c passed, q1_0_mat_vec_lr's on four shapes at least. */
static void expect_every_line_passed(const collected *c) {
  size_t checked = 0;
  for (size_t k = 0; k < c->n; k++) {
    const bml_verify_line *x = &c->lines[k];
    cr_expect(x->ok, "%s %s %zux%zu %s refused: %s", x->check, x->fma, x->rows, x->n, x->regime,
              x->detail ? x->detail : "");
    checked += strcmp(x->check, "q1_0_mat_vec_lr") == 0 && x->total > 0;
  }
  cr_expect(checked >= 4, "q1_0_mat_vec_lr checked on %zu shapes only", checked);
}

/* NVIDIA's build, its byte-permute lookups (BML_LWORD) written in C, its
 * ring of weights, its scales staged as half2 and (Hopper's) its table
 * sources in local memory, the TMA's copies made in C: the same bits as
 * the reference on this card too. */
#define NVIDIA_IN_C "-DBML_LWORD_C=1 -DBML_RING=1 -DBML_D0HALF=1 -DBML_TMA_C=1"
Test(oracle, nvidias_build_written_in_c_passes_every_check) {
  static collected c;
  int verified;
  cr_expect_eq(verify_built_with(NVIDIA_IN_C, &c, &verified), 0);
  cr_expect_eq(verified, 1);
  expect_every_line_passed(&c);
}

/* Shapes the tuning may choose for q1_0_mat_vec_lr (rows per slice, slices
 * and lanes per work-item) besides the default that every other test
 * builds: three slices, a slice of 16, and two lanes a work-item, the last
 * also in NVIDIA's formulation written in C.  Each is built as asked and
 * passes every check, or (a small GPU) is fitted down or refused for its
 * work-group as the tuning would find. */
Test(oracle, the_lr_kernels_other_shapes_pass_every_check) {
  static const struct {
    size_t shape[3];
    const char *options;
  } cases[] = {{{32, 3, 1}, NULL}, {{16, 4, 1}, NULL}, {{64, 2, 2}, NULL}, {{64, 2, 2}, NVIDIA_IN_C}};
  size_t n, i, verified = 0;
  const size_t(*shapes)[3] = bml__tune_lr_candidates(&n);
  bml_devices *l = card_under_test(&i);
  for (size_t k = 0; k < BML_ARRAY_SIZE(cases); k++) {
    const size_t *want = cases[k].shape;
    bool candidate = false;
    for (size_t s = 0; s < n; s++) candidate |= memcmp(shapes[s], want, sizeof shapes[s]) == 0;
    cr_expect(candidate, "_lr %zux%zu, %zu lanes is not a candidate of the tuning", want[0], want[1], want[2]);
    bml__oracle_hooks h = {.extra_options = cases[k].options, .quick = true};
    memcpy(h.lr_shape, want, sizeof h.lr_shape);
    static collected c;
    c.n = 0;
    bml__card *card = NULL;
    bml__build use;
    const int rc = verify_keeping(l, i, &h, &c, &card, &use);
    const bml_verify_line *last = c.n ? &c.lines[c.n - 1] : NULL;
    if (rc != 0 && last && strcmp(last->check, "build") == 0 && last->detail &&
        strstr(last->detail, "CL_INVALID_WORK_GROUP_SIZE")) {
      cr_log_warn("_lr %zux%zu, %zu lanes: more work-items than this card's kernel takes", want[0], want[1], want[2]);
      continue;
    }
    cr_expect_eq(rc, 0, "_lr %zux%zu, %zu lanes (%s): not verified", want[0], want[1], want[2],
                 cases[k].options ? cases[k].options : "plain");
    expect_every_line_passed(&c);
    if (rc != 0) continue;
    char built[64];
    snprintf(built, sizeof built, "-DBML_LRROWS=%zu -DBML_LRRPT=%zu -DBML_LRLPT=%zu ", card->lrrows, card->lrrpt,
             card->lrlpt);
    cr_expect(strstr(use.options, built) != NULL, "the card's shape %s, built with %s", built, use.options);
    if (8 / want[2] * want[0] > l->dev[i].cl.max_work_group) {
      cr_expect_lt(card->lrrows, want[0], "_lr %zux%zu, %zu lanes: more work-items than the card's work-groups",
                   want[0], want[1], want[2]);
      cr_log_warn("_lr %zux%zu, %zu lanes: fitted to %zu rows a slice on this card", want[0], want[1], want[2],
                  card->lrrows);
    } else {
      cr_expect(card->lrrows == want[0] && card->lrrpt == want[1] && card->lrlpt == want[2],
                "asked for %zux%zu, %zu lanes, built %s", want[0], want[1], want[2], built);
      verified++;
    }
    bml__build_release(&use);
    bml__card_close(card);
  }
  cr_expect(verified > 0, "no shape was built as asked");
  bml__oracle_set_hooks(NULL);
  bml_devices_free(l);
}

/* Verifies the card under test with extra build options that break the
 * build: the verification must refuse the device, its last line being the
 * failed build.  Returns that line (in c). */
static const bml_verify_line *bad_build(const char *options, collected *c) {
  int verified;
  cr_expect_eq(verify_built_with(options, c, &verified), BML_EVERIFY);
  cr_expect_eq(verified, 0);
  cr_assert(c->n >= 1);
  const bml_verify_line *b = &c->lines[c->n - 1];
  cr_expect_str_eq(b->check, "build");
  cr_expect(!b->ok);
  return b;
}

Test(oracle, a_bad_build_option_refuses_the_device_without_aborting) {
  static collected c;
  const bml_verify_line *b = bad_build("-cl-bankml-no-such-option", &c);
  cr_expect(b->detail && strstr(b->detail, "-cl-bankml-no-such-option"), "the options are not named: %s",
            b->detail ? b->detail : "");
}

Test(oracle, a_bad_source_refuses_the_device_with_its_build_log) {
  static collected c;
  const bml_verify_line *b = bad_build("-DBML_WG=)", &c);
  cr_expect(b->detail && strstr(b->detail, "CL_BUILD_PROGRAM_FAILURE") && strstr(b->detail, "build log:"),
            "no build log: %s", b->detail ? b->detail : "");
}

Test(oracle, forced_emulation_is_used_and_exact) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  bml__oracle_hooks h = {.force_emulated = true, .quick = true};
  bml__card *card = NULL;
  bml__build use;
  static collected c;
  cr_assert_eq(verify_keeping(l, i, &h, &c, &card, &use), 0);
  cr_expect(use.emulated_fma, "the build in use is not the emulated one");
  cr_expect(strstr(use.options, "-DBML_EMULATE_FMA=1") != NULL, "%s", use.options);
  cr_expect_null(find_line(&c, "q1_0_mat_vec", "native", 7, 256, "random"), "native kernels ran though forced off");
  cr_expect_not_null(find_line(&c, "q1_0_mat_vec", "emulated", 7, 256, "random"));
  bml__build_release(&use);
  bml__card_close(card);
  bml_devices_free(l);
}

Test(oracle, matrices_split_into_chunks_give_the_same_bits) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  bml__oracle_hooks h = {.max_chunk_rows = 48, .quick = true, .wg = 32};
  bml__oracle_set_hooks(&h);
  static collected c;
  cr_expect_eq(verify(l, i, &c, 1), 0);
  const bml_verify_line *x = find_line(&c, "q1_0_mat_vec8", "native", 301, 5120, "layer");
  cr_expect(x && x->ok && x->exact == 301);
  bml_devices_free(l);
}

/* A launch of the table kernels gives the same bits with a work-group per
 * group of rows, with one work-group taking every group, and with a few
 * (each taking every third, fifth, ... group of a product, and groups of
 * a batch's records): every check passes in each. */
Test(oracle, the_table_kernels_give_the_same_bits_whatever_work_groups_a_launch_runs) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  static const size_t caps[] = {SIZE_MAX, 1, 3, 5};
  for (size_t t = 0; t < BML_ARRAY_SIZE(caps); t++) {
    bml__oracle_hooks h = {.quick = true, .max_groups = caps[t]};
    bml__oracle_set_hooks(&h);
    static collected c;
    c.n = 0;
    cr_expect_eq(verify(l, i, &c, 1), 0, "max_groups %zu: not verified", caps[t]);
    size_t table = 0;
    for (size_t k = 0; k < c.n; k++) {
      const bml_verify_line *x = &c.lines[k];
      if (strncmp(x->check, "q1_0_mat_vec_l", 14) != 0) continue;
      table++;
      cr_expect(x->ok && x->total > 0 && x->exact == x->total, "max_groups %zu: %s %s %zux%zu %s: %zu of %zu rows exact",
                caps[t], x->check, x->fma, x->rows, x->n, x->regime, x->exact, x->total);
    }
    cr_expect(table >= 8, "max_groups %zu: %zu checks of the table kernels", caps[t], table);
  }
  bml__oracle_set_hooks(NULL);
  bml_devices_free(l);
}

/* One table buffer, in the plain build and in NVIDIA's written in C (whose
 * sources' slots are then ordered by the build's second barrier). */
Test(oracle, a_card_with_little_local_memory_uses_one_table_and_gives_the_same_bits) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  static const char *const builds[] = {NULL, NVIDIA_IN_C};
  for (size_t b = 0; b < BML_ARRAY_SIZE(builds); b++) {
    bml__oracle_hooks h = {.local_mem = 24576, .quick = true, .extra_options = builds[b]};
    static collected c;
    c.n = 0;
    bml__card *card = NULL;
    bml__build use = {0};
    cr_assert_eq(verify_keeping(l, i, &h, &c, &card, &use), 0, "%s", builds[b] ? builds[b] : "plain");
    cr_expect(strstr(use.options, "-DBML_LHALVES=1") != NULL, "%s", use.options);
    static const char *const kernels[] = {"q1_0_mat_vec_l", "q1_0_mat_vec_lr", "q1_0_mat_vec_lb", "q1_0_mat_vec_lrb"};
    for (size_t k = 0; k < BML_ARRAY_SIZE(kernels); k++) {
      const bml_verify_line *x = find_line(&c, kernels[k], use.emulated_fma ? "emulated" : "native", 100, 2688, "random");
      cr_expect(x && x->ok && x->exact == 100, "%s 100x2688 missing or wrong (%s)", kernels[k], use.options);
    }
    bml__build_release(&use);
    bml__card_close(card);
  }
  bml__oracle_set_hooks(NULL);
  bml_devices_free(l);
}

/* A kernel may run fewer work-items a group than the device allows
 * (CL_KERNEL_WORK_GROUP_SIZE: its registers, on phones' GPUs).  Every
 * launch of 256 then failed and the tuning gave up at its first candidate,
 * so the card was refused.  Now a build whose work-groups exceed a kernel's
 * limit fails naming it, the tuning passes such shapes over, and the card
 * is verified with shapes that fit.  (The tuning is measured here: a
 * remembered one is of the card's real limit.) */
/* A fresh tuning cache for one test (the tuning is measured, or with the
 * tuning off the defaults apply, whatever the tests' own cache holds). */
typedef struct {
  char dir[32];
  char *was;
} fresh_cache;

static void fresh_cache_use(fresh_cache *f) {
  const char *was = getenv("BANKML_CACHE_DIR");
  f->was = was ? strdup(was) : NULL;
  snprintf(f->dir, sizeof f->dir, "/tmp/bankml-tune-XXXXXX");
  cr_assert_not_null(mkdtemp(f->dir));
  setenv("BANKML_CACHE_DIR", f->dir, 1);
}

static void fresh_cache_drop(fresh_cache *f) {
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  cr_expect_eq(system(cmd), 0);
  if (f->was) setenv("BANKML_CACHE_DIR", f->was, 1); /* the tests' own cache, not the user's */
  else unsetenv("BANKML_CACHE_DIR");
  free(f->was);
}

/* Verifies the card under test with hooks h on a fresh tuning cache, and
 * expects it verified with shapes of at most 128 work-items a group; with
 * use_capped, every kernel of the build the card keeps may run at most 128
 * too (the hooks capped the native build). */
static void expect_tuned_within_128(bml_devices *l, size_t i, const bml__oracle_hooks *h, bool use_capped) {
  fresh_cache f;
  fresh_cache_use(&f);
  static collected c;
  c.n = 0;
  bml__card *card = NULL;
  bml__build use = {0};
  const int rc = verify_keeping(l, i, h, &c, &card, &use);
  bml__oracle_set_hooks(NULL);
  fresh_cache_drop(&f);
  const bml_verify_line *bad = NULL; /* the native probe's line refuses nothing */
  for (size_t k = 0; k < c.n && !bad; k++)
    if (!c.lines[k].ok && strcmp(c.lines[k].fma, "native") != 0) bad = &c.lines[k];
  cr_expect_eq(rc, 0, "not verified: %s: %s", bad ? bad->check : "?", bad && bad->detail ? bad->detail : "");
  if (rc == 0) {
    cr_expect(card->lrows * 8 <= 128 && bml__card_lr_wg(card) <= 128, "_l %zu, _lr %zux%zu, %zu lanes: beyond 128 work-items",
              card->lrows, card->lrrows, card->lrrpt, card->lrlpt);
    for (int k = 0; use_capped && k < BML_KERNEL_COUNT; k++) cr_expect_leq(use.kernel_wg[k], 128, "%d", k);
    bml__build_release(&use);
    bml__card_close(card);
  }
}

Test(oracle, kernels_that_take_smaller_work_groups_get_shapes_that_fit) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  bml__oracle_hooks h = {.kernel_wg = 128, .quick = true};
  expect_tuned_within_128(l, i, &h, true);
  fresh_cache f;
  /* untuned, with nothing remembered (the default shapes, 256
   * work-items), the build fails naming the kernel, and the card is
   * refused */
  fresh_cache_use(&f);
  bml__tune_disable(true);
  static collected c2;
  const int untuned = verify_keeping(l, i, &h, &c2, NULL, NULL);
  bml__tune_disable(false);
  fresh_cache_drop(&f);
  cr_expect_eq(untuned, BML_EVERIFY);
  const bml_verify_line *x = NULL;
  for (size_t k = 0; k < c2.n && !x; k++)
    if (strcmp(c2.lines[k].check, "build") == 0) x = &c2.lines[k];
  cr_expect(x && x->detail &&
                strstr(x->detail, " work-items and this device runs at most 128 of it (CL_KERNEL_WORK_GROUP_SIZE)") != NULL,
            "%s", x && x->detail ? x->detail : "no build line");
  bml_devices_free(l);
}

/* The emulated fma's longer code may leave a kernel fewer work-items than
 * the native build's (a GPU's registers): the tuning picks shapes that
 * both builds fit, and the card is verified.  It tuned the native build
 * alone, and the oracle's emulated build then refused the card, for good
 * (the shapes were remembered). */
Test(oracle, the_tuned_shapes_fit_the_emulated_build_too) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  const bml__oracle_hooks h = {.kernel_wg_emulated = 128, .quick = true};
  expect_tuned_within_128(l, i, &h, false);
  bml_devices_free(l);
}

/* A device whose work-groups hold at most 128 work-items (PoCL told so by
 * POCL_MAX_WORK_GROUP_SIZE): the default _lr shape is fitted down to 16
 * rows, and the _l candidates were then all taken as beyond the device
 * (their build's _lr had been fitted), so the tuning failed and was
 * measured again at every open. */
Test(oracle, a_device_of_128_work_items_is_tuned_within_them) {
  setenv("POCL_MAX_WORK_GROUP_SIZE", "128", 1); /* read when PoCL starts: before the discovery */
  size_t i;
  bml_devices *l = card_under_test(&i);
  if (l->dev[i].cl.max_work_group > 128) {
    bml_devices_free(l);
    cr_skip_test("the card under test is not PoCL (POCL_MAX_WORK_GROUP_SIZE does not apply)");
  }
  fresh_cache f;
  fresh_cache_use(&f);
  bml__oracle_hooks h = {.quick = true};
  static collected c;
  bml__card *card = NULL;
  bml__build use = {0};
  const int rc = verify_keeping(l, i, &h, &c, &card, &use);
  char path[64];
  snprintf(path, sizeof path, "%s/cards.json", f.dir);
  const bool remembered = access(path, R_OK) == 0;
  fresh_cache_drop(&f);
  cr_assert_eq(rc, 0, "not verified: %s", c.n ? c.lines[c.n - 1].check : "no line");
  cr_expect(remembered, "the tuning failed: nothing was remembered");
  cr_expect(card->lrows * 8 <= 128 && bml__card_lr_wg(card) <= 128, "_l %zu, _lr %zux%zu, %zu lanes", card->lrows,
            card->lrrows, card->lrrpt, card->lrlpt);
  bml__build_release(&use);
  bml__card_close(card);
  bml_devices_free(l);
}

Test(oracle, an_unusable_device_is_not_verified) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_GPU");
  bml_discover_options o;
  bml_discover_options_init(&o);
  o.software = 0;
  bml_devices *l = NULL;
  cr_assert_eq(bml_devices_discover(&o, &l), 0);
  size_t unusable = 0;
  for (size_t i = 0; i < bml_devices_count(l); i++)
    if (!bml_devices_get(l, i)->usable) {
      cr_expect_eq(bml_devices_verify(l, i, NULL), BML_ENODEV);
      unusable++;
    }
  if (unusable == 0) { /* the argument checks below ran; the refusal had nothing to refuse */
    cr_expect_eq(bml_devices_verify(l, bml_devices_count(l), NULL), BML_EINVAL);
    bml_devices_free(l);
    cr_skip_test("no unusable device here (PoCL, without BANKML_GPU_SOFTWARE, is one)");
  }
  cr_expect_eq(bml_devices_verify(l, bml_devices_count(l), NULL), BML_EINVAL);
  cr_expect_eq(bml_devices_verify(NULL, 0, NULL), BML_EINVAL);
  bml_devices_free(l);
}

Test(oracle, a_card_that_cannot_open_is_not_verified) {
  const char *build = getenv("BANKML_TOP_BUILDDIR"), *src = getenv("BANKML_TOP_SRCDIR");
  cr_assert(build && src);
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fakeicd/vendors", build);
  setenv("OCL_ICD_VENDORS", path, 1);
  snprintf(path, sizeof path, "%s/tests/fakeicd/mixed.conf", src);
  setenv("BML_FAKEICD_CONFIG", path, 1);
  snprintf(path, sizeof path, "%s/tests/fixtures/sysfs/mixed", src);
  setenv("BANKML_SYSFS_ROOT", path, 1);
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SOFTWARE");
  bml_devices *l = NULL;
  cr_assert_eq(bml_devices_discover(NULL, &l), 0);
  static collected c;
  cr_expect_eq(verify(l, 0, &c, 1), BML_EVERIFY);
  cr_assert_eq(c.n, 1);
  cr_expect_str_eq(c.lines[0].check, "open");
  cr_expect(c.lines[0].detail && strstr(c.lines[0].detail, "clCreateContext: CL_DEVICE_NOT_AVAILABLE (-2)"),
            "%s", c.lines[0].detail ? c.lines[0].detail : "");
  bml_devices_free(l);
}

static char logged[16384];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

/* A fresh tuning cache in dir (a mkdtemp template) with the build's debug
 * lines on; the card under test's listing, its index in *index. */
static bml_devices *tuning_fixture(char *dir, size_t *index) {
  cr_assert_not_null(mkdtemp(dir));
  setenv("BANKML_CACHE_DIR", dir, 1);
  setenv("BANKML_DEBUG", "build", 1);
  return card_under_test(index);
}

/* Removes the cache (its file, lock and program binaries) and dir. */
static void tuning_cleanup(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

Test(oracle, tunables_are_measured_once_and_remembered) {
  char dir[] = "/tmp/bankml-cl-tune-XXXXXX";
  size_t i;
  bml_devices *l = tuning_fixture(dir, &i);
  bml__oracle_hooks h = {.quick = true};
  bml__oracle_set_hooks(&h);
  bml_log_set_sink(capture, NULL);
  static collected c;
  cr_assert_eq(verify(l, i, &c, 1), 0);
  cr_expect(strstr(logged, "tuned \"") != NULL, "no measurement the first time: %s", logged);
  char path[256];
  snprintf(path, sizeof path, "%s/cards.json", dir);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "no tuning cache written at %s", path);
  char text[4096] = "";
  size_t got = fread(text, 1, sizeof text - 1, f);
  text[got] = '\0';
  fclose(f);
  cr_expect(strstr(text, bml_devices_get(l, i)->name) && strstr(text, "\"lrows\"") && strstr(text, "\"lrrpt\"") &&
                strstr(text, "\"lrlpt\""),
            "%s", text);
  /* what is remembered is what was measured, "always _lr" (0 rows) included */
  const char *tuned = strstr(logged, "tuned \"");
  char from[64] = "";
  if (tuned && strstr(tuned, " from ")) sscanf(strstr(tuned, " from "), " from %63s", from);
  logged[0] = '\0';
  c.n = 0;
  cr_assert_eq(verify(l, i, &c, 1), 0);
  cr_expect(strstr(logged, "tuning \"") == NULL, "measured again although remembered: %s", logged);
  const char *remembered = strstr(logged, "remembered: ");
  char from2[64] = "";
  if (remembered && strstr(remembered, " from ")) sscanf(strstr(remembered, " from "), " from %63s", from2);
  cr_expect(from[0] && strcmp(from, from2) == 0, "measured _lr from %s rows, remembered from %s: %s", from, from2,
            logged);
  bml_log_set_sink(NULL, NULL);
  tuning_cleanup(dir);
  bml_devices_free(l);
}

/* Writes text as the tuning cache in dir. */
static void write_cache(const char *dir, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/cards.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

/* A cache file with one tuning entry of layout `layout` for the card under
 * test (l's device i): its shapes are `fields`. */
static void cache_entry(char *buf, size_t len, int layout, const bml_devices *l, size_t i, const char *fields) {
  snprintf(buf, len,
           "{\"schema\": 1, \"entries\": [{\"kind\": \"tuning\", \"key\": {\"layout\": %d, \"device\": \"%s\", "
           "\"driver\": \"%s\", \"bankml_cl_version\": \"%s\"}, %s}]}",
           layout, bml_devices_get(l, i)->name, l->dev[i].cl.driver_version, bml_version_string(), fields);
}

/* A cache of another layout, odd JSON, or tunables no measurement gives (a
 * hand edit) is measured again and replaced, and the card still verifies. */
Test(oracle, a_cache_this_version_did_not_write_is_measured_again_and_replaced) {
  char dir[] = "/tmp/bankml-cl-tune-XXXXXX";
  size_t i;
  bml_devices *l = tuning_fixture(dir, &i);
  char edited[1024], lanes[1024], layout5[1024], layout4[1024], layout3[1024], layout2[1024];
  cache_entry(edited, sizeof edited, 6, l, i,
              "\"lrows\": 48, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 1, \"lr_from_rows\": 0");
  /* every shape a candidate but the lanes (32x4 is one, with one lane) */
  cache_entry(lanes, sizeof lanes, 6, l, i,
              "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 2, \"lr_from_rows\": 0");
  /* layout 5 was measured on launches of a work-group per group of rows */
  cache_entry(layout5, sizeof layout5, 5, l, i,
              "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 1, \"lr_from_rows\": 16384");
  /* layout 4 was measured on the kernels before their cheaper table build */
  cache_entry(layout4, sizeof layout4, 4, l, i,
              "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 1, \"lr_from_rows\": 16384");
  /* layout 3 had no lanes per work-item: an entry of it is measured again
   * even where it names them */
  cache_entry(layout3, sizeof layout3, 3, l, i,
              "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lrlpt\": 1, \"lr_from_rows\": 16384");
  /* layout 2's shapes were checked against the native build alone */
  cache_entry(layout2, sizeof layout2, 2, l, i, "\"lrows\": 32, \"lrrows\": 32, \"lrrpt\": 4, \"lr_from_rows\": 16384");
  const char *caches[] = {"{\"schema\": 2, \"entries\": []}", "{\"schema\": 1, \"entries\": {}}", "[1, 2]", edited,
                          lanes, layout5, layout4, layout3, layout2};
  bml__oracle_hooks h = {.quick = true};
  bml__oracle_set_hooks(&h);
  bml_log_set_sink(capture, NULL);
  for (size_t k = 0; k < BML_ARRAY_SIZE(caches); k++) {
    write_cache(dir, caches[k]);
    static collected c;
    logged[0] = '\0';
    c.n = 0;
    cr_expect_eq(verify(l, i, &c, 1), 0, "cache %zu: not verified", k);
    cr_expect(strstr(logged, "tuned \"") != NULL, "cache %zu was used: %s", k, logged);
    logged[0] = '\0';
    c.n = 0;
    cr_expect_eq(verify(l, i, &c, 1), 0);
    cr_expect(strstr(logged, "tuning \"") == NULL, "cache %zu was not replaced: measured again: %s", k, logged);
  }
  bml_log_set_sink(NULL, NULL);
  tuning_cleanup(dir);
  bml_devices_free(l);
}

/* The card under test opened (no verification): its listing in *list,
 * its index in *index. */
static bml__card *card_opened(bml_devices **list, size_t *index) {
  *list = card_under_test(index);
  char err[256];
  bml__card *c = NULL;
  cr_assert_eq(bml__card_open(&(*list)->dev[*index].cl, &c, err, sizeof err), 0, "%s", err);
  return c;
}

/* Boards' drivers cap a buffer at a quarter of their memory or less
 * (CL_DEVICE_MAX_MEM_ALLOC_SIZE: 1792 MiB of 7 GiB on an Adreno 635): a
 * matrix whose bits exceed the cap is cut into chunks of rows, no slab's
 * buffer exceeds it, and every kernel gives the CPU's bits across the
 * chunks.  Here the cap is 64 KiB: 301x5120 (640 bytes of bits a row) takes
 * three chunks of 102 rows at most. */
Test(oracle, a_card_whose_largest_buffer_is_small_cuts_matrices_and_keeps_the_bits) {
  size_t i;
  bml_devices *l;
  bml__card *c = card_opened(&l, &i);
  c->max_alloc = 64 << 10;
  const size_t rows = 301, n = 5120;
  bml_block_q1_0 *w = malloc(rows * (n / 128) * sizeof *w);
  bml_block_q8_0 *a = malloc(n / 32 * sizeof *a);
  float *want = malloc(rows * sizeof *want), *got = malloc(rows * sizeof *got);
  cr_assert(w && a && want && got);
  uint64_t seed = 0xa110cu;
  bml__gen_q1_0(&seed, w, rows, n, false);
  cr_assert_eq(bml__gen_q8_0(&seed, a, n, false), 0);
  cr_assert_eq(bml__q1_0_run(&bml__q1_0_ref, w, rows, n, a, want), 0);
  bml__build b;
  char *log = NULL;
  cr_assert_eq(bml__card_build(c, false, NULL, &b, &log), 0, "%s", log ? log : "");
  free(log);
  cr_expect_null(strstr(b.options, "-cl-std"), "the build asks for an OpenCL C version: %s", b.options);
  bml__rows_part part = {w, rows};
  bml__card_matrix m = {0};
  cr_assert_eq(bml__card_matrix_upload(c, &part, 1, n, false, &m), 0);
  cr_expect_eq(m.nchunks, 3, "%zu chunks", m.nchunks);
  for (size_t s = 0; s < c->nslabs; s++)
    cr_expect_leq((uint64_t)c->slabs[s].cap * 16, c->max_alloc, "slab %zu: %zu row-blocks of bits", s, c->slabs[s].cap);
  bml__card_buf act = {0}, out = {0};
  for (int k = 0; k < BML_KERNEL_COUNT; k++) {
    memset(got, 0, rows * sizeof *got);
    cr_assert_eq(bml__card_product(c, &b, (bml__kernel_id)k, 0, &m, a, &act, &out, got), 0);
    const long r = bml__first_difference(want, got, rows);
    cr_expect(r < 0, "%s: row %ld differs (cpu 0x%08x, card 0x%08x)", bml__kernel_name((bml__kernel_id)k), r,
              r < 0 ? 0 : bml__float_bits(want[r]), r < 0 ? 0 : bml__float_bits(got[r]));
  }
  bml__card_buf_free(&act);
  bml__card_buf_free(&out);
  bml__card_matrix_free(c, &m);
  bml__build_release(&b);
  bml__card_close(c);
  bml_devices_free(l);
  free(w), free(a), free(want), free(got);
}

Test(oracle, slabs_reuse_freed_ranges_merge_them_and_release_empty_slabs) {
  size_t i;
  bml_devices *l;
  bml__card *c = card_opened(&l, &i);
  size_t s[4], off[4];
  /* the first slab is exact; a later one doubles what the card holds, and
   * is BML_SLAB_MIN_BYTES at least; exact slabs fill up */
  const size_t min_rb = BML_SLAB_MIN_BYTES / BML_ROW_BLOCK_BYTES;
  cr_assert_eq(bml__slab_alloc(c, 1000, true, &s[0], &off[0]), 0);
  cr_expect_eq(bml__card_slab_bytes(c), 1000 * BML_ROW_BLOCK_BYTES);
  cr_expect_eq(bml__slab_growth(c, 10, false), min_rb * BML_ROW_BLOCK_BYTES, "a new slab is BML_SLAB_MIN_BYTES at least");
  cr_expect_eq(bml__slab_growth(c, 10, true), 10 * BML_ROW_BLOCK_BYTES, "an exact slab is just what is asked");
  cr_assert_eq(bml__slab_alloc(c, 1000, true, &s[1], &off[1]), 0);
  cr_expect_eq(bml__card_slab_bytes(c), 2000 * BML_ROW_BLOCK_BYTES);
  bml__slab_free(c, s[1], off[1], 1000);
  cr_expect_eq(bml__card_slab_bytes(c), 1000 * BML_ROW_BLOCK_BYTES, "the emptied second slab was not released");
  cr_assert_eq(bml__slab_alloc(c, 300, false, &s[1], &off[1]), 0);
  cr_assert_eq(bml__slab_alloc(c, 300, false, &s[2], &off[2]), 0);
  cr_assert_eq(bml__slab_alloc(c, 300, false, &s[3], &off[3]), 0);
  cr_expect(s[1] != s[0] && s[2] == s[1] && s[3] == s[1], "the three share the second slab");
  cr_expect(off[1] == 0 && off[2] == 300 && off[3] == 600);
  cr_expect_eq(bml__card_slab_bytes(c), (1000 + min_rb) * BML_ROW_BLOCK_BYTES);
  cr_expect_eq(bml__slab_growth(c, min_rb - 900, false), 0, "the rest of the second slab is free");
  /* a freed range is reused; freed neighbours merge into one range */
  bml__slab_free(c, s[2], off[2], 300);
  size_t s2, o2;
  cr_assert_eq(bml__slab_alloc(c, 250, false, &s2, &o2), 0);
  cr_expect(s2 == s[1] && o2 == 300, "the hole was not reused (slab %zu at %zu)", s2, o2);
  bml__slab_free(c, s2, o2, 250);
  bml__slab_free(c, s[3], off[3], 300);
  cr_expect_eq(bml__slab_growth(c, min_rb - 300, false), 0, "the ranges from 300 on did not merge");
  /* an emptied slab goes back to the driver */
  bml__slab_free(c, s[1], off[1], 300);
  cr_expect_eq(bml__card_slab_bytes(c), 1000 * BML_ROW_BLOCK_BYTES);
  bml__slab_free(c, s[0], off[0], 1000);
  cr_expect_eq(bml__card_slab_bytes(c), 0);
  bml__card_close(c);
  bml_devices_free(l);
}

/* PoCL shares the host's memory, so its matrices go up through the mapped
 * (host-unified) path; a discrete card, like the H200, copies them with
 * writes.  That path, forced here, gives every check the same bits. */
Test(oracle, the_discrete_cards_upload_path_passes_every_check) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  static collected c;
  const bml__oracle_hooks h = {.discrete = true, .quick = true, .max_chunk_rows = 300};
  bml__oracle_set_hooks(&h);
  int rc = verify(l, i, &c, 1);
  for (size_t k = 0; k < c.n; k++)
    cr_expect(c.lines[k].ok, "%s %s %zux%zu %s: %zu/%zu", c.lines[k].check, c.lines[k].fma, c.lines[k].rows,
              c.lines[k].n, c.lines[k].regime, c.lines[k].exact, c.lines[k].total);
  cr_expect_eq(rc, 0, "%s", bml_err_name(rc));
  cr_expect_gt(c.n, 20, "only %zu checks", c.n);
  bml_devices_free(l);
}

/* The growth a matrix of several chunks will cause is what allocating its
 * chunks one after the other causes: each chunk takes what the ones before
 * left.  Summing each chunk's growth against the same state (as before)
 * let every chunk "fit" one free range (the limiter then allowed more than
 * its limit) and charged each chunk a slab of the current total (too
 * little when they double, too much when one slab holds them all).
 * Random matrices, exact or not, with random frees between them. */
Test(oracle, the_growth_of_a_chunked_matrix_is_what_its_allocation_makes) {
  size_t i;
  bml_devices *l;
  bml__card *c = card_opened(&l, &i);
  const size_t min_rb = BML_SLAB_MIN_BYTES / BML_ROW_BLOCK_BYTES;
  enum { MAXHELD = 64 };
  size_t held_slab[MAXHELD], held_off[MAXHELD], held_rb[MAXHELD], nheld = 0;
  uint64_t seed = 0x51ab5eedu;
  for (int step = 0; step < 200; step++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t x = seed >> 20;
    /* free a few, to leave holes */
    while (nheld > 0 && (nheld >= MAXHELD - 8 || x % 3 == 0)) {
      const size_t k = (size_t)((x >> 8) % nheld);
      bml__slab_free(c, held_slab[k], held_off[k], held_rb[k]);
      held_slab[k] = held_slab[nheld - 1], held_off[k] = held_off[nheld - 1], held_rb[k] = held_rb[--nheld];
      if (x % 7 != 0) break;
    }
    if (bml__card_slab_bytes(c) > (uint64_t)6 * BML_SLAB_MIN_BYTES) { /* keep PoCL's memory modest */
      while (nheld > 0) bml__slab_free(c, held_slab[nheld - 1], held_off[nheld - 1], held_rb[nheld - 1]), nheld--;
    }
    const size_t nchunks = 1 + (size_t)((x >> 4) % 4);
    const size_t rb = 1 + (size_t)((x >> 12) % (min_rb / 2)), last = 1 + (size_t)((x >> 32) % rb);
    const bool exact = (x >> 40) % 2;
    const uint64_t before = bml__card_slab_bytes(c);
    const uint64_t predicted = bml__slab_growth_chunks(c, nchunks, rb, last, exact);
    for (size_t k = 0; k < nchunks && nheld < MAXHELD; k++) {
      const size_t need = k + 1 == nchunks ? last : rb;
      cr_assert_eq(bml__slab_alloc(c, need, exact, &held_slab[nheld], &held_off[nheld]), 0);
      held_rb[nheld++] = need;
    }
    const uint64_t grown = bml__card_slab_bytes(c) - before;
    cr_assert_eq(predicted, grown, "step %d: %zu chunks of %zu (last %zu), %s: predicted %llu bytes, grew %llu",
                 step, nchunks, rb, last, exact ? "exact" : "doubling", (unsigned long long)predicted,
                 (unsigned long long)grown);
  }
  while (nheld > 0) bml__slab_free(c, held_slab[nheld - 1], held_off[nheld - 1], held_rb[nheld - 1]), nheld--;
  cr_expect_eq(bml__card_slab_bytes(c), 0);
  bml__card_close(c);
  bml_devices_free(l);
}

/* The fallback tests' card: the card under test with the default
 * tunables, and whether its platform is NVIDIA's. */
static bml__card *card_for_fallback(bml_devices **l, size_t *i, bool *nvidia) {
  bml__card *c = card_opened(l, i);
  bml__card_set_tunables(c, 32, 32, 4, 1);
  *nvidia = strstr(bml_devices_get(*l, *i)->platform, "NVIDIA") != NULL;
  return c;
}

/* c built with the options its flags force on: the build must succeed,
 * dropping whatever the compiler refuses. */
static void build_forced(bml__card *c, bml__build *b) {
  char *log = NULL;
  cr_assert_eq(bml__card_build(c, false, NULL, b, &log), 0, "%s", log ? log : "");
  free(log);
}

static void fallback_done(bml__card *c, bml_devices *l, bml__build *b) {
  bml__build_release(b);
  bml__card_close(c);
  bml_devices_free(l);
}

/* NVIDIA's driver builds the kernels with PTX's prmt inline; any other
 * compiler that refuses it gets the plain C formulation (the same bits,
 * which the oracle checks), not a failed build. */
Test(oracle, the_byte_permute_build_is_nvidias_and_a_refusal_falls_back_to_plain_c) {
  size_t i;
  bml_devices *l;
  bool nvidia;
  bml__card *c = card_for_fallback(&l, &i, &nvidia);
  cr_expect_eq(c->nvidia_build, nvidia, "NVIDIA's build chosen for \"%s\"", bml_devices_get(l, i)->platform);
  c->nvidia_build = true;
  bml__build b;
  build_forced(c, &b);
  if (nvidia) {
    cr_expect(c->nvidia_build && strstr(b.options, BML_NVIDIA_OPTIONS) != NULL, "%s", b.options);
  } else {
    cr_expect(!c->nvidia_build, "the refused option is still chosen");
    cr_expect(strstr(b.options, "BML_PRMT") == NULL && strstr(b.options, "BML_RING") == NULL &&
                  strstr(b.options, "BML_D0HALF") == NULL,
              "built with %s", b.options);
  }
  fallback_done(c, l, &b);
}

/* The TMA's copies are NVIDIA's build's on compute capability 9.0 and
 * later; a compiler that refuses them (PoCL, or an older driver's PTX)
 * builds without them, keeping the rest of NVIDIA's build where it takes
 * it, not a failed build. */
Test(oracle, the_tma_build_is_hoppers_and_a_refusal_falls_back) {
  size_t i;
  bml_devices *l;
  bool nvidia;
  bml__card *c = card_for_fallback(&l, &i, &nvidia);
  cr_expect(!c->nvidia_tma || nvidia, "the TMA chosen for \"%s\"", bml_devices_get(l, i)->platform);
  const bool hopper = c->nvidia_tma;
  c->nvidia_build = c->nvidia_tma = true;
  bml__build b;
  build_forced(c, &b);
  if (hopper) {
    cr_expect(c->nvidia_tma && strstr(b.options, BML_NVIDIA_TMA_OPTION) != NULL, "%s", b.options);
  } else {
    cr_expect(!c->nvidia_tma, "the refused TMA is still chosen");
    cr_expect(strstr(b.options, "BML_TMA_SRC") == NULL, "built with %s", b.options);
    cr_expect_eq(c->nvidia_build, nvidia, "NVIDIA's other options kept where taken: %s", b.options);
  }
  fallback_done(c, l, &b);
}

/* Planning needs no device: a card's table shapes and matrices' chunks. */
static const bml__card plan_card = {.lrows = 32, .lrrows = 32, .lrrpt = 4, .lrlpt = 1};

/* Plans the items on plan_card and checks that each launch numbers its
 * records' work-groups from 0, in order.  Returns the launches. */
static size_t plan_checked(const bml__batch_item *items, size_t n, bml__batch_rec *scratch, bml__desc *desc,
                           bml__batch_run *runs) {
  size_t nruns = bml__batch_plan(&plan_card, items, n, scratch, desc, runs);
  for (size_t r = 0; r < nruns; r++) {
    size_t g = 0;
    for (size_t k = runs[r].first; k < runs[r].first + runs[r].count; k++) {
      cr_expect_eq(desc[k].first_group, g, "launch %zu record %zu's first work-group", r, k);
      cr_expect_eq(desc[k].wgs, bml__card_groups(&plan_card, runs[r].kind, desc[k].rows),
                   "launch %zu record %zu: a work-group per group (max_groups 0)", r, k);
      g += bml__card_groups(&plan_card, runs[r].kind, desc[k].rows);
    }
    cr_expect_eq(runs[r].groups, g, "launch %zu's work-groups", r);
  }
  return nruns;
}

Test(oracle, a_batch_plan_is_a_launch_per_slab_and_kernel_cut_every_run_bytes) {
  /* big: 65536 x 8192 in slab 1 (84 MB); small: 1000 x 256 in slab 0 */
  bml__card_chunk big_ch = {0, 65536, 1, 0, 65536 * 64}, small_ch = {0, 1000, 0, 0, 1000 * 2};
  bml__card_matrix big = {65536, 8192, 1, &big_ch, 0}, small = {1000, 256, 1, &small_ch, 0};
  const size_t big_bytes = bml__card_matrix_bytes(65536, 8192);
  cr_assert(3 * big_bytes < BML_RUN_BYTES && 4 * big_bytes >= BML_RUN_BYTES, "the test's sizes assume 256 MiB");
  bml__batch_item items[7];
  for (size_t i = 0; i < 7; i++) /* big, small, big, big, small, big, big */
    items[i] = (bml__batch_item){i == 1 || i == 4 ? &small : &big, BML_BATCHED_LR, 100 * i, 0};
  bml__batch_rec scratch[7];
  bml__desc desc[7];
  bml__batch_run runs[7];
  cr_assert_eq(bml__batch_records(items, 7), 7);
  size_t n = plan_checked(items, 7, scratch, desc, runs);
  /* slab 0's two records, then slab 1's five: four reach 256 MiB, one more */
  cr_assert_eq(n, 3, "%zu launches", n);
  static const size_t first[3] = {0, 2, 6}, count[3] = {2, 4, 1}, slab[3] = {0, 1, 1};
  static const size_t act[7] = {100, 400, 0, 200, 300, 500, 600}; /* each run in the items' order */
  for (size_t r = 0; r < 3; r++) {
    cr_expect_eq(runs[r].first, first[r], "run %zu", r);
    cr_expect_eq(runs[r].count, count[r], "run %zu", r);
    cr_expect_eq(runs[r].slab, slab[r], "run %zu", r);
  }
  for (size_t k = 0; k < 7; k++) cr_expect_eq(desc[k].act_off, act[k], "record %zu", k);
  cr_expect_eq(desc[2].rows, 65536);
  cr_expect_eq(desc[2].nb, 64);
}

/* Plans items on plan_card with max_groups cap and checks each launch's
 * numbering: records' work-groups from 0 in order, each at least one and
 * at most its groups, and within the cap wherever a record has fewer
 * work-groups than groups; past it (more records than the cap) no
 * work-group takes more groups than cover the fewest steps of a record.
 * Returns the one launch's records' work-groups in wgs. */
static void plan_capped(const bml__batch_item *items, size_t n, size_t cap, size_t *wgs) {
  bml__card card = plan_card;
  card.max_groups = cap;
  bml__batch_rec scratch[8];
  bml__desc desc[8];
  bml__batch_run runs[8];
  cr_assert(n <= 8);
  const size_t nruns = bml__batch_plan(&card, items, n, scratch, desc, runs);
  cr_assert_eq(nruns, 1, "cap %zu: %zu launches", cap, nruns);
  size_t first = 0, least = SIZE_MAX;
  bool fewer = false;
  for (size_t i = 0; i < n; i++) {
    const size_t st = bml__card_groups(&card, BML_BATCHED_LR, desc[i].rows) * ((desc[i].nb + 7u) / 8u);
    if (st < least) least = st;
  }
  for (size_t i = 0; i < n; i++) {
    const size_t g = bml__card_groups(&card, BML_BATCHED_LR, desc[i].rows);
    cr_expect_eq(desc[i].first_group, first, "cap %zu, record %zu", cap, i);
    cr_expect(desc[i].wgs >= 1 && desc[i].wgs <= g, "cap %zu, record %zu: %u work-groups for %zu groups", cap, i,
              (unsigned)desc[i].wgs, g);
    fewer |= desc[i].wgs < g;
    wgs[i] = desc[i].wgs;
    first += desc[i].wgs;
    const size_t tiles = (desc[i].nb + 7u) / 8u, taken = (g + desc[i].wgs - 1) / desc[i].wgs;
    if (n > cap && cap)
      cr_expect(taken == 1 || taken * tiles < least + tiles, "cap %zu, record %zu: a work-group takes %zu groups of %zu tiles, past %zu steps",
                cap, i, taken, tiles, least);
  }
  cr_expect_eq(runs[0].groups, first, "cap %zu: the launch's work-groups", cap);
  cr_expect(!fewer || n > cap || runs[0].groups <= cap, "cap %zu: %zu work-groups", cap, runs[0].groups);
}

/* A launch of more groups of rows than the card's max_groups gives its
 * records fewer work-groups, each taking about as many tiles (the
 * kernel's work-group w of a record of W takes its groups w, w + W, ...:
 * every group once, by bml_lanes); one of fewer, or with a record too
 * small to share that way, a work-group per group.  A launch of more
 * records than max_groups runs in waves: its work-groups take the steps of
 * BML_PLAN_WAVES waves, or the fewest steps of a record where fewer. */
Test(oracle, a_launch_past_max_groups_gives_its_records_fewer_work_groups_each_taking_several_groups) {
  /* 8192 x 4096: 64 groups of 128 rows, 4 tiles each (256 steps); 1000 x
   * 256: 8 groups of one tile (8 steps); 16 MB in all, one launch */
  bml__card_chunk big_ch = {0, 8192, 0, 0, 8192 * 32}, small_ch = {0, 1000, 0, 0, 1000 * 2};
  bml__card_matrix big = {8192, 4096, 1, &big_ch, 0}, small = {1000, 256, 1, &small_ch, 0};
  const bml__batch_item items[4] = {{&big, BML_BATCHED_LR, 0, 0}, {&big, BML_BATCHED_LR, 100, 0},
                                    {&big, BML_BATCHED_LR, 200, 0}, {&small, BML_BATCHED_LR, 300, 0}};
  size_t wgs[4];
  /* three big records, 192 groups: 16 work-groups each (4 groups, 16
   * steps, a work-group) within 50 and 48; one each within 3; within 1,
   * waves: 768 steps over 8 x 1 are 96, 3 work-groups each (of 22 groups,
   * 88 steps) */
  cr_assert_eq(BML_PLAN_WAVES, 8, "the expected counts assume 8 waves");
  static const size_t caps[] = {48, 50, 3, 1}, want[] = {16, 16, 1, 3};
  for (size_t t = 0; t < BML_ARRAY_SIZE(caps); t++) {
    plan_capped(items, 3, caps[t], wgs);
    for (size_t i = 0; i < 3; i++) cr_expect_eq(wgs[i], want[t], "cap %zu, record %zu: %zu", caps[t], i, wgs[i]);
  }
  plan_capped(items, 3, 47, wgs); /* fewer, within 47 (the checks above) */
  cr_expect(wgs[0] < 64 && wgs[0] == wgs[1] && wgs[1] == wgs[2], "cap 47: %zu %zu %zu", wgs[0], wgs[1], wgs[2]);
  /* at or past the launch's groups: a work-group per group */
  static const size_t open_caps[] = {192, 5000, 0};
  for (size_t t = 0; t < BML_ARRAY_SIZE(open_caps); t++) {
    plan_capped(items, 3, open_caps[t], wgs);
    for (size_t i = 0; i < 3; i++) cr_expect_eq(wgs[i], 64, "cap %zu, record %zu: %zu", open_caps[t], i, wgs[i]);
  }
  /* with the small record (8 steps, fewer than a work-group would take): a
   * work-group per group */
  static const size_t small_caps[] = {50, 7, 4};
  for (size_t t = 0; t < BML_ARRAY_SIZE(small_caps); t++) {
    plan_capped(items, 4, small_caps[t], wgs);
    for (size_t i = 0; i < 4; i++)
      cr_expect_eq(wgs[i], i < 3 ? 64 : 8, "cap %zu, record %zu: %zu", small_caps[t], i, wgs[i]);
  }
  /* four records within 3 and 1: waves of the small record's 8 steps (776
   * over 8 x 3 or 8 x 1 are more), 32 work-groups of 2 groups for each big
   * one, one for the small one's 8 groups */
  static const size_t wave_caps[] = {3, 1};
  for (size_t t = 0; t < BML_ARRAY_SIZE(wave_caps); t++) {
    plan_capped(items, 4, wave_caps[t], wgs);
    for (size_t i = 0; i < 4; i++)
      cr_expect_eq(wgs[i], i < 3 ? 32 : 1, "cap %zu, record %zu: %zu", wave_caps[t], i, wgs[i]);
  }
  /* the three big records within 2: 768 steps over 8 x 2 are 48, fewer
   * than a record's 256: 6 work-groups each (of 11 groups, 44 steps) */
  plan_capped(items, 3, 2, wgs);
  for (size_t i = 0; i < 3; i++) cr_expect_eq(wgs[i], 6, "cap 2, record %zu: %zu", i, wgs[i]);
}

/* Plans n items of the matrices ms[i] (all BML_BATCHED_L, in one slab)
 * and returns the launches' record counts in counts. */
static size_t plan_counts(const bml__card_matrix *const *ms, size_t n, size_t *counts) {
  bml__batch_item items[64];
  bml__batch_rec scratch[64];
  bml__desc desc[64];
  bml__batch_run runs[64];
  cr_assert(n <= 64);
  for (size_t i = 0; i < n; i++) items[i] = (bml__batch_item){ms[i], BML_BATCHED_L, 64 * i, 0};
  size_t nruns = plan_checked(items, n, scratch, desc, runs);
  for (size_t r = 0; r < nruns; r++) counts[r] = runs[r].count;
  for (size_t k = 0; k < n; k++) cr_expect_eq(desc[k].act_off, 64 * k, "record %zu out of the items' order", k);
  return nruns;
}

Test(oracle, a_batch_plan_halves_its_last_launch_down_to_the_tail_bytes) {
  /* 32 products of 12288 x 4096 (7.9 MB each) in one slab: 252 MB, one
   * launch by BML_RUN_BYTES, then halved while the second half is 2 x
   * BML_TAIL_BYTES or more: 16, 8, 4 and 4 records. */
  bml__card_chunk ch = {0, 12288, 0, 0, 12288 * 32};
  bml__card_matrix m = {12288, 4096, 1, &ch, 0};
  const bml__card_matrix *ms[32];
  for (size_t i = 0; i < 32; i++) ms[i] = &m;
  cr_assert(32 * bml__card_matrix_bytes(12288, 4096) < BML_RUN_BYTES, "the test's sizes assume 256 MiB");
  size_t counts[64], n = plan_counts(ms, 32, counts);
  cr_assert_eq(n, 4, "%zu launches", n);
  static const size_t want[4] = {16, 8, 4, 4};
  for (size_t r = 0; r < 4; r++) cr_expect_eq(counts[r], want[r], "launch %zu: %zu records", r, counts[r]);
  /* a record bigger than the rest together is a launch of its own, first
   * or last; and a small batch stays one launch */
  bml__card_chunk hch = {0, 151936, 0, 0, 151936 * 32}, sch = {0, 4096, 0, 0, 4096 * 32};
  bml__card_matrix head = {151936, 4096, 1, &hch, 0}, small = {4096, 4096, 1, &sch, 0};
  const bml__card_matrix *tail_last[3] = {&small, &small, &head}, *head_first[3] = {&head, &small, &small};
  n = plan_counts(tail_last, 3, counts);
  cr_expect(n == 2 && counts[0] == 2 && counts[1] == 1, "small, small, head: %zu launches", n);
  n = plan_counts(head_first, 3, counts);
  cr_expect(n == 2 && counts[0] == 1 && counts[1] == 2, "head, small, small: %zu launches", n);
  const bml__card_matrix *few[3] = {&small, &small, &small};
  n = plan_counts(few, 3, counts);
  cr_expect_eq(n, 1, "three 2.6 MB products: %zu launches", n);
}

/* Out of memory at the card's open: the line names it and the verdict is
 * BML_ENOMEM, not a card that gave other bits (the line was blank and the
 * verdict BML_EVERIFY). */
Test(oracle, out_of_memory_at_the_open_is_named_and_not_called_other_bits) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  static collected c;
  const bml__oracle_hooks h = {.open_nomem = true};
  bml__oracle_set_hooks(&h);
  int rc = verify(l, i, &c, 1);
  cr_expect_eq(rc, BML_ENOMEM, "%s", bml_err_name(rc));
  cr_expect_eq(bml_devices_get(l, i)->verified, 0);
  cr_assert_geq(c.n, 1);
  cr_expect_str_eq(c.lines[0].check, "open");
  cr_expect(!c.lines[0].ok);
  cr_expect(c.lines[0].detail && strcmp(c.lines[0].detail, "out of memory") == 0, "detail: %s",
            c.lines[0].detail ? c.lines[0].detail : "(none)");
  bml_devices_free(l);
}

/* A cache that cannot be written says why (it said only that it could
 * not): here its directory would be under a regular file. */
Test(oracle, a_cache_that_cannot_be_written_says_why) {
  char dir[] = "/tmp/bankml-cl-tune-XXXXXX";
  size_t i;
  bml_devices *l = tuning_fixture(dir, &i);
  char file[300], under[320];
  snprintf(file, sizeof file, "%s/file", dir);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  snprintf(under, sizeof under, "%s/sub", file);
  setenv("BANKML_CACHE_DIR", under, 1);
  bml__oracle_hooks h = {.quick = true};
  bml__oracle_set_hooks(&h);
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  static collected c;
  cr_expect_eq(verify(l, i, &c, 1), 0);
  bml_log_set_sink(NULL, NULL);
  cr_expect(strstr(logged, "cannot write the cache ") && strstr(logged, "(Not a directory)"), "%s", logged);
  remove(file);
  tuning_cleanup(dir);
  bml_devices_free(l);
}

