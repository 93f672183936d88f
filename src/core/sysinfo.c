/* Host facts: the Linux kernel version warning (kernels before 5.5 can hang multi-process runs), signal names. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "core/internal.h"

int acc__kernel_below(const char *release, int major, int minor, int patch) {
  if (!release) return -1;
  long v[3] = {0, 0, 0};
  int parsed = 0;
  const char *p = release;
  while (parsed < 3 && *p >= '0' && *p <= '9') {
    char *end;
    v[parsed++] = strtol(p, &end, 10);
    p = end;
    if (*p != '.') break;
    p++;
  }
  if (parsed < 2) return -1; /* needs at least major.minor */
  if (v[0] != major) return v[0] < major;
  if (v[1] != minor) return v[1] < minor;
  return v[2] < patch;
}

int acc__kernel_warning(const char *sysname, const char *release, char *buf, size_t cap) {
  if (!sysname || !release || !buf || cap == 0) return 0;
  buf[0] = '\0';
  if (strcmp(sysname, "Linux") != 0 || acc__kernel_below(release, 5, 5, 0) != 1) return 0;
  snprintf(buf, cap,
           "Detected kernel version %s, which is below the recommended minimum of 5.5.0; this can "
           "cause the process to hang. It is recommended to upgrade the kernel to the minimum "
           "version or higher.",
           release);
  return 1;
}

void acc__warn_old_kernel(void) {
  struct utsname u;
  char msg[512];
  if (uname(&u) == 0 && acc__kernel_warning(u.sysname, u.release, msg, sizeof msg))
    fprintf(stderr, "accelerate: warning: %s\n", msg);
}

const char *acc__signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: {
      static _Thread_local char buf[32];
      snprintf(buf, sizeof buf, "signal %d", sig);
      return buf;
    }
  }
}
