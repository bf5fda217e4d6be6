#!/bin/sh
# dist-check.sh -- what `make distcheck' checks beyond building: the tarball
# carries every file of the tree that .ci/run and the docs name, and `make
# install' installs every document the man page names.
#
#   dist-check.sh refs SRCDIR DISTDIR    (distcheck-hook, on the unpacked tree)
#   dist-check.sh docs MANPAGE DOCDIR INCLUDEDIR    (installcheck-local)
set -u

# Paths of the tree (under tools/ doc/ tests/ src/ cl/ include/ m4/ .ci/)
# named in the given files, one a line.
named_paths() {
  grep -ohE '(\.ci|tools|doc|tests|src|cl|include|m4)/[A-Za-z0-9_./+-]*[A-Za-z0-9_+-]' "$@" 2>/dev/null | sort -u
}

# Whether path p is one of the tree's own files or directories (tracked by
# git: an in-tree build leaves outputs beside them).
tracked() {
  [ -n "$(git -C "$src" ls-files -- "$1" 2>/dev/null | head -n 1)" ]
}

refs() {
  src=$1 dist=$2 missing=0
  if ! git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "dist-check: $src is not a git checkout: which named paths are the tree's is not known; not checked"
    return 0
  fi
  # the files that name others: CI's script, the README and every doc
  set -- "$dist/.ci/run" "$dist/README.md" "$dist"/doc/*.md "$dist/doc/bankml-cl.1" \
    "$dist"/tools/harness/README.md "$dist"/tests/*/README.md "$dist"/tests/golden/README.md
  for f in "$@"; do
    [ -f "$f" ] || { echo "dist-check: the tarball lacks ${f#"$dist"/}" >&2; missing=1; }
  done
  for p in $(named_paths "$@"); do
    # a path of the tree (not a build's output), missing from the tarball
    if tracked "$p" && ! { [ -e "$dist/$p" ] || [ -L "$dist/$p" ]; }; then
      echo "dist-check: $p is named in .ci/run or the docs but is not in the tarball (EXTRA_DIST)" >&2
      missing=1
    fi
  done
  [ "$missing" = 0 ] && echo "dist-check: every file .ci/run and the docs name is in the tarball"
  return "$missing"
}

docs() {
  man=$1 docdir=$2 includedir=$3 missing=0
  for d in $(grep -ohE '[A-Za-z0-9_-]+\.md' "$man" | sort -u); do
    [ -f "$docdir/$d" ] || { echo "dist-check: the man page names $d, which make install does not install in $docdir" >&2; missing=1; }
  done
  for h in $(grep -ohE '[A-Za-z0-9_-]+\.h\b' "$man" | sort -u); do
    [ -f "$includedir/$h" ] || { echo "dist-check: the man page names $h, which make install does not install in $includedir" >&2; missing=1; }
  done
  [ "$missing" = 0 ] && echo "dist-check: every document the man page names is installed"
  return "$missing"
}

case ${1-} in
refs) [ $# = 3 ] && refs "$2" "$3" ;;
docs) [ $# = 4 ] && docs "$2" "$3" "$4" ;;
*) echo "usage: dist-check.sh refs SRCDIR DISTDIR | docs MANPAGE DOCDIR INCLUDEDIR" >&2; exit 2 ;;
esac
