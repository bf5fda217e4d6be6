#!/bin/sh
# layers.sh -- the layers of src/, checked: a file includes headers of its own layer or lower ones only,
# no two components of src/ include each other (a component: a .c file and its .h, or a header alone;
# x_int.h, the private header of x's files, is x's),
# and, once built, no object of the library or the command calls a higher layer's function nor takes
# part in a circle of calls.  The layers, lowest first: base, cpu, devices, card, share, cli (each
# folder's README.md says what it owns).  And the worker (src/share) makes no OpenCL call itself: the
# card's submission (src/card/submit.c) makes each, checked.  OpenCL's names are macros over the
# loader's table (src/devices/clload.h), so the source is read for them, and the objects for calls of
# the table (bml__cl) or of an extension's entry point (bml__cl_extension).
# And sizes: no source file of src/ or cl/ over 600 lines, none of the worker's (src/share) over 400,
# no test file over 800.
# TAP on standard output; usage: layers.sh [SRCDIR [BUILDDIR]]
# (make check gives neither: BANKML_TOP_SRCDIR and BANKML_TOP_BUILDDIR).
top_srcdir=${1:-${BANKML_TOP_SRCDIR:?run by make check, or give the source directory}}
top_builddir=${2:-${BANKML_TOP_BUILDDIR:-$top_srcdir}}
LAYERS="base cpu devices card share cli"
tmp=${TMPDIR:-/tmp}/bankml-cl-layers.$$
trap 'rm -f "$tmp".*' EXIT
echo 1..7

# rank LAYER: its place in LAYERS (0: none) in $r, without a subshell (the loops below call it thousands of times)
rank() {
  r=0
  n=0
  for l in $LAYERS; do
    n=$((n + 1))
    [ "$l" = "$1" ] && r=$n && return
  done
}

