/* bankml-cl.c -- the command's entry point: global options and the table of subcommands. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "bankml-cl.h"
#include "cli.h"

static int cmd_help(int argc, char **argv);

/* Every subcommand, in the order --help lists them.  A new one is a row
 * here and a cmd_<name>() in its own file. */
static const struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} commands[] = {
    {"devices", cmd_devices, "list every OpenCL device, what it is and whether bankml-cl uses it"},
    {"bench", cmd_bench, "time the Q1_0 matrix-vector product and check its bits"},
    {"help", cmd_help, "show this help, or a command's (bankml-cl help bench)"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const struct command *find_command(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

static void usage(FILE *f) {
  fprintf(f, "usage: bankml-cl COMMAND [OPTION...]\n"
             "       bankml-cl --help | --version\n"
             "\n"
             "bankml-cl computes 1-bit (Q1_0) matrix products bit for bit as ggml's CPU\n"
             "kernel.\n"
             "\n"
             "Commands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n"
             "Options:\n"
             "  -h, --help     show this help and exit\n"
             "  -V, --version  show the version and exit\n"
             "\n"
             CLI_EXIT_HELP "\n"
             "'bankml-cl COMMAND --help' shows a command's options; bankml-cl(1) has the rest.\n");
}

static int unknown_command(const char *name) {
  fprintf(stderr, "bankml-cl: unknown command '%s'\nTry 'bankml-cl --help'.\n", CLI_ARG(name));
  return CLI_EXIT_USAGE;
}

/* `bankml-cl help [COMMAND]`: this usage, or COMMAND's own --help. */
static int cmd_help(int argc, char **argv) {
  if (argc < 2) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (argc > 2) {
    fprintf(stderr, "bankml-cl help: unexpected argument '%s'\n", CLI_ARG(argv[2]));
    return CLI_EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return cmd_help(1, argv);
  const struct command *c = find_command(argv[1]);
  if (!c) return unknown_command(argv[1]);
  if (c->run == cmd_help) return cmd_help(1, argv);
  char help_opt[] = "--help";
  char *sub_argv[] = {argv[1], help_opt, NULL};
  cli_getopt_reset();
  return c->run(2, sub_argv);
}

/* Scans the options before the subcommand.  Returns -1 to go on to the
 * subcommand, else the exit status. */
static int global_options(int argc, char **argv) {
  static const struct option longopts[] = {
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0},
  };
  opterr = 0;
  int c;
  /* '+': stop at the subcommand's name; its options are its own. */
  while ((c = cli_getopt(argc, argv, "+:hV", longopts)) != -1) {
    switch (c) {
    case 'h': usage(stdout); return CLI_EXIT_OK;
    case 'V': printf("bankml-cl %s\n", bml_version_string()); return CLI_EXIT_OK;
    default: return cli_option_error(NULL, c, argv);
    }
  }
  return -1;
}

/* Output goes through stdio: a full disk or closed pipe shows only here.
 * Output that could not be written is status 3 whatever the command found
 * (a failed check's report, or a refused card's, is lost too; stdio may
 * have failed during the report or only at this flush, by its size).  A
 * usage error writes nothing there. */
static int finish_output(int status) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "bankml-cl: cannot write the output: %s\n", strerror(errno));
    return CLI_EXIT_ERROR;
  }
  return status;
}

int main(int argc, char **argv) {
  int status = global_options(argc, argv);
  if (status >= 0) return finish_output(status);
  if (optind >= argc) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const struct command *c = find_command(argv[optind]);
  if (!c) return unknown_command(argv[optind]);
  int sub_argc = argc - optind;
  char **sub_argv = argv + optind;
  cli_getopt_reset();
  return finish_output(c->run(sub_argc, sub_argv));
}
