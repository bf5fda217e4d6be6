/* test_devices_cli.c -- bankml-cl devices as a user runs it, on the fake ICD and sysfs trees and on PoCL: listings, --verify. */
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
static void clean_environment(void) { unsetenv("BANKML_THREADS"); }

/* A full verification of every selected device (devices --verify) takes
 * long on a loaded machine: the suite's timeout is raised (as test_cli's). */
TestSuite(devices_cli, .init = clean_environment, .timeout = 400);

/* ---- bankml-cl devices, on the fake ICD and the fake sysfs trees -------- */

Test(devices_cli, help_lists_devices) {
  struct run r = RUN("--help");
  cr_expect(strstr(r.out, "\n  devices ") != NULL, "devices is not listed: %s", r.out);
  run_free(&r);
}

Test(devices_cli, devices_prints_one_json_object) {
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

Test(devices_cli, devices_brief_is_one_line_per_device) {
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
Test(devices_cli, devices_text_quotes_control_characters_in_driver_names) {
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
Test(devices_cli, devices_text_cuts_long_names_at_a_whole_character) {
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

Test(devices_cli, devices_with_no_platform_exits_0) {
  use_fake_devices("empty", "empty");
  struct run r = RUN("devices", "--brief");
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strstr(r.out, "no OpenCL device found") != NULL, "%s", r.out);
  cr_expect(strstr(r.out, "OCL_ICD_VENDORS") != NULL, "%s", r.out);
  run_free(&r);
}

Test(devices_cli, devices_refuses_a_bad_gpu_choice_by_name) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "graphics", 1);
  expect_usage_error(RUN("devices"), "BANKML_GPU=\"graphics\"");
  setenv("BANKML_GPU", "7", 1);
  expect_usage_error(RUN("devices"), "BANKML_GPU=\"7\"");
}

Test(devices_cli, devices_misuse_exits_2) {
  expect_usage_error(RUN("devices", "--frobnicate"), "--frobnicate");
  expect_usage_error(RUN("devices", "extra"), "extra");
  expect_usage_error(RUN("devices", "--brief", "--compact"), "--compact");
  /* the command's own scan permutes, as its option string asks: an option
   * after an operand is still read as one (the top-level scan's stop at the
   * first operand was kept, and 'extra' was named instead) */
  expect_usage_error(RUN("devices", "extra", "--frobnicate"), "--frobnicate");
}

Test(devices_cli, devices_verify_with_no_usable_gpu_says_so_and_exits_0) {
  use_fake_devices("llvmpipe", "empty");
  struct run r = RUN("devices", "--verify");
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect_str_eq(r.out, "bankml-cl devices --verify: no usable GPU found; bankml-cl runs on the CPU\n");
  run_free(&r);
}

/* Usable cards that BANKML_GPU left out are not "no usable GPU found". */
Test(devices_cli, devices_verify_with_no_card_selected_says_so_and_exits_0) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "off", 1);
  struct run r = RUN("devices", "--verify");
  cr_expect_eq(r.status, 0, "stderr: %s", r.err);
  cr_expect(strncmp(r.out, "bankml-cl devices --verify: no usable GPU selected (", 52) == 0, "%s", r.out);
  cr_expect(strstr(r.out, " usable, none chosen by BANKML_GPU); bankml-cl runs on the CPU\n") != NULL, "%s", r.out);
  run_free(&r);
}

/* A card that fails is its own status, 4: not misuse (2), which ran nothing. */
Test(devices_cli, devices_verify_refuses_a_card_that_fails_and_exits_4) {
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
Test(devices_cli, devices_verify_on_a_terminal_shows_progress_and_prints_the_same_lines) {
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

Test(devices_cli, devices_verify_json_gives_the_checks_and_the_verdict) {
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

Test(devices_cli, devices_verify_json_without_a_usable_card_says_so_and_exits_0) {
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
Test(devices_cli, devices_verify_refusing_into_a_full_disk_is_3) {
  use_fake_devices("mixed", "mixed");
  setenv("BANKML_GPU", "0", 1);
  struct run r = run_cli_to((const char *const[]){"devices", "--verify", NULL}, "/dev/full");
  cr_expect_eq(r.status, 3, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect(strstr(r.err, "cannot write the output") != NULL, "%s", r.err);
  run_free(&r);
}

Test(devices_cli, devices_verify_passes_on_pocl_with_the_software_flag) {
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
Test(devices_cli, devices_verify_refuses_when_the_named_golden_cases_cannot_be_read) {
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
  /* refused before any build or check: the verdict could not be complete */
  cr_expect(strstr(r.out, "fma probe") == NULL && strstr(r.out, "q1_0_mat_vec") == NULL, "a check ran: %s", r.out);
  run_free(&r);
}

Test(devices_cli, devices_verify_misuse_exits_2) {
  expect_usage_error(RUN("devices", "--verify", "--brief"), "--brief");
  expect_usage_error(RUN("devices", "--verify", "--compact"), "--json");
  expect_usage_error(RUN("devices", "--brief", "--json"), "--json");
  expect_usage_error(RUN("devices", "--golden", "/tmp"), "--golden");
  expect_usage_error(RUN("devices", "--verify", "--golden", "/nonexistent/golden"), "\"/nonexistent/golden\"");
  expect_usage_error(RUN("devices", "--verify", "--golden", ""), "--golden");
}
