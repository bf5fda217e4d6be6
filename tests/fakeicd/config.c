/* config.c -- reads a fake ICD scenario: [platform] and [device] sections of key = value lines. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakeicd.h"

/* Turns value into the field at `field` (`size` bytes).  Returns NULL, or
 * what the value should have looked like. */
typedef const char *parse_fn(const char *value, void *field, size_t size);

#define NO_FLAG ((size_t)-1)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define FIELD_SIZE(T, f) sizeof(((T *)0)->f)

struct key {
  const char *name;
  parse_fn *parse;
  size_t off;
  size_t size;
  size_t has_off;    /* the bool set when the key is given, or NO_FLAG */
  const char *dflt;  /* parsed when the section opens; NULL: zero */
};

struct name_value {
  const char *name;
  long long value;  /* flags, multipliers and (negative) error codes */
};

/* ------------------------------------------------------------------ */
/* Value parsers                                                       */
/* ------------------------------------------------------------------ */

static const struct name_value *lookup(const struct name_value *t, const char *name, size_t len)
{
  for (; t->name != NULL; t++)
    if (strlen(t->name) == len && strncmp(t->name, name, len) == 0)
      return t;
  return NULL;
}

static int hex_digit(char c)
{
  static const char digits[] = "0123456789abcdef";
  const char *at = c != '\0' ? strchr(digits, tolower((unsigned char)c)) : NULL;
  return at != NULL ? (int)(at - digits) : -1;
}

static const char *parse_string(const char *value, void *field, size_t size)
{
  size_t len = strlen(value);
  if (len >= size)
    return "too long";
  memcpy(field, value, len + 1);
  return NULL;
}

static const struct name_value size_suffixes[] = {
  {"", 1},
  {"K", 1ull << 10}, {"KiB", 1ull << 10},
  {"M", 1ull << 20}, {"MiB", 1ull << 20},
  {"G", 1ull << 30}, {"GiB", 1ull << 30},
  {"T", 1ull << 40}, {"TiB", 1ull << 40},
  {NULL, 0},
};

/* A whole number: decimal or 0x hex, then an optional K/M/G/T (binary) suffix. */
static const char *parse_u64(const char *value, uint64_t *out)
{
  static const char *const why = "expected an unsigned number (decimal or 0x hex, optional K/M/G/T suffix)";
  int hex = value[0] == '0' && (value[1] == 'x' || value[1] == 'X');
  const char *digits = hex ? value + 2 : value;
  char *end;
  if (hex_digit(digits[0]) < 0 || (!hex && !isdigit((unsigned char)digits[0])))
    return why;
  errno = 0;
  unsigned long long v = strtoull(digits, &end, hex ? 16 : 10);
  const struct name_value *mul = lookup(size_suffixes, end, strlen(end));
  if (errno != 0 || mul == NULL)
    return why;
  if (v > UINT64_MAX / (uint64_t)mul->value)
    return "too large";
  *out = v * (uint64_t)mul->value;
  return NULL;
}

/* Fields of 4 bytes (cl_uint) or 8 (cl_ulong, size_t). */
static const char *parse_unsigned(const char *value, void *field, size_t size)
{
  uint64_t v;
  const char *why = parse_u64(value, &v);
  if (why != NULL)
    return why;
  if (size == sizeof(uint32_t)) {
    uint32_t v32 = (uint32_t)v;
    if (v > UINT32_MAX)
      return "too large for 32 bits";
    memcpy(field, &v32, sizeof v32);
  } else {
    memcpy(field, &v, sizeof v);
  }
  return NULL;
}

static const struct name_value booleans[] = {
  {"0", CL_FALSE}, {"1", CL_TRUE}, {"false", CL_FALSE}, {"true", CL_TRUE},
  {"no", CL_FALSE}, {"yes", CL_TRUE}, {NULL, 0},
};

static const char *parse_bool(const char *value, void *field, size_t size)
{
  const struct name_value *b = lookup(booleans, value, strlen(value));
  cl_bool v;
  (void)size;
  if (b == NULL)
    return "expected 0, 1, true, false, yes or no";
  v = (cl_bool)b->value;
  memcpy(field, &v, sizeof v);
  return NULL;
}

