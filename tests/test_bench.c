/* test_bench.c -- bankml-cl bench as a user runs it: the CPU, the card, the split, a model's token, --clblast, --gap, the JSON and the table. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bankml-cl.h"
#include "runcli.h"

/* A thread count from the environment must not steer the runs below. */
static void clean_environment(void) { unsetenv("BANKML_THREADS"), unsetenv("BANKML_POOL_WAIT_MS"); }

/* The worker's open verifies the card in full when nothing is remembered:
 * the suite's timeout is raised (as test_cli's). */
TestSuite(bench, .init = clean_environment, .timeout = 400);

/* One result row of the 256x512 run below; marks (threads, cache) as seen. */
static void check_row(json_t *row, bool seen[3][2]) {
  cr_expect_str_eq(string_of(row, "shape"), "256x512");
  cr_expect_eq(integer_of(row, "rows"), 256);
  cr_expect_eq(integer_of(row, "n"), 512);
  cr_expect_eq(integer_of(row, "weight_bytes"), 256 * 512 / 128 * 18);
  json_int_t t = integer_of(row, "threads");
  cr_assert(t == 1 || t == 2, "threads %lld", (long long)t);
  const char *cache = string_of(row, "cache");
  cr_assert(strcmp(cache, "warm") == 0 || strcmp(cache, "flushed") == 0, "cache %s", cache);
  seen[t][strcmp(cache, "flushed") == 0] = true;
  double median = real_of(row, "median_ms"), min = real_of(row, "min_ms");
  cr_expect(min > 0 && min <= median, "min %g, median %g", min, median);
  cr_expect(real_of(row, "gbps") > 0);
  cr_expect(json_is_true(json_object_get(row, "exact")), "a result was not bit-exact");
}

Test(bench, bench_quick_json_reports_every_measurement_exact) {
  struct run r =
      RUN("bench", "--cpu", "--quick", "--json", "--shape", "256x512", "--threads", "1,2");
  cr_assert_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect_str_empty(r.err, "no --verbose, yet stderr has: %s", r.err);
  json_error_t e;
  json_t *root = json_loads(r.out, 0, &e);
  cr_assert_not_null(root, "not JSON (%s at line %d): %s", e.text, e.line, r.out);
  cr_expect_eq(integer_of(root, "schema"), 1);
  cr_expect_str_eq(string_of(root, "bankml_cl_version"), bml_version_string());
  cr_expect_str_eq(string_of(root, "mode"), "cpu");
  const char *path = string_of(root, "cpu_path");
  cr_expect(strcmp(path, "ref") == 0 || strcmp(path, "avx2") == 0 || strcmp(path, "avx512") == 0 ||
                strcmp(path, "neon") == 0 || strcmp(path, "neon-dot") == 0,
            "cpu_path %s", path);
  cr_expect_geq(integer_of(root, "threads_available"), 1);
  cr_expect_eq(integer_of(root, "runs"), 5);
  cr_expect(json_is_null(json_object_get(root, "pool_wait_ms")), "BANKML_POOL_WAIT_MS unset, yet a wait is named");
  json_t *results = json_object_get(root, "results");
  cr_assert(json_is_array(results));
  cr_assert_eq(json_array_size(results), 4, "1 shape x 2 thread counts x warm and flushed");
  bool seen[3][2] = {{false}};
  for (size_t i = 0; i < json_array_size(results); i++) check_row(json_array_get(results, i), seen);
  cr_expect(seen[1][0] && seen[1][1] && seen[2][0] && seen[2][1],
            "a (threads, cache) row is missing");
  json_decref(root);
  run_free(&r);
}

/* The pools' wait, where BANKML_POOL_WAIT_MS sets it, is in the header
 * and the JSON: gap figures depend on it; a bad value stops the bench,
 * naming the variable. */
Test(bench, bench_names_the_pools_wait_from_the_environment) {
  setenv("BANKML_POOL_WAIT_MS", "40", 1);
  struct run t = RUN("bench", "--cpu", "--shape", "128x256", "--threads", "2", "--runs", "3", "--gap", "0");
  struct run j = RUN("bench", "--cpu", "--json", "--shape", "128x256", "--threads", "2", "--runs", "3");
  setenv("BANKML_POOL_WAIT_MS", "forty", 1);
  struct run bad = RUN("bench", "--cpu", "--shape", "128x256", "--threads", "2", "--runs", "3");
  unsetenv("BANKML_POOL_WAIT_MS");
  cr_assert_eq(t.status, 0, "exit status %d, stderr: %s", t.status, t.err);
  cr_expect(strstr(t.out, "\npool helpers awake 40 ms after a product (BANKML_POOL_WAIT_MS; default 1, or the gaps' cadence)\n") != NULL,
            "no wait in the header:\n%s", t.out);
  cr_assert_eq(j.status, 0, "exit status %d, stderr: %s", j.status, j.err);
  json_error_t e;
  json_t *root = json_loads(j.out, 0, &e);
  cr_assert_not_null(root, "not JSON (%s at line %d): %s", e.text, e.line, j.out);
  cr_expect_eq(integer_of(root, "pool_wait_ms"), 40);
  json_decref(root);
  cr_expect_neq(bad.status, 0, "a bad BANKML_POOL_WAIT_MS was taken: %s", bad.out);
  cr_expect(strstr(bad.err, "BANKML_POOL_WAIT_MS=\"forty\"") != NULL, "the error does not name it: %s", bad.err);
  run_free(&t), run_free(&j), run_free(&bad);
}

