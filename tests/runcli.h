/* runcli.h -- the tests run the built bankml-cl command as a user does: its exit status and both outputs. */
#ifndef BML_TEST_RUNCLI_H
#define BML_TEST_RUNCLI_H

#include <jansson.h>

/* What one run of the command left: its exit status and both outputs. */
struct run {
  int status; /* the exit status, or 128 + the signal that ended it */
  char *out, *err;
};

/* The whole of the file open on fd, as a string (malloc'd). */
char *slurp(int fd);

/* The whole of a file of the source tree ($BANKML_TOP_SRCDIR/rel), as a
 * string (malloc'd). */
char *read_source(const char *rel);

/* Runs the built command (a libtool wrapper script in the build tree) with
 * the NULL-terminated args, stdout and stderr captured in files so neither
 * pipe can fill up and stall it; stdout to out_path instead when it is not
 * NULL (out is then ""). */
struct run run_cli_to(const char *const *args, const char *out_path);
struct run run_cli(const char *const *args);

/* As run_cli, with stderr a terminal (the slave of a pseudo-terminal, what
 * the command wrote there read from its master: err), stdout a file. */
struct run run_cli_tty(const char *const *args);

void run_free(struct run *r);

#define RUN(...) run_cli((const char *const[]){__VA_ARGS__, NULL})

/* Misuse: exit 2, nothing on stdout, and stderr names what was wrong (r is
 * freed). */
void expect_usage_error(struct run r, const char *named);

/* A member of obj that must be a string, an integer, a number: the test
 * fails where it is not. */
const char *string_of(json_t *obj, const char *key);
json_int_t integer_of(json_t *obj, const char *key);
double real_of(json_t *obj, const char *key);

/* The fake ICD in the scenario of tests/fakeicd/<scenario>.conf, and the
 * fake sysfs tree tests/fixtures/sysfs/<sysfs>; no software device. */
void use_fake_devices(const char *scenario, const char *sysfs);

/* The offset in s of a control character a terminal would act on (C0 but
 * newline, DEL, UTF-8's C1), or -1. */
long control_at(const char *s);

#endif