/* A comma-separated list of names from table, or a number. */
static const char *parse_flags(const char *value, const struct name_value *table, cl_ulong *out)
{
  cl_ulong bits = 0;
  if (isdigit((unsigned char)value[0]))
    return parse_u64(value, out);
  while (*value != '\0') {
    size_t len = strcspn(value, ",");
    const char *name = value;
    size_t n = len;
    while (n > 0 && isspace((unsigned char)*name))
      name++, n--;
    while (n > 0 && isspace((unsigned char)name[n - 1]))
      n--;
    const struct name_value *f = lookup(table, name, n);
    if (f == NULL)
      return "unknown name in the list";
    bits |= (cl_ulong)f->value;
    value += len + (value[len] == ',');
  }
  *out = bits;
  return NULL;
}

static const struct name_value device_types[] = {
  {"gpu", CL_DEVICE_TYPE_GPU},
  {"cpu", CL_DEVICE_TYPE_CPU},
  {"accelerator", CL_DEVICE_TYPE_ACCELERATOR},
  {"custom", CL_DEVICE_TYPE_CUSTOM},
  {"default", CL_DEVICE_TYPE_DEFAULT},
  {NULL, 0},
};

static const char *parse_type(const char *value, void *field, size_t size)
{
  cl_ulong bits;
  const char *why = parse_flags(value, device_types, &bits);
  (void)size;
  if (why != NULL || bits == 0)
    return "expected gpu, cpu, accelerator or custom, optionally with ',default'";
  memcpy(field, &bits, sizeof(cl_device_type));
  return NULL;
}

static const struct name_value fp_flags[] = {
  {"denorm", CL_FP_DENORM},
  {"inf_nan", CL_FP_INF_NAN},
  {"round_to_nearest", CL_FP_ROUND_TO_NEAREST},
  {"round_to_zero", CL_FP_ROUND_TO_ZERO},
  {"round_to_inf", CL_FP_ROUND_TO_INF},
  {"fma", CL_FP_FMA},
  {"soft_float", CL_FP_SOFT_FLOAT},
  {"correctly_rounded_divide_sqrt", CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT},
  {NULL, 0},
};

static const char *parse_fp_config(const char *value, void *field, size_t size)
{
  cl_ulong bits;
  (void)size;
  if (parse_flags(value, fp_flags, &bits) != NULL)
    return "expected a number or a list of denorm, inf_nan, round_to_nearest, round_to_zero, "
           "round_to_inf, fma, soft_float, correctly_rounded_divide_sqrt";
  memcpy(field, &bits, sizeof(cl_device_fp_config));
  return NULL;
}

#define CL_ERROR(name) {#name, name}
static const struct name_value cl_errors[] = {
  CL_ERROR(CL_SUCCESS),
  CL_ERROR(CL_DEVICE_NOT_FOUND),
  CL_ERROR(CL_DEVICE_NOT_AVAILABLE),
  CL_ERROR(CL_COMPILER_NOT_AVAILABLE),
  CL_ERROR(CL_MEM_OBJECT_ALLOCATION_FAILURE),
  CL_ERROR(CL_OUT_OF_RESOURCES),
  CL_ERROR(CL_OUT_OF_HOST_MEMORY),
  CL_ERROR(CL_INVALID_VALUE),
  CL_ERROR(CL_INVALID_DEVICE_TYPE),
  CL_ERROR(CL_INVALID_PLATFORM),
  CL_ERROR(CL_INVALID_DEVICE),
  CL_ERROR(CL_INVALID_OPERATION),
  CL_ERROR(CL_PLATFORM_NOT_FOUND_KHR),
  {NULL, 0},
};

