/* runcli.c -- the tests run the built bankml-cl command: with its outputs in files, or stderr on a terminal. */
#define _GNU_SOURCE
#include "runcli.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

char *slurp(int fd) {
  off_t size = lseek(fd, 0, SEEK_END);
  cr_assert(size >= 0);
  char *buf = malloc((size_t)size + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(pread(fd, buf, (size_t)size, 0), size);
  buf[size] = '\0';
  return buf;
}

char *read_source(const char *rel) {
  const char *src = getenv("BANKML_TOP_SRCDIR");
  cr_assert_not_null(src, "BANKML_TOP_SRCDIR is not set (run through make check)");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", src, rel);
  int fd = open(path, O_RDONLY);
  cr_assert(fd >= 0, "cannot open %s", path);
  char *text = slurp(fd);
  close(fd);
  return text;
}

static int temp_file(void) {
  char name[] = "/tmp/bankml-cl-test-XXXXXX";
  int fd = mkstemp(name);
  cr_assert(fd >= 0, "mkstemp failed");
  unlink(name);
  return fd;
}

/* The command's path and argv (args after the path), in argv[32]. */
static const char *command_argv(const char *const *args, char **argv, char *path, size_t len) {
  const char *top = getenv("BANKML_TOP_BUILDDIR");
  cr_assert_not_null(top, "BANKML_TOP_BUILDDIR is not set (run through make check)");
  snprintf(path, len, "%s/src/bankml-cl", top);
  argv[0] = path;
  size_t argc = 1;
  for (; args[argc - 1]; argc++) {
    cr_assert(argc < 31);
    argv[argc] = (char *)args[argc - 1];
  }
  argv[argc] = NULL;
  return path;
}

/* Starts the command with stdout on out and stderr on err; its pid. */
static pid_t spawn(const char *const *args, int out, int err) {
  char path[4096], *argv[32];
  command_argv(args, argv, path, sizeof path);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, err, STDERR_FILENO);
  pid_t pid;
  cr_assert_eq(posix_spawn(&pid, path, &fa, NULL, argv, environ), 0, "cannot run %s", path);
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

static int wait_status(pid_t pid) {
  int ws;
  cr_assert_eq(waitpid(pid, &ws, 0), pid);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

struct run run_cli_to(const char *const *args, const char *out_path) {
  int out = out_path ? open(out_path, O_WRONLY | O_CLOEXEC) : temp_file(), err = temp_file();
  cr_assert(out >= 0, "cannot open %s", out_path);
  int status = wait_status(spawn(args, out, err));
  struct run r = {status, out_path ? strdup("") : slurp(out), slurp(err)};
  close(out);
  close(err);
  return r;
}

struct run run_cli(const char *const *args) { return run_cli_to(args, NULL); }

struct run run_cli_tty(const char *const *args) {
  int master, slave, out = temp_file();
  cr_assert_eq(openpty(&master, &slave, NULL, NULL, NULL), 0, "openpty: %s", strerror(errno));
  fcntl(master, F_SETFD, FD_CLOEXEC);
  pid_t pid = spawn(args, out, slave);
  close(slave);
  /* read until the command has closed its end (EIO), so it never blocks
   * on a full terminal */
  size_t len = 0, cap = 4096;
  char *err = malloc(cap);
  cr_assert_not_null(err);
  for (;;) {
    if (cap - len < 1024 && !(err = realloc(err, cap *= 2))) cr_assert_fail("out of memory");
    ssize_t n = read(master, err + len, cap - len - 1);
    if (n > 0) len += (size_t)n;
    else if (n < 0 && errno == EINTR) continue;
    else break;
  }
  err[len] = '\0';
  close(master);
  struct run r = {wait_status(pid), slurp(out), err};
  close(out);
  return r;
}

void run_free(struct run *r) {
  free(r->out);
  free(r->err);
}

/* ---- what the suites of the command check ---------------------------------- */

/* Misuse: exit 2, nothing on stdout, and stderr names what was wrong. */
void expect_usage_error(struct run r, const char *named) {
  cr_expect_eq(r.status, 2, "exit status %d, stderr: %s", r.status, r.err);
  cr_expect_str_empty(r.out);
  cr_expect(strstr(r.err, named) != NULL, "stderr does not name '%s': %s", named, r.err);
  run_free(&r);
}

/* A member of obj that must be a string, an integer, a number: the test
 * fails where it is not. */
const char *string_of(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  cr_assert(json_is_string(v), "\"%s\" is not a string", key);
  return json_string_value(v);
}

json_int_t integer_of(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  cr_assert(json_is_integer(v), "\"%s\" is not an integer", key);
  return json_integer_value(v);
}

double real_of(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  cr_assert(json_is_number(v), "\"%s\" is not a number", key);
  return json_number_value(v);
}

/* The fake ICD in the scenario of tests/fakeicd/<scenario>.conf, and the
 * fake sysfs tree tests/fixtures/sysfs/<sysfs>. */
void use_fake_devices(const char *scenario, const char *sysfs) {
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

/* Whether s holds a control character a terminal would act on: C0 other
 * than newline, DEL, or UTF-8's C1 (0xc2 0x80-0x9f).  Returns its offset, or
 * -1. */
long control_at(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if ((*p < 0x20 && *p != '\n') || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
      return (long)(p - (const unsigned char *)s);
  return -1;
}
