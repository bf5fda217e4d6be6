/* test_cache.c -- what the worker's open remembers (verdicts, calibration, program binaries), and what it never trusts. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel_variants.h"
#include "base/hooks.h"
#include "card/cache.h"
#include "exact.h"
#include "golden.h"
#include "logbuf.h"
#include "card/oracle.h"
#include "card/tune.h"
#include "share/access.h"

static bml_pool *pool;
static char dir[64];

/* The quick oracle on its few small shapes (the cache is this suite's
 * subject; tests/test_oracle.c runs every shape), the default tunables and
 * a pool of two threads: each test's process, and each racer's (below).
 * 0, or the pool's error. */
static int quick_opens(void) {
  bml__oracle_hooks h = {.quick = true, .tiny = true};
  bml__oracle_set_hooks(&h);
  bml__tune_disable(true);
  return bml_pool_open(2, &pool);
}

/* Each test: its own cache directory, the quick oracle, the default
 * tunables (a tuning measured in each fresh directory would take long). */
static void setup(void) {
  unsetenv("OCL_ICD_VENDORS");
  unsetenv("BANKML_SYSFS_ROOT");
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_LIMIT");
  unsetenv("BANKML_VERIFY");
  setenv("BANKML_GPU_SHARE", "0.5", 1); /* a worker whatever PoCL's calibration says, unless a test calibrates */
  setenv("BANKML_GPU_SOFTWARE", "1", 1);
  setenv("BANKML_DEBUG", "build,oracle,worker", 1); /* read once, at the pool's open */
  snprintf(dir, sizeof dir, "/tmp/bankml-cl-cache-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  setenv("BANKML_CACHE_DIR", dir, 1);
  cr_assert_eq(quick_opens(), 0);
}

static void teardown(void) {
  bml_pool_close(pool);
  bml__oracle_set_hooks(NULL);
  char cmd[96];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(cache, .init = setup, .fini = teardown, .timeout = 120);

static char logged[65536];
static void capture(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logbuf_append(logged, sizeof logged, msg);
}

/* Opens a worker with what is logged in `logged`; skips where there is no
 * OpenCL device at all.  NULL: no card is used. */
static bml_worker *open_logged(const bml_worker_options *o) {
  bml_worker *w = NULL;
  logged[0] = '\0';
  bml_log_set_sink(capture, NULL);
  int rc = bml_worker_open_with(pool, o, &w);
  bml_log_set_sink(NULL, NULL);
  cr_assert_eq(rc, 0, "open: %s", bml_strerror(rc));
  if (!w && strstr(logged, "no usable GPU is selected"))
    cr_skip_test("no OpenCL device for a worker here (apt-get install pocl-opencl-icd): %s", logged);
  return w;
}

/* The status's "open" member `name`. */
static char *open_field(bml_worker *w, const char *name) {
  char *text = NULL;
  cr_assert_eq(bml_worker_status_json(w, &text), 0);
  json_t *j = json_loads(text, 0, NULL);
  const char *v = json_string_value(json_object_get(json_object_get(j, "open"), name));
  cr_assert_not_null(v, "status has no open.%s: %s", name, text);
  char *copy = strdup(v);
  json_decref(j);
  free(text);
  return copy;
}

static void expect_open(bml_worker *w, const char *name, const char *want) {
  char *got = open_field(w, name);
  cr_expect_str_eq(got, want, "open.%s: %s, not %s (%s)", name, got, want, logged);
  free(got);
}

/* A product on the worker, every row compared with the CPU's. */
static void expect_exact(bml_worker *w) {
  int rc;
  const long bad = exact_worker_product(w, 300, 1024, 77, false, &rc);
  cr_assert_eq(rc, 0, "%s", bml_strerror(rc));
  cr_expect_lt(bad, 0, "row %ld differs", bad);
}

static char *path_of(const char *name) {
  static char path[160];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return path;
}

/* The cache file's verdict entry (a new reference; NULL: none) and, in
 * *root, the whole file. */
static json_t *verdict_entry(json_t **root) {
  json_error_t e;
  *root = json_load_file(path_of("cards.json"), 0, &e);
  cr_assert_not_null(*root, "cards.json: %s", e.text);
  json_t *entries = json_object_get(*root, "entries");
  for (size_t i = 0; i < json_array_size(entries); i++) {
    json_t *x = json_array_get(entries, i);
    if (strcmp(json_string_value(json_object_get(x, "kind")), "verdict") == 0) return json_incref(x);
  }
  return NULL;
}

static void save_root(json_t *root) { cr_assert_eq(json_dump_file(root, path_of("cards.json"), 0), 0); }

static void write_file(const char *name, const void *data, size_t len) {
  FILE *f = fopen(path_of(name), "w");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(data, 1, len, f), len);
  fclose(f);
}

/* ---- a second open ------------------------------------------------------------------ */

Test(cache, a_second_open_takes_the_remembered_verdict_batch_check_and_calibration) {
  unsetenv("BANKML_GPU_SHARE"); /* calibrated: it is remembered too */
  bml_worker *w = open_logged(NULL);
  cr_expect(strstr(logged, "calibration: card ") != NULL, "no calibration measured: %s", logged);
  if (w) {
    expect_open(w, "verdict", "verified");
    expect_open(w, "batch_check", "checked");
    expect_open(w, "calibration", "measured");
  }
  bml_worker_close(w);
  json_t *root, *e = verdict_entry(&root);
  cr_assert_not_null(e, "no verdict remembered");
  cr_expect_str_eq(json_string_value(json_object_get(e, "verdict")), "verified");
  json_t *cal = json_object_get(e, "calibration");
  cr_expect_eq(json_integer_value(json_object_get(cal, "threads")), 2);
  cr_expect_gt(json_real_value(json_object_get(cal, "card_seconds")), 0);
  /* the key names the checks that ran: this suite's tiny ones (a full verdict is never taken for them) */
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(e, "key"), "checks")), "tiny");
  json_decref(e), json_decref(root);
  w = open_logged(NULL);
  /* the spot check ran: the oracle did not */
  cr_expect(strstr(logged, "confirmed by the spot check") != NULL, "%s", logged);
  cr_expect(strstr(logged, "calibration (remembered)") != NULL, "%s", logged);
  /* what it remembered of the batch check (zero-copy transfers, resident
   * tokens) is confirmed on the card, not checked again in full */
  cr_expect(strstr(logged, "the remembered check of its batches (") != NULL && strstr(logged, ") confirmed on the card"),
            "%s", logged);
  cr_expect(strstr(logged, "checking again") == NULL && strstr(logged, "it runs on one queue") == NULL,
            "the batch check ran again: %s", logged);
  if (w) {
    expect_open(w, "verdict", "remembered");
    expect_open(w, "batch_check", "remembered");
    expect_open(w, "calibration", "remembered");
    expect_exact(w);
  }
  bml_worker_close(w);
}

