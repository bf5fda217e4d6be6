/* bench.c -- `bankml-cl bench`: options, defaults and the table of modes (which do the timing). */
#define _POSIX_C_SOURCE 200809L

#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bankml-cl.h"
#include "bench.h"
#include "cli.h"
#include "progress.h"

/* Each mode is an option of its name (--cpu) and a row here; the report
 * and the table are shared.  --clblast is a baseline, not bankml-cl: its
 * rows are checked within a bound. */
static const struct bench_mode modes[] = {
    {"cpu", "the CPU thread pool (bml_pool_q1_0_mat_vec)", bench_cpu_run},
    {"card", "the verified card alone (the worker with share 1 and\n"
             "                   limit 1): one product and its wait (card), and 32 as\n"
             "                   one batch (card-pipelined, per product), each reading\n"
             "                   a matrix of its own (fewer distinct matrices where 32\n"
             "                   would take more than a quarter of the card's memory)",
     bench_card_run},
    {"split", "the worker as an engine gets it: the learnt share on\n"
              "                   the card, the rest on the pool, the limiter on (split,\n"
              "                   split-pipelined: --card's products)", bench_split_run},
    {"clblast", bench_clblast_help, bench_clblast_run},
};
#define NMODES (sizeof modes / sizeof modes[0])

/* The shapes of the reference figures (doc/PERFORMANCE.md): bonsai-8b's
 * attention (4096x4096), gate/up (12288x4096) and down (4096x12288)
 * products, bonsai-1.7b's, and the 151936-row output head. */
static const struct bench_shape default_shapes[] = {
    {4096, 4096}, {12288, 4096}, {4096, 12288},  {2048, 2048},
    {6144, 2048}, {2048, 6144},  {151936, 2048},
};
static const struct bench_shape quick_shapes[] = {{2048, 2048}, {4096, 4096}};

enum { DEFAULT_RUNS = 21, DEFAULT_WARMUP = 3, QUICK_RUNS = 5, QUICK_WARMUP = 1 };
#define MAX_RUNS 1000000L
#define MAX_GAP_MS 60000L /* a minute between two products */

/* Values above 255: these long options have no short form (see args.c). */
enum {
  OPT_SHAPE = 256,
  OPT_THREADS,
  OPT_RUNS,
  OPT_WARMUP,
  OPT_QUICK,
  OPT_JSON,
  OPT_VERBOSE,
  OPT_MODEL,
  OPT_GAP,
  OPT_MODE
};

static const struct option fixed_options[] = {
    {"shape", required_argument, NULL, OPT_SHAPE},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"runs", required_argument, NULL, OPT_RUNS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"quick", no_argument, NULL, OPT_QUICK},
    {"json", no_argument, NULL, OPT_JSON},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"model", required_argument, NULL, OPT_MODEL},
    {"gap", required_argument, NULL, OPT_GAP},
    {"help", no_argument, NULL, 'h'},
};
#define NFIXED (sizeof fixed_options / sizeof fixed_options[0])

