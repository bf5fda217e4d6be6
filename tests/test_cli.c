/* test_cli.c -- the bankml-cl command as a user runs it: help, version, misuse, bench --json. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bankml-cl.h"
#include "runcli.h"

/* Misuse: exit 2, nothing on stdout, and stderr names what was wrong. */
static void expect_usage_error(struct run r, const char *named) {
  cr_expect_eq(r.status, 2, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect_str_empty(r.out);
  cr_expect(strstr(r.err, named) != NULL, "stderr does not name '%s': %s", named, r.err);
  run_free(&r);
}

/* --help wins over every other option and its errors (bankml-cl(1)). */
Test(cli, help_wins_over_other_options_and_their_errors) {
  const char *const *const runs[] = {
      (const char *const[]){"devices", "--help", "--brief", "--compact", NULL},
      (const char *const[]){"devices", "--golden", "/nonexistent", "-h", NULL},
      (const char *const[]){"bench", "--help", "--runs", "0", NULL},
      (const char *const[]){"bench", "--model", "bonsai-8b", "--shape", "128x128", "--help", NULL},
  };
  for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
    struct run r = run_cli(runs[i]);
    cr_expect_eq(r.status, 0, "run %zu: exit %d, stderr: %s", i, r.status, r.err);
    cr_expect(strncmp(r.out, "usage: bankml-cl ", 17) == 0, "run %zu: %s", i, r.out);
    cr_expect_str_empty(r.err, "run %zu", i);
    run_free(&r);
  }
}

/* --golden names what is wrong with the path: missing, or not a directory. */
Test(cli, a_golden_path_that_is_a_file_is_not_a_directory) {
  struct run r = RUN("devices", "--verify", "--golden", "/etc/passwd");
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "\"/etc/passwd\": not a directory") != NULL, "%s", r.err);
  run_free(&r);
}

/* BANKML_DEBUG=device,env: each device's verdict and each variable read. */
Test(cli, debug_device_and_env_say_something) {
  setenv("BANKML_DEBUG", "device,env", 1);
  setenv("BANKML_GPU", "off", 1);
  struct run r = RUN("devices", "--brief");
  unsetenv("BANKML_DEBUG");
  unsetenv("BANKML_GPU");
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.err, "debug: BANKML_GPU=\"off\"") != NULL, "%s", r.err);
  if (strstr(r.out, "\n") == NULL) cr_skip_test("no OpenCL device here to say a verdict of");
  cr_expect(strstr(r.err, ", matched by ") != NULL, "%s", r.err);
  run_free(&r);
}

/* A thread count from the environment must not steer the runs below. */
static void clean_environment(void) { unsetenv("BANKML_THREADS"); }

/* A full verification of every selected device (on an NVIDIA H200 host,
 * the H200 and PoCL, with make check -j8 beside it) took 111 s of the 120 once
 * allowed; a test's own timeout beside the suite's made Criterion's runner
 * report a leak of its own under ASan when tests ran in parallel (seen in
 * test_devices), so the suite's is raised. */
TestSuite(cli, .init = clean_environment, .timeout = 400);

Test(cli, help_lists_bench_and_exits_0) {
  struct run r = RUN("--help");
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strstr(r.out, "usage: bankml-cl") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "\n  bench ") != NULL, "bench is not listed: %s", r.out);
  cr_expect_str_empty(r.err);
  run_free(&r);
}

/* Every exit status, 4 (a card that failed verification) included, is in
 * --help and in the man page's EXIT STATUS, once each. */
Test(cli, help_and_the_man_page_give_every_exit_status) {
  struct run r = RUN("--help");
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strstr(r.out, "Exit status: 0 done") && strstr(r.out, "; 2 bad usage") && strstr(r.out, "; 3 could not run") &&
                strstr(r.out, "4 devices --verify: a selected card failed verification"),
            "%s", r.out);
  run_free(&r);
  r = RUN("devices", "--help");
  for (char *c = r.out; *c; c++) /* the wording, wherever the lines break */
    if (*c == '\n')
      *c = ' ';
  cr_expect(strstr(r.out, "; 4 a selected card failed verification") != NULL, "%s", r.out);
  run_free(&r);
  char *man = read_source("doc/bankml-cl.1");
  const char *section = strstr(man, "\n.SH EXIT STATUS\n"), *end = section ? strstr(section + 1, "\n.SH ") : NULL;
  cr_assert(section && end, "no EXIT STATUS section");
  for (int status = 0; status <= 4; status++) {
    char entry[16];
    snprintf(entry, sizeof entry, ".TP\n.B %d\n", status);
    const char *at = strstr(section, entry);
    cr_expect(at && at < end, "EXIT STATUS does not give %d", status);
  }
  free(man);
}

Test(cli, help_command_prints_the_same_help) {
  struct run a = RUN("--help"), b = RUN("help");
  cr_expect_eq(b.status, 0);
  cr_expect(strstr(b.out, "\n  bench ") != NULL, "bench is not listed: %s", b.out);
  cr_expect_str_eq(a.out, b.out);
  run_free(&a);
  run_free(&b);
  static const char *const asks[] = {"--help", "-h"}; /* 'help --help' was an unknown command */
  for (size_t i = 0; i < 2; i++) {
    struct run c = RUN("--help"), d = RUN("help", asks[i]);
    cr_expect_eq(d.status, 0, "help %s: exit %d, %s", asks[i], d.status, d.err);
    cr_expect_str_eq(c.out, d.out);
    run_free(&c);
    run_free(&d);
  }
}

