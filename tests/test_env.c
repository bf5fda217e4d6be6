/* test_env.c -- strict parsing of numbers from the environment and the command line. */
#include <criterion/criterion.h>

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/bml.h"
#include "base/log.h"
#include "base/env.h"

Test(env, whole_numbers_parse_strictly) {
  long v = -1;
  cr_expect_eq(bml__parse_long("42", 1, 100, &v), 0);
  cr_expect_eq(v, 42);
  cr_expect_eq(bml__parse_long("", 1, 100, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_long(NULL, 1, 100, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_long("4x", 1, 100, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_long(" 4", 1, 100, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_long("4 ", 1, 100, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_long("101", 1, 100, &v), BML_ERANGE);
  cr_expect_eq(bml__parse_long("0", 1, 100, &v), BML_ERANGE);
  cr_expect_eq(bml__parse_long("\n4", 1, 100, &v), BML_EINVAL, "strtol skips a newline: the parser must not");
  cr_expect_eq(bml__parse_long("+4", 1, 100, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_long("99999999999999999999999", 1, 100, &v), BML_ERANGE, "a number, out of range");
  cr_expect_eq(v, 42, "a refused value must not be stored");
}

Test(env, decimals_parse_strictly) {
  double v = -1;
  cr_expect_eq(bml__parse_double("0.25", 0, 1, &v), 0);
  cr_expect_eq(v, 0.25);
  cr_expect_eq(bml__parse_double("nan", 0, 1, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_double("inf", 0, 1, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_double("0.5.", 0, 1, &v), BML_EINVAL);
  cr_expect_eq(bml__parse_double("2", 0, 1, &v), BML_ERANGE);
  cr_expect_eq(v, 0.25);
}

Test(env, thread_count_unset_empty_good_junk_out_of_range) {
  int n = -7;
  unsetenv("BANKML_THREADS");
  cr_expect_eq(bml__env_threads(&n), 0);
  cr_expect_eq(n, -7, "unset leaves the default");
  setenv("BANKML_THREADS", "", 1);
  cr_expect_eq(bml__env_threads(&n), 0);
  cr_expect_eq(n, -7, "empty leaves the default");
  setenv("BANKML_THREADS", "5", 1);
  cr_expect_eq(bml__env_threads(&n), 0);
  cr_expect_eq(n, 5);
  setenv("BANKML_THREADS", "five", 1);
  cr_expect_eq(bml__env_threads(&n), BML_EENV);
  setenv("BANKML_THREADS", "5000", 1);
  cr_expect_eq(bml__env_threads(&n), BML_EENV);
  cr_expect_eq(n, 5);
  unsetenv("BANKML_THREADS");
}

Test(env, pool_wait_unset_empty_good_junk_out_of_range) {
  unsigned ms = 7;
  unsetenv("BANKML_POOL_WAIT_MS");
  cr_expect_eq(bml__env_pool_wait_ms(&ms), 0);
  cr_expect_eq(ms, 7u, "unset leaves the default");
  setenv("BANKML_POOL_WAIT_MS", "", 1);
  cr_expect_eq(bml__env_pool_wait_ms(&ms), 0);
  cr_expect_eq(ms, 7u, "empty leaves the default");
  setenv("BANKML_POOL_WAIT_MS", "0", 1);
  cr_expect_eq(bml__env_pool_wait_ms(&ms), 0);
  cr_expect_eq(ms, 0u);
  setenv("BANKML_POOL_WAIT_MS", "10000", 1);
  cr_expect_eq(bml__env_pool_wait_ms(&ms), 0);
  cr_expect_eq(ms, 10000u);
  static const char *const bad[] = {"10001", "-1", "1.5", "one", " 5"};
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++) {
    setenv("BANKML_POOL_WAIT_MS", bad[i], 1);
    cr_expect_eq(bml__env_pool_wait_ms(&ms), BML_EENV, "\"%s\" taken", bad[i]);
    cr_expect_eq(ms, 10000u, "\"%s\" changed the value", bad[i]);
  }
  /* a pool refuses to open with it, as with a bad BANKML_THREADS */
  bml_pool *p = (bml_pool *)&ms;
  cr_expect_eq(bml_pool_open(2, &p), BML_EENV);
  cr_expect_null(p);
  unsetenv("BANKML_POOL_WAIT_MS");
}

/* BANKML_GPU_SHARE and BANKML_GPU_LIMIT clamp whatever number they are
 * given, infinities and overflows included; junk and NaN are errors. */
Test(env, share_and_limit_clamp_any_number_and_refuse_the_rest) {
  static const struct {
    const char *v;
    double share, limit;
  } ok[] = {{"0.5", 0.5, 0.5}, {"5", 0.95, 1.0}, {"-3", 0.0, 0.05}, {"inf", 0.95, 1.0},
            {"-inf", 0.0, 0.05}, {"1e400", 0.95, 1.0}, {"-1e400", 0.0, 0.05}, {"1e-400", 0.0, 0.05}};
  for (size_t i = 0; i < BML_ARRAY_SIZE(ok); i++) {
    double s = -1, l = -1;
    setenv("BANKML_GPU_SHARE", ok[i].v, 1);
    setenv("BANKML_GPU_LIMIT", ok[i].v, 1);
    cr_expect_eq(bml__env_gpu_share(&s), 0, "BANKML_GPU_SHARE=%s refused", ok[i].v);
    cr_expect_eq(bml__env_gpu_limit(&l), 0, "BANKML_GPU_LIMIT=%s refused", ok[i].v);
    cr_expect(s == ok[i].share, "BANKML_GPU_SHARE=%s gave %g", ok[i].v, s);
    cr_expect(l == ok[i].limit, "BANKML_GPU_LIMIT=%s gave %g", ok[i].v, l);
  }
  static const char *bad[] = {"nan", "abc", "0.5x", " 0.5", "\n0.5", "-nan", "0,5"};
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++) {
    double s = -1;
    setenv("BANKML_GPU_SHARE", bad[i], 1);
    cr_expect_eq(bml__env_gpu_share(&s), BML_EENV, "BANKML_GPU_SHARE=\"%s\" accepted", bad[i]);
    cr_expect(s == -1, "a refused value was stored");
  }
  unsetenv("BANKML_GPU_SHARE");
  unsetenv("BANKML_GPU_LIMIT");
}

/* A locale whose decimal point is a comma: an installed one, else one
 * made with localedef into a directory of its own (LOCPATH); NULL when
 * neither is possible here (no locale sources: apt-get install locales). */
static locale_t comma_locale(void) {
  static const char *const names[] = {"de_DE.UTF-8", "fr_FR.UTF-8", "de_DE.utf8", "fr_FR.utf8"};
  for (size_t i = 0; i < BML_ARRAY_SIZE(names); i++) {
    locale_t l = newlocale(LC_NUMERIC_MASK, names[i], (locale_t)0);
    if (l) return l;
  }
  char dir[] = "/tmp/bml-locale-XXXXXX", cmd[256];
  if (!mkdtemp(dir)) return (locale_t)0;
  snprintf(cmd, sizeof cmd, "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
  int st = system(cmd);
  locale_t l = (locale_t)0;
  if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) <= 1) { /* 1: warnings only */
    setenv("LOCPATH", dir, 1);
    l = newlocale(LC_NUMERIC_MASK, "de_DE.UTF-8", (locale_t)0); /* loaded: the files can go */
    unsetenv("LOCPATH");
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) cr_log_warn("cannot remove %s", dir);
  return l;
}

/* A program in a locale with a decimal comma still gives the variables '.' */
Test(env, decimals_use_a_point_whatever_the_locale) {
  locale_t comma = comma_locale();
  if (!comma) cr_skip_test("no locale with a decimal comma can be made here (apt-get install locales)");
  locale_t old = uselocale(comma);
  char probe[16];
  snprintf(probe, sizeof probe, "%.1f", 0.5);
  cr_assert_str_eq(probe, "0,5", "the locale's decimal point is not a comma");
  double v = -1, s = -1;
  int rc = bml__parse_double("0.25", 0, 1, &v);
  setenv("BANKML_GPU_SHARE", "0.5", 1);
  int rs = bml__env_gpu_share(&s);
  setenv("BANKML_GPU_SHARE", "0,5", 1);
  double t = -1;
  int rt = bml__env_gpu_share(&t);
  uselocale(old);
  freelocale(comma);
  unsetenv("BANKML_GPU_SHARE");
  cr_expect_eq(rc, 0);
  cr_expect(v == 0.25, "0.25 gave %g", v);
  cr_expect_eq(rs, 0, "BANKML_GPU_SHARE=0.5 refused under a decimal comma");
  cr_expect(s == 0.5, "BANKML_GPU_SHARE=0.5 gave %g", s);
  cr_expect_eq(rt, BML_EENV, "BANKML_GPU_SHARE=0,5 accepted");
}

/* What the library logged: how many messages, and the last one. */
static struct {
  int count;
  char last[4096];
} logged;

static void count_messages(void *ctx, bml_log_level level, const char *cat, const char *msg) {
  (void)ctx, (void)level, (void)cat;
  logged.count++;
  snprintf(logged.last, sizeof logged.last, "%s", msg);
}

/* Unknown BANKML_DEBUG categories are one warning that lists them, cut
 * short: 20,000 of them were 20,000 warnings each repeating the whole
 * value (41 MB on stderr, 7 s).  The known ones among them still count. */
Test(env, unknown_debug_categories_are_one_short_warning) {
  const size_t count = 20000;
  char *v = malloc(count * 8 + 16);
  cr_assert_not_null(v);
  size_t len = (size_t)sprintf(v, "pool");
  for (size_t i = 0; i < count; i++) len += (size_t)sprintf(v + len, ",x%zu", i);
  setenv("BANKML_DEBUG", v, 1);
  free(v);
  bml_log_set_sink(count_messages, NULL);
  unsigned mask = bml__env_debug();
  setenv("BANKML_DEBUG", "pool,\x1b[2Jbogus", 1);
  int many = logged.count;
  char first[4096];
  snprintf(first, sizeof first, "%s", logged.last);
  unsigned one = bml__env_debug();
  bml_log_set_sink(NULL, NULL);
  unsetenv("BANKML_DEBUG");
  cr_expect_eq(many, 1, "%d messages for 20000 unknown categories", many);
  cr_expect(strlen(first) < 400, "a warning of %zu bytes: %s", strlen(first), first);
  cr_expect(strstr(first, "BANKML_DEBUG=\"pool,x0,x1,") != NULL, "%s", first);
  cr_expect(strstr(first, ": 20000 unknown categories ignored: \"x0\", \"x1\", ") != NULL, "%s", first);
  cr_expect(strstr(first, ", ... (known: all, pool, cpu, device, pci, build, oracle, worker, env)") != NULL, "%s", first);
  cr_expect_eq(mask, (unsigned)BML_CAT_POOL, "the known category among them was lost");
  cr_expect_eq(logged.count, 2);
  cr_expect(strstr(logged.last, ": unknown category \"\x1b[2Jbogus\" ignored") != NULL, "%s", logged.last);
  cr_expect_eq(one, (unsigned)BML_CAT_POOL);
}

/* bml_env_check names every bad variable, not only the first, and opens
 * nothing; a good environment passes. */
Test(env, the_check_names_every_bad_variable) {
  static const char *const bad[][2] = {
      {"BANKML_THREADS", "0"},        {"BANKML_GPU", "pci:zz"},      {"BANKML_GPU_SOFTWARE", "2"},
      {"BANKML_GPU_SHARE", "half"},   {"BANKML_GPU_LIMIT", "nan"},   {"BANKML_GPU_QUEUES", "0"},
      {"BANKML_SYSFS_ROOT", "sys"},   {"BANKML_POOL_WAIT_MS", "1s"},
  };
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++) setenv(bad[i][0], bad[i][1], 1);
  logged.count = 0;
  bml_log_set_sink(count_messages, NULL);
  int rc = bml_env_check();
  bml_log_set_sink(NULL, NULL);
  cr_expect_eq(rc, BML_EENV);
  cr_expect_eq(logged.count, (int)BML_ARRAY_SIZE(bad), "%d messages for %zu bad variables", logged.count,
               BML_ARRAY_SIZE(bad));
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++) unsetenv(bad[i][0]);
  setenv("BANKML_GPU", "0,2", 1);
  setenv("BANKML_GPU_SHARE", "0.5", 1);
  cr_expect_eq(bml_env_check(), 0);
  unsetenv("BANKML_GPU");
  unsetenv("BANKML_GPU_SHARE");
}