/* The command line as given; -1 (runs, warmup) and empty lists mean "default". */
struct bench_args {
  struct bench_config cfg;
  bool mode[NMODES];
  bool quick, help;
  size_t shapes_cap, threads_cap, gaps_cap;
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: bankml-cl bench [MODE] [OPTION...]\n"
          "\n"
          "Times the Q1_0 x Q8_0 matrix-vector product on random matrices, warm and\n"
          "with the weights flushed from the caches before each run, and checks that\n"
          "every result equals the single-thread kernel's, bit for bit.\n"
          "\n"
          "Modes (default --%s):\n",
          modes[0].name);
  for (size_t i = 0; i < NMODES; i++) fprintf(f, "  --%-15s%s\n", modes[i].name, modes[i].help);
  fprintf(f, "\n"
             "--clblast is the baseline a user would pick instead: the same matrices\n"
             "dequantized to F32 (and F16 where the device has cl_khr_fp16) through\n"
             "CLBlast's GEMV on the first selected device (BANKML_GPU; PoCL and other\n"
             "software devices need BANKML_GPU_SOFTWARE=1), timed warm, each run an\n"
             "enqueue and a clFinish, after at least one untimed run (CLBlast builds its\n"
             "kernels in the first).  A shape the device cannot hold is skipped with a\n"
             "note.  Its rows are not bit-exact (exact is false): each result is checked\n"
             "against a CPU reference in double within a bound (F32: the worst case of\n"
             "float summation in any order; F16: a statistical bound), shown as\n"
             "\"agrees\".  Their GB/s counts the F32 or F16 matrix CLBlast reads\n"
             "(bytes_read); weight_bytes stays the Q1_0 size; threads is 0 (\"-\").\n");
  fprintf(f, "\nOptions:\n"
             "  --shape RxN      a matrix of R rows and N columns, N a multiple of 128;\n"
             "                   repeatable.  Default:");
  for (size_t i = 0; i < sizeof default_shapes / sizeof default_shapes[0]; i++)
    fprintf(f, "%s%zux%zu", i == 3 ? "\n                   " : " ", default_shapes[i].rows,
            default_shapes[i].n);
  fprintf(f,
          "\n"
          "  --threads LIST   pool sizes, e.g. 1,2,4 or 1-8.  Default: every count from 1\n"
          "                   to BANKML_THREADS, else to the number of CPUs bankml-cl may\n"
          "                   run on.  The card's modes and --model take the largest only\n"
          "  --runs N         timed runs per measurement (default %d)\n"
          "  --warmup N       untimed runs before the warm measurement (default %d); a\n"
          "                   split model's round trips also until its token has learnt\n"
          "  --quick          a smoke test of a few seconds: 2048x2048 and 4096x4096, 1 and\n"
          "                   all threads, %d runs after %d warm-up (explicit options win)\n"
          "  --model NAME     instead of the shapes, a model's token of products in decode\n"
          "                   order (per layer Q, K, V, O, gate, up, down, then the head):\n"
          "                   bonsai-8b (253 products) or bonsai-1.7b (197); with --card\n"
          "                   and --split, pipelined (the token as one batch) and with\n"
          "                   round trips (each group run when the one before returned,\n"
          "                   through a token that keeps its results: Q/K/V, O,\n"
          "                   gate/up, down)\n"
          "  --gap LIST       idle gaps in milliseconds, e.g. 0,10,40,200 (0 to %ld;\n"
          "                   repeatable): --cpu then times, for each gap and thread\n"
          "                   count, products each after a sleep of that long (no cache\n"
          "                   flush), and reports the median, the 90th percentile and\n"
          "                   the slowest product instead of warm and flushed; --card\n"
          "                   and --split, for each gap, single products each after\n"
          "                   such a sleep instead of single and pipelined (not with\n"
          "                   --model or --clblast); the warm-up runs after gaps too.\n"
          "                   The pool's helpers stay awake through gaps of up to\n"
          "                   250 ms once two have passed (its cadence), unless\n"
          "                   BANKML_POOL_WAIT_MS sets their wait\n"
          "  --json           one JSON object on stdout instead of the table\n"
          "  --verbose        progress on stderr (with --model: the worker's time per\n"
          "                   token by phase, and its status)\n"
          "  -h, --help       show this help and exit\n"
          "\n"
          "On a terminal, one line on stderr says what is measured and how far along\n"
          "(nothing is added where stderr is a file or a pipe).\n"
          "\n"
          "Exit status: 0 every check passed, 1 a result not bit-exact (or a baseline's\n"
          "outside its bound), 2 bad usage, 3 could not run (also: --clblast with no\n"
          "usable device, or without CLBlast: not built in, or not installed).  See\n"
          "bankml-cl(1).\n",
          DEFAULT_RUNS, DEFAULT_WARMUP, QUICK_RUNS, QUICK_WARMUP, MAX_GAP_MS);
}

static int bad_value(const char *option, const char *value, const char *why) {
  fprintf(stderr, "bankml-cl bench: bad %s \"%s\": %s\n", option, CLI_ARG(value), why);
  return CLI_EXIT_USAGE;
}

