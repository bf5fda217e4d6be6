/* devices.c -- `bankml-cl devices`: every OpenCL device as JSON or one line each. */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bankml-cl.h"
#include "cli.h"
#include "progress.h"

struct devices_args {
  bool brief, compact, help, json, verify;
  const char *golden;
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: bankml-cl devices [--brief | --compact]\n"
          "       bankml-cl devices --verify [--golden DIR] [--json [--compact]]\n"
          "\n"
          "Lists every OpenCL device the ICD loader finds, cross-checked against what\n"
          "the kernel says (libpci, sysfs): its kind, whether bankml-cl may use it and\n"
          "why not, which devices are selected and which work goes where.  Prints one\n"
          "JSON object (schema in bankml-cl(1) and doc/DEVICES.md).\n"
          "\n"
          "With --verify, each selected card must prove on the card that it gives the\n"
          "CPU kernel's bits: the fma probe, then every kernel (six, each with the\n"
          "native and the emulated fma) on random data with -128 quants and special\n"
          "scales, on layer-shaped data, on shapes from 64x128 to 12288x4096 and on\n"
          "ggml's golden cases; one line per check, every row compared bit for bit.\n"
          "On a terminal, a line on stderr says which check runs and how many passed.\n"
          "\n"
          "Options:\n"
          "  --brief      one line per device instead of JSON\n"
          "  --compact    JSON on one line\n"
          "  --json       the listing as JSON (the default); with --verify, the checks\n"
          "               and verdicts as one JSON object instead of lines\n"
          "  --verify     verify every selected card on the card\n"
          "  --golden DIR where ggml's golden vectors are (default: $BANKML_GOLDEN_DIR,\n"
          "               else the installed copy); a named directory without them\n"
          "               fails the verification\n"
          "  -h, --help   show this help and exit\n"
          "\n"
          "Environment: BANKML_GPU=off|none|cpu, 0,2 (report indices) or\n"
          "pci:0000:03:00.0 chooses the devices; BANKML_GPU_SOFTWARE=1 lets software\n"
          "devices (PoCL, llvmpipe) be used, for tests and CI only.\n"
          "\n"
          "Exit status: 0 listed, or every selected card verified (also when there is\n"
          "no usable card); 2 bad usage, a bad value in a BANKML_ variable (any of\n"
          "them: bankml-cl(1), ENVIRONMENT); 3 could not run; 4 a selected card\n"
          "failed verification (it is not used).  See bankml-cl(1).\n");
}