# Every include of src/<layer>/*.[ch]: "<from component> <to component> <from layer> <to layer>"; a
# name without a folder is the including file's own (the command's "bench.h"); the public header and
# the generated kernel bytes are no component.
: >"$tmp.inc"
for layer in $LAYERS; do
  for f in "$top_srcdir"/src/$layer/*.[ch]; do
    [ -f "$f" ] || continue
    base=${f##*/}
    from=$layer/${base%.*}
    from=${from%_int}
    sed -n 's/^[ \t]*#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f" | while read -r inc; do
      case $inc in
      bankml-cl.h | *.inc | config.h) continue ;;
      */*) to=$inc ;;
      *) to=$layer/$inc ;;
      esac
      to=${to%.*}
      to=${to%_int}
      [ "$to" = "$from" ] || echo "$from $to $layer ${to%%/*}"
    done >>"$tmp.inc"
  done
done

# 1: no include reaches up
: >"$tmp.up"
while read -r from to fl tl; do
  rank "$fl"
  rf=$r
  rank "$tl"
  [ "$r" -gt "$rf" ] && echo "$from includes $to" >>"$tmp.up"
  [ "$r" -eq 0 ] && echo "$from includes $to, in no layer" >>"$tmp.up"
done <"$tmp.inc"
if [ -s "$tmp.up" ]; then
  sed 's/^/# upward: /' "$tmp.up"
  echo "not ok 1 - no file includes a higher layer's header"
else
  echo "ok 1 - no file includes a higher layer's header ($(wc -l <"$tmp.inc") includes)"
fi

# 2: no circle of includes (tsort names one)
if cut -d' ' -f1,2 "$tmp.inc" | tsort >/dev/null 2>"$tmp.loop"; then
  echo "ok 2 - no circle of includes"
else
  sed 's/^/# /' "$tmp.loop"
  echo "not ok 2 - no circle of includes"
fi

# 5 (told after 3 and 4): no OpenCL call in the worker's source, outside comments, strings and
# characters (a string ends at its line's end): cl<Capital>...(, the table's bml__cl(), an
# extension's bml__cl_extension() or the card's cl_nv_create_buffer entry point (->create_buffer_nv())
for f in "$top_srcdir"/src/share/*.[ch]; do
  [ -f "$f" ] || continue
  awk -v f="share/${f##*/}" '
    FNR == 1 { comment = 0 }
    {
      s = $0; code = ""; quote = ""
      for (i = 1; i <= length(s); i++) {
        ch = substr(s, i, 1); next2 = substr(s, i, 2)
        if (comment) { if (next2 == "*/") { comment = 0; i++ } continue }
        if (quote != "") { if (ch == "\\") i++; else if (ch == quote) quote = ""; continue }
        if (next2 == "/*") { comment = 1; i++; code = code " "; continue }
        if (next2 == "//") break
        if (ch == "\"" || ch == "\047") { quote = ch; code = code ch ch; continue }
        code = code ch
      }
      if (code ~ /(^|[^A-Za-z0-9_])(cl[A-Z][A-Za-z0-9_]*|bml__cl|bml__cl_extension|create_buffer_nv)[ \t]*\(/)
        print f ":" FNR ": " $0
    }' "$f"
done >"$tmp.cl"
test5() {
  if [ -s "$tmp.cl" ]; then
    sed 's/^/# OpenCL call: /' "$tmp.cl"
    echo "not ok 5 - no file of src/share calls OpenCL (src/card/submit.c does)"
  else
    echo "ok 5 - no file of src/share calls OpenCL (src/card/submit.c does)"
  fi
}

# 7: sizes, in lines: a file a newcomer reads whole (generated files aside)
test7() {
  : >"$tmp.big"
  for spec in "src/*/*.[ch] 600" "cl/*.cl 600" "src/share/*.[ch] 400" "tests/*.[ch] 800" "tests/fakeicd/*.c 800"; do
    limit=${spec##* }
    for f in $top_srcdir/${spec% *}; do
      [ -f "$f" ] || continue
      # a generated file (an in-tree build's tests/fakeicd/stubs.c) is not read by hand
      head -n 1 "$f" | grep -q 'generated .*do not edit' && continue
      n=$(wc -l <"$f")
      [ "$n" -gt "$limit" ] && echo "${f#"$top_srcdir"/}: $n lines, over $limit" >>"$tmp.big"
    done
  done
  if [ -s "$tmp.big" ]; then
    sed 's/^/# /' "$tmp.big"
    echo "not ok 7 - no file over its size (src/, cl/ 600 lines; src/share 400; tests 800)"
  else
    echo "ok 7 - no file over its size (src/, cl/ 600 lines; src/share 400; tests 800)"
  fi
}

# The calls between objects, once built (libtool's objects in .libs, the command's beside its sources):
# "<from component> <to component>" for each function or variable one defines and another uses.  One
# nm for every object (nm -A names each line's file): an nm per object spent 9 s in its 69 starts.
: >"$tmp.objs"
for layer in $LAYERS; do
  for o in "$top_builddir"/src/$layer/.libs/libbmlcore_la-*.o "$top_builddir"/src/$layer/bankml_cl-*.o; do
    [ -f "$o" ] && echo "$o" >>"$tmp.objs"
  done
done
: >"$tmp.sym"
if [ -s "$tmp.objs" ]; then
  # shellcheck disable=SC2046 # the objects' paths: no spaces in a build directory libtool accepts
  nm -A $(cat "$tmp.objs") 2>/dev/null | awk '{
    i = index($0, ":"); file = substr($0, 1, i - 1); n = split(substr($0, i + 1), f, " ")
    k = split(file, part, "/"); name = part[k]; layer = part[k - 1] == ".libs" ? part[k - 2] : part[k - 1]
    sub(/^libbmlcore_la-/, "", name); sub(/^bankml_cl-/, "", name); sub(/\.o$/, "", name)
    c = layer "/" name
    if (n == 2 && f[1] == "U") print c, "U", f[2]
    else if (n == 3 && f[2] ~ /^[TDBRC]$/) print c, "D", f[3]
  }' >"$tmp.sym"
fi
awk '$2 == "D" && !($3 in def) { def[$3] = $1 } $2 == "U" { use[NR] = $1 " " $3 }
     END { for (i in use) { split(use[i], u, " "); if ((u[2] in def) && def[u[2]] != u[1]) print u[1], def[u[2]], u[2] } }' \
  "$tmp.sym" | sort -u >"$tmp.call"
if [ ! -s "$tmp.sym" ]; then
  echo "ok 3 # SKIP no objects built in $top_builddir/src"
  echo "ok 4 # SKIP no objects built in $top_builddir/src"
  test5
  echo "ok 6 # SKIP no objects built in $top_builddir/src"
  test7
  exit 0
fi

# 3: no call reaches up
: >"$tmp.up"
while read -r from to sym; do
  rank "${from%%/*}"
  rf=$r
  rank "${to%%/*}"
  [ "$r" -gt "$rf" ] && echo "$from calls $to ($sym)" >>"$tmp.up"
done <"$tmp.call"
if [ -s "$tmp.up" ]; then
  sed 's/^/# upward: /' "$tmp.up"
  echo "not ok 3 - no object calls a higher layer"
else
  echo "ok 3 - no object calls a higher layer ($(cut -d' ' -f1,2 "$tmp.call" | sort -u | wc -l) arrows)"
fi

# 4: no circle of calls
if cut -d' ' -f1,2 "$tmp.call" | sort -u | tsort >/dev/null 2>"$tmp.loop"; then
  echo "ok 4 - no circle of calls"
else
  sed 's/^/# /' "$tmp.loop"
  echo "not ok 4 - no circle of calls"
fi

test5

# 6: no object of src/share takes an OpenCL entry point: none from the loader's table (bml__cl), an
# extension's (bml__cl_extension) or the library's own (cl<Capital>...)
awk '$1 ~ /^share\// && $2 == "U" && ($3 == "bml__cl" || $3 == "bml__cl_extension" || $3 ~ /^cl[A-Z]/) { print $1, $3 }' \
  "$tmp.sym" | sort -u >"$tmp.clsym"
if [ -s "$tmp.clsym" ]; then
  sed 's/^/# OpenCL call: /' "$tmp.clsym"
  echo "not ok 6 - no object of src/share calls OpenCL"
else
  echo "ok 6 - no object of src/share calls OpenCL ($(grep -c '^share/.* U ' "$tmp.sym") calls out)"
fi

test7