/* Grows *list (of *cap elements of size) to hold need; 0 or BML_ENOMEM. */
static int reserve(void **list, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t cap2 = *cap ? *cap * 2 : 8;
  while (cap2 < need) cap2 *= 2;
  void *p = realloc(*list, cap2 * size);
  if (!p) return BML_ENOMEM;
  *list = p;
  *cap = cap2;
  return 0;
}

/* --shape RxN: R >= 1 rows, N a positive multiple of 128. */
static int add_shape(struct bench_args *args, const char *s) {
  long rows = 0, n = 0;
  const char *end = NULL;
  int rc = cli_parse_long_prefix(s, 0, LONG_MAX, &rows, &end);
  if (rc == 0 && *end != 'x') rc = BML_EINVAL;
  if (rc == 0) rc = cli_parse_long(end + 1, 0, LONG_MAX, &n);
  if (rc == BML_ERANGE) return bad_value("--shape", s, "too large");
  if (rc != 0) return bad_value("--shape", s, "expected ROWSxN in whole numbers, e.g. 4096x4096");
  if (rows < 1) return bad_value("--shape", s, "ROWS must be at least 1");
  if (n < BML_Q1_0_BLOCK || n % BML_Q1_0_BLOCK != 0)
    return bad_value("--shape", s, "N must be a positive multiple of 128");
  /* the one check of a shape's size, for every mode: its weights and results fit the address space */
  if ((size_t)rows > SIZE_MAX / ((size_t)n / BML_Q1_0_BLOCK * sizeof(bml_block_q1_0)) ||
      (size_t)rows > SIZE_MAX / sizeof(float))
    return bad_value("--shape", s, "too large for this machine's address space");
  struct bench_config *cfg = &args->cfg;
  if (reserve((void **)&cfg->shapes, &args->shapes_cap, cfg->nshapes + 1, sizeof *cfg->shapes))
    return CLI_EXIT_ERROR;
  cfg->shapes[cfg->nshapes++] = (struct bench_shape){(size_t)rows, (size_t)n};
  return 0;
}

/* A count given twice (--threads 1,1 or 1-4,2) is timed once, where it
 * first came: two rows of one measurement would only say it twice. */
static int push_thread_count(struct bench_args *args, long t) {
  struct bench_config *cfg = &args->cfg;
  for (size_t i = 0; i < cfg->nthreads; i++)
    if (cfg->threads[i] == (int)t) return 0;
  if (reserve((void **)&cfg->threads, &args->threads_cap, cfg->nthreads + 1, sizeof *cfg->threads))
    return BML_ENOMEM;
  cfg->threads[cfg->nthreads++] = (int)t;
  return 0;
}

/* One item of a --threads list, "T" or "A-B"; *end is left after it. */
static int add_thread_item(struct bench_args *args, const char *s, const char **end) {
  long lo, hi;
  int rc = cli_parse_long_prefix(s, 1, BENCH_MAX_THREADS, &lo, end);
  hi = lo;
  if (rc == 0 && **end == '-')
    rc = cli_parse_long_prefix(*end + 1, lo, BENCH_MAX_THREADS, &hi, end);
  for (long t = lo; rc == 0 && t <= hi; t++) rc = push_thread_count(args, t);
  return rc;
}

/* --threads LIST: comma-separated counts and ranges, each 1..BENCH_MAX_THREADS. */
static int add_threads(struct bench_args *args, const char *s) {
  const char *p = s, *end = NULL;
  for (;;) {
    int rc = add_thread_item(args, p, &end);
    if (rc == BML_ENOMEM) return CLI_EXIT_ERROR;
    if (rc != 0 || (*end != ',' && *end != '\0'))
      return bad_value("--threads", s, "expected thread counts from 1 to 1024, e.g. 1,2,4 or 1-8");
    if (*end == '\0') return 0;
    p = end + 1;
  }
}

/* --gap LIST: comma-separated milliseconds, each 0..MAX_GAP_MS; a gap
 * given twice is timed once. */