Test(bench, bench_text_is_a_header_and_one_line_per_measurement) {
  struct run r = RUN("bench", "--quick", "--shape", "128x256", "--shape", "3x128", "--threads", "2",
                     "--runs", "3");
  cr_assert_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect_str_empty(r.err);
  int lines = 0, exact = 0;
  for (const char *p = r.out; (p = strchr(p, '\n')); p++) lines++;
  for (const char *p = r.out; (p = strstr(p, " yes\n")); p++) exact++;
  cr_expect_eq(lines, 2 + 4, "header, column names, 2 shapes x warm and flushed:\n%s", r.out);
  cr_expect_eq(exact, 4, "%s", r.out);
  cr_expect(strncmp(r.out, "bankml-cl ", 10) == 0 && strstr(r.out, "CPU path ") &&
                strstr(r.out, "3 runs"),
            "header: %s", r.out);
  cr_expect(strstr(r.out, "\n3x128 ") && strstr(r.out, "flushed"), "%s", r.out);
  run_free(&r);
}

Test(bench, bench_verbose_reports_progress_on_stderr_only) {
  struct run r =
      RUN("bench", "--quick", "--json", "--verbose", "--shape", "128x128", "--threads", "1");
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strstr(r.err, "bankml-cl bench: 128x128") != NULL, "%s", r.err);
  json_t *root = json_loads(r.out, 0, NULL);
  cr_expect_not_null(root, "stdout is not just the JSON: %s", r.out);
  json_decref(root);
  run_free(&r);
}

/* ---- the progress line, on a terminal only --------------------------------- */

/* Whether s holds a byte that moves a terminal's cursor or erases: what
 * the progress line is drawn with, and never written to a file or pipe. */
static bool has_terminal_controls(const char *s) { return strchr(s, '\r') || strchr(s, '\033'); }

/* The shape, threads, cache and exact columns of a bench table's rows (the
 * times differ from run to run), one row per line. */
static void table_columns(const char *table, char *out, size_t len) {
  out[0] = '\0';
  const char *line = strchr(table, '\n'); /* after the header, which has the date */
  for (; line && line[1]; line = strchr(line + 1, '\n')) {
    char shape[32], threads[16], cache[16], rest[256];
    if (sscanf(line + 1, "%31s %15s %15s %255[^\n]", shape, threads, cache, rest) != 4) continue;
    const char *exact = strrchr(rest, ' ');
    size_t used = strlen(out);
    snprintf(out + used, len - used, "%s %s %s %s\n", shape, threads, cache, exact ? exact + 1 : rest);
  }
}

#define BENCH_SMALL "bench", "--cpu", "--shape", "256x512", "--runs", "2", "--warmup", "0", "--threads", "1,2"

Test(bench, bench_on_a_terminal_shows_one_progress_line_and_the_same_table) {
  setenv("TERM", "xterm", 1);
  struct run tty = run_cli_tty((const char *const[]){BENCH_SMALL, NULL}), piped = RUN(BENCH_SMALL);
  cr_assert_eq(tty.status, 0, "%s", tty.err);
  cr_assert_eq(piped.status, 0, "%s", piped.err);
  cr_expect(strstr(tty.err, "\rbankml-cl bench [0/4 measurements] ") != NULL, "%s", tty.err);
  cr_expect(strstr(tty.err, "\rbankml-cl bench [3/4 measurements] cpu 256x512, 2 threads, flushed (") != NULL, "%s",
            tty.err);
  const char *last = strstr(tty.err, "[4/4 measurements]");
  cr_expect(last && strstr(last, "\033[K\r\033[K"), "the line is not taken down at the end: %s", tty.err);
  cr_expect_str_empty(piped.err, "piped, stderr has: %s", piped.err);
  cr_expect(!has_terminal_controls(piped.out) && !has_terminal_controls(tty.out), "%s", tty.out);
  char a[1024], b[1024];
  table_columns(tty.out, a, sizeof a);
  table_columns(piped.out, b, sizeof b);
  cr_expect_str_eq(a, b);
  size_t rows = 0;
  for (const char *p = a; (p = strstr(p, " yes\n")); p++) rows++;
  cr_expect_eq(rows, 4, "2 thread counts x warm and flushed, exact: %s", tty.out);
  run_free(&tty);
  run_free(&piped);
}

