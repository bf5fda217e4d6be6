/* icd.c -- what the ICD loader could not give, as notes that say what to install: no loader, no driver registered, a driver that cannot be loaded. */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include "base/env.h"
#include "base/util.h"
#include "devices/device.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define VENDORS_DIR "/etc/OpenCL/vendors"

/* The packages that give a card's OpenCL driver, for each vendor family. */
#define PACKAGES                                                                                  \
  "intel-opencl-icd (Intel), mesa-opencl-icd (AMD and others, through Mesa), or the vendor's own " \
  "driver (NVIDIA, Arm Mali, Qualcomm Adreno); pocl-opencl-icd gives a CPU device, for tests"
#define DRIVERS "the card's OpenCL driver: " PACKAGES

void bml__icd_loader_notes(const bml__cl_loader *ld, bml__notes *notes) {
  if (!ld->loaded) {
    bml__notes_add(notes, "no OpenCL ICD loader: %s cannot be loaded (%s), so no device is listed and bankml-cl "
                   "runs on the CPU; for a GPU, install the loader, ocl-icd-libopencl1 (Debian, Ubuntu), and "
                   DRIVERS, ld->library, ld->error);
    return;
  }
  if (ld->nmissing == 0) return;
  char names[640] = "";
  for (size_t i = 0, used = 0; i < ld->nmissing && used < sizeof names; i++)
    used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", ld->missing[i]);
  bml__notes_add(notes, "the OpenCL ICD loader %s lacks %zu entry point%s bankml-cl calls (%s): each fails with "
                 "BML_ENOTSUP; a newer loader (ocl-icd-libopencl1) has them", ld->library, ld->nmissing,
                 ld->nmissing == 1 ? "" : "s", names);
}

/* Where the loader reads its drivers, as ocl-icd (and the Khronos loader,
 * for the directory) does: OCL_ICD_VENDORS (a directory, one .icd file, or
 * a library), else OPENCL_VENDOR_PATH, else /etc/OpenCL/vendors. */
typedef struct {
  const char *dir, *file, *library; /* one of them */
  char where[640];                  /* how a note names it */
} icd_source;

static void find_source(icd_source *s) {
  const char *vendors, *vendor_path, *filenames;
  bml__env_icd(&vendors, &vendor_path, &filenames);
  struct stat st;
  memset(s, 0, sizeof *s);
  if (vendors && stat(vendors, &st) == 0 && S_ISDIR(st.st_mode)) {
    s->dir = vendors;
  } else if (vendors) {
    size_t len = strlen(vendors);
    if (len > 4 && strcmp(vendors + len - 4, ".icd") == 0)
      s->file = vendors;
    else
      s->library = vendors;
  } else {
    s->dir = vendor_path ? vendor_path : VENDORS_DIR;
  }
  if (vendors)
    snprintf(s->where, sizeof s->where, "OCL_ICD_VENDORS=\"%s\" (read instead of " VENDORS_DIR ")", vendors);
  else if (vendor_path)
    snprintf(s->where, sizeof s->where, "OPENCL_VENDOR_PATH=\"%s\" (read instead of " VENDORS_DIR ")", vendor_path);
  else
    snprintf(s->where, sizeof s->where, VENDORS_DIR);
}

/* Whether the library loads as the loader loads it (it may have already):
 * false with dlerror()'s words in why. */
static bool loads(const char *library, char *why, size_t len) {
  dlerror();
  void *h = dlopen(library, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) h = dlopen(library, RTLD_LAZY | RTLD_LOCAL);
  if (h) {
    dlclose(h);
    return true;
  }
  const char *e = dlerror();
  snprintf(why, len, "%s", e ? e : "dlopen failed");
  return false;
}

/* The library an .icd file names (its first line, trimmed) into lib;
 * false, with a note, when the file cannot be read or names none. */
