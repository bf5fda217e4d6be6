/* reference.c -- the oracle's reference: ggml's golden cases, used only where this build's CPU kernel gives their bits. */
#include "card/oracle_int.h"

#include "base/env.h"
#include "base/log.h"
#include "cpu/golden.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The golden cases are the reference only where this build's CPU kernel
 * gives their bits (its tests check that): a case where it does not is a
 * damaged file or another ggml's, and the card would be blamed for the
 * file's bits.  Such a file is a refusing line of its own, naming the
 * case, and no kernel is checked against it. */
static bool golden_is_the_cpus(run *v, const char *dir, const bml__golden_q1 *g, int ng) {
  for (int i = 0; i < ng; i++) {
    float *cpu = malloc((size_t)g[i].rows * sizeof *cpu);
    int rc = cpu ? bml_q1_0_mat_vec(g[i].w, g[i].rows, g[i].n, g[i].a, cpu) : BML_ENOMEM;
    long r = rc == 0 ? bml__first_difference(g[i].ref, cpu, g[i].rows) : -1;
    char detail[700] = "";
    if (rc != 0)
      snprintf(detail, sizeof detail, "ggml's golden cases cannot be checked: case %d on the CPU: %s", i + 1,
               bml_strerror(rc));
    else if (r >= 0)
      snprintf(detail, sizeof detail,
               "ggml's golden cases in %s are not this build's CPU kernel's: case %d (%ux%u) row %ld is 0x%08x in "
               "the file, 0x%08x on the CPU (a damaged file, or another ggml's): nothing was checked against it",
               dir, i + 1, g[i].rows, g[i].n, r, bml__float_bits(g[i].ref[r]), bml__float_bits(cpu[r]));
    free(cpu);
    if (!detail[0]) continue;
    bml_verify_line line = {.check = "golden", .fma = "", .regime = "golden", .first_bad = -1, .ok = 0,
                            .detail = detail};
    bml__oracle_emit(v, &line);
    return false;
  }
  return true;
}

/* ggml's golden cases.  A directory that was named (the option, or
 * BANKML_GOLDEN_DIR) or an installed file that is there must be read: a
 * case that cannot be is a refusing line, as any check that cannot run.
 * Only a default file that is not installed (a build tree, or after make
 * uninstall, which leaves the directory) is a note, and the verdict says
 * the golden cases were not checked. */
int bml__oracle_load_golden(run *v, bml__golden_q1 **g) {
  const char *env = NULL;
  bml__env_golden_dir(&env);
  const bool named = (v->opt && v->opt->golden_dir) || env;
  const char *dir = v->opt && v->opt->golden_dir ? v->opt->golden_dir : bml__golden_default_dir();
  if (!*dir) return 0;
  char err[600] = "";
  int n = bml__golden_load_q1(dir, g, err, sizeof err);
  if (n > 0 && golden_is_the_cpus(v, dir, *g, n)) return n;
  if (n > 0) { /* refused above: nothing is checked against it */
    bml__golden_free_q1(*g, n);
    *g = NULL;
    return 0;
  }
  char file[4096];
  snprintf(file, sizeof file, "%s/%s", dir, BML__GOLDEN_Q1_FILE);
  const bool refuse = named || access(file, F_OK) == 0; /* an installed copy that cannot be read */
  char detail[700];
  snprintf(detail, sizeof detail, "ggml's golden cases %s: %s%s", refuse ? "cannot be read" : "not checked", err,
           named ? "" : " (set BANKML_GOLDEN_DIR)");
  bml_verify_line line = {.check = "golden", .fma = "", .regime = "golden", .first_bad = -1, .ok = !refuse,
                          .detail = detail};
  bml__oracle_emit(v, &line);
  return 0;
}
