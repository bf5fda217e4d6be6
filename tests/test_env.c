/* test_env.c -- strict parsing of numbers from the environment and the command line. */
#include <criterion/criterion.h>

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