Test(cli, help_bench_shows_the_bench_options) {
  struct run r = RUN("help", "bench"), s = RUN("bench", "--help");
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strstr(r.out, "--shape") && strstr(r.out, "--threads") && strstr(r.out, "--cpu"), "%s",
            r.out);
  cr_expect_eq(s.status, 0);
  cr_expect_str_eq(r.out, s.out);
  run_free(&r);
  run_free(&s);
}

Test(cli, version_prints_the_library_version) {
  struct run r = RUN("--version");
  cr_assert_eq(r.status, 0);
  char want[64];
  snprintf(want, sizeof want, "bankml-cl %s\n", bml_version_string());
  cr_expect_str_eq(r.out, want);
  unsigned x, y, z;
  char end;
  cr_expect_eq(sscanf(r.out, "bankml-cl %u.%u.%u%c", &x, &y, &z, &end), 4, "%s", r.out);
  cr_expect_eq(end, '\n');
  run_free(&r);
}

Test(cli, no_command_is_misuse) {
  struct run r = RUN(NULL);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "usage:") != NULL, "%s", r.err);
  cr_expect_str_empty(r.out);
  run_free(&r);
}

Test(cli, unknown_command_exits_2_naming_it) {
  expect_usage_error(RUN("frobnicate"), "'frobnicate'");
}

Test(cli, unknown_help_topic_exits_2_naming_it) {
  expect_usage_error(RUN("help", "nosuch"), "'nosuch'");
}

Test(cli, unknown_option_exits_2_naming_it) {
  expect_usage_error(RUN("--frobnicate"), "'--frobnicate'");
  expect_usage_error(RUN("-Z"), "'-Z'");
  expect_usage_error(RUN("bench", "--frobnicate"), "'--frobnicate'");
  expect_usage_error(RUN("bench", "--quick", "extra"), "'extra'");
}

Test(cli, a_long_option_is_named_as_typed) {
  expect_usage_error(RUN("--help=1"), "'--help=1'");
  expect_usage_error(RUN("--version=1"), "'--version=1'");
  expect_usage_error(RUN("bench", "--help=1"), "'--help=1'");
  expect_usage_error(RUN("bench", "--cpu=1"), "takes no value: '--cpu=1'");
  expect_usage_error(RUN("bench", "--c"), "ambiguous option '--c'");
}

Test(cli, model_goes_with_neither_shapes_nor_clblast) {
  expect_usage_error(RUN("bench", "--model", "bonsai-1.7b", "--shape", "128x128"), "--shape");
  expect_usage_error(RUN("bench", "--clblast", "--model", "bonsai-1.7b"), "--clblast");
}

/* A bad BANKML_GPU with a card's mode is refused before anything is
 * measured: exit 2 ("nothing was measured") with no table printed. */
Test(cli, a_bad_gpu_choice_is_refused_before_any_measurement) {
  setenv("BANKML_GPU", "xyz", 1);
  struct run r = RUN("bench", "--cpu", "--card", "--shape", "128x128", "--runs", "1", "--warmup", "0", "--threads",
                     "1");
  unsetenv("BANKML_GPU");
  cr_expect_eq(r.status, 2, "exit status %d, stdout: %s", r.status, r.out);
  cr_expect_str_eq(r.out, "", "rows were measured before the refusal");
  cr_expect(strstr(r.err, "BANKML_GPU=\"xyz\"") != NULL, "%s", r.err);
  run_free(&r);
}

/* So are the worker's own variables (they were read when the worker opened,
 * after the CPU's rows). */
Test(cli, a_bad_worker_variable_is_refused_before_any_measurement) {
  static const char *const vars[][2] = {
      {"BANKML_GPU_SHARE", "abc"}, {"BANKML_GPU_LIMIT", "0.5x"}, {"BANKML_GPU_QUEUES", "99"}};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    setenv(vars[i][0], vars[i][1], 1);
    struct run r = RUN("bench", "--cpu", "--split", "--shape", "128x128", "--runs", "1", "--warmup", "0",
                       "--threads", "1");
    unsetenv(vars[i][0]);
    cr_expect_eq(r.status, 2, "%s: exit status %d, stdout: %s", vars[i][0], r.status, r.out);
    cr_expect_str_eq(r.out, "", "%s: rows were measured before the refusal", vars[i][0]);
    cr_expect(strstr(r.err, vars[i][0]) != NULL, "%s", r.err);
    run_free(&r);
  }
}

/* A CPU path this build or CPU lacks is a warning, and the best one runs:
 * every path gives the same bits, so a product must not fail for it. */
