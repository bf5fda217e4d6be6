/* cli.h -- what the bankml-cl command's files share: exit codes, subcommands, argument parsing. */
#ifndef BML_CLI_H
#define BML_CLI_H

#include <stdbool.h>
#include <stddef.h>

/* Exit status of the command; bankml-cl(1) documents each value under EXIT STATUS. */
enum cli_exit {
  CLI_EXIT_OK = 0,         /* done, every check passed */
  CLI_EXIT_CHECK = 1,      /* ran, but a check failed (bench: a result was not bit-exact) */
  CLI_EXIT_USAGE = 2,      /* bad option, argument or environment variable; nothing ran */
  CLI_EXIT_ERROR = 3,      /* could not run: out of memory, no threads, a failed write */
  CLI_EXIT_UNVERIFIED = 4, /* devices --verify: a selected card failed verification, and is not used */
};

/* The statuses in words, one line each, for --help. */
#define CLI_EXIT_HELP                                                                   \
  "Exit status: 0 done, every check passed; 1 a check failed (bench: a result not\n"  \
  "bit-exact); 2 bad usage or environment variable, nothing ran; 3 could not run;\n"  \
  "4 devices --verify: a selected card failed verification.  See bankml-cl(1).\n"

/* Subcommands: argv[0] is the subcommand's name; the return value is an enum cli_exit. */
int cmd_bench(int argc, char **argv);
int cmd_devices(int argc, char **argv);

/* Parses all of s as a decimal whole number in lo..hi: digits only, no sign,
 * no space.  Returns 0 and *out, BML_EINVAL (not a number) or BML_ERANGE. */
int cli_parse_long(const char *s, long lo, long hi, long *out);

/* As cli_parse_long, but for the digits at the start of s; *end is set just
 * past them (the caller checks what follows). */
int cli_parse_long_prefix(const char *s, long lo, long hi, long *out, const char **end);

/* getopt_long (no index), remembering where the option began for
 * cli_option_error: every option loop of the command calls this. */
struct option;
int cli_getopt(int argc, char **argv, const char *opts, const struct option *longopts);

/* Reports a cli_getopt failure (c is '?' or ':') on stderr, naming the
 * option, as "bankml-cl CMD: ...".  Returns CLI_EXIT_USAGE. */
int cli_option_error(const char *cmd, int c, char **argv);

/* Copies s (NULL: "") into buf for a terminal: each control character (C0,
 * DEL and, in UTF-8, C1) becomes '?', so that a driver's string (a device or
 * platform name, a note) cannot move the cursor, clear the screen or retitle
 * the window.  Longer text is cut at a whole UTF-8 character and ends in
 * "...".  len >= 4.  Returns buf.  JSON output needs none of this: jansson
 * escapes control characters. */
#define CLI_PRINTABLE_LEN 1024
const char *cli_printable(const char *s, char *buf, size_t len);
/* cli_printable into a buffer that lives to the end of the enclosing block:
 * printf("%s", CLI_PRINTABLE(d->name)). */
#define CLI_PRINTABLE(s) cli_printable((s), (char[CLI_PRINTABLE_LEN]){0}, CLI_PRINTABLE_LEN)
/* A command-line argument echoed in a misuse message, as CLI_PRINTABLE but
 * cut past 64 bytes: a 100 KB argument was a 100 KB line, and its escape
 * bytes reached the terminal. */
#define CLI_ARG_LEN 68
#define CLI_ARG(s) cli_printable((s), (char[CLI_ARG_LEN]){0}, CLI_ARG_LEN)

/* Checks every variable of the library (bml_env_check) before a command
 * runs anything: a bad one is misuse whatever the command, since the engine
 * that links the library reads the same environment (bankml-cl(1),
 * ENVIRONMENT).  Returns 0, or CLI_EXIT_USAGE after the library has named
 * each bad variable and a line says nothing was run. */
int cli_check_env(const char *cmd);

/* Resets getopt_long so a subcommand can scan its own argv. */
void cli_getopt_reset(void);

/* Whether argv (a subcommand's, argv[0] its name) holds -h or --help
 * before any "--": help then wins over every other option and its errors
 * (bankml-cl(1): --help prints the usage and exits 0). */
bool cli_asks_help(int argc, char **argv);

#endif /* BML_CLI_H */
