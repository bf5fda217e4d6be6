# clapi.awk -- reads the preprocessed clapi.h: the dispatch table's members and each entry point's prototype.
#
# Shared by gen-stubs.awk (the fake ICD's stubs) and tests/clshim/gen-shim.awk
# (the fault-injecting loader's forwarders): `awk -f clapi.awk -f gen-X.awk`.
# Their END calls parse_api(), which fills members[1..nmembers] (the struct
# _cl_icd_dispatch members in order), is_placeholder[name] (Windows-only,
# untyped), ret[name] and args[name] (from "extern RET NAME(PARAMS)").

!/^#/ { text = text " " $0 }

function trim(s) {
  sub(/^ +/, "", s)
  sub(/ +$/, "", s)
  return s
}

# A placeholder entry (typedef void *cl_api_X): a Windows-only API.
function placeholder(s,    name) {
  name = s
  sub(/^typedef void \*cl_api_/, "", name)
  is_placeholder[name] = 1
}

# One member of the dispatch struct: "cl_api_X X".
function member(s,    name) {
  name = s
  sub(/.* /, "", name)
  if (name != "")
    members[++nmembers] = name
}

# "extern RET NAME(PARAMS)": remember RET and PARAMS for NAME.
function declaration(s,    open, head, name, params) {
  open = index(s, "(")
  head = trim(substr(s, 8, open - 8))
  match(head, /[A-Za-z0-9_]+$/)
  name = substr(head, RSTART)
  if (name in ret)
    return
  params = substr(s, open + 1)
  sub(/\) *$/, "", params)
  ret[name] = trim(substr(head, 1, RSTART - 1))
  args[name] = params
}

function scan(s) {
  s = trim(s)
  if (in_struct) {
    if (s ~ /^\}/) {
      in_struct = 0
      return
    }
    member(s)
  } else if (s ~ /^typedef void \*cl_api_[A-Za-z0-9_]+$/) {
    placeholder(s)
  } else if (s ~ /^typedef struct _cl_icd_dispatch \{/) {
    in_struct = 1
    sub(/^typedef struct _cl_icd_dispatch \{ */, "", s)
    member(s)
  } else if (s ~ /^extern [^(]*[ *]cl[A-Za-z0-9_]* ?\(.*\)$/) {
    declaration(s)
  }
}

# Splits the text read into statements and scans each; stops (exit 1) when
# the dispatch struct is not there.
function parse_api(    n, i, stmt) {
  gsub(/[ \t]+/, " ", text)
  n = split(text, stmt, ";")
  for (i = 1; i <= n; i++)
    scan(stmt[i])
  if (nmembers == 0) {
    print "clapi.awk: struct _cl_icd_dispatch not found in the input" > "/dev/stderr"
    exit 1
  }
}
