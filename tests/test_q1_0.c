/* test_q1_0.c -- every CPU path and the public entry points against ggml's golden bits. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bml.h"
#include "base/hooks.h"
#include "golden.h"
#include "cpu/q1_0.h"
#include "cpu/gen.h"

static golden_q1_case *cases;
static int ncases;

static void load(void) {
  ncases = golden_load_q1(&cases);
  cr_assert(ncases > 0, "cannot read the Q1_0 golden file from %s", golden_dir());
}

static void unload(void) {
  golden_free_q1(cases, ncases);
  bml__q1_0_kernel_force(NULL);
}

static void expect_case_bits(int i, const float *got, const char *what) {
  const golden_q1_case *c = &cases[i];
  long r = golden_first_difference(c->ref, got, c->rows);
  cr_expect(r < 0, "%s: case %d (%ux%u, flags %u): row %ld differs (ggml 0x%08x, got 0x%08x)",
            what, i, c->rows, c->n, c->flags, r, r < 0 ? 0 : golden_bits(c->ref[r]),
            r < 0 ? 0 : golden_bits(got[r]));
}

/* Runs every golden case through the CPU path `name`, or skips visibly when
 * this build or this CPU lacks it. */
static void golden_through_path(const char *name) {
  int rc = bml__q1_0_kernel_force(name);
  if (rc == BML_EINVAL) cr_skip_test("CPU path %s is not built on this architecture", name);
  if (rc == BML_ENOTSUP) cr_skip_test("this CPU cannot run the %s path", name);
  cr_assert_eq(rc, 0);
  cr_assert_str_eq(bml__q1_0_kernel_active()->name, name);
  for (int i = 0; i < ncases; i++) {
    float *out = malloc(cases[i].rows * sizeof *out);
    cr_assert_not_null(out);
    cr_assert_eq(bml_q1_0_mat_vec(cases[i].w, cases[i].rows, cases[i].n, cases[i].a, out), 0);
    expect_case_bits(i, out, name);
    free(out);
  }
}

TestSuite(q1_0, .init = load, .fini = unload);

/* Every case of the file is read: 18, of 2988 rows in all. */
Test(q1_0, golden_file_is_read_whole) {
  size_t rows = 0;
  for (int i = 0; i < ncases; i++) rows += cases[i].rows;
  cr_expect_eq(ncases, 18);
  cr_expect_eq(rows, 2988);
}

/* A file with more than its count of cases says is refused (a count cut
 * short would leave cases unchecked). */
Test(q1_0, a_golden_file_longer_than_its_cases_is_refused) {
  char dir[] = "/tmp/bml-golden-XXXXXX", cmd[512], err[256] = "";
  cr_assert_not_null(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "cp '%s/%s' '%s/' && printf x >> '%s/%s'", golden_dir(), BML__GOLDEN_Q1_FILE, dir, dir,
           BML__GOLDEN_Q1_FILE);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  golden_q1_case *c = NULL;
  const int n = bml__golden_load_q1(dir, &c, err, sizeof err);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  cr_expect_eq(system(cmd), 0);
  cr_expect_eq(n, BML_EFORMAT, "loaded %d cases", n);
  cr_expect(strstr(err, "bytes after its last case") != NULL, "%s", err);
  if (n > 0) golden_free_q1(c, n);
}

/* Only a regular file is read: a FIFO where the file should be would wait
 * for a writer for ever, a directory is not a file. */
Test(q1_0, a_golden_path_that_is_not_a_file_is_refused_at_once, .timeout = 30) {
  char dir[] = "/tmp/bml-golden-XXXXXX", path[512], err[256] = "";
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/%s", dir, BML__GOLDEN_Q1_FILE);
  for (int fifo = 0; fifo < 2; fifo++) {
    cr_assert_eq(fifo ? mkfifo(path, 0600) : mkdir(path, 0700), 0, "%s", path);
    golden_q1_case *c = NULL;
    err[0] = '\0';
    const int n = bml__golden_load_q1(dir, &c, err, sizeof err);
    fifo ? unlink(path) : rmdir(path);
    cr_expect_eq(n, BML_EFORMAT, "%s: %d", fifo ? "a FIFO" : "a directory", n);
    cr_expect(strstr(err, "not a regular file") != NULL, "%s", err);
    if (n > 0) golden_free_q1(c, n);
  }
  rmdir(dir);
}

