/* args.c -- strict parsing of the command's numbers and one wording for option errors. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "bankml-cl.h"
#include "cli.h"

int cli_parse_long_prefix(const char *s, long lo, long hi, long *out, const char **end) {
  /* strtol alone would take leading space, a sign and "0x"-less junk
   * after the digits; a count given to the command is digits only. */
  if (!s || !isdigit((unsigned char)s[0])) return BML_EINVAL;
  char *stop = NULL;
  errno = 0;
  long v = strtol(s, &stop, 10);
  if (errno == ERANGE || v < lo || v > hi) return BML_ERANGE;
  if (errno != 0 || stop == s) return BML_EINVAL;
  *out = v;
  *end = stop;
  return 0;
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
  const char *end = NULL;
  long v;
  int rc = cli_parse_long_prefix(s, lo, hi, &v, &end);
  if (rc != 0) return rc;
  if (*end != '\0') return BML_EINVAL;
  *out = v;
  return 0;
}

int cli_option_error(const char *cmd, int c, char **argv) {
  /* Options that take a value have no short form and a val above 255, so
   * a printable optopt always means a short option typed as such; anything
   * else is named by the argument getopt_long just consumed. */
  char shortopt[3] = {'-', (char)optopt, '\0'};
  const char *name = optopt > 0 && optopt < 256 && isprint(optopt) ? shortopt : argv[optind - 1];
  const char *sp = cmd ? " " : "";
  if (c == ':')
    fprintf(stderr, "bankml-cl%s%s: option '%s' needs a value\n", sp, cmd ? cmd : "", name);
  else
    fprintf(stderr, "bankml-cl%s%s: unknown option '%s'\n", sp, cmd ? cmd : "", name);
  fprintf(stderr, "Try 'bankml-cl %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
  return CLI_EXIT_USAGE;
}

void cli_getopt_reset(void) {
  /* The top-level scan stops cleanly at the subcommand's name (never inside
   * a cluster of short options), so restarting at argv[1] is enough. */
  optind = 1;
}
