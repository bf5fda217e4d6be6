/* args.c -- strict parsing of the command's numbers and one wording for option errors. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Backs o off to the start of the UTF-8 character that would end buf[0..o). */
static size_t utf8_cut(const char *buf, size_t o) {
  size_t c = o;
  while (c > 0 && ((unsigned char)buf[c - 1] & 0xc0) == 0x80) c--;
  /* a lead byte whose character is complete keeps it */
  if (c > 0 && (unsigned char)buf[c - 1] >= 0xc0) {
    unsigned char lead = (unsigned char)buf[c - 1];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    return o - (c - 1) >= need ? o : c - 1;
  }
  return o;
}

const char *cli_printable(const char *s, char *buf, size_t len) {
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  size_t o = 0;
  for (; *p && o + 1 < len; p++) {
    bool c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
    buf[o++] = p[0] < 0x20 || p[0] == 0x7f || c1 ? '?' : (char)p[0];
    if (c1) p++;
  }
  if (*p) { /* cut: room for "..." after a whole character */
    o = utf8_cut(buf, o < len - 4 ? o : len - 4);
    memcpy(buf + o, "...", 3);
    o += 3;
  }
  buf[o] = '\0';
  return buf;
}

/* optind before the last cli_getopt: the argument its option came from */
static int option_at;

int cli_getopt(int argc, char **argv, const char *opts, const struct option *longopts) {
  option_at = optind;
  return getopt_long(argc, argv, opts, longopts, NULL);
}

int cli_option_error(const char *cmd, int c, char **argv) {
  /* A long option is named by its argument (its optopt is the option's
   * val, which for --help is 'h'); a short one by optopt.  The argument is
   * where the scan stood before it: inside a cluster of short options
   * (-xh) optind has not moved yet, so argv[optind - 1] is the argument
   * before, maybe a long option.  Where the scan skipped non-options
   * first (a permuting scan), it is the one just consumed. */
  const char *arg = option_at > 0 && argv[option_at] && argv[option_at][0] == '-' ? argv[option_at]
                    : optind > 0                                                  ? argv[optind - 1]
                                                                                  : NULL;
  bool is_long = arg && arg[0] == '-' && arg[1] == '-';
  char shortopt[3] = {'-', (char)optopt, '\0'};
  const char *name = !is_long && optopt > 0 && optopt < 256 && isprint(optopt) ? shortopt : arg ? CLI_ARG(arg) : "?";
  const char *sp = cmd ? " " : "";
  if (c == ':')
    fprintf(stderr, "bankml-cl%s%s: option '%s' needs a value\n", sp, cmd ? cmd : "", name);
  else if (is_long && strchr(name, '='))
    fprintf(stderr, "bankml-cl%s%s: unknown option, or one that takes no value: '%s'\n", sp, cmd ? cmd : "", name);
  else if (is_long)
    fprintf(stderr, "bankml-cl%s%s: unknown or ambiguous option '%s'\n", sp, cmd ? cmd : "", name);
  else
    fprintf(stderr, "bankml-cl%s%s: unknown option '%s'\n", sp, cmd ? cmd : "", name);
  fprintf(stderr, "Try 'bankml-cl %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
  return CLI_EXIT_USAGE;
}

int cli_check_env(const char *cmd) {
  if (bml_env_check() == 0) return CLI_EXIT_OK;
  fprintf(stderr, "bankml-cl %s: %s (named above): nothing was run\n", cmd, bml_strerror(BML_EENV));
  return CLI_EXIT_USAGE;
}

void cli_getopt_reset(void) {
  /* The top-level scan stops cleanly at the subcommand's name (never inside
   * a cluster of short options), so restarting at argv[1] is enough; glibc
   * reads a command's option string afresh (its ordering, '+' or not) only
   * when optind is 0. */
#ifdef __GLIBC__
  optind = 0;
#else
  optind = 1;
#endif
}

bool cli_asks_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--") == 0) return false;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return true;
  }
  return false;
}
