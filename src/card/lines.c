/* lines.c -- a verification's lines: each reported to the caller and logged, a failing one remembered. */
#include "card/oracle_int.h"

#include "base/log.h"

void bml__oracle_emit(run *v, bml_verify_line *line) {
  line->device = v->index;
  line->device_name = v->name;
  if (!line->ok) v->failed = true;
  bml__debug(BML_CAT_ORACLE, "%s %s %zux%zu %s: %zu/%zu%s", line->check, line->fma, line->rows, line->n,
             line->regime, line->exact, line->total, line->ok ? "" : " FAILED");
  if (v->opt && v->opt->on_line) v->opt->on_line(v->opt->ctx, line);
}

void bml__oracle_emit_error(run *v, const char *check, const char *fma, const char *detail) {
  bml_verify_line line = {.check = check, .fma = fma, .regime = "", .first_bad = -1, .detail = detail};
  bml__oracle_emit(v, &line);
}