/* A CL_xxx name from the table above, or a decimal code <= 0. */
static const char *parse_error(const char *value, void *field, size_t size)
{
  const struct name_value *e = lookup(cl_errors, value, strlen(value));
  long long v;
  (void)size;
  if (e != NULL) {
    v = e->value;
  } else {
    char *end;
    errno = 0;
    v = strtoll(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || v > 0 || v < INT32_MIN)
      return "expected an OpenCL error name (CL_OUT_OF_HOST_MEMORY, ...) or a code <= 0";
  }
  cl_int code = (cl_int)v;
  memcpy(field, &code, sizeof code);
  return NULL;
}

/* As parse_error, but CL_SUCCESS is refused: the fake cannot succeed. */
static const char *parse_failure(const char *value, void *field, size_t size)
{
  cl_int code = -1;
  const char *why = parse_error(value, &code, size);
  if (why != NULL || code == CL_SUCCESS)
    return "expected an OpenCL error other than CL_SUCCESS";
  memcpy(field, &code, sizeof code);
  return NULL;
}

static const char *parse_icd(const char *value, void *field, size_t size)
{
  if (strcmp(value, "a") != 0 && strcmp(value, "b") != 0)
    return "expected a or b (the two fake libraries)";
  return parse_string(value, field, size);
}

/* Fixed-width hex fields with separators: the sysfs PCI address forms. */
struct hex_field {
  int digits;
  char sep;  /* after the field; '\0' for the end of the value */
  unsigned max;
};

static int parse_hex_fields(const char *s, const struct hex_field *form, size_t n, unsigned *out)
{
  for (size_t i = 0; i < n; i++) {
    unsigned v = 0;
    for (int d = 0; d < form[i].digits; d++, s++) {
      int x = hex_digit(*s);
      if (x < 0)
        return -1;
      v = v * 16 + (unsigned)x;
    }
    if (*s != form[i].sep || v > form[i].max)
      return -1;
    s += *s != '\0';
    out[i] = v;
  }
  return 0;
}

static const char *parse_pci(const char *value, void *field, size_t size)
{
  static const struct hex_field form[] = {{4, ':', 0xffff}, {2, ':', 0xff}, {2, '.', 0x1f}, {1, '\0', 7}};
  unsigned f[4];
  cl_device_pci_bus_info_khr info;
  (void)size;
  if (parse_hex_fields(value, form, 4, f) != 0)
    return "expected a PCI address DDDD:BB:DD.F (hex, device <= 1f, function <= 7)";
  info.pci_domain = f[0];
  info.pci_bus = f[1];
  info.pci_device = f[2];
  info.pci_function = f[3];
  memcpy(field, &info, sizeof info);
  return NULL;
}

static const char *parse_amd_topology(const char *value, void *field, size_t size)
{
  static const struct hex_field form[] = {{2, ':', 0xff}, {2, '.', 0x1f}, {1, '\0', 7}};
  unsigned f[3];
  cl_device_topology_amd t;
  (void)size;
  if (parse_hex_fields(value, form, 3, f) != 0)
    return "expected BB:DD.F (hex, device <= 1f, function <= 7)";
  memset(&t, 0, sizeof t);
  t.pcie.type = CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD;
  t.pcie.bus = (cl_char)f[0];  /* signed in AMD's struct: bus 0x80+ reads negative */
  t.pcie.device = (cl_char)f[1];
  t.pcie.function = (cl_char)f[2];
  memcpy(field, &t, sizeof t);
  return NULL;
}

/* 32 hex digits; dashes anywhere are ignored (8-4-4-4-12 is fine). */
static const char *parse_uuid(const char *value, void *field, size_t size)
{
  cl_uchar bytes[CL_UUID_SIZE_KHR];
  size_t nibbles = 0;
  for (; *value != '\0'; value++) {
    int x = hex_digit(*value);
    if (*value == '-')
      continue;
    if (x < 0 || nibbles == 2 * sizeof bytes)
      return "expected 32 hex digits";
    if (nibbles % 2 == 0)
      bytes[nibbles / 2] = (cl_uchar)(x << 4);
    else
      bytes[nibbles / 2] |= (cl_uchar)x;
    nibbles++;
  }
  if (nibbles != 2 * sizeof bytes)
    return "expected 32 hex digits";
  memcpy(field, bytes, size);
  return NULL;
}

