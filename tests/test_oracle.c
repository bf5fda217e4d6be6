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
#include "oracletest.h"
#include "kernel_variants.h"
#include "card/tune.h"

static void no_hooks(void) { bml__oracle_set_hooks(NULL); }

/* The timeout catches a hang, not slowness: with PoCL's kernel cache empty
 * (a fresh machine, CI's case) the lr shapes' test compiles four programs'
 * kernels at their first launches, more than 8 minutes alone on 2 vCPUs
 * of an AMD EPYC. */
TestSuite(oracle, .init = no_hooks, .fini = no_hooks, .timeout = 1500);

/* The shipped kernel sources (cl/), each read by the tests from the source
 * tree, with the helpers (`static inline` definitions) each holds at least. */
static const char *const cl_files[] = {"cl/q1_0.cl", "cl/q1_0_table.cl", "cl/q1_0_lanes.cl", "cl/q1_0_batch.cl",
                                       "cl/nvidia.cl"};
static const int cl_helpers[] = {7, 10, 6, 1, 6};

/* The kernels' sources are ASCII, and OpenCL C follows C99's inline: a plain `inline` definition makes no
 * callable copy, so a call a compiler does not inline links to nothing
 * (clang at -O2 for SPIR-V and AMD leaves bml_lanes undefined: the build
 * fails and the card is refused).  PoCL and NVIDIA inline everything, so
 * only the source can show it: every helper is `static inline` (or
 * `static BML_INLINE`, which is `inline` where the compiler is not clang). */
Test(oracle, kernel_helpers_are_static_inline) {
  for (size_t k = 0; k < BML_ARRAY_SIZE(cl_files); k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", getenv("BANKML_TOP_SRCDIR"), cl_files[k]);
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
    cr_expect_geq(helpers, cl_helpers[k], "%s: the helpers were not found (%d)", path, helpers);
  }
}

/* The source file as it is, in a static buffer (the next call reuses it). */
static const char *kernel_source_text(const char *file) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", getenv("BANKML_TOP_SRCDIR"), file);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  static char text[1 << 17];
  const size_t len = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  cr_assert_lt(len, sizeof text - 1, "%s is larger than the test reads", file);
  text[len] = '\0';
  return text;
}

/* The library builds the portable program from one embedded source: the
 * files of cl/ before nvidia.cl, joined in their order (Makefile.am), not
 * one more byte nor one less. */
Test(oracle, the_embedded_program_is_the_sources_joined_in_order) {
  extern const char bml__cl_q1_0_source[];
  const char *e = bml__cl_q1_0_source;
  for (size_t k = 0; k + 1 < BML_ARRAY_SIZE(cl_files); k++) {
    const char *text = kernel_source_text(cl_files[k]);
    const size_t len = strlen(text);
    cr_assert_gt(len, 0, "%s is empty", cl_files[k]);
    cr_assert(strncmp(e, text, len) == 0, "the embedded source differs from %s", cl_files[k]);
    e += len;
  }
  cr_expect_eq(*e, '\0', "the embedded source goes on past the last file: %.60s", e);
}

