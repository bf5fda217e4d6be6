/* test_cli.c -- the bankml-cl command as a user runs it: help, version, misuse, the environment. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bankml-cl.h"
#include "runcli.h"

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