/* Writes len bytes of data as dir/name (dir made here), loads it with the
 * Q1_0 reader (kind 1) or the Q8_0 one, removes both and returns the
 * reader's result, its reason in err. */
static int load_bytes(int kind, const void *data, size_t len, char *err, size_t errlen) {
  char dir[] = "/tmp/bml-golden-XXXXXX", path[512];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/%s", dir, kind == 1 ? BML__GOLDEN_Q1_FILE : "q8_0_quantize.golden");
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  cr_assert_eq(fwrite(data, 1, len, f), len);
  cr_assert_eq(fclose(f), 0);
  err[0] = '\0';
  int n;
  if (kind == 1) {
    golden_q1_case *c = NULL;
    if ((n = bml__golden_load_q1(dir, &c, err, errlen)) > 0) golden_free_q1(c, n);
  } else {
    golden_q8_case *c = NULL;
    if ((n = bml__golden_load_q8(dir, &c, err, errlen)) > 0) golden_free_q8(c, n);
  }
  unlink(path);
  rmdir(dir);
  return n;
}

/* A header ("BMLG", version 1, kind, count) and the first case's u32s
 * (rows, n, flags for kind 1; n for kind 2) into buf; returns its length. */
static size_t golden_header(uint8_t *buf, uint32_t kind, uint32_t count, const uint32_t *words, size_t nwords) {
  memcpy(buf, "BMLG", 4);
  uint32_t head[3] = {1, kind, count};
  size_t len = 4;
  for (size_t i = 0; i < 3 + nwords; i++, len += 4) {
    uint32_t v = i < 3 ? head[i] : words[i - 3];
    for (int b = 0; b < 4; b++) buf[len + (size_t)b] = (uint8_t)(v >> (8 * b));
  }
  return len;
}

/* A case's sizes are read from the file: each is checked against the bytes
 * left before anything is allocated.  A case of 2^20 x 2^20 took 151 GB
 * before the read failed, and the reason was empty; 2 GB were taken
 * before "truncated".  Now each is refused at once, naming both sizes. */
Test(q1_0, golden_sizes_are_bounded_by_the_file_before_any_allocation) {
  static const struct {
    int kind;
    uint32_t words[3];
    size_t nwords, extra; /* zero bytes after the case's header */
    const char *why;
  } bad[] = {
      {1, {1u << 20, 1u << 20, 0}, 3, 200, "case 0: truncated file (the case takes 154628325376 bytes, 200 are left)"},
      {1, {16384, 1u << 20, 0}, 3, 200, "case 0: truncated file (the case takes 2417164288 bytes, 200 are left)"},
      {2, {1u << 24}, 1, 200, "case 0: truncated file (the case takes 102760448 bytes, 200 are left)"},
  };
  uint8_t buf[512] = {0};
  char err[512];
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++) {
    /* 200 bytes more: the count of 1 case fits (a case takes at least 174) */
    size_t len = golden_header(buf, (uint32_t)bad[i].kind, 1, bad[i].words, bad[i].nwords) + bad[i].extra;
    int n = load_bytes(bad[i].kind, buf, len, err, sizeof err);
    cr_expect_eq(n, BML_EFORMAT, "claim %zu: %d (%s)", i, n, err);
    cr_expect(strstr(err, bad[i].why) != NULL, "claim %zu: %s", i, err);
  }
  /* a count of cases more than the file could hold, before they are allocated */
  size_t len = golden_header(buf, 1, 100000, NULL, 0) + 200;
  cr_expect_eq(load_bytes(1, buf, len, err, sizeof err), BML_EFORMAT);
  cr_expect(strstr(err, "bad case count 100000 (1 to 100000, each case at least 174 bytes: 200 are left)") != NULL,
            "%s", err);
}