/* Another pool (its threads) is another calibration; the verdict stands. */
Test(cache, a_pool_of_other_threads_calibrates_again) {
  unsetenv("BANKML_GPU_SHARE");
  bml_worker_close(open_logged(NULL));
  bml_pool *other = NULL;
  cr_assert_eq(bml_pool_open(1, &other), 0);
  bml_pool *was = pool;
  pool = other;
  bml_worker *w = open_logged(NULL);
  pool = was;
  cr_expect(strstr(logged, "confirmed by the spot check") != NULL, "%s", logged);
  cr_expect(strstr(logged, "calibration: card ") != NULL, "not calibrated for one thread: %s", logged);
  bml_worker_close(w);
  bml_pool_close(other);
}

/* ---- program binaries --------------------------------------------------------------- */

/* The keys of the program binaries in the cache (their names say them):
 * how many. */
static size_t binaries(unsigned long long *keys, size_t cap) {
  size_t n = 0;
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strncmp(e->d_name, "program-", 8) == 0 && n < cap) keys[n++] = strtoull(e->d_name + 8, NULL, 16);
  closedir(d);
  return n;
}

/* How many of the binaries are whole, of more than `more` bytes. */
static size_t binaries_read(const unsigned long long *keys, size_t n, size_t more) {
  size_t whole = 0;
  for (size_t i = 0; i < n; i++) {
    void *data;
    size_t len;
    if (bml__cache_binary_read(keys[i], &data, &len) == 0) whole += len > more, free(data);
  }
  return whole;
}