/* A comma-separated list of 1 to 8 sizes (sub-group sizes). */
static const char *parse_sizes(const char *value, void *field, size_t size)
{
  static const char *const why = "expected 1 to 8 comma-separated whole numbers";
  struct fake_sizes list;
  (void)size;
  memset(&list, 0, sizeof list);
  for (const char *p = value;;) {
    char *end;
    if (!isdigit((unsigned char)*p) || list.count == COUNT(list.sizes))
      return why;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno != 0 || v == 0 || (*end != ',' && *end != '\0'))
      return why;
    list.sizes[list.count++] = (size_t)v;
    if (*end == '\0')
      break;
    p = end + 1;
  }
  memcpy(field, &list, sizeof list);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Keys                                                                */
/* ------------------------------------------------------------------ */

#define PKEY(name, parse, f, dflt) \
  {name, parse, offsetof(struct _cl_platform_id, f), FIELD_SIZE(struct _cl_platform_id, f), NO_FLAG, dflt}
#define DKEY(name, parse, f, dflt) \
  {name, parse, offsetof(struct _cl_device_id, f), FIELD_SIZE(struct _cl_device_id, f), NO_FLAG, dflt}
#define DOPT(name, parse, f, has) \
  {name, parse, offsetof(struct _cl_device_id, f), FIELD_SIZE(struct _cl_device_id, f), \
   offsetof(struct _cl_device_id, has), NULL}

static const struct key platform_keys[] = {
  PKEY("icd", parse_icd, icd, "a"),
  PKEY("name", parse_string, name, "Fake Platform"),
  PKEY("vendor", parse_string, vendor, "fakeicd"),
  PKEY("version", parse_string, version, "OpenCL 3.0 fakeicd"),
  PKEY("profile", parse_string, profile, "FULL_PROFILE"),
  PKEY("extensions", parse_string, extensions, "cl_khr_icd"),
  PKEY("suffix", parse_string, suffix, "FAKE"),
  PKEY("get_device_ids_error", parse_error, get_device_ids_error, "CL_SUCCESS"),
  PKEY("create_context_error", parse_failure, create_context_error, "CL_DEVICE_NOT_AVAILABLE"),
};

static const struct key device_keys[] = {
  DKEY("type", parse_type, type, "gpu"),
  DKEY("name", parse_string, name, "Fake Device"),
  DKEY("vendor", parse_string, vendor, "Fake Vendor"),
  DKEY("vendor_id", parse_unsigned, vendor_id, "0"),
  DKEY("version", parse_string, version, "OpenCL 3.0 fakeicd"),
  DKEY("opencl_c_version", parse_string, opencl_c_version, "OpenCL C 1.2"),
  DKEY("driver_version", parse_string, driver_version, "1.0"),
  DKEY("profile", parse_string, profile, "FULL_PROFILE"),
  DKEY("extensions", parse_string, extensions, ""),
  DKEY("compute_units", parse_unsigned, compute_units, "1"),
  DKEY("clock_mhz", parse_unsigned, clock_mhz, "1000"),
  DKEY("address_bits", parse_unsigned, address_bits, "64"),
  DKEY("global_mem", parse_unsigned, global_mem, "1G"),
  DOPT("max_alloc", parse_unsigned, max_alloc, has_max_alloc),
  DKEY("local_mem", parse_unsigned, local_mem, "64K"),
  DKEY("max_work_group_size", parse_unsigned, max_work_group_size, "256"),
  DKEY("host_unified", parse_bool, host_unified, "0"),
  DKEY("available", parse_bool, available, "1"),
  DKEY("compiler_available", parse_bool, compiler_available, "1"),
  DKEY("fp32_config", parse_fp_config, fp32_config, "round_to_nearest,inf_nan"),
  DKEY("fp64_config", parse_fp_config, fp64_config, "0"),
  DOPT("pci", parse_pci, pci, has_pci),
  DOPT("uuid", parse_uuid, uuid, has_uuid),
  DOPT("amd_topology", parse_amd_topology, amd_topology, has_amd_topology),
  DOPT("nv_bus", parse_unsigned, nv_bus, has_nv_bus),
  DOPT("nv_slot", parse_unsigned, nv_slot, has_nv_slot),
  DOPT("nv_domain", parse_unsigned, nv_domain, has_nv_domain),
  DOPT("il_version", parse_string, il_version, has_il_version),
  DOPT("sub_group_sizes", parse_sizes, sub_group_sizes, has_sub_group_sizes),
  DOPT("nv_warp_size", parse_unsigned, nv_warp_size, has_nv_warp_size),
  DOPT("amd_wavefront_width", parse_unsigned, amd_wavefront_width, has_amd_wavefront_width),
  DKEY("create_context_error", parse_failure, create_context_error, "CL_DEVICE_NOT_AVAILABLE"),
};