/* Every way a golden file can end early or go wrong says why: the real
 * file cut at every field, and its header damaged. */
Test(q1_0, every_failure_of_the_golden_reader_says_why) {
  char src[4200], err[512];
  snprintf(src, sizeof src, "%s/%s", golden_dir(), BML__GOLDEN_Q1_FILE);
  FILE *f = fopen(src, "rb");
  cr_assert_not_null(f, "%s", src);
  static uint8_t whole[8 << 20];
  size_t size = fread(whole, 1, sizeof whole, f);
  fclose(f);
  cr_assert(size > 1000 && size < sizeof whole, "%s: %zu bytes", src, size);
  const size_t cuts[] = {0, 3, 4, 10, 15, 16, 20, 27, 28, 29, 500, size / 2, size - 1};
  for (size_t i = 0; i < BML_ARRAY_SIZE(cuts); i++) {
    int n = load_bytes(1, whole, cuts[i], err, sizeof err);
    cr_expect_eq(n, BML_EFORMAT, "cut at %zu: %d", cuts[i], n);
    cr_expect(strstr(err, BML__GOLDEN_Q1_FILE ": ") != NULL && strlen(err) > strlen(BML__GOLDEN_Q1_FILE) + 10,
              "cut at %zu: no reason: \"%s\"", cuts[i], err);
  }
  static const struct {
    size_t at;
    uint8_t byte;
    const char *why;
  } damage[] = {
      {0, 'X', "not a version-1 kind-1 golden file"},
      {4, 2, "not a version-1 kind-1 golden file"},
      {12, 0, "bad case count 0"},
      {16 + 4, 100, "case 0: bad shape"},
  };
  for (size_t i = 0; i < BML_ARRAY_SIZE(damage); i++) {
    uint8_t keep = whole[damage[i].at];
    whole[damage[i].at] = damage[i].byte;
    int n = load_bytes(1, whole, size, err, sizeof err);
    whole[damage[i].at] = keep;
    cr_expect_eq(n, BML_EFORMAT, "damage %zu: %d", i, n);
    cr_expect(strstr(err, damage[i].why) != NULL, "damage %zu: %s", i, err);
  }
}

Test(q1_0, golden_file_has_every_regime) {
  int minus128 = 0, layer = 0, single_block = 0, multi_block = 0;
  for (int i = 0; i < ncases; i++) {
    minus128 += cases[i].flags & 1;
    layer += (cases[i].flags >> 1) & 1;
    single_block += cases[i].n == 128;
    multi_block += cases[i].n > 128;
  }
  cr_expect(minus128 > 0 && layer > 0 && single_block > 0 && multi_block > 0,
            "golden file lacks a regime: -128 %d, layer %d, single %d, multi %d", minus128, layer,
            single_block, multi_block);
}

Test(q1_0, reference_path_matches_ggml) { golden_through_path("ref"); }
Test(q1_0, avx2_path_matches_ggml) { golden_through_path("avx2"); }
Test(q1_0, avx512_path_matches_ggml) { golden_through_path("avx512"); }
Test(q1_0, neon_path_matches_ggml) { golden_through_path("neon"); }
Test(q1_0, neon_dot_path_matches_ggml) { golden_through_path("neon-dot"); }

/* The path products take unless a test forces one: BANKML_CPU_PATH's when
 * this CPU runs it, else the last (the best) this CPU runs.  Where the CPU
 * is known, BANKML_TEST_CPU_PATH names the path it must be: .ci/run runs
 * this suite under qemu as a CPU with the dot product (-cpu max: neon-dot)
 * and as one without (cortex-a53: neon), so a path that says it runs where
 * it cannot, or the wrong way round, fails here. */