static void binary_file(unsigned long long key, char *name, size_t len) {
  snprintf(name, len, "program-%016llx.bin", key);
}

Test(cache, program_binaries_are_remembered_and_a_bad_one_is_rebuilt) {
  unsigned long long keys[8];
  /* the worker's program is remembered at its close, once its kernels
   * have run (what PoCL compiled for them is in the binary) */
  bml_worker *first = open_logged(NULL);
  const size_t open_n = binaries(keys, 8);
  bml_worker_close(first);
  const size_t n = binaries(keys, 8);
  cr_expect_lt(open_n, n, "the worker's binary was remembered before its close (%zu binaries, %zu after)", open_n, n);
  cr_assert_gt(n, 0, "no program binary remembered in %s", dir);
  bml_worker *w = open_logged(NULL);
  cr_expect(strstr(logged, "from its remembered binary") != NULL, "%s", logged);
  bml_worker_close(w);
  /* binaries the driver refuses (valid files of ours, the bytes garbage):
   * built from source, the verdict still confirmed, the binary replaced */
  for (size_t i = 0; i < n; i++) bml__cache_binary_write(keys[i], "not a program", 13);
  cr_expect_eq(binaries_read(keys, n, 13), 0);
  w = open_logged(NULL);
  cr_expect(strstr(logged, "the remembered program binary was refused") != NULL, "%s", logged);
  cr_expect(strstr(logged, "confirmed by the spot check") != NULL, "%s", logged);
  cr_assert_not_null(w, "%s", logged);
  expect_exact(w);
  bml_worker_close(w);
  cr_expect_gt(binaries_read(keys, n, 13), 0, "the refused binary was not replaced");
  /* truncated files: not read at all */
  for (size_t i = 0; i < n; i++) {
    char name[64];
    binary_file(keys[i], name, sizeof name);
    FILE *f = fopen(path_of(name), "r+");
    cr_assert_not_null(f);
    cr_assert_eq(ftruncate(fileno(f), 40), 0);
    fclose(f);
  }
  cr_expect_eq(binaries_read(keys, n, 0), 0, "a truncated binary reads");
  w = open_logged(NULL);
  cr_expect(strstr(logged, "from its remembered binary") == NULL, "a truncated binary was used: %s", logged);
  cr_expect(strstr(logged, "confirmed by the spot check") != NULL, "%s", logged);
  bml_worker_close(w);
  /* another key's file under this name is not this key's */
  char name[64], other[64];
  bml__cache_binary_write(keys[0] ^ 1, "another key's", 13);
  binary_file(keys[0], name, sizeof name);
  binary_file(keys[0] ^ 1, other, sizeof other);
  char from[160];
  snprintf(from, sizeof from, "%s", path_of(other));
  cr_assert_eq(rename(from, path_of(name)), 0);
  void *data;
  size_t len;
  cr_expect_eq(bml__cache_binary_read(keys[0], &data, &len), BML_EIO);
}

/* ---- what is never trusted ------------------------------------------------------------ */

/* A card built to give other bits (the outer fma as a multiply and an
 * add): refused, and the refusal remembered; its cache entry doctored to
 * "verified" is caught by the spot check, and the card verified again and
 * refused. */
