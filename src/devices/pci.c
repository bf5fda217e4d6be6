/* pci.c -- PCI ids and names of a function, through a table of methods (libpci, plain sysfs). */
#include "base/log.h"
#include "base/util.h"
#include "devices/sysfs.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pci/pci.h>

/* ---- method 1: libpci ------------------------------------------------------------ */
/* libpci reports errors through a callback that must not return (its default
 * one exits) and that gets no context pointer.  So one use of libpci at a time runs
 * under a lock, with the state here: lp_error() records the message and jumps
 * back to lp_run(), which frees what that use held.  libpci never prints:
 * warnings become notes, debug messages go to the "pci" log category. */
static struct {
  pthread_mutex_t lock;
  sigjmp_buf jmp;
  char msg[256], last_warning[256];
  bml__notes *notes;
  struct pci_access *acc; /* the use's handles, released by lp_run */
  struct pci_dev *dev;
} lp = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Formats a libpci message into buf, without its trailing newline. */
static BML_PRINTF(3, 0) void lp_format(char *buf, size_t cap, const char *fmt, va_list ap) {
  vsnprintf(buf, cap, fmt, ap);
  size_t n = strlen(buf);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) buf[--n] = '\0';
}

/* libpci declares the hook noreturn with its own PCI_NONRET, an attribute of
 * the pointer's type (clang 16 refuses _Noreturn there: not part of a type) */
static PCI_NONRET BML_PRINTF(1, 2) void lp_error(char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lp_format(lp.msg, sizeof lp.msg, fmt, ap);
  va_end(ap);
  siglongjmp(lp.jmp, 1);
}