Test(cli, an_unknown_cpu_path_is_a_warning_and_the_best_path_runs) {
  setenv("BANKML_CPU_PATH", "bogus", 1);
  struct run r = RUN("bench", "--cpu", "--shape", "128x128", "--runs", "1", "--warmup", "0", "--threads", "1");
  unsetenv("BANKML_CPU_PATH");
  cr_expect_eq(r.status, 0, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect(strstr(r.err, "bankml-cl: warning: BANKML_CPU_PATH=\"bogus\": no such CPU path in this build; using ") !=
                NULL, "%s", r.err);
  cr_expect(strstr(r.out, "CPU path bogus") == NULL && strstr(r.out, "CPU path ") != NULL, "%s", r.out);
  run_free(&r);
}

/* A mode that fails after others measured: their rows are still reported. */
Test(cli, rows_measured_before_a_failing_mode_are_reported) {
  setenv("BANKML_GPU", "off", 1);
  struct run r = RUN("bench", "--cpu", "--card", "--shape", "256x256", "--runs", "1", "--warmup", "0", "--threads",
                     "1", "--json");
  unsetenv("BANKML_GPU");
  cr_expect_eq(r.status, 3, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect(strstr(r.err, "no card is used") != NULL, "%s", r.err);
  json_t *root = json_loads(r.out, 0, NULL);
  cr_assert_not_null(root, "no report on stdout: %s", r.out);
  json_t *rows = json_object_get(root, "results");
  cr_expect_eq(json_array_size(rows), 2, "the cpu's warm and flushed rows");
  cr_expect_str_eq(json_string_value(json_object_get(json_array_get(rows, 0), "mode")), "cpu");
  json_decref(root);
  run_free(&r);
}

Test(cli, option_without_its_value_exits_2_naming_it) {
  expect_usage_error(RUN("bench", "--shape"), "'--shape'");
  expect_usage_error(RUN("bench", "--threads"), "'--threads'");
}

Test(cli, bad_shapes_exit_2_naming_the_value) {
  const char *bad[] = {"4x100",  "x128",   "0x128",
                       "128x0",  "128",    "16x128junk",
                       "-4x128", "4x-128", "99999999999999999999999x128",
                       "4611686018427387904x256" /* 2^62 rows of 36 bytes: past the address space */};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char named[64];
    snprintf(named, sizeof named, "\"%s\"", bad[i]);
    expect_usage_error(RUN("bench", "--quick", "--shape", bad[i]), named);
  }
}

Test(cli, bad_thread_lists_exit_2_naming_the_value) {
  const char *bad[] = {"0", "abc", "1,,2", "2,", "1-", "3-2", "1025", " 1", "+1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char named[64];
    snprintf(named, sizeof named, "\"%s\"", bad[i]);
    expect_usage_error(RUN("bench", "--quick", "--threads", bad[i]), named);
  }
}

Test(cli, bad_run_counts_exit_2_naming_the_value) {
  expect_usage_error(RUN("bench", "--runs", "0"), "\"0\"");
  expect_usage_error(RUN("bench", "--runs", "5x"), "\"5x\"");
  expect_usage_error(RUN("bench", "--warmup", "-1"), "\"-1\"");
}

Test(cli, bad_BANKML_THREADS_exits_2_naming_it) {
  setenv("BANKML_THREADS", "abc", 1);
  struct run r = RUN("bench", "--cpu", "--quick", "--shape", "128x128", "--threads", "1");
  cr_expect_eq(r.status, 2, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect(strstr(r.err, "BANKML_THREADS") != NULL, "%s", r.err);
  cr_expect(strstr(r.err, bml_strerror(BML_EENV)) != NULL, "%s", r.err);
  cr_expect_str_empty(r.out);
  run_free(&r);
}

static const char *string_of(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  cr_assert(json_is_string(v), "\"%s\" is not a string", key);
  return json_string_value(v);
}

static json_int_t integer_of(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  cr_assert(json_is_integer(v), "\"%s\" is not an integer", key);
  return json_integer_value(v);
}

static double real_of(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  cr_assert(json_is_number(v), "\"%s\" is not a number", key);
  return json_number_value(v);
}

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

Test(cli, bench_quick_json_reports_every_measurement_exact) {
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

Test(cli, bench_text_is_a_header_and_one_line_per_measurement) {
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

Test(cli, bench_verbose_reports_progress_on_stderr_only) {
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

Test(cli, bench_on_a_terminal_shows_one_progress_line_and_the_same_table) {
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
Test(cli, messages_on_a_terminal_go_above_the_progress_line) {
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

Test(cli, a_dumb_terminal_gets_no_progress_line) {
  setenv("TERM", "dumb", 1);
  struct run r = run_cli_tty((const char *const[]){BENCH_SMALL, NULL});
  cr_expect_eq(r.status, 0);
  cr_expect_str_empty(r.err);
  run_free(&r);
}

/* ---- bankml-cl devices, on the fake ICD and the fake sysfs trees -------- */

static void use_fake_devices(const char *scenario, const char *sysfs) {
  const char *build = getenv("BANKML_TOP_BUILDDIR"), *src = getenv("BANKML_TOP_SRCDIR");
  cr_assert(build && src);
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fakeicd/vendors", build);
  setenv("OCL_ICD_VENDORS", path, 1);
  snprintf(path, sizeof path, "%s/tests/fakeicd/%s.conf", src, scenario);
  setenv("BML_FAKEICD_CONFIG", path, 1);
  snprintf(path, sizeof path, "%s/tests/fixtures/sysfs/%s", src, sysfs);
  setenv("BANKML_SYSFS_ROOT", path, 1);
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SOFTWARE");
}

Test(cli, help_lists_devices) {
  struct run r = RUN("--help");
  cr_expect(strstr(r.out, "\n  devices ") != NULL, "devices is not listed: %s", r.out);
  run_free(&r);
}

Test(cli, devices_prints_one_json_object) {
  use_fake_devices("mixed", "mixed");
  struct run r = RUN("devices");
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  json_error_t e;
  json_t *root = json_loads(r.out, 0, &e);
  cr_assert_not_null(root, "not JSON: %s\n%s", e.text, r.out);
  cr_expect_eq(json_integer_value(json_object_get(root, "schema")), 1);
  cr_expect_eq(json_array_size(json_object_get(root, "devices")), 4);
  cr_expect_eq(json_array_size(json_object_get(root, "selected")), 3);
  json_decref(root);
  run_free(&r);
}

Test(cli, devices_brief_is_one_line_per_device) {
  use_fake_devices("mixed", "mixed");
  struct run r = RUN("devices", "--brief");
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strstr(r.out, "0 discrete   gfx1030 (") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "pci 0000:03:00.0: usable, selected\n") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "3 cpu        pthread-skylake-avx512 (Portable Computing Language): "
                          "not usable: software device (PoCL)\n") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "note: platform \"Broken Platform\": clGetDeviceIDs: CL_OUT_OF_HOST_MEMORY (-6)") != NULL,
            "%s", r.out);
  run_free(&r);
}

/* Whether s holds a control character a terminal would act on: C0 other
 * than newline, DEL, or UTF-8's C1 (0xc2 0x80-0x9f).  Returns its offset, or
 * -1. */
static long control_at(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if ((*p < 0x20 && *p != '\n') || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
      return (long)(p - (const unsigned char *)s);
  return -1;
}

/* mixed.conf with the first card's name and its platform's replaced (every
 * registration of them), as a temporary file; *path gets its name. */
static void write_named_conf(const char *name, const char *platform, char *path, size_t len) {
  char *text = read_source("tests/fakeicd/mixed.conf");
  snprintf(path, len, "/tmp/bankml-cl-conf-XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (strcmp(line, "name = gfx1030") == 0)
      fprintf(f, "name = %s\n", name);
    else if (strncmp(line, "name = Fake Discrete", strlen("name = Fake Discrete")) == 0)
      fprintf(f, "name = %s%s\n", platform, line + strlen("name = Fake Discrete"));
    else
      fprintf(f, "%s\n", line);
  }
  cr_assert_eq(fclose(f), 0);
  free(text);
}

/* A driver's names are quoted in the text output, not obeyed: an escape
 * sequence in a device or platform name (a title change, a screen clear, a
 * C1 control sequence introducer) prints with '?' for each control
 * character, in the lines and in the library's log on stderr.  The JSON
 * keeps the name as the driver gave it (jansson escapes it). */
Test(cli, devices_text_quotes_control_characters_in_driver_names) {
  const char *evil = "gfx\x1b]0;owned\x07\x1b[2J1030\xc2\x9b" "1m";
  char path[64];
  write_named_conf(evil, "Fake\x1b[31m Discrete", path, sizeof path);
  use_fake_devices("mixed", "mixed");
  setenv("BML_FAKEICD_CONFIG", path, 1);
  setenv("BANKML_DEBUG", "device", 1);
  struct run r = RUN("devices", "--brief");
  unsetenv("BANKML_DEBUG");
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strstr(r.out, "0 discrete   gfx?]0;owned??[2J1030?1m (Fake?[31m Discrete") != NULL,
            "%s", r.out);
  cr_expect_eq(control_at(r.out), -1, "a control character at %ld of stdout: %s", control_at(r.out), r.out);
  cr_expect(strstr(r.err, "gfx?]0;owned??[2J1030?1m") != NULL, "the debug log does not quote the name: %s", r.err);
  cr_expect_eq(control_at(r.err), -1, "a control character at %ld of stderr: %s", control_at(r.err), r.err);
  run_free(&r);

  r = RUN("devices");
  unlink(path);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  json_t *root = json_loads(r.out, 0, NULL);
  cr_assert_not_null(root, "not JSON: %s", r.out);
  json_t *first = json_array_get(json_object_get(root, "devices"), 0);
  cr_expect_str_eq(json_string_value(json_object_get(first, "name")), evil);
  json_decref(root);
  run_free(&r);
}

/* A name longer than a line's room is cut at a whole UTF-8 character and
 * ends in "...". */
Test(cli, devices_text_cuts_long_names_at_a_whole_character) {
  char name[2 * 600 + 4] = "gfx";
  for (int i = 0; i < 600; i++) strcat(name, "\xc3\xa9"); /* e acute */
  char path[64];
  write_named_conf(name, "Fake Discrete", path, sizeof path);
  use_fake_devices("mixed", "mixed");
  setenv("BML_FAKEICD_CONFIG", path, 1);
  struct run r = RUN("devices", "--brief");
  unlink(path);
  cr_assert_eq(r.status, 0, "stderr: %s", r.err);
  const char *cut = strstr(r.out, "\xc3\xa9... (Fake Discrete");
  cr_expect_not_null(cut, "%.200s", r.out);
  const char *start = strstr(r.out, "gfx");
  cr_assert_not_null(start);
  /* the buffer's 1023 bytes: "gfx", 508 whole characters, "..." */
  cr_expect_eq(cut + 2 - start, 3 + 2 * 508, "%ld bytes of the name before the dots", (long)(cut + 2 - start));
  run_free(&r);
}

Test(cli, devices_with_no_platform_exits_0) {
  use_fake_devices("empty", "empty");
  struct run r = RUN("devices", "--brief");
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strstr(r.out, "no OpenCL device found") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "OCL_ICD_VENDORS") != NULL, "%s", r.out);
  run_free(&r);
}

Test(cli, devices_refuses_a_bad_gpu_choice_by_name) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "graphics", 1);
  expect_usage_error(RUN("devices"), "BANKML_GPU=\"graphics\"");
  setenv("BANKML_GPU", "7", 1);
  expect_usage_error(RUN("devices"), "BANKML_GPU=\"7\"");
}

