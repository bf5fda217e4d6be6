/* test_env.c -- strict parsing of numbers from the environment and the command line. */
#include <criterion/criterion.h>

#include <stdlib.h>

#include "bml.h"

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
  cr_expect_eq(bml__parse_long("99999999999999999999999", 1, 100, &v), BML_EINVAL);
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
  static const char *bad[] = {"nan", "abc", "0.5x", " 0.5", "-nan"};
  for (size_t i = 0; i < BML_ARRAY_SIZE(bad); i++) {
    double s = -1;
    setenv("BANKML_GPU_SHARE", bad[i], 1);
    cr_expect_eq(bml__env_gpu_share(&s), BML_EENV, "BANKML_GPU_SHARE=\"%s\" accepted", bad[i]);
    cr_expect(s == -1, "a refused value was stored");
  }
  unsetenv("BANKML_GPU_SHARE");
  unsetenv("BANKML_GPU_LIMIT");
}