Test(cache, a_doctored_verdict_for_a_card_that_gives_other_bits_is_caught) {
  const bml__oracle_hooks h = {.quick = true, .device_source = bml_test_unfused_outer};
  bml__oracle_set_hooks(&h);
  cr_expect_null(open_logged(NULL));
  cr_expect(strstr(logged, "NOT VERIFIED") && strstr(logged, "differs"), "%s", logged);
  json_t *root, *e = verdict_entry(&root);
  cr_assert_not_null(e, "the refusal was not remembered");
  cr_expect_str_eq(json_string_value(json_object_get(e, "verdict")), "refused");
  /* remembered: refused without the oracle */
  cr_expect_null(open_logged(NULL));
  cr_expect(strstr(logged, "remembered refusal") != NULL, "%s", logged);
  cr_expect(strstr(logged, "q1_0_mat_vec native") == NULL, "the oracle ran again: %s", logged);
  /* doctored: verified with the native fma, the build's options those asked for */
  const char *options = json_string_value(json_object_get(json_object_get(e, "key"), "options"));
  json_object_set_new(e, "verdict", json_string("verified"));
  json_object_set_new(e, "fma", json_string("native"));
  json_object_set_new(e, "build_options", json_string(options));
  json_object_set_new(e, "nvidia_build", json_false());
  json_object_set_new(e, "nvidia_tma", json_false());
  json_object_set_new(e, "batches", json_pack("{s:i, s:i}", "queues", 1, "kept", 1));
  save_root(root);
  json_decref(e), json_decref(root);
  cr_expect_null(open_logged(NULL), "a doctored cache made a card that gives other bits usable");
  cr_expect(strstr(logged, "is not confirmed on the card") && strstr(logged, "differs"), "%s", logged);
  cr_expect(strstr(logged, "q1_0_mat_vec native") != NULL, "not verified again: %s", logged);
  e = verdict_entry(&root);
  cr_expect_str_eq(json_string_value(json_object_get(e, "verdict")), "refused", "the doctored verdict stayed");
  json_decref(e), json_decref(root);
}

/* The cache file as it was after a first open, changed by edit: the next
 * open verifies in full, and the file is replaced by a good one (an open
 * after that takes its verdict). */
static void expect_verified_again(void (*edit)(void)) {
  bml_worker_close(open_logged(NULL));
  edit();
  bml_worker *w = open_logged(NULL);
  cr_assert_not_null(w, "%s", logged);
  expect_open(w, "verdict", "verified");
  cr_expect(strstr(logged, "q1_0_mat_vec native") != NULL || strstr(logged, "q1_0_mat_vec emulated") != NULL,
            "the oracle did not run: %s", logged);
  expect_exact(w);
  bml_worker_close(w);
  w = open_logged(NULL);
  cr_assert_not_null(w, "%s", logged);
  expect_open(w, "verdict", "remembered");
  bml_worker_close(w);
}

static void edit_key(const char *member, const char *value) {
  json_t *root, *e = verdict_entry(&root);
  cr_assert_not_null(e);
  json_object_set_new(json_object_get(e, "key"), member, json_string(value));
  save_root(root);
  json_decref(e), json_decref(root);
}
static void another_driver(void) { edit_key("driver", "0.0 another driver"); }
static void another_version(void) { edit_key("bankml_cl_version", "0.0.1"); }
static void another_source(void) { edit_key("source", "0123456789abcdef"); }
static void other_options(void) { edit_key("options", "-DBML_WG=64"); }
static void garbage(void) {
  static const char bytes[] = "\x7f" "ELF\x02\x01\x01 not JSON at all";
  write_file("cards.json", bytes, sizeof bytes - 1);
}
static void truncated(void) {
  FILE *f = fopen(path_of("cards.json"), "r+");
  cr_assert_not_null(f);
  fseek(f, 0, SEEK_END);
  const long size = ftell(f);
  cr_assert_eq(ftruncate(fileno(f), size / 2), 0);
  fclose(f);
}
static void another_layout(void) {
  json_t *root, *e = verdict_entry(&root);
  json_object_set_new(root, "schema", json_integer(BML_CACHE_SCHEMA + 1));
  save_root(root);
  json_decref(e), json_decref(root);
}
static void not_a_verdict(void) {
  json_t *root, *e = verdict_entry(&root);
  json_object_set_new(e, "verdict", json_string("probably"));
  save_root(root);
  json_decref(e), json_decref(root);
}