Test(q1_0, the_automatic_path_is_the_best_this_cpu_runs_or_the_one_named) {
  const bml__q1_0_kernel *const *ks = bml__q1_0_kernels();
  const bml__q1_0_kernel *best = NULL;
  for (size_t k = 0; ks[k]; k++)
    if (ks[k]->supported()) best = ks[k];
  cr_assert_not_null(best, "not even the reference is supported");
  const char *want = getenv("BANKML_CPU_PATH");
  for (size_t k = 0; want && *want && ks[k]; k++)
    if (strcmp(ks[k]->name, want) == 0 && ks[k]->supported()) best = ks[k];
  cr_expect_str_eq(bml__q1_0_kernel_active()->name, best->name, "BANKML_CPU_PATH=%s", want ? want : "(unset)");
  cr_expect_str_eq(bml_cpu_path(), best->name);
  const char *known = getenv("BANKML_TEST_CPU_PATH");
  if (known && *known) cr_expect_str_eq(bml_cpu_path(), known, "BANKML_TEST_CPU_PATH");
}

Test(q1_0, reference_differs_from_ggml_generic_where_ggml_says_so) {
  /* The scalar column is another order; our reference must not be it. */
  long differ = 0;
  for (int i = 0; i < ncases; i++)
    for (uint32_t r = 0; r < cases[i].rows; r++)
      differ += !golden_same_bits(cases[i].ref[r], cases[i].generic[r]);
  cr_expect(differ > 0, "golden file's two columns never differ: the test would not see an order change");
}

Test(q1_0, dot_matches_each_row) {
  for (int i = 0; i < ncases; i++) {
    size_t nb = cases[i].n / 128;
    for (uint32_t r = 0; r < cases[i].rows; r += 7) {
      float got = bml_q1_0_dot(cases[i].w + r * nb, cases[i].a, cases[i].n);
      cr_expect(golden_same_bits(got, cases[i].ref[r]), "case %d row %u: ggml 0x%08x, got 0x%08x", i,
                r, golden_bits(cases[i].ref[r]), golden_bits(got));
    }
  }
}

Test(q1_0, one_row_at_a_time_matches) {
  for (int i = 0; i < ncases; i++) {
    size_t nb = cases[i].n / 128;
    float out[1];
    uint32_t r = cases[i].rows - 1;
    cr_assert_eq(bml_q1_0_mat_vec(cases[i].w + r * nb, 1, cases[i].n, cases[i].a, out), 0);
    cr_expect(golden_same_bits(out[0], cases[i].ref[r]), "case %d last row", i);
  }
}

Test(q1_0, bad_arguments_are_refused_and_nothing_written) {
  bml_block_q1_0 w[2] = {{0}};
  bml_block_q8_0 a[8] = {{0}};
  float out[2] = {123.0f, 456.0f};
  cr_expect_eq(bml_q1_0_mat_vec(NULL, 1, 128, a, out), BML_EINVAL);
  cr_expect_eq(bml_q1_0_mat_vec(w, 1, 128, NULL, out), BML_EINVAL);
  cr_expect_eq(bml_q1_0_mat_vec(w, 1, 128, a, NULL), BML_EINVAL);
  cr_expect_eq(bml_q1_0_mat_vec(w, 1, 0, a, out), BML_ESHAPE);
  cr_expect_eq(bml_q1_0_mat_vec(w, 1, 64, a, out), BML_ESHAPE);
  cr_expect_eq(bml_q1_0_mat_vec(w, 1, 200, a, out), BML_ESHAPE);
  cr_expect_eq(bml_q1_0_mat_vec(w, 1, 256 + 32, a, out), BML_ESHAPE);
  /* rows whose weights (18 bytes a block) or results could not be in memory */
  cr_expect_eq(bml_q1_0_mat_vec(w, SIZE_MAX / 18 + 1, 128, a, out), BML_ESHAPE);
  cr_expect_eq(bml_q1_0_mat_vec(w, SIZE_MAX / 36 + 1, 256, a, out), BML_ESHAPE);
  /* an n whose prepared activation (2n + n/8 bytes) wraps past SIZE_MAX to
   * 16 bytes: it took the 16 KiB stack scratch and wrote past it */
  const size_t wraps = (SIZE_MAX / 17 * 8 / 128 + 1) * 128;
  cr_expect_eq(bml_q1_0_mat_vec(w, 1, wraps, a, out), BML_ESHAPE);
  cr_expect_eq(bml_q1_0_mat_vec(w, 1, SIZE_MAX / 4 / 128 * 128 + 128, a, out), BML_ESHAPE);
  cr_expect(out[0] == 123.0f && out[1] == 456.0f, "out was written on error");
  cr_expect(isnan(bml_q1_0_dot(w, a, 96)), "dot of bad n is not NaN");
  cr_expect(isnan(bml_q1_0_dot(NULL, a, 128)), "dot of NULL is not NaN");
  cr_expect_eq(bml_q1_0_mat_vec(w, 0, 128, a, out), 0, "zero rows is an empty product");
}

