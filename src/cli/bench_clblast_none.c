/* bench_clblast_none.c -- `bankml-cl bench --clblast` without CLBlast: says how to get it. */
#include <stdio.h>

#include "bankml-cl.h"
#include "bench.h"

const char bench_clblast_help[] = "CLBlast's GEMV, the baseline (below); not in this build,\n"
                                  "                   which lacked libclblast-dev at ./configure";

int bench_clblast_run(const struct bench_config *cfg, struct bench_report *rep) {
  (void)cfg;
  (void)rep;
  fprintf(stderr, "bankml-cl bench --clblast: this bankml-cl was built without CLBlast "
                  "(apt-get install libclblast-dev and re-run ./configure)\n");
  return BML_ENOTSUP;
}