static int add_gaps(struct bench_args *args, const char *s) {
  struct bench_config *cfg = &args->cfg;
  char why[80];
  snprintf(why, sizeof why, "expected idle gaps in milliseconds from 0 to %ld, e.g. 0,10,40,200", MAX_GAP_MS);
  for (const char *p = s, *end = NULL;; p = end + 1) {
    long ms;
    if (cli_parse_long_prefix(p, 0, MAX_GAP_MS, &ms, &end) != 0 || (*end != ',' && *end != '\0'))
      return bad_value("--gap", s, why);
    bool seen = false;
    for (size_t i = 0; i < cfg->ngaps; i++) seen |= cfg->gaps[i] == ms;
    if (!seen && reserve((void **)&cfg->gaps, &args->gaps_cap, cfg->ngaps + 1, sizeof *cfg->gaps) != 0)
      return CLI_EXIT_ERROR;
    if (!seen) cfg->gaps[cfg->ngaps++] = ms;
    if (*end == '\0') return 0;
  }
}

static int set_count(long *out, const char *option, const char *s, long lo) {
  if (cli_parse_long(s, lo, MAX_RUNS, out) != 0) {
    char why[64];
    snprintf(why, sizeof why, "expected a whole number from %ld to %ld", lo, MAX_RUNS);
    return bad_value(option, s, why);
  }
  return 0;
}

/* Applies one option; 0 or an exit status. */
static int apply_option(struct bench_args *args, int c, char **argv) {
  switch (c) {
  case OPT_SHAPE: return add_shape(args, optarg);
  case OPT_THREADS: return add_threads(args, optarg);
  case OPT_RUNS: return set_count(&args->cfg.runs, "--runs", optarg, 1);
  case OPT_WARMUP: return set_count(&args->cfg.warmup, "--warmup", optarg, 0);
  case OPT_GAP: return add_gaps(args, optarg);
  case OPT_QUICK: args->quick = true; return 0;
  case OPT_JSON: args->cfg.json = true; return 0;
  case OPT_VERBOSE: args->cfg.verbose = true; return 0;
  case OPT_MODEL:
    if (!(args->cfg.model = bench_model_find(optarg))) {
      char why[96];
      snprintf(why, sizeof why, "no such model (known: %s)", bench_model_names());
      return bad_value("--model", optarg, why);
    }
    return 0;
  case 'h': args->help = true; return 0;
  default:
    if (c >= OPT_MODE && c < OPT_MODE + (int)NMODES) {
      args->mode[c - OPT_MODE] = true;
      return 0;
    }
    return cli_option_error("bench", c, argv);
  }
}

/* --gap times the shapes of the CPU, card and split modes: not a model's
 * token, nor CLBlast's.  0 or CLI_EXIT_USAGE. */
static int check_gap_use(const struct bench_args *args) {
  if (args->cfg.ngaps == 0) return 0;
  const char *why = args->cfg.model ? "--model's token" : NULL;
  for (size_t i = 0; !why && i < NMODES; i++)
    if (args->mode[i] && strcmp(modes[i].name, "clblast") == 0) why = "--clblast";
  if (!why) return 0;
  fprintf(stderr, "bankml-cl bench: --gap times the products of each --shape on the pool, the card or both, not %s\n"
                  "Try 'bankml-cl bench --help'.\n", why);
  return CLI_EXIT_USAGE;
}