Test(cache, another_driver_verifies_again) { expect_verified_again(another_driver); }
Test(cache, another_version_of_bankml_cl_verifies_again) { expect_verified_again(another_version); }
Test(cache, another_kernel_source_verifies_again) { expect_verified_again(another_source); }
Test(cache, other_build_options_verify_again) { expect_verified_again(other_options); }
Test(cache, a_garbage_file_verifies_again) { expect_verified_again(garbage); }
Test(cache, a_truncated_file_verifies_again) { expect_verified_again(truncated); }
Test(cache, a_file_of_another_layout_verifies_again) { expect_verified_again(another_layout); }
Test(cache, a_verdict_this_version_does_not_write_verifies_again) { expect_verified_again(not_a_verdict); }

/* BANKML_VERIFY=always verifies at every open; an explicit option wins
 * over the variable either way. */
Test(cache, verify_always_from_the_variable_or_the_options) {
  bml_worker_close(open_logged(NULL));
  setenv("BANKML_VERIFY", "always", 1);
  bml_worker *w = open_logged(NULL);
  cr_assert_not_null(w, "%s", logged);
  expect_open(w, "verdict", "verified");
  expect_open(w, "batch_check", "checked");
  bml_worker_close(w);
  bml_worker_options o;
  bml_worker_options_init(&o);
  o.verify = BML_VERIFY_CACHED; /* the caller's choice: the variable does not override it */
  w = open_logged(&o);
  cr_assert_not_null(w, "%s", logged);
  expect_open(w, "verdict", "remembered");
  bml_worker_close(w);
  setenv("BANKML_VERIFY", "cached", 1);
  o.verify = BML_VERIFY_ALWAYS;
  w = open_logged(&o);
  cr_assert_not_null(w, "%s", logged);
  expect_open(w, "verdict", "verified");
  bml_worker_close(w);
  setenv("BANKML_VERIFY", "sometimes", 1);
  cr_expect_eq(bml_worker_open(pool, &w), BML_EENV);
  cr_expect_eq(bml_worker_check_env(), BML_EENV);
}

/* Test hooks other than the build's options and the checks' extent keep
 * the open away from the cache: nothing is read or written. */
Test(cache, hooks_that_change_the_open_bypass_the_cache) {
  const bml__oracle_hooks h = {.quick = true, .max_chunk_rows = 100};
  bml__oracle_set_hooks(&h);
  bml_worker *w = open_logged(NULL);
  cr_assert_not_null(w, "%s", logged);
  bml_worker_close(w);
  cr_expect_neq(access(path_of("cards.json"), F_OK), 0, "the cache was written under a hook");
}

/* ---- two processes ------------------------------------------------------------------- */

#define RACERS 2
#define STORES 30 /* each: RACERS * STORES stays within BML_CACHE_MAX_ENTRIES */

static json_t *racer_key(int racer, int k) { return json_pack("{s:i, s:i}", "racer", racer, "k", k); }

/* The racers' work, by name: each returns the racer's exit status. */
static int store_entries(int racer);
static int open_worker(int racer);
static const struct {
  const char *name;
  int (*run)(int racer);
} racer_jobs[] = {{"store", store_entries}, {"open", open_worker}};

/* Starts RACERS processes, each exiting with job(its number).  Each is this
 * program run afresh (racer_main, below, takes it before Criterion's main):
 * a child that went on from fork() in this process, which has threads (the
 * pool's, Criterion's), could inherit a lock that another thread held at the
 * fork, as AddressSanitizer's allocator lock is, and wait for it forever. */
static void race(pid_t *pid, const char *job) {
  for (int r = 0; r < RACERS; r++) {
    char spec[32];
    snprintf(spec, sizeof spec, "%s:%d", job, r);
    cr_assert_eq(setenv("BML_TEST_CACHE_RACER", spec, 1), 0);
    pid[r] = fork();
    cr_assert_geq(pid[r], 0);
    if (pid[r] == 0) {
      execl("/proc/self/exe", "test_cache", (char *)NULL);
      _exit(126);
    }
  }
  unsetenv("BML_TEST_CACHE_RACER");
}

/* A racer's process: BML_TEST_CACHE_RACER names its job and number; the
 * test that started it set the cache directory and the variables. */