/* ------------------------------------------------------------------ */
/* The file                                                            */
/* ------------------------------------------------------------------ */

struct parser {
  const char *path;
  const char *icd;        /* keep the platforms of this library */
  unsigned line;
  struct fake_model *m;
  struct _cl_platform_id *platform;  /* the last [platform], NULL before one */
  struct _cl_device_id *device;      /* the open [device], or NULL */
  const struct key *keys;            /* of the open section, NULL before one */
  size_t nkeys;
  void *object;                      /* what the open section fills */
  uint64_t seen;                     /* keys given in it, by index */
  size_t platforms_in_file;          /* the limits count both libraries' */
  size_t devices_in_file;            /* so both accept the same files */
};

__attribute__((format(printf, 2, 3)))
static int fail(const struct parser *ps, const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "fakeicd[%s]: %s:%u: ", ps->icd, ps->path, ps->line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return -1;
}

/* CL_PLATFORM/DEVICE_NUMERIC_VERSION exist from OpenCL 3.0 on. */
static bool numeric_version(const char *version, cl_version *out)
{
  unsigned major, minor;
  if (sscanf(version, "OpenCL %u.%u", &major, &minor) != 2 || major < 3)
    return false;
  *out = CL_MAKE_VERSION(major, minor, 0);
  return true;
}

static void end_device(struct parser *ps)
{
  struct _cl_device_id *d = ps->device;
  if (d == NULL)
    return;
  if (!d->has_max_alloc)
    d->max_alloc = d->global_mem / 4;
  for (size_t i = 0; i < COUNT(d->work_item_sizes); i++)
    d->work_item_sizes[i] = d->max_work_group_size;
  d->work_item_dims = (cl_uint)COUNT(d->work_item_sizes);
  d->endian_little = CL_TRUE;
  d->has_numeric_version = numeric_version(d->version, &d->numeric_version);
  ps->device = NULL;
}

/* A platform ends at the next [platform] or at the end of the file; one
 * that the other library presents is dropped with its devices. */
static void end_platform(struct parser *ps)
{
  struct _cl_platform_id *p = ps->platform;
  end_device(ps);
  if (p == NULL)
    return;
  p->has_numeric_version = numeric_version(p->version, &p->numeric_version);
  if (strcmp(p->icd, ps->icd) != 0) {
    ps->m->num_devices = p->first_device;
    ps->m->num_platforms--;
  }
  ps->platform = NULL;
}

static void start_section(struct parser *ps, void *object, const struct key *keys, size_t nkeys)
{
  ps->object = object;
  ps->keys = keys;
  ps->nkeys = nkeys;
  ps->seen = 0;
  for (size_t i = 0; i < nkeys; i++)
    if (keys[i].dflt != NULL)
      keys[i].parse(keys[i].dflt, (char *)object + keys[i].off, keys[i].size);
}

static int open_platform(struct parser *ps)
{
  struct fake_model *m = ps->m;
  end_platform(ps);
  if (++ps->platforms_in_file > FAKE_MAX_PLATFORMS)
    return fail(ps, "more than %d platforms", FAKE_MAX_PLATFORMS);
  ps->platform = &m->platforms[m->num_platforms++];
  memset(ps->platform, 0, sizeof *ps->platform);
  ps->platform->first_device = m->num_devices;
  start_section(ps, ps->platform, platform_keys, COUNT(platform_keys));
  return 0;
}

