/* runcli.h -- the tests run the built bankml-cl command as a user does: its exit status and both outputs. */
#ifndef BML_TEST_RUNCLI_H
#define BML_TEST_RUNCLI_H

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

#endif