/* Messages written while the line is up go above it, each on a line of
 * its own: the library's log here. */
Test(bench, messages_on_a_terminal_go_above_the_progress_line) {
  setenv("TERM", "xterm", 1);
  setenv("BANKML_DEBUG", "pool", 1);
  struct run r = run_cli_tty((const char *const[]){BENCH_SMALL, NULL});
  unsetenv("BANKML_DEBUG");
  cr_assert_eq(r.status, 0, "%s", r.err);
  size_t seen = 0;
  for (const char *p = r.err; (p = strstr(p, "bankml-cl: debug: ")); p++, seen++)
    cr_expect(p == r.err || p[-1] == '\n' || (p - r.err >= 4 && memcmp(p - 4, "\r\033[K", 4) == 0),
              "a message begins inside the progress line: %.60s", p - 10 > r.err ? p - 10 : r.err);
  cr_expect_geq(seen, 2, "%s", r.err);
  run_free(&r);
}

Test(bench, a_dumb_terminal_gets_no_progress_line) {
  setenv("TERM", "dumb", 1);
  struct run r = run_cli_tty((const char *const[]){BENCH_SMALL, NULL});
  cr_expect_eq(r.status, 0);
  cr_expect_str_empty(r.err);
  run_free(&r);
}

/* ---- bankml-cl bench --clblast: the baseline, on PoCL ------------------- */

/* One clblast row of the 256x512 run below; returns 1 for an F32 row. */
static int check_clblast_row(json_t *row) {
  const char *mode = string_of(row, "mode");
  bool f32 = strcmp(mode, "clblast-f32") == 0;
  cr_assert(f32 || strcmp(mode, "clblast-f16") == 0, "mode %s", mode);
  cr_expect_str_eq(string_of(row, "shape"), "256x512");
  cr_expect_eq(integer_of(row, "threads"), 0);
  cr_expect_str_eq(string_of(row, "cache"), "warm");
  cr_expect_eq(integer_of(row, "weight_bytes"), 256 * 512 / 128 * 18, "the Q1_0 size");
  cr_expect_eq(integer_of(row, "bytes_read"), 256 * 512 * (f32 ? 4 : 2));
  double median = real_of(row, "median_ms"), min = real_of(row, "min_ms");
  cr_expect(min > 0 && min <= median, "min %g, median %g", min, median);
  cr_expect(real_of(row, "gbps") > 0);
  cr_expect_str_eq(string_of(row, "check"), "tolerance");
  cr_expect(json_is_false(json_object_get(row, "exact")), "a baseline claims bit-exactness");
  cr_expect(json_is_true(json_object_get(row, "agrees")), "%s disagrees with the CPU", mode);
  cr_expect(json_is_true(json_object_get(row, "probe_exact")), "%s: the exact probe differs", mode);
  double ratio = real_of(row, "error_to_bound");
  cr_expect(ratio >= 0 && ratio <= 1, "error_to_bound %g", ratio);
  return f32;
}

static void use_pocl(void) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
}

Test(bench, bench_clblast_on_pocl_agrees_with_a_cpu_reference) {
  use_pocl();
  struct run r = RUN("bench", "--clblast", "--quick", "--json", "--shape", "256x512");
  const char *why = strstr(r.err, "built without CLBlast")      ? "built without CLBlast"
                    : strstr(r.err, "no usable OpenCL device") ? "no PoCL device here"
                                                                : NULL;
  if (why) {
    cr_expect_eq(r.status, 3, "stderr: %s", r.err);
    run_free(&r);
    cr_skip_test("%s", why);
  }
  cr_assert_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  json_error_t e;
  json_t *root = json_loads(r.out, 0, &e);
  cr_assert_not_null(root, "not JSON (%s at line %d): %s", e.text, e.line, r.out);
  cr_expect_str_eq(string_of(root, "mode"), "clblast");
  cr_expect(strlen(string_of(root, "device")) > 0);
  json_t *results = json_object_get(root, "results");
  cr_assert(json_is_array(results));
  int f32 = 0;
  for (size_t i = 0; i < json_array_size(results); i++)
    f32 += check_clblast_row(json_array_get(results, i));
  cr_expect_eq(f32, 1, "one clblast-f32 row for one shape");
  json_decref(root);
  run_free(&r);
}

Test(bench, bench_clblast_without_a_device_says_so_and_exits_3) {
  use_fake_devices("empty", "empty");
  struct run r = RUN("bench", "--clblast", "--quick", "--shape", "128x128");
  cr_expect_eq(r.status, 3, "stderr: %s", r.err);
  cr_expect_str_empty(r.out);
  cr_expect(strstr(r.err, "no usable OpenCL device") || strstr(r.err, "built without CLBlast"),
            "%s", r.err);
  run_free(&r);
}

/* Every shape too large for the device: nothing is measured, and exit 0
 * ("every result was bit-exact") would say otherwise. */