__attribute__((constructor)) static void racer_main(void) {
  const char *spec = getenv("BML_TEST_CACHE_RACER");
  if (!spec) return;
  const char *colon = strchr(spec, ':');
  if (!colon || quick_opens() != 0) _exit(125);
  for (size_t i = 0; i < sizeof racer_jobs / sizeof racer_jobs[0]; i++)
    if (strncmp(spec, racer_jobs[i].name, (size_t)(colon - spec)) == 0 &&
        racer_jobs[i].name[colon - spec] == '\0') {
      const int rc = racer_jobs[i].run(atoi(colon + 1));
      bml_pool_close(pool);
      _exit(rc);
    }
  _exit(125);
}

/* STORES entries of its own: 0, or 1 when a store failed. */
static int store_entries(int racer) {
  for (int k = 0; k < STORES; k++) {
    json_t *key = racer_key(racer, k);
    int rc = bml__cache_store("test", key, json_pack("{s:i}", "value", racer * 1000 + k));
    json_decref(key);
    if (rc != 0) return 1;
  }
  return 0;
}

/* Two processes store entries at once while this one reads: every read
 * finds a whole file, and every entry stays. */
Test(cache, two_processes_storing_at_once_keep_each_others_entries) {
  pid_t pid[RACERS];
  race(pid, "store");
  int reads = 0, torn = 0;
  for (bool done = false; !done; reads++) {
    int status;
    done = true;
    for (int r = 0; r < RACERS; r++)
      if (pid[r] > 0 && waitpid(pid[r], &status, WNOHANG) == pid[r]) {
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "racer %d failed", r);
        pid[r] = 0;
      }
    for (int r = 0; r < RACERS; r++) done &= pid[r] == 0;
    if (access(path_of("cards.json"), F_OK) == 0) {
      json_error_t e;
      json_t *root = json_load_file(path_of("cards.json"), 0, &e);
      torn += root == NULL;
      json_decref(root);
    }
  }
  cr_expect_eq(torn, 0, "%d of %d reads found a torn file", torn, reads);
  for (int r = 0; r < RACERS; r++)
    for (int k = 0; k < STORES; k++) {
      json_t *key = racer_key(r, k), *e = bml__cache_find("test", key);
      cr_expect(e && json_integer_value(json_object_get(e, "value")) == r * 1000 + k, "racer %d's entry %d is lost", r, k);
      json_decref(e), json_decref(key);
    }
}

/* A worker opened: 0, 1 (none), 3 (no device to open here). */
static int open_worker(int racer) {
  (void)racer;
  bml_devices *l = NULL;
  bool any = false;
  if (bml_devices_discover(NULL, &l) == 0)
    for (size_t i = 0; i < bml_devices_count(l); i++) any |= bml_devices_get(l, i)->selected != 0;
  bml_devices_free(l);
  if (!any) return 3;
  bml_worker *w = NULL;
  int rc = bml_worker_open(pool, &w);
  bml_worker_close(w);
  return rc == 0 && w ? 0 : 1;
}

/* Two processes open workers on one fresh cache at once: both verify,
 * both store, and the file holds one good verdict that a third open takes.
 * (Each is a process of its own: race.) */
Test(cache, two_processes_opening_at_once_leave_one_good_verdict) {
  pid_t pid[RACERS];
  race(pid, "open");
  int status[RACERS];
  for (int r = 0; r < RACERS; r++) cr_assert_eq(waitpid(pid[r], &status[r], 0), pid[r]);
  if (WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 3)
    cr_skip_test("no OpenCL device for a worker here (apt-get install pocl-opencl-icd)");
  for (int r = 0; r < RACERS; r++)
    cr_expect(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0, "process %d opened no worker", r);
  json_t *root, *e = verdict_entry(&root);
  cr_expect(e && strcmp(json_string_value(json_object_get(e, "verdict")), "verified") == 0, "no verdict remembered");
  json_decref(e), json_decref(root);
  bml_worker *w = open_logged(NULL);
  cr_assert_not_null(w, "%s", logged);
  expect_open(w, "verdict", "remembered");
  bml_worker_close(w);
}