Test(cli, devices_misuse_exits_2) {
  expect_usage_error(RUN("devices", "--frobnicate"), "--frobnicate");
  expect_usage_error(RUN("devices", "extra"), "extra");
  expect_usage_error(RUN("devices", "--brief", "--compact"), "--compact");
  /* the command's own scan permutes, as its option string asks: an option
   * after an operand is still read as one (the top-level scan's stop at the
   * first operand was kept, and 'extra' was named instead) */
  expect_usage_error(RUN("devices", "extra", "--frobnicate"), "--frobnicate");
}

/* An unknown BANKML_DEBUG category is reported when the work starts, in
 * every command; it was read at the first debug message, so `devices
 * --brief` and a CPU bench, which write none, said nothing of it. */
Test(cli, an_unknown_debug_category_is_reported_by_every_command) {
  setenv("BANKML_DEBUG", "pool,bogus", 1);
  use_fake_devices("llvmpipe", "empty");
  struct run runs[] = {RUN("devices", "--brief"),
                       RUN("bench", "--cpu", "--shape", "128x128", "--runs", "1", "--warmup", "0", "--threads", "1")};
  unsetenv("BANKML_DEBUG");
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    cr_expect_eq(runs[i].status, 0, "run %zu: exit status %d, stderr: %s", i, runs[i].status, runs[i].err);
    cr_expect(strstr(runs[i].err, "unknown category \"bogus\" ignored") != NULL, "run %zu: %s", i, runs[i].err);
    run_free(&runs[i]);
  }
}