Test(bench, bench_clblast_with_every_shape_skipped_exits_3) {
  use_pocl();
  struct run r = RUN("bench", "--clblast", "--shape", "1048576x131072", "--runs", "1", "--warmup", "0");
  const char *why = strstr(r.err, "built without CLBlast")      ? "built without CLBlast"
                    : strstr(r.err, "no usable OpenCL device") ? "no PoCL device here"
                                                                : NULL;
  if (why) {
    run_free(&r);
    cr_skip_test("%s", why);
  }
  cr_expect_eq(r.status, 3, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect(strstr(r.err, "skipped for clblast-f32") && strstr(r.err, "nothing measured"), "%s", r.err);
  cr_expect_str_empty(r.out);
  run_free(&r);
}

Test(bench, help_bench_lists_clblast) {
  struct run r = RUN("bench", "--help");
  cr_expect_eq(r.status, 0);
  cr_expect(strstr(r.out, "\n  --clblast ") != NULL, "%s", r.out);
  run_free(&r);
}

/* The worker modes on PoCL: every row exact, named by mode. */
static void expect_modes(json_t *root, const char *const *modes, size_t nmodes) {
  json_t *results = json_object_get(root, "results");
  cr_assert(json_is_array(results));
  for (size_t m = 0; m < nmodes; m++) {
    int found = 0;
    for (size_t i = 0; i < json_array_size(results); i++) {
      json_t *row = json_array_get(results, i);
      if (strcmp(json_string_value(json_object_get(row, "mode")), modes[m]) != 0) continue;
      found++;
      cr_expect(json_is_true(json_object_get(row, "exact")), "%s row not exact", modes[m]);
      cr_expect(json_real_value(json_object_get(row, "median_ms")) > 0);
    }
    cr_expect(found > 0, "no %s row", modes[m]);
  }
}

/* bench on PoCL with a share of 0.5: a loaded host's calibration may give
 * PoCL too small a share for a worker, and these tests are not about the
 * calibration. */
static struct run run_pocl_at_half(const char *const *args) {
  use_pocl();
  setenv("BANKML_GPU_SHARE", "0.5", 1);
  struct run r = run_cli(args);
  unsetenv("BANKML_GPU_SHARE");
  return r;
}
#define RUN_POCL_AT_HALF(...) run_pocl_at_half((const char *const[]){__VA_ARGS__, NULL})

/* bench on PoCL at a share of 0.5: its JSON; the test skips where no card
 * is used. */
static json_t *pocl_bench_json(const char *const *args) {
  struct run r = run_pocl_at_half(args);
  if (strstr(r.err, "no card is used") && strstr(r.err, "no usable GPU is selected")) {
    run_free(&r);
    cr_skip_test("no PoCL device here");
  }
  cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
  /* the card computed: not refused, not retired, not an error that sent
   * its rows to the CPU (the rows would still be exact) */
  cr_expect(strstr(r.err, "GPU not used") == NULL, "%s", r.err);
  json_t *root = json_loads(r.out, 0, NULL);
  cr_assert_not_null(root, "%s", r.out);
  run_free(&r);
  return root;
}

Test(bench, bench_card_and_split_on_pocl_are_exact) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--card", "--split", "--quick", "--json", "--shape",
                                                        "384x1024", "--threads", "2", NULL});
  static const char *const modes[] = {"card", "card-pipelined", "split", "split-pipelined"};
  expect_modes(root, modes, 4);
  cr_expect(json_real_value(json_object_get(root, "card_read_gbps")) > 0, "no read bandwidth measured");
  /* the worker's open: its seconds, and whether its verdict was remembered */
  json_t *open = json_object_get(root, "worker_open");
  const char *verdict = json_string_value(json_object_get(open, "verdict"));
  cr_expect(json_real_value(json_object_get(open, "seconds")) > 0, "no worker_open.seconds");
  cr_expect(verdict && (strcmp(verdict, "verified") == 0 || strcmp(verdict, "remembered") == 0), "verdict %s",
            verdict ? verdict : "missing");
  json_decref(root);
}

/* The table's header says how the worker's open went. */
Test(bench, bench_text_says_how_long_the_workers_open_took) {
  struct run r = RUN_POCL_AT_HALF("bench", "--card", "--quick", "--shape", "256x512", "--runs", "1", "--warmup", "0");
  if (strstr(r.err, "no usable GPU is selected")) {
    run_free(&r);
    cr_skip_test("no PoCL device here");
  }
  cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
  double seconds = 0;
  char verdict[16] = "";
  const char *line = strstr(r.out, "\nworker opened in ");
  cr_expect(line && sscanf(line, "\nworker opened in %lf s (verdict %15[a-z])", &seconds, verdict) == 2 && seconds > 0 &&
                (strcmp(verdict, "verified") == 0 || strcmp(verdict, "remembered") == 0),
            "%s", r.out);
  run_free(&r);
}

