/* cli.c -- fuzzes the command's arguments (src/cli): the input is argv, NUL-separated, parsed by the real main.
 *
 * BANKML_THREADS is set to a bad value, so every command stops after its
 * options, at the check of the environment (cli_check_env): the parsing
 * is what runs, not the measurements.  bankml-cl.c is compiled with
 * -Dmain=bankml_cl_main. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int bankml_cl_main(int argc, char **argv);

#define MAX_ARGS 24

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int started;
  if (!started++) {
    setenv("BANKML_THREADS", "stop-after-the-options", 1);
    fuzz_quiet();
  }
  char *fields[MAX_ARGS];
  size_t n = fuzz_fields(data, size, 0, fields, MAX_ARGS);
  char *argv[MAX_ARGS + 2] = {(char *)"bankml-cl"};
  for (size_t i = 0; i < n; i++) argv[i + 1] = fields[i];
  argv[n + 1] = NULL;
  optind = 0; /* glibc: a new scan, its option string read afresh */
  int status = bankml_cl_main((int)n + 1, argv);
  if (status < 0 || status > 3) __builtin_trap(); /* an exit status bankml-cl(1) does not document */
  fuzz_fields_free(fields, MAX_ARGS);
  return 0;
}