Test(cli, devices_verify_with_no_usable_gpu_says_so_and_exits_0) {
  use_fake_devices("llvmpipe", "empty");
  struct run r = RUN("devices", "--verify");
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "bankml-cl devices --verify: no usable GPU found; bankml-cl runs on the CPU\n");
  run_free(&r);
}

/* Usable cards that BANKML_GPU left out are not "no usable GPU found". */
Test(cli, devices_verify_with_no_card_selected_says_so_and_exits_0) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "off", 1);
  struct run r = RUN("devices", "--verify");
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strncmp(r.out, "bankml-cl devices --verify: no usable GPU selected (", 52) == 0, "%s", r.out);
  cr_expect(strstr(r.out, " usable, none chosen by BANKML_GPU); bankml-cl runs on the CPU\n") != NULL, "%s", r.out);
  run_free(&r);
}

/* A card that fails is its own status, 4: not misuse (2), which ran nothing. */
Test(cli, devices_verify_refuses_a_card_that_fails_and_exits_4) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "0", 1);
  struct run r = RUN("devices", "--verify");
  cr_expect_eq(r.status, 4, "stdout: %s stderr: %s", r.out, r.err);
  cr_expect(strstr(r.out, "0 gfx1030: NOT VERIFIED \u2014 open: clCreateContext: CL_DEVICE_NOT_AVAILABLE (-2); "
                          "bankml-cl will not use this card\n") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "0 gfx1030: NOT VERIFIED (the open check could not run); bankml-cl will not use this card\n") !=
                NULL, "%s", r.out);
  run_free(&r);
}

/* On a terminal, the line says the device and the check; stdout is the
 * piped run's, byte for byte, and the piped stderr has nothing added. */
Test(cli, devices_verify_on_a_terminal_shows_progress_and_prints_the_same_lines) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "0", 1);
  setenv("TERM", "xterm", 1);
  struct run tty = run_cli_tty((const char *const[]){"devices", "--verify", NULL}), piped = RUN("devices", "--verify");
  cr_expect_eq(tty.status, 4);
  cr_expect_eq(piped.status, 4);
  cr_expect(strstr(tty.err, "\rbankml-cl devices --verify [checks: 0] 0 gfx1030: opening it and building") != NULL,
            "%s", tty.err);
  cr_expect(strstr(tty.err, "\rbankml-cl devices --verify [checks: 1] 0 gfx1030: open (") != NULL, "%s", tty.err);
  cr_expect_str_eq(tty.out, piped.out);
  cr_expect_str_empty(piped.err);
  run_free(&tty);
  run_free(&piped);
}