/* The pipelined products read a matrix each (32), or as many as a quarter
 * of the card's memory holds where 32 would not; a single product reads
 * one.  The report names the card's memory.  (8192x4096, not 16384x8192:
 * 1.6 s on PoCL against 6.6; the next test makes the quarter the bound.) */
Test(bench, bench_card_pipelines_a_matrix_each_within_a_quarter_of_the_card) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--card", "--json", "--shape", "8192x4096", "--shape",
                                                        "2048x2048", "--runs", "1", "--warmup", "0", "--threads", "2",
                                                        NULL});
  json_t *results = json_object_get(root, "results");
  cr_assert(json_is_array(results));
  const json_int_t memory = json_integer_value(json_object_get(root, "card_memory_bytes"));
  cr_assert(memory > 0, "the report names no card memory");
  int pipelined = 0;
  for (size_t i = 0; i < json_array_size(results); i++) {
    json_t *row = json_array_get(results, i);
    const char *mode = string_of(row, "mode");
    const json_int_t card = integer_of(row, "card_bytes"), got = integer_of(row, "matrices");
    cr_expect(json_is_true(json_object_get(row, "exact")), "%s %s not exact", mode, string_of(row, "shape"));
    if (strcmp(mode, "card") == 0) {
      cr_expect_eq(got, 1, "a single product of %s reads %lld matrices", string_of(row, "shape"), (long long)got);
      continue;
    }
    json_int_t want = memory / 4 / card;
    if (want > 32) want = 32;
    if (want < 1) want = 1;
    cr_expect_eq(got, want, "%s: %lld matrices for %lld card bytes each, not %lld", string_of(row, "shape"),
                 (long long)got, (long long)card, (long long)want);
    pipelined++;
  }
  cr_expect_eq(pipelined, 2, "card-pipelined rows: %d", pipelined);
  json_decref(root);
}

/* Where 32 of a shape's matrices would take more than a quarter of the
 * card's memory, the pipelined products read fewer: PoCL given 1 GiB
 * (POCL_MEMORY_LIMIT) holds 25 of 8192x8192's 10.5 MB in its quarter.
 * Skipped where a real card is found first (an NVIDIA H200, say): it is the
 * one benched, and its quarter holds 32. */
Test(bench, bench_card_reads_fewer_matrices_where_32_exceed_a_quarter_of_the_card) {
  setenv("POCL_MEMORY_LIMIT", "1", 1);
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--card", "--json", "--shape", "8192x8192", "--runs", "1",
                                                        "--warmup", "0", "--threads", "2", NULL});
  unsetenv("POCL_MEMORY_LIMIT");
  const json_int_t memory = json_integer_value(json_object_get(root, "card_memory_bytes"));
  if (memory != (json_int_t)1 << 30) {
    json_decref(root);
    cr_skip_test("the card benched has %lld bytes of memory, not PoCL's 1 GiB (a real card was found first)",
                 (long long)memory);
  }
  json_t *results = json_object_get(root, "results");
  cr_assert(json_is_array(results));
  int pipelined = 0;
  for (size_t i = 0; i < json_array_size(results); i++) {
    json_t *row = json_array_get(results, i);
    if (strcmp(string_of(row, "mode"), "card-pipelined") != 0) continue;
    const json_int_t card = integer_of(row, "card_bytes"), got = integer_of(row, "matrices");
    cr_expect(card > memory / 4 / 32, "8192x8192's %lld card bytes: 32 of them fit a quarter of 1 GiB", (long long)card);
    cr_expect_eq(got, memory / 4 / card, "%lld matrices of %lld card bytes in a quarter of %lld", (long long)got,
                 (long long)card, (long long)memory);
    cr_expect(json_is_true(json_object_get(row, "exact")), "8192x8192 pipelined not exact");
    pipelined++;
  }
  cr_expect_eq(pipelined, 1, "card-pipelined rows: %d", pipelined);
  json_decref(root);
}

/* The split alone names its card but does not spend seconds measuring a
 * read bandwidth that no split row is set against. */
Test(bench, bench_split_alone_measures_no_card_bandwidth) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--split", "--json", "--shape", "256x256", "--runs", "1",
                                                        "--warmup", "0", "--threads", "1", NULL});
  cr_expect(json_is_null(json_object_get(root, "card_read_gbps")), "a split-only report measured the card's bandwidth");
  cr_expect(strlen(string_of(root, "device")) > 0, "the card is not named");
  json_decref(root);
}