/* The source file without its comments, in a buffer the caller frees. */
static char *kernel_source_code(const char *file) {
  const char *text = kernel_source_text(file);
  const size_t len = strlen(text);
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
 * them: no subgroup built-in, no `double` nor cl_khr_fp64 (only a test's
 * build fakes a twice-rounded fma with them: tests/kernel_variants.h), and
 * `half` only as the type of the pointers vload_half and vstore_half take
 * (core OpenCL C 1.2).  The host side is compiled for OpenCL 1.2's API
 * (CL_TARGET_OPENCL_VERSION 120, src/devices/clinc.h) and the build asks
 * for no -cl-std (OpenCL C 1.2, the default). */
Test(oracle, the_kernels_need_no_optional_feature_of_opencl) {
  int halves = 0;
  for (size_t k = 0; k < BML_ARRAY_SIZE(cl_files); k++) {
    char *code = kernel_source_code(cl_files[k]);
    int depth = 0;
    char *save = NULL;
    for (char *line = strtok_r(code, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
      while (*line == ' ') line++;
      if (strncmp(line, "#if", 3) == 0)
        depth++;
      else if (strncmp(line, "#endif", 6) == 0)
        depth--;
      cr_expect_null(strstr(line, "sub_group"), "%s: a subgroup built-in: %s", cl_files[k], line);
      cr_expect_null(strstr(line, "cl_khr_fp16"), "%s: cl_khr_fp16: %s", cl_files[k], line);
      cr_expect_null(strstr(line, "cl_khr_fp64"), "%s: cl_khr_fp64: %s", cl_files[k], line);
      for (const char *p = line; (p = strstr(p, "double")) != NULL; p += 6)
        cr_expect((p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) || isalnum((unsigned char)p[6]) ||
                      p[6] == '_',
                  "%s: double: %s", cl_files[k], line);
      for (const char *p = line; (p = strstr(p, "half")) != NULL; p += 4) {
        if ((p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) || isalnum((unsigned char)p[4]) || p[4] == '_')
          continue; /* vload_half2, half2, bml_d0half: not the type */
        const char *q = p + 4;
        while (*q == ' ') q++;
        cr_expect_eq(*q, '*', "%s: half used as a value, which needs cl_khr_fp16: %s", cl_files[k], line);
        halves++;
      }
    }
    cr_expect_eq(depth, 0, "%s: the #if blocks did not balance", cl_files[k]);
    free(code);
  }
  cr_expect_gt(halves, 0, "no half pointer found: the test no longer reads what it means to");
}

/* No build option or hook of the shipped sources exists for the tests
 * alone: a test builds what it needs through the oracle's hooks
 * (tests/kernel_variants.h). */
Test(oracle, the_kernel_sources_name_no_test) {
  for (size_t k = 0; k < BML_ARRAY_SIZE(cl_files); k++) {
    char *code = kernel_source_code(cl_files[k]);
    cr_expect_null(strstr(code, "TEST"), "%s names a test: %s", cl_files[k], strstr(code, "TEST"));
    cr_expect_null(strstr(code, "_C)"), "%s has a switch for C formulations", cl_files[k]);
    free(code);
  }
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

/* Verifies the card under test, quickly, built with the variant's
 * additions (its options and sources): the lines in c, the device's
 * verified flag in *verified.  Returns the verification's result. */
static int verify_built_with(bml__oracle_hooks variant, collected *c, int *verified) {
  size_t i;
  bml_devices *l = card_under_test(&i);
  bml__oracle_hooks h = variant;
  h.quick = true;
  bml__oracle_set_hooks(&h);
  int rc = verify(l, i, c, 1);
  *verified = bml_devices_get(l, i)->verified;
  bml_devices_free(l);
  return rc;
}

Test(oracle, an_unfused_outer_fma_is_refused_with_the_row_named) {
  static collected c;
  int verified;
  cr_expect_eq(verify_built_with((bml__oracle_hooks){.device_source = bml_test_unfused_outer}, &c, &verified), BML_EVERIFY);
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
  bml__oracle_hooks h = {.device_source = bml_test_twice_rounded_fma, .quick = true};
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

/* A batched kernel that writes nothing (the test build below) must not pass
 * on results another kernel left in the buffers: the oracle fills them
 * before each check, and each kernel's cases are its own. */
Test(oracle, a_kernel_that_writes_nothing_is_refused) {
  static collected c;
  int verified;
  cr_expect_eq(verify_built_with((bml__oracle_hooks){.device_source = bml_test_lrb_renamed, .source_after = bml_test_lrb_writes_nothing}, &c, &verified), BML_EVERIFY);
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

/* NVIDIA's build, its byte-permute lookups (bml_lword) written in C, its
 * ring of weights, its scales staged as half2 and (Hopper's) its table
 * sources in local memory, the TMA's copies made in C: the same bits as
 * the reference on this card too. */
#define NVIDIA_IN_C {.device_source = bml_test_nvidia_in_c, .extra_options = BML_TEST_NVIDIA_IN_C_OPTIONS}
Test(oracle, nvidias_build_written_in_c_passes_every_check) {
  static collected c;
  int verified;
  cr_expect_eq(verify_built_with((bml__oracle_hooks)NVIDIA_IN_C, &c, &verified), 0);
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
    bml__oracle_hooks build;
  } cases[] = {{{32, 3, 1}, {0}}, {{16, 4, 1}, {0}}, {{64, 2, 2}, {0}}, {{64, 2, 2}, NVIDIA_IN_C}};
  size_t n, i, verified = 0;
  const size_t(*shapes)[3] = bml__tune_lr_candidates(&n);
  bml_devices *l = card_under_test(&i);
  for (size_t k = 0; k < BML_ARRAY_SIZE(cases); k++) {
    const size_t *want = cases[k].shape;
    bool candidate = false;
    for (size_t s = 0; s < n; s++) candidate |= memcmp(shapes[s], want, sizeof shapes[s]) == 0;
    cr_expect(candidate, "_lr %zux%zu, %zu lanes is not a candidate of the tuning", want[0], want[1], want[2]);
    bml__oracle_hooks h = cases[k].build;
    h.quick = true;
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
                 cases[k].build.device_source ? "NVIDIA's in C" : "plain");
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
  cr_expect_eq(verify_built_with((bml__oracle_hooks){.extra_options = options}, c, &verified), BML_EVERIFY);
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
  static const bml__oracle_hooks builds[] = {{0}, NVIDIA_IN_C};
  for (size_t b = 0; b < BML_ARRAY_SIZE(builds); b++) {
    bml__oracle_hooks h = builds[b];
    h.local_mem = 24576, h.quick = true;
    static collected c;
    c.n = 0;
    bml__card *card = NULL;
    bml__build use = {0};
    cr_assert_eq(verify_keeping(l, i, &h, &c, &card, &use), 0, "%s", builds[b].device_source ? "NVIDIA's in C" : "plain");
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