/* Fills args from argv; 0 or an exit status (a message is printed). */
static int parse_args(int argc, char **argv, struct bench_args *args) {
  struct option longopts[NFIXED + NMODES + 1];
  memcpy(longopts, fixed_options, sizeof fixed_options);
  for (size_t i = 0; i < NMODES; i++)
    longopts[NFIXED + i] = (struct option){modes[i].name, no_argument, NULL, OPT_MODE + (int)i};
  longopts[NFIXED + NMODES] = (struct option){NULL, 0, NULL, 0};
  opterr = 0;
  int c, rc = 0;
  while (rc == 0 && (c = cli_getopt(argc, argv, "+:h", longopts)) != -1)
    rc = apply_option(args, c, argv);
  if (rc == 0 && optind < argc) {
    fprintf(stderr, "bankml-cl bench: unexpected argument '%s'\nTry 'bankml-cl bench --help'.\n",
            CLI_ARG(argv[optind]));
    rc = CLI_EXIT_USAGE;
  }
  if (rc == 0 && args->cfg.model && args->cfg.nshapes > 0) {
    fprintf(stderr, "bankml-cl bench: --model and --shape: a model's token has its own shapes; give one or "
                    "the other\nTry 'bankml-cl bench --help'.\n");
    rc = CLI_EXIT_USAGE;
  }
  for (size_t i = 0; rc == 0 && args->cfg.model && i < NMODES; i++)
    if (args->mode[i] && modes[i].run == bench_clblast_run) {
      fprintf(stderr, "bankml-cl bench: --clblast measures shapes, not --model's token\n"
                      "Try 'bankml-cl bench --help'.\n");
      rc = CLI_EXIT_USAGE;
    }
  if (rc == 0) rc = check_gap_use(args);
  if (rc == CLI_EXIT_ERROR) fprintf(stderr, "bankml-cl bench: %s\n", bml_strerror(BML_ENOMEM));
  return rc;
}

/* The pool size bml_pool_open(0) picks (BANKML_THREADS, else the CPUs of
 * the process's affinity); opening it is also how a bad BANKML_THREADS is
 * caught up front. */
static int default_pool_threads(int *out) {
  bml_pool *p = NULL;
  int rc = bml_pool_open(0, &p);
  if (rc != 0) {
    fprintf(stderr, "bankml-cl bench: cannot open a thread pool: %s%s\n", bml_strerror(rc),
            rc == BML_EENV ? " (BANKML_THREADS)" : "");
    return rc == BML_EENV ? CLI_EXIT_USAGE : CLI_EXIT_ERROR;
  }
  *out = bml_pool_threads(p);
  bml_pool_close(p);
  return 0;
}

/* A device mode's choice of card (BANKML_GPU) and the worker's variables
 * are checked before anything is measured: an error after the CPU's rows
 * were printed would say "nothing was measured" (exit 2) with a table
 * above it. */
static int check_gpu_choice(const struct bench_args *args) {
  bool devices = false;
  for (size_t i = 1; i < NMODES; i++) devices |= args->mode[i]; /* modes[0] is the CPU's */
  if (!devices) return 0;
  if (bml_worker_check_env() == BML_EENV) return CLI_EXIT_USAGE; /* named by the library */
  bml_devices *list = NULL;
  int rc = bml_devices_discover(NULL, &list);
  bml_devices_free(list);
  if (rc == BML_EENV) return CLI_EXIT_USAGE; /* the library has named the variable */
  return 0; /* other failures: the modes say so in their turn */
}

/* Everything not given on the command line; 0 or an exit status. */
static int fill_defaults(struct bench_args *args, int max_threads) {
  struct bench_config *cfg = &args->cfg;
  if (cfg->nshapes == 0) {
    const struct bench_shape *shapes = args->quick ? quick_shapes : default_shapes;
    size_t n = args->quick ? sizeof quick_shapes / sizeof quick_shapes[0]
                           : sizeof default_shapes / sizeof default_shapes[0];
    if (reserve((void **)&cfg->shapes, &args->shapes_cap, n, sizeof *shapes) != 0) goto nomem;
    memcpy(cfg->shapes, shapes, n * sizeof *shapes);
    cfg->nshapes = n;
  }
  /* Every count from 1 to the maximum; --quick takes just the two ends. */
  bool given = cfg->nthreads > 0;
  for (int t = 1; !given && t <= max_threads; t++)
    if (!args->quick || t == 1 || t == max_threads)
      if (push_thread_count(args, t) != 0) goto nomem;
  if (cfg->runs < 0) cfg->runs = args->quick ? QUICK_RUNS : DEFAULT_RUNS;
  if (cfg->warmup < 0) cfg->warmup = args->quick ? QUICK_WARMUP : DEFAULT_WARMUP;
  bool any = false;
  for (size_t i = 0; i < NMODES; i++) any |= args->mode[i];
  if (!any) args->mode[0] = true;
  return 0;
nomem:
  fprintf(stderr, "bankml-cl bench: %s\n", bml_strerror(BML_ENOMEM));
  return CLI_EXIT_ERROR;
}