Test(q1_0, error_names_and_messages) {
  cr_expect_str_eq(bml_err_name(BML_ESHAPE), "BML_ESHAPE");
  cr_expect_str_eq(bml_err_name(-11), "CL_BUILD_PROGRAM_FAILURE");
  cr_expect_str_eq(bml_err_name(-1), "CL_DEVICE_NOT_FOUND");
  cr_expect_str_eq(bml_err_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
  cr_expect_str_eq(bml_err_name(-1099), "CL_INVALID_VA_API_MEDIA_SURFACE_INTEL");
  cr_expect_str_eq(bml_err_name(-1121), "CL_CONTEXT_TERMINATED_KHR", "a lost device has a name");
  cr_expect_str_eq(bml_err_name(-1142), "CL_INVALID_SEMAPHORE_KHR");
  cr_expect_str_eq(bml_err_name(-1143), "unknown error");
  cr_expect_str_eq(bml_err_name(12345), "unknown error");
  cr_expect_str_eq(bml_strerror(BML_EENV), "bad value in an environment variable");
  cr_expect_str_eq(bml_strerror(0), "success");
}

/* Beyond the golden file: every built path against the reference on fresh
 * random and layer-shaped data, odd row counts (tails of every unroll),
 * several widths. */
Test(q1_0, every_path_matches_reference_on_random_shapes) {
  static const size_t shapes[][2] = {{1, 128}, {3, 256}, {17, 384}, {31, 1024}, {33, 4096}, {67, 2688}, {130, 5120}};
  const bml__q1_0_kernel *const *ks = bml__q1_0_kernels();
  uint64_t seed = 0x5eed1234abcdull;
  int checked = 0;
  for (size_t s = 0; s < BML_ARRAY_SIZE(shapes); s++)
    for (int layer = 0; layer < 2; layer++) {
      size_t rows = shapes[s][0], n = shapes[s][1];
      bml_block_q1_0 *w = malloc(rows * (n / 128) * sizeof *w);
      bml_block_q8_0 *a = malloc(n / 32 * sizeof *a);
      float *want = malloc(rows * sizeof *want), *got = malloc(rows * sizeof *got);
      cr_assert(w && a && want && got);
      bml__gen_q1_0(&seed, w, rows, n, layer);
      cr_assert_eq(bml__gen_q8_0(&seed, a, n, layer), 0);
      cr_assert_eq(bml__q1_0_run(&bml__q1_0_ref, w, rows, n, a, want), 0);
      for (size_t k = 1; ks[k]; k++) {
        if (!ks[k]->supported()) continue;
        cr_assert_eq(bml__q1_0_run(ks[k], w, rows, n, a, got), 0);
        long r = golden_first_difference(want, got, rows);
        cr_expect(r < 0, "%s %zux%zu %s: row %ld differs (ref 0x%08x, got 0x%08x)", ks[k]->name, rows,
                  n, layer ? "layer" : "random", r, r < 0 ? 0 : golden_bits(want[r]),
                  r < 0 ? 0 : golden_bits(got[r]));
        checked++;
      }
      free(w), free(a), free(want), free(got);
    }
  if (checked == 0) cr_skip_test("only the reference path is built or runnable here");
}

Test(q1_0, forcing_an_unknown_path_is_refused) {
  cr_expect_eq(bml__q1_0_kernel_force("neon-on-x86"), BML_EINVAL);
  cr_expect_eq(bml__q1_0_kernel_force(NULL), 0);
}