static int parse_args(int argc, char **argv, struct devices_args *a) {
  enum { OPT_BRIEF = 256, OPT_COMPACT, OPT_JSON, OPT_VERIFY, OPT_GOLDEN };
  static const struct option longopts[] = {
      {"brief", no_argument, NULL, OPT_BRIEF},
      {"compact", no_argument, NULL, OPT_COMPACT},
      {"json", no_argument, NULL, OPT_JSON},
      {"verify", no_argument, NULL, OPT_VERIFY},
      {"golden", required_argument, NULL, OPT_GOLDEN},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  opterr = 0;
  int c;
  while ((c = cli_getopt(argc, argv, ":h", longopts)) != -1) {
    switch (c) {
    case OPT_BRIEF: a->brief = true; break;
    case OPT_COMPACT: a->compact = true; break;
    case OPT_JSON: a->json = true; break;
    case OPT_VERIFY: a->verify = true; break;
    case OPT_GOLDEN: a->golden = optarg; break;
    case 'h': a->help = true; break;
    default: return cli_option_error("devices", c, argv);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "bankml-cl devices: unexpected argument '%s'\nTry 'bankml-cl devices --help'.\n",
            CLI_ARG(argv[optind]));
    return CLI_EXIT_USAGE;
  }
  if (a->brief && (a->compact || a->json)) {
    fprintf(stderr, "bankml-cl devices: --brief and --%s do not go together\n", a->json ? "json" : "compact");
    return CLI_EXIT_USAGE;
  }
  if (a->verify && (a->brief || (a->compact && !a->json))) {
    fprintf(stderr, "bankml-cl devices: --verify prints its own lines: drop --%s%s\n", a->brief ? "brief" : "compact",
            a->brief ? "" : " (with --json, the JSON is on one line)");
    return CLI_EXIT_USAGE;
  }
  if (a->golden && !a->verify) {
    fprintf(stderr, "bankml-cl devices: --golden goes with --verify\n");
    return CLI_EXIT_USAGE;
  }
  struct stat st;
  const bool exists = a->golden && *a->golden && stat(a->golden, &st) == 0;
  if (a->golden && (!exists || !S_ISDIR(st.st_mode))) {
    fprintf(stderr, "bankml-cl devices: --golden \"%s\": %s\n", CLI_ARG(a->golden),
            !*a->golden ? "expected a directory" : !exists ? "no such directory" : "not a directory");
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
    printf("%zu %-10s %s (%s)", d->index, bml_device_kind_name(d->kind), CLI_PRINTABLE(d->name),
           CLI_PRINTABLE(d->platform));
    if (d->pci_address) printf(" pci %s", d->pci_address);
    if (d->usable)
      printf(": usable%s\n", d->selected ? ", selected" : ", not selected");
    else
      printf(": not usable: %s\n", CLI_PRINTABLE(d->why_not));
  }
  for (size_t i = 0; i < bml_devices_note_count(list); i++)
    printf("note: %s\n", CLI_PRINTABLE(bml_devices_note(list, i)));
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

/* ---- --verify ----------------------------------------------------------- */

/* "q1_0_mat_vec (fma: native) 4096x4096 layer", leaving out what a check
 * does not have. */
static const char *what_of(const bml_verify_line *l, char *buf, size_t len) {
  int w = snprintf(buf, len, "%s", l->check);
  if (*l->fma && w >= 0 && (size_t)w < len) w += snprintf(buf + w, len - (size_t)w, " (fma: %s)", l->fma);
  if (l->rows && l->n && w >= 0 && (size_t)w < len) w += snprintf(buf + w, len - (size_t)w, " %zux%zu", l->rows, l->n);
  if (*l->regime && w >= 0 && (size_t)w < len) snprintf(buf + w, len - (size_t)w, " %s", l->regime);
  return buf;
}

/* "4096x4096 " or "" for checks without a shape. */
static const char *shape_of(const bml_verify_line *l, char *buf, size_t len) {
  if (l->rows && l->n)
    snprintf(buf, len, "%zux%zu ", l->rows, l->n);
  else
    buf[0] = '\0';
  return buf;
}

static void print_probe(const bml_verify_line *l) {
  printf("%zu %s: fma probe (%s): %zu/%zu cases correctly rounded", l->device, CLI_PRINTABLE(l->device_name), l->fma,
         l->exact, l->total);
  if (!l->ok)
    printf(" (case %ld: exact 0x%08x, card 0x%08x)%s%s", l->first_bad, l->cpu_bits, l->card_bits,
           l->detail ? "; " : "", CLI_PRINTABLE(l->detail));
  printf(" (%.1f ms)\n", l->ms);
}

/* What a device's lines said, for its verdict: bits that differed are the
 * card's fault; a check that could not run (a build, an OpenCL error, ggml's
 * golden cases unreadable) is named instead.  With --json, its checks. */
struct verdict {
  bool golden_skipped; /* the oracle's note: no golden copy installed */
  bool golden_ran;     /* a kernel ran ggml's golden cases */
  bool bits_differ;
  char first_failed[64]; /* the first refusing check that found no differing bits */
  json_t *checks;        /* --json: the device's checks; NULL: lines on stdout */
};

static void print_line(const bml_verify_line *l) {
  char shape[48];
  bool native_probe = strcmp(l->check, "fma probe") == 0 && strcmp(l->fma, "native") == 0;
  if (strcmp(l->check, "fma probe") == 0 && (l->ok || native_probe)) {
    print_probe(l);
  } else if (strcmp(l->check, "golden") == 0 && l->ok) {
    printf("%zu %s: %s\n", l->device, CLI_PRINTABLE(l->device_name), l->detail ? CLI_PRINTABLE(l->detail) : "golden cases");
  } else if (strcmp(l->check, "golden") == 0) {
    printf("%zu %s: NOT VERIFIED \u2014 %s; bankml-cl will not use this card\n", l->device, CLI_PRINTABLE(l->device_name),
           l->detail ? CLI_PRINTABLE(l->detail) : "ggml's golden cases cannot be read");
  } else if (strcmp(l->check, "build") == 0 && l->ok) { /* a variant the compiler refused, left out */
    printf("%zu %s: build (fma: %s) %s\n", l->device, CLI_PRINTABLE(l->device_name), l->fma,
           l->detail ? CLI_PRINTABLE(l->detail) : "left out");
  } else if (l->ok) {
    printf("%zu %s: %s %s%s: %zu/%zu rows bit-exact (fma: %s, %.1f ms%s)\n", l->device, CLI_PRINTABLE(l->device_name),
           l->check, shape_of(l, shape, sizeof shape), l->regime, l->exact, l->total, l->fma, l->ms,
           l->batched ? " for the batch" : "");
  } else if (l->first_bad >= 0) {
    char what[160];
    printf("%zu %s: NOT VERIFIED \u2014 %s: %s %ld differs (cpu 0x%08x, card 0x%08x), %zu/%zu bit-exact; "
           "bankml-cl will not use this card\n",
           l->device, CLI_PRINTABLE(l->device_name), what_of(l, what, sizeof what),
           strcmp(l->check, "fma probe") == 0 ? "case" : "row", l->first_bad, l->cpu_bits, l->card_bits,
           l->exact, l->total);
  } else {
    char what[160];
    printf("%zu %s: NOT VERIFIED \u2014 %s: %s; bankml-cl will not use this card\n", l->device,
           CLI_PRINTABLE(l->device_name), what_of(l, what, sizeof what), l->detail ? CLI_PRINTABLE(l->detail) : "failed");
  }
  fflush(stdout);
}

static json_t *bits_json(long first_bad, uint32_t bits) {
  char hex[16];
  snprintf(hex, sizeof hex, "0x%08x", bits);
  return first_bad >= 0 ? json_string(hex) : json_null();
}

/* One check as JSON (doc/ORACLE.md gives the fields). */
static json_t *line_json(const bml_verify_line *l) {
  return json_pack("{s:s, s:s, s:I, s:I, s:s, s:I, s:I, s:b, s:o, s:o, s:o, s:f, s:b, s:o}", "check", l->check, "fma",
                   l->fma, "rows", (json_int_t)l->rows, "n", (json_int_t)l->n, "regime", l->regime, "exact",
                   (json_int_t)l->exact, "total", (json_int_t)l->total, "ok", l->ok != 0, "first_bad",
                   l->first_bad >= 0 ? json_integer(l->first_bad) : json_null(), "cpu_bits",
                   bits_json(l->first_bad, l->cpu_bits), "card_bits", bits_json(l->first_bad, l->card_bits), "ms",
                   l->ms, "batched", l->batched != 0, "detail", l->detail ? json_string(l->detail) : json_null());
}

static void on_line(void *ctx, const bml_verify_line *l) {
  struct verdict *v = ctx;
  bool native_probe = strcmp(l->check, "fma probe") == 0 && strcmp(l->fma, "native") == 0;
  /* the native fma probe's cases that differ only choose the emulated fma:
   * they refuse nothing */
  if (!l->ok && l->first_bad >= 0 && !native_probe)
    v->bits_differ = true;
  else if (!l->ok && !native_probe && !v->first_failed[0])
    snprintf(v->first_failed, sizeof v->first_failed, "%s", l->check);
  if (strcmp(l->check, "golden") == 0 && l->ok) v->golden_skipped = true; /* the note the oracle writes when no copy is installed */
  if (strcmp(l->check, "golden") != 0 && strcmp(l->regime, "golden") == 0) v->golden_ran = true;
  if (v->checks) {
    json_t *j = line_json(l);
    if (!j || json_array_append_new(v->checks, j) != 0) v->checks = NULL; /* out of memory: said at the end */
  } else {
    progress_hold(); /* stdout may be the same terminal */
    print_line(l);
  }
  char what[160];
  progress_advance();
  progress_step("%zu %s: %s", l->device, CLI_PRINTABLE(l->device_name), what_of(l, what, sizeof what));
}

/* Verifies one selected device; prints its verdict (text), or fills its
 * JSON object.  Returns the exit status it calls for. */
static int verify_one(bml_devices *list, size_t i, bml_verify_options *o, json_t *dj) {
  struct verdict *v = o->ctx;
  const bml_device *d = bml_devices_get(list, i);
  memset(v, 0, sizeof *v);
  v->checks = dj ? json_array() : NULL;
  progress_step("%zu %s: opening it and building the kernels", i, CLI_PRINTABLE(d->name));
  int rc = bml_devices_verify(list, i, o);
  /* no row differed: a check could not run, which refuses the card too */
  char why[128] = "";
  if (rc == BML_EVERIFY && !v->bits_differ && v->first_failed[0])
    snprintf(why, sizeof why, "the %s check could not run", v->first_failed);
  else if (rc != 0)
    snprintf(why, sizeof why, "%s", bml_strerror(rc));
  if (dj) {
    json_object_set_new(dj, "index", json_integer((json_int_t)i));
    json_object_set_new(dj, "name", json_string(d->name));
    json_object_set_new(dj, "verified", json_boolean(rc == 0));
    json_object_set_new(dj, "why_not", rc == 0 ? json_null() : json_string(why));
    json_object_set_new(dj, "golden_checked", json_boolean(v->golden_ran));
    json_object_set_new(dj, "checks", v->checks ? v->checks : json_null());
  } else {
    progress_hold();
    if (rc == 0)
      printf("%zu %s: verified: every check bit-exact%s; bankml-cl may use this card\n", i, CLI_PRINTABLE(d->name),
             v->golden_skipped ? " (ggml's golden cases not checked)" : "");
    else
      printf("%zu %s: NOT VERIFIED (%s); bankml-cl will not use this card\n", i, CLI_PRINTABLE(d->name), why);
    fflush(stdout);
  }
  /* bankml-cl(1), EXIT STATUS: 4 when a selected card fails; out of memory
   * (of the checks' JSON too) is the command's own failure (3) */
  if (rc == BML_ENOMEM || (dj && !v->checks)) return CLI_EXIT_ERROR;
  return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_UNVERIFIED;
}

/* The verdict of the whole run, in words; NULL when a card was checked. */
static const char *without_card(const bml_devices *list, size_t checked, size_t *usable) {
  *usable = 0;
  for (size_t i = 0; i < bml_devices_count(list); i++) *usable += bml_devices_get(list, i)->usable ? 1 : 0;
  if (checked > 0) return NULL;
  return *usable > 0 ? "no usable GPU selected" /* BANKML_GPU chose none of them */ : "no usable GPU found";
}

/* --verify --json: one object, the devices checked and their checks. */
static int print_verify_json(json_t *root, bool compact) {
  char *text = root ? json_dumps(root, (compact ? JSON_COMPACT : JSON_INDENT(2)) | JSON_PRESERVE_ORDER) : NULL;
  if (!text) {
    fprintf(stderr, "bankml-cl devices --verify: cannot write the report: %s\n", bml_strerror(BML_ENOMEM));
    return CLI_EXIT_ERROR;
  }
  puts(text);
  free(text);
  return CLI_EXIT_OK;
}

static int verify_selected(bml_devices *list, const struct devices_args *a) {
  bml_verify_options o;
  bml_verify_options_init(&o);
  o.on_line = on_line;
  o.golden_dir = a->golden;
  struct verdict v;
  o.ctx = &v;
  json_t *devices = a->json ? json_array() : NULL, *selected = a->json ? json_array() : NULL;
  int status = CLI_EXIT_OK;
  size_t checked = 0, usable = 0;
  progress_start("bankml-cl devices --verify", 0, "checks"); /* on a terminal only */
  for (size_t i = 0; i < bml_devices_count(list); i++) {
    if (!bml_devices_get(list, i)->selected) continue;
    checked++;
    json_t *dj = a->json ? json_object() : NULL;
    int s = verify_one(list, i, &o, dj);
    if (dj) json_array_append_new(devices, dj);
    if (selected) json_array_append_new(selected, json_integer((json_int_t)i));
    if (status != CLI_EXIT_ERROR && s != CLI_EXIT_OK) status = s; /* 3 wins over 4 */
  }
  progress_stop();
  const char *none = without_card(list, checked, &usable);
  if (a->json) {
    json_t *root = json_pack("{s:i, s:s, s:o, s:o, s:I, s:s}", "schema", 1, "bankml_cl_version", bml_version_string(),
                             "devices", devices, "selected", selected, "usable", (json_int_t)usable, "result",
                             none ? none : status == CLI_EXIT_OK ? "verified" : "not verified");
    int s = print_verify_json(root, a->compact);
    json_decref(root);
    return s != CLI_EXIT_OK ? s : status;
  }
  if (none && usable > 0)
    printf("bankml-cl devices --verify: no usable GPU selected (%zu usable, none chosen by BANKML_GPU); "
           "bankml-cl runs on the CPU\n", usable);
  else if (none)
    printf("bankml-cl devices --verify: no usable GPU found; bankml-cl runs on the CPU\n");
  return status;
}

int cmd_devices(int argc, char **argv) {
  struct devices_args a = {0};
  if (cli_asks_help(argc, argv)) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  int status = parse_args(argc, argv, &a);
  if (status != CLI_EXIT_OK) return status;
  if (a.help) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if ((status = cli_check_env("devices")) != CLI_EXIT_OK) return status;
  bml_devices *list = NULL;
  if (a.verify) progress_init(); /* before the library and its drivers start threads */
  int rc = bml_devices_discover(NULL, &list);
  if (rc == BML_EENV) return CLI_EXIT_USAGE; /* the library has named the variable */
  if (rc != 0) {
    fprintf(stderr, "bankml-cl devices: %s\n", bml_strerror(rc));
    return CLI_EXIT_ERROR;
  }
  if (a.verify)
    status = verify_selected(list, &a);
  else if (a.brief)
    print_brief(list);
  else
    status = print_json(list, a.compact);
  bml_devices_free(list);
  return status;
}
