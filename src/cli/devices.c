/* devices.c -- `bankml-cl devices`: every OpenCL device as JSON or one line each. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bankml-cl.h"
#include "cli.h"

struct devices_args {
  bool brief, compact, help;
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: bankml-cl devices [--brief | --compact]\n"
          "\n"
          "Lists every OpenCL device the ICD loader finds, cross-checked against what\n"
          "the kernel says (libpci, sysfs): its kind, whether bankml-cl may use it and\n"
          "why not, which devices are selected and which work goes where.  Prints one\n"
          "JSON object (schema in bankml-cl(1) and doc/DEVICES.md).\n"
          "\n"
          "Options:\n"
          "  --brief      one line per device instead of JSON\n"
          "  --compact    JSON on one line\n"
          "  -h, --help   show this help and exit\n"
          "\n"
          "Environment: BANKML_GPU=off|none|cpu, 0,2 (report indices) or\n"
          "pci:0000:03:00.0 chooses the devices; BANKML_GPU_SOFTWARE=1 lets software\n"
          "devices (PoCL, llvmpipe) be used, for tests and CI only.\n"
          "\n"
          "Exit status: 0 listed (also when there is no device), 2 bad usage or a bad\n"
          "BANKML_GPU, 3 could not run.  See bankml-cl(1).\n");
}

static int parse_args(int argc, char **argv, struct devices_args *a) {
  enum { OPT_BRIEF = 256, OPT_COMPACT };
  static const struct option longopts[] = {
      {"brief", no_argument, NULL, OPT_BRIEF},
      {"compact", no_argument, NULL, OPT_COMPACT},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
    case OPT_BRIEF: a->brief = true; break;
    case OPT_COMPACT: a->compact = true; break;
    case 'h': a->help = true; break;
    default: return cli_option_error("devices", c, argv);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "bankml-cl devices: unexpected argument '%s'\n", argv[optind]);
    return CLI_EXIT_USAGE;
  }
  if (a->brief && a->compact) {
    fprintf(stderr, "bankml-cl devices: --brief and --compact do not go together\n");
    return CLI_EXIT_USAGE;
  }
  return CLI_EXIT_OK;
}

/* "0 discrete  NVIDIA H200 (NVIDIA CUDA) pci 0000:00:06.0: usable, selected" */
static void print_brief(const bml_devices *list) {
  size_t n = bml_devices_count(list);
  if (n == 0) printf("no OpenCL device found; bankml-cl runs on the CPU (%s)\n", bml_cpu_path());
  for (size_t i = 0; i < n; i++) {
    const bml_device *d = bml_devices_get(list, i);
    printf("%zu %-10s %s (%s)", d->index, bml_device_kind_name(d->kind), d->name, d->platform);
    if (d->pci_address) printf(" pci %s", d->pci_address);
    if (d->usable)
      printf(": usable%s\n", d->selected ? ", selected" : ", not selected");
    else
      printf(": not usable: %s\n", d->why_not);
  }
  for (size_t i = 0; i < bml_devices_note_count(list); i++)
    printf("note: %s\n", bml_devices_note(list, i));
}

static int print_json(const bml_devices *list, bool compact) {
  char *json = NULL;
  int rc = bml_devices_report_json(list, !compact, &json);
  if (rc != 0) {
    fprintf(stderr, "bankml-cl devices: cannot write the report: %s\n", bml_strerror(rc));
    return CLI_EXIT_ERROR;
  }
  puts(json);
  free(json);
  return CLI_EXIT_OK;
}

int cmd_devices(int argc, char **argv) {
  struct devices_args a = {0};
  int status = parse_args(argc, argv, &a);
  if (status != CLI_EXIT_OK) return status;
  if (a.help) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  bml_devices *list = NULL;
  int rc = bml_devices_discover(NULL, &list);
  if (rc == BML_EENV) return CLI_EXIT_USAGE; /* the library has named the variable */
  if (rc != 0) {
    fprintf(stderr, "bankml-cl devices: %s\n", bml_strerror(rc));
    return CLI_EXIT_ERROR;
  }
  if (a.brief)
    print_brief(list);
  else
    status = print_json(list, a.compact);
  bml_devices_free(list);
  return status;
}