Test(bench, bench_model_token_on_pocl_is_exact) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--cpu", "--card", "--model", "bonsai-1.7b", "--runs",
                                                        "1", "--warmup", "0", "--threads", "2", "--json", NULL});
  static const char *const modes[] = {"cpu", "card-pipelined", "card-round-trips"};
  expect_modes(root, modes, 3);
  json_t *row = json_array_get(json_object_get(root, "results"), 1);
  cr_expect_str_eq(json_string_value(json_object_get(row, "label")), "bonsai-1.7b");
  cr_expect_null(json_object_get(row, "rows"), "a token has no one rows x n");
  cr_expect_null(json_object_get(row, "n"), "a token has no one rows x n");
  /* the suite's quick bench (BANKML_TEST_QUICK_BENCH): 2 of its 28 layers */
  cr_expect_eq(json_integer_value(json_object_get(row, "products_per_run")), 2 * 7 + 1, "2 layers of 7 and the head");
  json_decref(root);
}

/* A split token learns where its groups run (the share not fixed): its
 * round trips are timed once it has learnt, after more warm-up tokens,
 * and stay exact; the verbose lines say how many it took. */
Test(bench, a_split_models_token_is_timed_after_it_learnt) {
  use_pocl();
  struct run r = run_cli((const char *const[]){"bench", "--split", "--model", "bonsai-1.7b", "--runs", "1", "--warmup",
                                               "0", "--threads", "2", "--json", "--verbose", NULL});
  if (strstr(r.err, "no card is used") && strstr(r.err, "no usable GPU is selected")) {
    run_free(&r);
    cr_skip_test("no PoCL device here");
  }
  /* the learning needs the learnt share: on a loaded host PoCL's
   * calibration can fall below the least share, and no card is used */
  if (strstr(r.err, "no card is used") && strstr(r.err, "calibrated share") && strstr(r.err, "below 0.02")) {
    run_free(&r);
    cr_skip_test("the software card's calibrated share is below 0.02 here (a loaded host)");
  }
  cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
  cr_expect(strstr(r.err, "split-round-trips bonsai-1.7b: ") &&
                strstr(r.err, "more warm-up tokens while the token learnt"),
            "no learning said: %s", r.err);
  cr_expect(strstr(r.err, "still learns") == NULL, "%s", r.err);
  json_t *root = json_loads(r.out, 0, NULL);
  cr_assert_not_null(root, "%s", r.out);
  static const char *const modes[] = {"split-round-trips", "split-pipelined"};
  expect_modes(root, modes, 2);
  json_t *row = json_array_get(json_object_get(root, "results"), 0);
  cr_expect_str_eq(json_string_value(json_object_get(row, "token")), "resident");
  json_decref(root);
  run_free(&r);
}

/* The bench's exactness check can fail: with one bit of each result
 * changed (the test suite's BANKML_TEST_SPOIL_BENCH=1) every row of the
 * CPU, the card, the split and a model's token says so, in the JSON and in
 * the table, and the exit status is 1. */
static void expect_spoilt(const char *const *args, size_t rows) {
  setenv("BANKML_TEST_SPOIL_BENCH", "1", 1);
  setenv("BANKML_GPU_SHARE", "0.5", 1);
  struct run r = run_cli(args);
  unsetenv("BANKML_TEST_SPOIL_BENCH");
  unsetenv("BANKML_GPU_SHARE");
  if (strstr(r.err, "no usable GPU is selected")) {
    run_free(&r);
    cr_skip_test("no PoCL device here");
  }
  cr_expect_eq(r.status, 1, "exit status %d, stderr: %s", r.status, r.err);
  json_t *root = json_loads(r.out, 0, NULL);
  cr_assert_not_null(root, "%s", r.out);
  json_t *results = json_object_get(root, "results");
  cr_expect_eq(json_array_size(results), rows);
  for (size_t i = 0; i < json_array_size(results); i++)
    cr_expect(json_is_false(json_object_get(json_array_get(results, i), "exact")), "row %zu called exact", i);
  json_decref(root);
  run_free(&r);
}

Test(bench, a_spoilt_cpu_result_is_not_exact) {
  expect_spoilt((const char *const[]){"bench", "--cpu", "--quick", "--json", "--shape", "256x512", "--threads", "1",
                                      NULL},
                2);
  setenv("BANKML_TEST_SPOIL_BENCH", "1", 1);
  struct run r = RUN("bench", "--cpu", "--quick", "--shape", "256x512", "--threads", "1");
  unsetenv("BANKML_TEST_SPOIL_BENCH");
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.out, " NO") != NULL, "the table does not say NO: %s", r.out);
  run_free(&r);
}

Test(bench, spoilt_card_split_and_token_results_are_not_exact) {
  use_pocl();
  expect_spoilt((const char *const[]){"bench", "--card", "--split", "--quick", "--json", "--shape", "256x512",
                                      "--threads", "2", NULL},
                4);
  expect_spoilt((const char *const[]){"bench", "--card", "--model", "bonsai-1.7b", "--runs", "1", "--warmup", "0",
                                      "--threads", "2", "--json", NULL},
                2);
}

/* A full disk: exit 3 and one message with the system's reason, even when
 * the table is more than stdio's buffer (the bench said it twice then). */
