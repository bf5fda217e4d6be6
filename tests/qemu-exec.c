/* qemu-exec.c -- lets the test suites run under qemu-user where the kernel cannot run AArch64 programs itself.
 *
 * Criterion starts each test in a new process that executes the test
 * program again; under qemu-user that execve reaches the host kernel,
 * which refuses an AArch64 program unless binfmt_misc hands it to qemu
 * (a machine setting a container seldom has).  Preloaded into the
 * programs under test (LD_PRELOAD in qemu's QEMU_SET_ENV), this execve
 * runs an AArch64 program through $BANKML_TEST_EMULATOR (a static
 * qemu-aarch64, which reads its settings from the QEMU_* variables the
 * child inherits) and everything else, a shell for instance, as asked.
 * Built for the target by .ci/run; never part of the library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

/* Whether path is an ELF program for AArch64. */
static int is_aarch64(const char *path) {
  Elf64_Ehdr h;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, &h, sizeof h);
  close(fd);
  return n == (ssize_t)sizeof h && memcmp(h.e_ident, ELFMAG, SELFMAG) == 0 && h.e_machine == EM_AARCH64;
}

int execve(const char *path, char *const argv[], char *const envp[]) {
  execve_fn real = (execve_fn)dlsym(RTLD_NEXT, "execve");
  const char *emulator = getenv("BANKML_TEST_EMULATOR");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  if (!emulator || !*emulator || !is_aarch64(path)) return real(path, argv, envp);
  size_t argc = 0;
  while (argv[argc]) argc++;
  /* the emulator, the program, its arguments after argv[0] (none when
   * argc is 0), NULL */
  char **args = calloc(argc + 3, sizeof *args);
  if (!args) {
    errno = ENOMEM;
    return -1;
  }
  args[0] = (char *)emulator;
  args[1] = (char *)path;
  for (size_t i = 1; i < argc; i++) args[i + 1] = argv[i];
  int rc = real(emulator, args, envp);
  int saved = errno;
  free(args);
  errno = saved;
  return rc;
}