static int open_device(struct parser *ps)
{
  struct fake_model *m = ps->m;
  end_device(ps);
  if (ps->platform == NULL)
    return fail(ps, "[device] before any [platform]");
  if (++ps->devices_in_file > FAKE_MAX_DEVICES)
    return fail(ps, "more than %d devices", FAKE_MAX_DEVICES);
  ps->device = &m->devices[m->num_devices++];
  memset(ps->device, 0, sizeof *ps->device);
  ps->device->platform = ps->platform;
  ps->platform->num_devices++;
  start_section(ps, ps->device, device_keys, COUNT(device_keys));
  return 0;
}

static int open_section(struct parser *ps, const char *name)
{
  if (strcmp(name, "platform") == 0)
    return open_platform(ps);
  if (strcmp(name, "device") == 0)
    return open_device(ps);
  return fail(ps, "unknown section [%s] (expected [platform] or [device])", name);
}

static int set_key(struct parser *ps, const char *name, const char *value)
{
  if (ps->keys == NULL)
    return fail(ps, "'%s' before any [platform]", name);
  for (size_t i = 0; i < ps->nkeys; i++) {
    const struct key *k = &ps->keys[i];
    char *field = (char *)ps->object + k->off;
    const char *why;
    if (strcmp(k->name, name) != 0)
      continue;
    if (ps->seen & (UINT64_C(1) << i))
      return fail(ps, "%s given twice in one section", name);
    ps->seen |= UINT64_C(1) << i;
    if ((why = k->parse(value, field, k->size)) != NULL)
      return fail(ps, "%s = %s: %s", name, value, why);
    if (k->has_off != NO_FLAG)
      *(bool *)((char *)ps->object + k->has_off) = true;
    return 0;
  }
  return fail(ps, "unknown key '%s' in [%s]", name, ps->device != NULL ? "device" : "platform");
}

static char *trim(char *s)
{
  char *end = s + strlen(s);
  while (isspace((unsigned char)*s))
    s++;
  while (end > s && isspace((unsigned char)end[-1]))
    *--end = '\0';
  return s;
}

/* Blank lines and lines starting with # or ; are comments. */
static int parse_line(struct parser *ps, char *line)
{
  char *s = trim(line);
  char *eq;
  size_t len = strlen(s);
  if (len == 0 || s[0] == '#' || s[0] == ';')
    return 0;
  if (s[0] == '[') {
    if (s[len - 1] != ']')
      return fail(ps, "expected [platform] or [device]");
    s[len - 1] = '\0';
    return open_section(ps, trim(s + 1));
  }
  if ((eq = strchr(s, '=')) == NULL)
    return fail(ps, "expected key = value, [platform] or [device]");
  *eq = '\0';
  return set_key(ps, trim(s), trim(eq + 1));
}

static int parse_file(struct parser *ps, FILE *f)
{
  char line[4096];
  while (fgets(line, sizeof line, f) != NULL) {
    ps->line++;
    if (strchr(line, '\n') == NULL && !feof(f))
      return fail(ps, "line longer than %zu bytes", sizeof line - 2);
    if (parse_line(ps, line) != 0)
      return -1;
  }
  if (ferror(f))
    return fail(ps, "read error");
  end_platform(ps);
  return 0;
}

int fake_config_load(const char *path, const char *icd, struct fake_model *m)
{
  struct parser ps = {.path = path, .icd = icd, .m = m};
  FILE *f;
  int rc;
  memset(m, 0, sizeof *m);
  if ((f = fopen(path, "r")) == NULL) {
    fprintf(stderr, "fakeicd[%s]: %s: %s\n", icd, path, strerror(errno));
    return -1;
  }
  rc = parse_file(&ps, f);
  fclose(f);
  if (rc != 0)
    memset(m, 0, sizeof *m);
  return rc;
}