static json_t *verify_json(const char *const *args, int status) {
  struct run r = run_cli(args);
  cr_expect_eq(r.status, status, "exit %d, stderr: %s", r.status, r.err);
  json_error_t e;
  json_t *root = json_loads(r.out, 0, &e);
  cr_assert_not_null(root, "not JSON (%s): %s", e.text, r.out);
  cr_expect_eq(integer_of(root, "schema"), 1);
  run_free(&r);
  return root;
}

Test(cli, devices_verify_json_gives_the_checks_and_the_verdict) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "0", 1);
  json_t *root = verify_json((const char *const[]){"devices", "--verify", "--json", NULL}, 4);
  cr_expect_str_eq(string_of(root, "result"), "not verified");
  cr_expect_eq(integer_of(root, "usable"), 3);
  json_t *devices = json_object_get(root, "devices");
  cr_assert_eq(json_array_size(devices), 1);
  json_t *d = json_array_get(devices, 0);
  cr_expect_eq(integer_of(d, "index"), 0);
  cr_expect_str_eq(string_of(d, "name"), "gfx1030");
  cr_expect(json_is_false(json_object_get(d, "verified")));
  cr_expect_str_eq(string_of(d, "why_not"), "the open check could not run");
  cr_expect(json_is_false(json_object_get(d, "golden_checked")));
  json_t *checks = json_object_get(d, "checks");
  cr_assert_eq(json_array_size(checks), 1);
  json_t *c = json_array_get(checks, 0);
  cr_expect_str_eq(string_of(c, "check"), "open");
  cr_expect(json_is_false(json_object_get(c, "ok")));
  cr_expect(json_is_null(json_object_get(c, "first_bad")) && json_is_null(json_object_get(c, "card_bits")));
  cr_expect_str_eq(string_of(c, "detail"), "clCreateContext: CL_DEVICE_NOT_AVAILABLE (-2)");
  json_decref(root);
}

Test(cli, devices_verify_json_without_a_usable_card_says_so_and_exits_0) {
  use_fake_devices("llvmpipe", "empty");
  json_t *root = verify_json((const char *const[]){"devices", "--verify", "--json", "--compact", NULL}, 0);
  cr_expect_str_eq(string_of(root, "result"), "no usable GPU found");
  cr_expect_eq(json_array_size(json_object_get(root, "devices")), 0);
  json_decref(root);
  struct run r = RUN("devices", "--verify", "--json", "--compact");
  cr_expect_eq(strchr(r.out, '\n'), r.out + strlen(r.out) - 1, "--compact: one line: %s", r.out);
  run_free(&r);
}

/* A refused card whose report cannot be written: 3, as for any output
 * lost (it was 2, the refusal's, and the usage errors' status). */
Test(cli, devices_verify_refusing_into_a_full_disk_is_3) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "0", 1);
  struct run r = run_cli_to((const char *const[]){"devices", "--verify", NULL}, "/dev/full");
  cr_expect_eq(r.status, 3, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect(strstr(r.err, "cannot write the output") != NULL, "%s", r.err);
  run_free(&r);
}

Test(cli, devices_verify_passes_on_pocl_with_the_software_flag) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  struct run r = RUN("devices", "--verify");
  if (strstr(r.out, "no usable GPU found")) {
    run_free(&r);
    cr_skip_test("no PoCL device here (apt-get install pocl-opencl-icd)");
  }
  cr_expect_eq(r.status, 0, "stdout: %s stderr: %s", r.out, r.err);
  cr_expect(strstr(r.out, ": q1_0_mat_vec8 12288x4096 layer: 12288/12288 rows bit-exact (fma: native, ") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, ": q1_0_mat_vec 4096x4096 random: 4096/4096 rows bit-exact (fma: emulated, ") != NULL, "%s", r.out);
  /* a batched kernel's line gives its batch's time, and says so */
  const char *lrb = strstr(r.out, ": q1_0_mat_vec_lrb 4096x4096 random: 4096/4096 rows bit-exact (fma: native, ");
  const char *eol = lrb ? strchr(lrb, '\n') : NULL;
  static const char tail[] = " ms for the batch)";
  cr_expect(eol && (size_t)(eol - lrb) > sizeof tail && strncmp(eol - (sizeof tail - 1), tail, sizeof tail - 1) == 0,
            "%s", r.out);
  cr_expect(strstr(r.out, "verified: every check bit-exact") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "NOT VERIFIED") == NULL, "%s", r.out);
  cr_expect(strstr(r.err, "BANKML_GPU_SOFTWARE=1") != NULL, "no warning on stderr: %s", r.err);
  run_free(&r);
}

/* --golden names a directory without the golden file: the card is not
 * verified (the cases asked for could not be checked), and the line says
 * why; the hint about BANKML_GOLDEN_DIR is for the default only. */