static void start_report(const struct bench_args *args, struct bench_report *rep) {
  memset(rep, 0, sizeof *rep);
  for (size_t i = 0; i < NMODES; i++) {
    if (!args->mode[i]) continue;
    if (rep->modes[0]) strncat(rep->modes, ",", sizeof rep->modes - strlen(rep->modes) - 1);
    strncat(rep->modes, modes[i].name, sizeof rep->modes - strlen(rep->modes) - 1);
  }
  rep->cpu_path = bml_cpu_path();
  rep->flush = cache_flusher_method();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  rep->threads_available = cpus > 0 && cpus < INT_MAX ? (int)cpus : 1;
  rep->runs = args->cfg.runs;
  rep->warmup = args->cfg.warmup;
  /* the library refuses a bad value when a pool opens, and the bench with it */
  const char *wait = getenv("BANKML_POOL_WAIT_MS");
  char *end = NULL;
  rep->pool_wait_ms = wait && *wait ? strtol(wait, &end, 10) : -1;
  if (end && *end) rep->pool_wait_ms = -1;
  rep->started = time(NULL);
}

/* The rows a mode adds (at most: --clblast skips F16 on a card without it,
 * and shapes the card cannot hold), for the progress display. */
static size_t planned_rows(const struct bench_mode *m, const struct bench_config *cfg) {
  if (m->run == bench_cpu_run) return cfg->model ? 1 : cfg->nshapes * cfg->nthreads * 2; /* warm, flushed */
  return cfg->model ? 2 : cfg->nshapes * 2; /* single and pipelined (a token: and round trips); F32, F16 */
}

/* Runs the chosen modes and renders the report; an exit status. */
static int run_modes(const struct bench_args *args) {
  struct bench_report rep;
  start_report(args, &rep);
  int rc = 0;
  size_t planned = 0;
  for (size_t i = 0; i < NMODES; i++) planned += args->mode[i] ? planned_rows(&modes[i], &args->cfg) : 0;
  progress_start("bankml-cl bench", planned, "measurements"); /* on a terminal only */
  for (size_t i = 0; rc == 0 && i < NMODES; i++)
    if (args->mode[i]) rc = modes[i].run(&args->cfg, &rep);
  progress_stop();
  /* what was measured before a mode failed is reported all the same */
  if (rc == 0 || rep.nrows > 0) {
    int rrc = args->cfg.json ? bench_render_json(&rep, stdout) : bench_render_text(&rep, stdout);
    if (rrc != 0) rc = rrc; /* an unwritten report (BML_EIO) is 3, as finish_output has it */
  }
  int status = rc == 0 ? CLI_EXIT_OK : rc == BML_EENV ? CLI_EXIT_USAGE : CLI_EXIT_ERROR;
  for (size_t i = 0; status == CLI_EXIT_OK && i < rep.nrows; i++)
    if (!bench_row_ok(&rep.rows[i])) status = CLI_EXIT_CHECK;
  bench_report_free(&rep);
  return status;
}

int cmd_bench(int argc, char **argv) {
  struct bench_args args = {.cfg = {.runs = -1, .warmup = -1}};
  int max_threads = 0;
  progress_init(); /* before the library and its drivers start threads */
  const bool help = cli_asks_help(argc, argv); /* before the other options' errors */
  int status = help ? 0 : parse_args(argc, argv, &args);
  if (status == 0 && (help || args.help)) {
    usage(stdout);
    goto done;
  }
  if (status == 0) status = cli_check_env("bench");
  if (status == 0) status = default_pool_threads(&max_threads);
  if (status == 0) status = check_gpu_choice(&args);
  if (status == 0) status = fill_defaults(&args, max_threads);
  if (status == 0) status = run_modes(&args);
done:
  free(args.cfg.shapes);
  free(args.cfg.threads);
  free(args.cfg.gaps);
  return status;
}