Test(bench, a_full_disk_is_said_once_with_its_reason) {
  struct run r = run_cli_to((const char *const[]){"bench", "--cpu", "--shape", "128x128", "--shape", "256x128",
                                                  "--shape", "384x128", "--threads", "1-32", "--runs", "1",
                                                  "--warmup", "0", NULL},
                            "/dev/full");
  cr_expect_eq(r.status, 3, "exit status %d, stderr: %s", r.status, r.err);
  const char *first = strstr(r.err, "cannot write");
  cr_expect(first && strstr(r.err, "No space left on device"), "%s", r.err);
  cr_expect(first && !strstr(first + 1, "cannot write"), "said more than once: %s", r.err);
  run_free(&r);
}

/* A failed check whose report cannot be written is 3 too, whether stdio
 * failed during the report (a big one) or only at the last flush (a small
 * one): the status once depended on the report's size (1 or 3). */
Test(bench, an_unwritten_report_of_a_failed_check_is_3_at_any_size) {
  setenv("BANKML_TEST_SPOIL_BENCH", "1", 1);
  for (int big = 0; big < 2; big++) {
    struct run r = run_cli_to((const char *const[]){"bench", "--cpu", "--shape", "128x128", "--runs", "1",
                                                    "--warmup", "0", "--json", "--threads", big ? "1-32" : "1",
                                                    NULL},
                              "/dev/full");
    cr_expect_eq(r.status, 3, "%s report: exit status %d, stderr: %s", big ? "a big" : "a small", r.status, r.err);
    cr_expect(strstr(r.err, "No space left on device") != NULL, "%s", r.err);
    run_free(&r);
  }
  unsetenv("BANKML_TEST_SPOIL_BENCH");
}

/* --threads 1,1-2,2 names counts 1 and 2 twice each: each is timed once
 * (four rows: two counts, warm and flushed). */
Test(bench, bench_times_a_thread_count_given_twice_once) {
  struct run r = RUN("bench", "--cpu", "--quick", "--json", "--shape", "128x256", "--threads", "1,1-2,2");
  cr_assert_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  json_error_t e;
  json_t *root = json_loads(r.out, 0, &e);
  cr_assert_not_null(root, "not JSON (%s at line %d): %s", e.text, e.line, r.out);
  json_t *results = json_object_get(root, "results");
  cr_assert(json_is_array(results));
  cr_expect_eq(json_array_size(results), 4, "%zu rows", json_array_size(results));
  int seen[3][2] = {{0}};
  for (size_t i = 0; i < json_array_size(results); i++) {
    json_t *row = json_array_get(results, i);
    json_int_t t = integer_of(row, "threads");
    cr_assert(t == 1 || t == 2, "threads %lld", (long long)t);
    seen[t][strcmp(string_of(row, "cache"), "flushed") == 0]++;
  }
  for (int t = 1; t <= 2; t++)
    for (int c = 0; c < 2; c++) cr_expect_eq(seen[t][c], 1, "threads %d, %s: %d rows", t, c ? "flushed" : "warm", seen[t][c]);
  json_decref(root);
  run_free(&r);
}

Test(bench, bench_card_modes_run_on_the_largest_thread_count) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--split", "--shape", "256x256", "--runs", "1",
                                                        "--warmup", "0", "--threads", "2,1", "--json", NULL});
  json_t *rows = json_object_get(root, "results");
  cr_assert(json_array_size(rows) > 0);
  for (size_t i = 0; i < json_array_size(rows); i++)
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(rows, i), "threads")), 2, "row %zu", i);
  json_decref(root);
}

/* ---- bankml-cl bench --gap: products after idle gaps ---------------------- */

/* One row of a --gap run of `mode`: its gap, and its times in order (the
 * fastest, the median, the 90th percentile, the slowest). */
static json_int_t check_gap_row(json_t *row, const char *mode) {
  cr_expect_str_eq(string_of(row, "mode"), mode);
  cr_expect_str_eq(string_of(row, "cache"), "warm");
  double min = real_of(row, "min_ms"), median = real_of(row, "median_ms"), p90 = real_of(row, "p90_ms"),
         max = real_of(row, "max_ms");
  cr_expect(0 < min && min <= median && median <= p90 && p90 <= max, "min %g, median %g, p90 %g, max %g", min, median,
            p90, max);
  cr_expect(json_is_true(json_object_get(row, "exact")), "a result after a gap was not bit-exact");
  return integer_of(row, "gap_ms");
}

/* Each gap (given twice: timed once) and thread count is one row, gap by
 * gap, with the gap, the 90th percentile and the slowest product. */