Test(cli, devices_verify_refuses_when_the_named_golden_cases_cannot_be_read) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  char dir[] = "/tmp/bankml-golden-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  struct run r = RUN("devices", "--verify", "--golden", dir);
  rmdir(dir);
  if (strstr(r.out, "no usable GPU found")) {
    run_free(&r);
    cr_skip_test("no PoCL device here (apt-get install pocl-opencl-icd)");
  }
  cr_expect_eq(r.status, 4, "stdout: %s stderr: %s", r.out, r.err);
  cr_expect(strstr(r.out, "NOT VERIFIED \u2014 ggml's golden cases cannot be read: cannot open ") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "BANKML_GOLDEN_DIR") == NULL, "the hint is for the default directory: %s", r.out);
  cr_expect(strstr(r.out, "verified: every check bit-exact") == NULL, "%s", r.out);
  /* the verdict names the check that could not run: no row differed */
  cr_expect(strstr(r.out, "NOT VERIFIED (the golden check could not run); bankml-cl will not use this card\n") != NULL,
            "%s", r.out);
  cr_expect(strstr(r.out, "did not reproduce") == NULL, "the card's bits were not wrong: %s", r.out);
  run_free(&r);
}

Test(cli, devices_verify_misuse_exits_2) {
  expect_usage_error(RUN("devices", "--verify", "--brief"), "--brief");
  expect_usage_error(RUN("devices", "--verify", "--compact"), "--json");
  expect_usage_error(RUN("devices", "--brief", "--json"), "--json");
  expect_usage_error(RUN("devices", "--golden", "/tmp"), "--golden");
  expect_usage_error(RUN("devices", "--verify", "--golden", "/nonexistent/golden"), "\"/nonexistent/golden\"");
  expect_usage_error(RUN("devices", "--verify", "--golden", ""), "--golden");
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

Test(cli, bench_clblast_on_pocl_agrees_with_a_cpu_reference) {
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

Test(cli, bench_clblast_without_a_device_says_so_and_exits_3) {
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
Test(cli, bench_clblast_with_every_shape_skipped_exits_3) {
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

Test(cli, help_bench_lists_clblast) {
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

/* bench on PoCL with a share of 0.5 (PoCL's calibrated share may be too
 * small for a worker): its JSON; the test skips where no card is used. */
static json_t *pocl_bench_json(const char *const *args) {
  use_pocl();
  setenv("BANKML_GPU_SHARE", "0.5", 1);
  struct run r = run_cli(args);
  unsetenv("BANKML_GPU_SHARE");
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

Test(cli, bench_card_and_split_on_pocl_are_exact) {
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
Test(cli, bench_text_says_how_long_the_workers_open_took) {
  use_pocl();
  setenv("BANKML_GPU_SHARE", "0.5", 1);
  struct run r = RUN("bench", "--card", "--quick", "--shape", "256x512", "--runs", "1", "--warmup", "0");
  unsetenv("BANKML_GPU_SHARE");
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
 * one.  The report names the card's memory. */
Test(cli, bench_card_pipelines_a_matrix_each_within_a_quarter_of_the_card) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--card", "--json", "--shape", "16384x8192", "--shape",
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
Test(cli, bench_card_reads_fewer_matrices_where_32_exceed_a_quarter_of_the_card) {
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
Test(cli, bench_split_alone_measures_no_card_bandwidth) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--split", "--json", "--shape", "256x256", "--runs", "1",
                                                        "--warmup", "0", "--threads", "1", NULL});
  cr_expect(json_is_null(json_object_get(root, "card_read_gbps")), "a split-only report measured the card's bandwidth");
  cr_expect(strlen(string_of(root, "device")) > 0, "the card is not named");
  json_decref(root);
}

Test(cli, bench_model_token_on_pocl_is_exact) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--cpu", "--card", "--model", "bonsai-1.7b", "--runs",
                                                        "1", "--warmup", "0", "--threads", "2", "--json", NULL});
  static const char *const modes[] = {"cpu", "card-pipelined", "card-round-trips"};
  expect_modes(root, modes, 3);
  json_t *row = json_array_get(json_object_get(root, "results"), 1);
  cr_expect_str_eq(json_string_value(json_object_get(row, "label")), "bonsai-1.7b");
  cr_expect_null(json_object_get(row, "rows"), "a token has no one rows x n");
  cr_expect_null(json_object_get(row, "n"), "a token has no one rows x n");
  cr_expect_eq(json_integer_value(json_object_get(row, "products_per_run")), 197, "28 layers of 7 and the head");
  json_decref(root);
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

Test(cli, a_spoilt_cpu_result_is_not_exact) {
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

Test(cli, spoilt_card_split_and_token_results_are_not_exact) {
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
Test(cli, a_full_disk_is_said_once_with_its_reason) {
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
Test(cli, an_unwritten_report_of_a_failed_check_is_3_at_any_size) {
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

/* An unknown letter in a cluster of short options is named, not the long
 * option before it (getopt has not moved past the cluster yet). */
Test(cli, an_unknown_short_option_in_a_cluster_is_named) {
  struct run r = RUN("bench", "--json", "-xh");
  cr_expect(strstr(r.err, "'--json'") == NULL, "%s", r.err);
  expect_usage_error(r, "unknown option '-x'");
  r = RUN("devices", "--brief", "-xy");
  cr_expect(strstr(r.err, "'--brief'") == NULL, "%s", r.err);
  expect_usage_error(r, "unknown option '-x'");
  expect_usage_error(RUN("bench", "--runs=3", "--bogus"), "'--bogus'");
}

/* --threads 1,1-2,2 names counts 1 and 2 twice each: each is timed once
 * (four rows: two counts, warm and flushed). */
Test(cli, bench_times_a_thread_count_given_twice_once) {
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

Test(cli, bench_card_modes_run_on_the_largest_thread_count) {
  json_t *root = pocl_bench_json((const char *const[]){"bench", "--split", "--shape", "256x256", "--runs", "1",
                                                        "--warmup", "0", "--threads", "2,1", "--json", NULL});
  json_t *rows = json_object_get(root, "results");
  cr_assert(json_array_size(rows) > 0);
  for (size_t i = 0; i < json_array_size(rows); i++)
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(rows, i), "threads")), 2, "row %zu", i);
  json_decref(root);
}

Test(cli, bench_unknown_model_exits_2_naming_it) {
  expect_usage_error(RUN("bench", "--model", "bonsai-70b"), "bonsai-70b");
}

/* A misuse message echoes the argument cut past 64 bytes and with its
 * control characters as '?': a 100 KB argument was a 100 KB line, and an
 * escape sequence in it reached the terminal. */
Test(cli, misuse_echoes_a_long_or_hostile_argument_cut_and_printable) {
  static char arg[100001];
  memcpy(arg, "\x1b]0;owned\x07\x1b[2J", 14);
  memset(arg + 14, 'a', sizeof arg - 15);
  char opt[sizeof arg + 2] = "--";
  strcat(opt, arg);
  struct run runs[] = {RUN(arg), RUN("help", arg), RUN("bench", opt), RUN("bench", "--shape", arg),
                       RUN("bench", "--quick", arg), RUN("devices", arg), RUN("devices", "--verify", "--golden", arg)};
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    /* the echo: from its opening quote to the "..." that cuts it */
    const char *echo = strstr(runs[i].err, "?]0;owned??[2Jaaaa"), *dots = echo ? strstr(echo, "...") : NULL;
    cr_expect_not_null(dots, "run %zu: %.300s", i, runs[i].err);
    while (echo && echo > runs[i].err && echo[-1] != '\'' && echo[-1] != '"') echo--;
    cr_expect(dots && dots - echo == 64, "run %zu: not cut at 64 bytes: %.300s", i, runs[i].err);
    cr_expect(strlen(runs[i].err) < 300, "run %zu: %zu bytes on stderr", i, strlen(runs[i].err));
    cr_expect_eq(control_at(runs[i].err), -1, "run %zu: a control character at %ld", i, control_at(runs[i].err));
    expect_usage_error(runs[i], "...");
  }
}

/* Every variable whose bad values are errors is checked by every command
 * before it runs anything (bankml-cl(1), ENVIRONMENT): `bench --cpu` and
 * `devices` took a bad BANKML_GPU, BANKML_GPU_SHARE or BANKML_GPU_QUEUES
 * and exited 0. */
Test(cli, every_command_refuses_a_bad_variable_before_running) {
  static const char *const vars[][2] = {
      {"BANKML_GPU", "graphics"},   {"BANKML_GPU_SHARE", "abc"}, {"BANKML_GPU_LIMIT", "0.5x"},
      {"BANKML_GPU_QUEUES", "99"},  {"BANKML_THREADS", "many"},  {"BANKML_GPU_SOFTWARE", "yes"},
      {"BANKML_SYSFS_ROOT", "sys"},
  };
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    char named[64];
    snprintf(named, sizeof named, "%s=\"%s\"", vars[i][0], vars[i][1]);
    setenv(vars[i][0], vars[i][1], 1);
    expect_usage_error(RUN("devices", "--brief"), named);
    expect_usage_error(RUN("bench", "--cpu", "--shape", "128x128", "--runs", "1", "--warmup", "0", "--threads", "1"),
                       named);
    unsetenv(vars[i][0]);
  }
}

/* ---- bankml-cl bench --gap: products after idle gaps ---------------------- */

/* One row of a --gap run: its gap, and its times in order (the fastest,
 * the median, the 90th percentile, the slowest). */
static json_int_t check_gap_row(json_t *row) {
  cr_expect_str_eq(string_of(row, "mode"), "cpu");
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
Test(cli, bench_gap_json_reports_each_gap_and_thread_count) {
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
    cr_expect_eq(check_gap_row(row), gaps[i], "row %zu", i);
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

Test(cli, bench_gap_text_shows_the_gap_p90_worst_and_ratios_to_one_thread) {
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

Test(cli, bad_gaps_exit_2_naming_the_value) {
  const char *bad[] = {"-1", "abc", "10ms", "1,,2", "5,", "60001", "1.5", " 1", "+1", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char named[64];
    snprintf(named, sizeof named, "bad --gap \"%s\"", bad[i]);
    expect_usage_error(RUN("bench", "--cpu", "--shape", "128x128", "--gap", bad[i]), named);
  }
  expect_usage_error(RUN("bench", "--model", "bonsai-1.7b", "--gap", "10"), "--gap");
  expect_usage_error(RUN("bench", "--card", "--shape", "128x128", "--gap", "10"), "--gap");
}

Test(cli, a_spoilt_result_after_a_gap_is_not_exact) {
  expect_spoilt((const char *const[]){"bench", "--cpu", "--json", "--shape", "256x512", "--threads", "1,2", "--gap",
                                      "1", "--runs", "2", "--warmup", "0", NULL},
                2);
}