static BML_PRINTF(1, 2) void lp_warning(char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  lp_format(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (strcmp(buf, lp.last_warning) == 0) return; /* libpci repeats itself */
  bml__notes_add(lp.notes, "libpci: warning: %s", buf);
  snprintf(lp.last_warning, sizeof lp.last_warning, "%s", buf);
}

static BML_PRINTF(1, 2) void lp_debug(char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  lp_format(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (buf[0]) bml__debug(BML_CAT_PCI, "libpci: %s", buf);
}

/* Opens libpci on fs's sysfs tree; errors jump out through lp_error. */
static struct pci_access *lp_open(const bml__sysfs *fs) {
  char path[PATH_MAX];
  struct pci_access *acc = lp.acc = pci_alloc();
  acc->error = lp_error;
  acc->warning = lp_warning;
  acc->debug = lp_debug;
  acc->debugging = bml__debug_on(BML_CAT_PCI);
  acc->method = PCI_ACCESS_SYS_BUS_PCI;
  acc->id_lookup_mode = 0; /* no DNS, no ~/.pciids-cache */
  if (bml__sysfs_path(fs, "bus/pci", path, sizeof path) != 0) lp_error("sysfs root too long");
  if (pci_set_param(acc, "sysfs.path", path) != 0) lp_error("no parameter \"sysfs.path\"");
  pci_set_param(acc, "hwdb.disable", "1"); /* names from pci.ids only, as PCI_LOOKUP_NO_HWDB */
  if (fs->pci_ids[0]) pci_set_name_list_path(acc, (char *)fs->pci_ids, 0);
  pci_init(acc);
  return acc;
}

/* Releases the use's handles; an error on the way is ignored. */
static void lp_close(void) {
  if (sigsetjmp(lp.jmp, 0) == 0) {
    if (lp.dev) pci_free_dev(lp.dev);
    lp.dev = NULL;
    if (lp.acc) pci_cleanup(lp.acc);
  }
  lp.dev = NULL;
  lp.acc = NULL;
}

typedef int (*lp_job)(struct pci_access *acc, bml__pci_addr addr, bml__pci_info *out);

/* Runs job with libpci opened for it.  Returns the job's result, or BML_EIO after
 * a note with libpci's message when libpci failed. */
static int lp_run(lp_job job, const bml__sysfs *fs, bml__pci_addr addr, bml__pci_info *out,
                  bml__notes *notes) {
  int rc;
  pthread_mutex_lock(&lp.lock);
  lp.notes = notes;
  lp.last_warning[0] = '\0';
  if (sigsetjmp(lp.jmp, 0) == 0) {
    rc = job(lp_open(fs), addr, out);
  } else {
    bml__notes_add(notes, "libpci: %s", lp.msg);
    rc = BML_EIO;
  }
  lp_close();
  lp.notes = NULL;
  pthread_mutex_unlock(&lp.lock);
  return rc;
}

/* Vendor and device names from pci.ids ("" where it has none). */
static int lp_names(struct pci_access *acc, bml__pci_addr addr, bml__pci_info *out) {
  const int flags = PCI_LOOKUP_NO_NUMBERS | PCI_LOOKUP_NO_HWDB;
  char buf[512];
  (void)addr;
  const char *v = pci_lookup_name(acc, buf, sizeof buf, PCI_LOOKUP_VENDOR | flags, out->vendor_id);
  snprintf(out->vendor_name, sizeof out->vendor_name, "%s", v ? v : "");
  const char *d = pci_lookup_name(acc, buf, sizeof buf, PCI_LOOKUP_DEVICE | flags, out->vendor_id,
                                  out->device_id);
  snprintf(out->device_name, sizeof out->device_name, "%s", d ? d : "");
  if (acc->id_load_failed) bml__notes_add(lp.notes, "libpci: no names: cannot read %s", acc->id_file_name);
  return 0;
}

/* The one place that knows libpci's version: 3.8 added PCI_FILL_CLASS_EXT
 * and PCI_FILL_SUBSYS; before, the same come from config space. */
#if defined(PCI_FILL_CLASS_EXT) && defined(PCI_FILL_SUBSYS)
#define LP_FILL_EXT (PCI_FILL_CLASS_EXT | PCI_FILL_SUBSYS)
static void lp_fill_ext(struct pci_dev *d, int known, bml__pci_info *out) {
  if (known & PCI_FILL_CLASS_EXT) {
    out->class_code |= d->prog_if;
    out->revision = d->rev_id;
  }
  if (known & PCI_FILL_SUBSYS) {
    out->subsys_vendor_id = d->subsys_vendor_id;
    out->subsys_device_id = d->subsys_id;
  }
}
#else
#define LP_FILL_EXT 0
static void lp_fill_ext(struct pci_dev *d, int known, bml__pci_info *out) {
  (void)known;
  out->class_code |= pci_read_byte(d, PCI_CLASS_PROG);
  out->revision = pci_read_byte(d, PCI_REVISION_ID);
  if ((pci_read_byte(d, PCI_HEADER_TYPE) & 0x7f) != PCI_HEADER_TYPE_NORMAL) return;
  out->subsys_vendor_id = pci_read_word(d, PCI_SUBSYSTEM_VENDOR_ID);
  out->subsys_device_id = pci_read_word(d, PCI_SUBSYSTEM_ID);
}
#endif

/* Ids, class and names of addr. */
static int lp_ids(struct pci_access *acc, bml__pci_addr addr, bml__pci_info *out) {
  struct pci_dev *d = lp.dev = pci_get_dev(acc, (int)addr.domain, addr.bus, addr.dev, addr.fn);
  int known = pci_fill_info(d, PCI_FILL_IDENT | PCI_FILL_CLASS | LP_FILL_EXT);
  if (!(known & PCI_FILL_IDENT) || d->vendor_id == 0 || d->vendor_id == 0xffff) {
    bml__notes_add(lp.notes, "libpci: vendor id 0x%04x is not a device's", (unsigned)d->vendor_id);
    return BML_EFORMAT;
  }
  out->vendor_id = d->vendor_id;
  out->device_id = d->device_id;
  out->class_code = (uint32_t)d->device_class << 8;
  lp_fill_ext(d, known, out);
  return lp_names(acc, addr, out);
}

/* ---- method 2: plain sysfs reads ---------------------------------------------------- */
/* The id files of a function's directory; where one is missing, the same
 * bytes of its config space (whose first 64 bytes anyone may read). */
enum { ID_VENDOR, ID_DEVICE, ID_CLASS, ID_REVISION, ID_SUBSYS_VENDOR, ID_SUBSYS_DEVICE, ID_COUNT };
static const struct {
  const char *file;
  unsigned offset, size; /* in config space, little-endian */
  bool header0_only;     /* only in a type 0 (non-bridge) header */
} id_files[ID_COUNT] = {
    [ID_VENDOR] = {"vendor", 0x00, 2, false},
    [ID_DEVICE] = {"device", 0x02, 2, false},
    [ID_CLASS] = {"class", 0x09, 3, false},
    [ID_REVISION] = {"revision", 0x08, 1, false},
    [ID_SUBSYS_VENDOR] = {"subsystem_vendor", 0x2c, 2, true},
    [ID_SUBSYS_DEVICE] = {"subsystem_device", 0x2e, 2, true},
};

typedef struct {
  uint64_t v[ID_COUNT];
  bool have[ID_COUNT];
  bool bad[ID_COUNT]; /* the file is there and is not a number in range */
} pci_ids;

/* Takes from config space (cfg, len bytes) the ids that no file gave. */
static void ids_from_config(const uint8_t *cfg, size_t len, pci_ids *ids) {
  bool header0 = len > 0x0e && (cfg[0x0e] & 0x7f) == 0;
  for (int i = 0; i < ID_COUNT; i++) {
    unsigned off = id_files[i].offset, size = id_files[i].size;
    if (ids->have[i] || off + size > len || (id_files[i].header0_only && !header0)) continue;
    ids->v[i] = 0;
    for (unsigned b = size; b-- > 0;) ids->v[i] = ids->v[i] << 8 | cfg[off + b];
    ids->have[i] = true;
  }
}

/* Reads the ids of the function named name ("0000:03:00.0"). */
static void read_ids(const bml__sysfs *fs, const char *name, pci_ids *ids, bml__notes *notes) {
  char rel[96];
  uint8_t cfg[64];
  size_t len = 0;
  bool missing = false;
  for (int i = 0; i < ID_COUNT; i++) {
    snprintf(rel, sizeof rel, "bus/pci/devices/%s/%s", name, id_files[i].file);
    uint64_t max = (UINT64_C(1) << (8 * id_files[i].size)) - 1;
    int rc = bml__sysfs_read_u64(fs, rel, max, &ids->v[i], notes);
    ids->have[i] = rc == 0;
    ids->bad[i] = rc != 0 && rc != BML_ENODEV;
    missing |= rc == BML_ENODEV;
  }
  snprintf(rel, sizeof rel, "bus/pci/devices/%s/config", name);
  if (missing && bml__sysfs_read_raw(fs, rel, cfg, sizeof cfg, &len) == 0)
    ids_from_config(cfg, len, ids);
}

static bool ids_name_a_device(const pci_ids *ids) {
  return ids->have[ID_VENDOR] && ids->v[ID_VENDOR] != 0 && ids->v[ID_VENDOR] != 0xffff;
}

/* Adds a note on why the ids of name are not there.  Returns BML_ENODEV
 * when there is no such function, else BML_EFORMAT. */
static int ids_missing(const bml__sysfs *fs, const char *name, bml__notes *notes) {
  char rel[64], path[PATH_MAX];
  snprintf(rel, sizeof rel, "bus/pci/devices/%s", name);
  if (bml__sysfs_path(fs, rel, path, sizeof path) != 0) snprintf(path, sizeof path, "%s", rel);
  bool exists = access(path, F_OK) == 0;
  bml__notes_add(notes, "sysfs: %s: %s", path, exists ? "no vendor id" : "no such PCI function");
  return exists ? BML_EFORMAT : BML_ENODEV;
}

/* libpci reads the id files with strtol and keeps what fits (0x1234567 a
 * vendor 0x4567) and blocks on a file that is not a regular one (a FIFO
 * in a test's tree): the six id files libpci may read are read here first,
 * and where one is there but bad the plain sysfs method (which refuses it,
 * or does without it, with a note) takes over. */
static int method_libpci(const bml__sysfs *fs, bml__pci_addr addr, bml__pci_info *out,
                         bml__notes *notes) {
  char name[BML__PCI_ADDR_SIZE];
  pci_ids ids = {0};
  bml__notes quiet = {0};
  bml__pci_addr_format(addr, name);
  read_ids(fs, name, &ids, &quiet);
  bml__notes_free(&quiet);
  bool bad = false;
  for (int i = 0; i < ID_COUNT; i++) bad |= ids.bad[i];
  if (bad) {
    bml__notes_add(notes, "libpci: not used for %s: its id files do not all read as numbers", name);
    return BML_EFORMAT;
  }
  return lp_run(lp_ids, fs, addr, out, notes);
}

static int method_sysfs(const bml__sysfs *fs, bml__pci_addr addr, bml__pci_info *out,
                        bml__notes *notes) {
  char name[BML__PCI_ADDR_SIZE];
  pci_ids ids = {0};
  bml__pci_addr_format(addr, name);
  read_ids(fs, name, &ids, notes);
  if (!ids_name_a_device(&ids)) return ids_missing(fs, name, notes);
  out->vendor_id = (uint16_t)ids.v[ID_VENDOR];
  out->device_id = (uint16_t)ids.v[ID_DEVICE];
  out->class_code = (uint32_t)ids.v[ID_CLASS];
  out->revision = (uint8_t)ids.v[ID_REVISION];
  out->subsys_vendor_id = (uint16_t)ids.v[ID_SUBSYS_VENDOR];
  out->subsys_device_id = (uint16_t)ids.v[ID_SUBSYS_DEVICE];
  lp_run(lp_names, fs, addr, out, notes); /* names from pci.ids, where libpci can */
  return 0;
}

/* ---- the methods, in the order they are tried -------------------------------------- */
static const struct {
  const char *name;
  int (*lookup)(const bml__sysfs *fs, bml__pci_addr addr, bml__pci_info *out, bml__notes *notes);
} pci_methods[] = {
    {"libpci", method_libpci},
    {"sysfs", method_sysfs},
};

int bml__pci_lookup(const bml__sysfs *fs, bml__pci_addr addr, bml__pci_info *out,
                    bml__notes *notes) {
  int rc = addr.valid ? BML_ENODEV : BML_EINVAL;
  bml__notes dropped = {0};
  if (!notes) notes = &dropped;
  *out = (bml__pci_info){.numa_node = -1};
  for (size_t i = 0; i < BML_ARRAY_SIZE(pci_methods) && addr.valid && !out->method; i++) {
    *out = (bml__pci_info){.numa_node = -1}; /* nothing kept from a method that failed */
    rc = pci_methods[i].lookup(fs, addr, out, notes);
    if (rc == 0) out->method = pci_methods[i].name;
  }
  if (rc == 0) bml__sysfs_pci_attrs(fs, addr, out, notes);
  bml__notes_free(&dropped);
  return rc;
}

/* ---- display functions -------------------------------------------------------------- */

static uint64_t addr_key(bml__pci_addr a) {
  return (uint64_t)a.domain << 16 | (uint64_t)a.bus << 8 | (uint64_t)a.dev << 3 | a.fn;
}

static int addr_cmp(const void *x, const void *y) {
  uint64_t a = addr_key(*(const bml__pci_addr *)x), b = addr_key(*(const bml__pci_addr *)y);
  return a < b ? -1 : a > b;
}

/* Is the function named name a display controller (base class 0x03) of vendor? */
static bool is_display_of(const bml__sysfs *fs, const char *name, uint16_t vendor) {
  pci_ids ids = {0};
  read_ids(fs, name, &ids, NULL);
  return ids.have[ID_CLASS] && ids.v[ID_CLASS] >> 16 == 0x03 && ids.have[ID_VENDOR] &&
         ids.v[ID_VENDOR] == vendor;
}

int bml__pci_find_display(const bml__sysfs *fs, uint16_t vendor, bml__pci_addr *out, size_t cap,
                          size_t *count) {
  char path[PATH_MAX];
  bml__pci_addr *found = NULL, a;
  size_t n = 0, room = 0;
  int rc = 0;
  *count = 0;
  if (bml__sysfs_path(fs, "bus/pci/devices", path, sizeof path) != 0) return BML_ERANGE;
  DIR *dir = opendir(path);
  if (!dir) return 0; /* no PCI here */
  for (struct dirent *e; (e = readdir(dir));) {
    if (bml__pci_addr_parse(e->d_name, &a) != 0 || !is_display_of(fs, e->d_name, vendor)) continue;
    if (n == room) {
      room = room ? 2 * room : 8;
      bml__pci_addr *more = realloc(found, room * sizeof *more);
      if (!more) {
        rc = BML_ENOMEM;
        goto fail;
      }
      found = more;
    }
    found[n++] = a;
  }
  if (n > 1) qsort(found, n, sizeof *found, addr_cmp);
  *count = n;
  if (n) memcpy(out, found, (n < cap ? n : cap) * sizeof *out);
fail:
  free(found);
  closedir(dir);
  return rc;
}