static bool read_icd(const char *path, char *lib, size_t len, bml__notes *notes) {
  FILE *f = fopen(path, "r");
  if (!f) {
    bml__notes_add(notes, "cannot read %s: %s; the driver it registers is not listed", path, strerror(errno));
    return false;
  }
  if (!fgets(lib, (int)len, f)) lib[0] = '\0';
  fclose(f);
  char *start = lib + strspn(lib, " \t");
  size_t n = strcspn(start, "\r\n");
  while (n > 0 && (start[n - 1] == ' ' || start[n - 1] == '\t')) n--;
  memmove(lib, start, n);
  lib[n] = '\0';
  if (!lib[0]) bml__notes_add(notes, "%s names no library: the driver it registers is not listed", path);
  return lib[0] != '\0';
}

/* Checks one .icd file: 1 when its library cannot be loaded (noted). */
static int check_icd(const char *path, bml__notes *notes) {
  char lib[1024], why[512];
  if (!read_icd(path, lib, sizeof lib, notes)) return 1;
  if (loads(lib, why, sizeof why)) return 0;
  bml__notes_add(notes, "%s names the driver %s, which cannot be loaded (%s): its devices are not listed; "
                 "reinstall the package that installed it, or remove the file", path, lib, why);
  return 1;
}

static int is_icd(const struct dirent *e) {
  size_t len = strlen(e->d_name);
  return len > 4 && strcmp(e->d_name + len - 4, ".icd") == 0;
}

/* Checks the directory's .icd files (in name order); *count: how many. */
static int check_dir(const char *dir, size_t *count, bml__notes *notes) {
  struct dirent **list = NULL;
  int n = scandir(dir, &list, is_icd, alphasort);
  int broken = 0;
  *count = n > 0 ? (size_t)n : 0;
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
    broken += check_icd(path, notes);
    free(list[i]);
  }
  free(list);
  return broken;
}

/* OCL_ICD_FILENAMES: libraries the loader takes besides the .icd files. */
static int check_filenames(size_t *count, bml__notes *notes) {
  const char *vendors, *vendor_path, *filenames;
  bml__env_icd(&vendors, &vendor_path, &filenames);
  int broken = 0;
  for (const char *p = filenames; p && *p;) {
    size_t len = strcspn(p, ":");
    char lib[1024], why[512];
    snprintf(lib, sizeof lib, "%.*s", (int)len, p);
    if (lib[0]) {
      (*count)++;
      if (!loads(lib, why, sizeof why)) {
        bml__notes_add(notes, "OCL_ICD_FILENAMES names the driver %s, which cannot be loaded (%s)", lib, why);
        broken++;
      }
    }
    p += len + (p[len] == ':');
  }
  return broken;
}

void bml__icd_driver_notes(cl_uint platforms, bml__notes *notes) {
  icd_source s;
  find_source(&s);
  size_t count = 0, extra = 0;
  int broken = 0;
  char why[512];
  if (s.dir) {
    broken = check_dir(s.dir, &count, notes);
  } else if (s.file) {
    count = 1;
    broken = check_icd(s.file, notes);
  } else if (s.library) {
    count = 1;
    if (!loads(s.library, why, sizeof why)) {
      bml__notes_add(notes, "OCL_ICD_VENDORS names the driver %s, which cannot be loaded (%s)", s.library, why);
      broken = 1;
    }
  }
  broken += check_filenames(&extra, notes);
  count += extra;
  if (platforms > 0) return;
  if (count == 0)
    bml__notes_add(notes, "no OpenCL driver is registered: %s holds no .icd file, so no device is listed and "
                   "bankml-cl runs on the CPU; for a GPU, install the card's OpenCL driver, which registers its "
                   ".icd file there: " PACKAGES, s.where);
  else if ((size_t)broken == count)
    bml__notes_add(notes, "no OpenCL platform: none of the %zu driver%s registered in %s can be loaded (named "
                   "above), so bankml-cl runs on the CPU; for a GPU, reinstall " DRIVERS, count,
                   count == 1 ? "" : "s", s.where);
  else
    bml__notes_add(notes, "no OpenCL platform: the %zu driver%s registered in %s found no device, so bankml-cl "
                   "runs on the CPU; for a GPU, install " DRIVERS, count, count == 1 ? "" : "s", s.where);
}
