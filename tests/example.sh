#!/bin/sh
# example.sh -- examples/token as make check builds it: run on the first usable card, else on PoCL
# (BANKML_GPU_SOFTWARE=1) where PoCL is installed, else on the CPU, saying which; run twice, the second
# open taking the first one's remembered verdict; and README.md's library snippets, which must be the
# example's own lines.  TAP on standard output.
top_srcdir=${BANKML_TOP_SRCDIR:?run by make check}
top_builddir=${BANKML_TOP_BUILDDIR:?run by make check}
token=$top_builddir/examples/token
tmp=${TMPDIR:-/tmp}/bankml-cl-example.$$
trap 'rm -rf "$tmp".*' EXIT
echo 1..3

devices=$("$top_builddir/src/bankml-cl" devices --brief 2>/dev/null)
if printf '%s\n' "$devices" | grep -v 'not usable' | grep -q '^[0-9]'; then
  where="its card"
elif printf '%s\n' "$devices" | grep -q '(PoCL)'; then
  # a share fixed for PoCL, whose calibration may leave it too few rows to take any
  BANKML_GPU_SOFTWARE=1 BANKML_GPU_SHARE=0.5
  export BANKML_GPU_SOFTWARE BANKML_GPU_SHARE
  where="PoCL (BANKML_GPU_SOFTWARE=1)"
else
  where="the CPU (no OpenCL device here)"
fi

# 1, 2: every result bml_q1_0_mat_vec's bits, the card taking part where there is one; the second run's open
# takes the verdict the first one remembered
# (a copy of the test suite's cache, its own: the suites running beside it rewrite that one, and an entry
# another process wrote in between can be lost, which is safe but would make this check flaky)
mkdir -p "$tmp.cache" && { [ -z "${BANKML_CACHE_DIR:-}" ] || cp -R "$BANKML_CACHE_DIR"/. "$tmp.cache"/ 2>/dev/null || :; }
BANKML_CACHE_DIR=$tmp.cache && export BANKML_CACHE_DIR
for run in 1 2; do
  "$token" >"$tmp.out" 2>"$tmp.err"
  status=$?
  sed 's/^/# /' "$tmp.out" "$tmp.err"
  case $where in
    "the CPU"*) want="(CPU only)" ;;
    *) want="(card and CPU)" ;;
  esac
  if [ $status != 0 ] || ! grep -qF "$want" "$tmp.out"; then
    echo "not ok $run - examples/token on $where: exit $status, not every result exact $want"
  elif [ $run = 2 ] && [ "$want" = "(card and CPU)" ] && ! grep -q '"verdict":"remembered"' "$tmp.out"; then
    echo "not ok $run - examples/token on $where: the second open did not take the remembered verdict"
  else
    echo "ok $run - examples/token on $where: every result exact $want"
  fi
done

# 3: each snippet of README.md's "Using the library" is the example's lines between its markers
# ("README: begin NAME" .. "README: end"), their common indentation taken off
snippet_of_example() {
  sed -n "/README: begin $1 \*\//,/README: end \*\//p" "$top_srcdir/examples/token.c" | sed '1d;$d' |
    awk '{ lines[NR] = $0; if (NF) { match($0, /^ */); if (min == "" || RLENGTH < min) min = RLENGTH } }
         END { for (i = 1; i <= NR; i++) print substr(lines[i], min + 1) }'
}
snippet_of_readme() {
  sed -n "/<!-- examples\/token.c: $1 -->/,/<!-- \/examples\/token.c -->/p" "$top_srcdir/README.md" |
    sed '1d;$d' | sed '/^```/d'
}
bad=
for name in open submit group; do
  snippet_of_example "$name" >"$tmp.example"
  snippet_of_readme "$name" >"$tmp.readme"
  diff -u "$tmp.example" "$tmp.readme" | sed 's/^/# /'
  if [ ! -s "$tmp.example" ] || [ ! -s "$tmp.readme" ]; then
    bad="$bad $name (missing)"
  elif ! cmp -s "$tmp.example" "$tmp.readme"; then
    bad="$bad $name"
  fi
done
if [ -n "$bad" ]; then
  echo "not ok 3 - README.md's snippets are examples/token.c's lines: these differ:$bad"
else
  echo "ok 3 - README.md's snippets (open, submit, group) are examples/token.c's lines, which compile"
fi