Test(bench, bench_gap_json_reports_each_gap_and_thread_count) {
  struct run r = RUN("bench", "--cpu", "--json", "--shape", "256x512", "--threads", "1,2", "--gap", "0,5", "--gap",
                     "5", "--runs", "5", "--warmup", "1");
  cr_assert_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  json_error_t e;
  json_t *root = json_loads(r.out, 0, &e);
  cr_assert_not_null(root, "not JSON (%s at line %d): %s", e.text, e.line, r.out);
  json_t *results = json_object_get(root, "results");
  cr_assert_eq(json_array_size(results), 4, "2 gaps x 2 thread counts, no warm or flushed rows: %s", r.out);
  static const json_int_t gaps[4] = {0, 0, 5, 5}, threads[4] = {1, 2, 1, 2};
  for (size_t i = 0; i < 4; i++) {
    json_t *row = json_array_get(results, i);
    cr_expect_eq(check_gap_row(row, "cpu"), gaps[i], "row %zu", i);
    cr_expect_eq(integer_of(row, "threads"), threads[i], "row %zu", i);
  }
  json_decref(root);
  run_free(&r);
  /* without --gap, the rows have none of it */
  r = RUN("bench", "--cpu", "--json", "--shape", "128x128", "--threads", "1", "--runs", "1", "--warmup", "0");
  cr_assert_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  root = json_loads(r.out, 0, NULL);
  cr_assert_not_null(root, "%s", r.out);
  json_t *row = json_array_get(json_object_get(root, "results"), 0);
  cr_expect(row && !json_object_get(row, "gap_ms") && !json_object_get(row, "p90_ms"), "%s", r.out);
  json_decref(root);
  run_free(&r);
}

Test(bench, bench_gap_text_shows_the_gap_p90_worst_and_ratios_to_one_thread) {
  struct run r = RUN("bench", "--cpu", "--shape", "256x512", "--threads", "1,2", "--gap", "3", "--runs", "3",
                     "--warmup", "1");
  cr_assert_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect(strstr(r.out, "gap ms") && strstr(r.out, "p90 ms") && strstr(r.out, "max ms"), "header: %s", r.out);
  int exact = 0;
  for (const char *p = r.out; (p = strstr(p, " yes\n")); p++) exact++;
  cr_expect_eq(exact, 2, "one row per thread count: %s", r.out);
  const char *ratio = strstr(r.out, "\n256x512 after 3 ms gaps, 2 threads against 1: median ");
  cr_expect(ratio && strstr(ratio, "x the 1-thread median\n"), "no ratio line: %s", r.out);
  run_free(&r);
}

Test(bench, bad_gaps_exit_2_naming_the_value) {
  const char *bad[] = {"-1", "abc", "10ms", "1,,2", "5,", "60001", "1.5", " 1", "+1", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char named[64];
    snprintf(named, sizeof named, "bad --gap \"%s\"", bad[i]);
    expect_usage_error(RUN("bench", "--cpu", "--shape", "128x128", "--gap", bad[i]), named);
  }
  expect_usage_error(RUN("bench", "--model", "bonsai-1.7b", "--gap", "10"), "--gap");
  expect_usage_error(RUN("bench", "--clblast", "--shape", "128x128", "--gap", "10"), "--gap");
  expect_usage_error(RUN("bench", "--card", "--split", "--model", "bonsai-1.7b", "--gap", "10"), "--gap");
}

/* --card and --split after gaps: one row a mode, shape and gap, single
 * products only, exact; the text sets each split against the card alone. */
Test(bench, bench_card_and_split_after_gaps_on_pocl) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--card", "--split", "--json", "--shape", "256x1024",
                                                        "--threads", "2", "--gap", "0,3", "--runs", "3", "--warmup",
                                                        "1", NULL});
  json_t *results = json_object_get(root, "results");
  cr_assert_eq(json_array_size(results), 4, "2 modes x 2 gaps, no pipelined rows");
  static const char *const modes[4] = {"card", "card", "split", "split"};
  static const json_int_t gaps[4] = {0, 3, 0, 3};
  for (size_t i = 0; i < 4; i++) {
    json_t *row = json_array_get(results, i);
    cr_expect_eq(check_gap_row(row, modes[i]), gaps[i], "row %zu", i);
    cr_expect_eq(integer_of(row, "matrices"), 1, "row %zu: a single product", i);
  }
  json_decref(root);
  struct run r = RUN_POCL_AT_HALF("bench", "--card", "--split", "--shape", "256x1024", "--threads", "2", "--gap", "2",
                                  "--runs", "3", "--warmup", "1");
  cr_assert_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  const char *ratio = strstr(r.out, "\n256x1024 after 2 ms gaps, split against the card alone: median ");
  cr_expect(ratio && strstr(ratio, "x the card's median\n"), "no ratio line: %s", r.out);
  run_free(&r);
}

Test(bench, a_spoilt_result_after_a_gap_is_not_exact) {
  expect_spoilt((const char *const[]){"bench", "--cpu", "--json", "--shape", "256x512", "--threads", "1,2", "--gap",
                                      "1", "--runs", "2", "--warmup", "0", NULL},
                2);
}
