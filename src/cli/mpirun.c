/* mpirun flavors: Open MPI takes --hostfile/--npernode/--bind-to and -x to export variables;
 * the Hydra launchers (Intel MPI, MVAPICH, MPICH) take -f/-ppn and forward the environment. */
#include "cli/mpirun.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>

static int contains_nocase(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = hay; *p; p++)
    if (strncasecmp(p, needle, n) == 0) return 1;
  return 0;
}

acc_mpi_flavor acc_mpi_flavor_parse(const char *out) {
  if (!out || !*out) return ACC_MPI_UNKNOWN;
  if (strstr(out, "Open MPI") || strstr(out, "OpenRTE")) return ACC_MPI_OPENMPI;
  if (strstr(out, "Intel(R) MPI") || contains_nocase(out, "intel mpi")) return ACC_MPI_INTEL;
  if (contains_nocase(out, "mvapich")) return ACC_MPI_MVAPICH;
  if (contains_nocase(out, "mpich") || strstr(out, "HYDRA")) return ACC_MPI_MPICH;
  return ACC_MPI_UNKNOWN;
}

const char *acc_mpi_flavor_name(acc_mpi_flavor f) {
  switch (f) {
    case ACC_MPI_OPENMPI:
      return "Open MPI";
    case ACC_MPI_INTEL:
      return "Intel MPI";
    case ACC_MPI_MVAPICH:
      return "MVAPICH";
    case ACC_MPI_MPICH:
      return "MPICH";
    default:
      return "unknown MPI";
  }
}

int acc_mpi_flavor_exports_with_x(acc_mpi_flavor f) { return f == ACC_MPI_OPENMPI; }

int acc_mpirun_prefix(acc_mpi_flavor f, const char *mpirun, const char *hostfile,
                      const char *per_node, const char *total, char **argv) {
  int c = 0;
  argv[c++] = (char *)mpirun;
  if (f == ACC_MPI_OPENMPI) {
    if (hostfile) {
      argv[c++] = "--hostfile";
      argv[c++] = (char *)hostfile;
      argv[c++] = "--npernode";
      argv[c++] = (char *)per_node;
    }
    argv[c++] = "-n";
    argv[c++] = (char *)total;
    if (hostfile) {
      argv[c++] = "--bind-to";
      argv[c++] = "socket";
    }
  } else {
    if (hostfile) {
      argv[c++] = "-f";
      argv[c++] = (char *)hostfile;
      argv[c++] = "-ppn";
      argv[c++] = (char *)per_node;
    }
    argv[c++] = "-n";
    argv[c++] = (char *)total;
  }
  argv[c] = NULL;
  return c;
}

acc_mpi_flavor acc_mpi_flavor_probe(const char *mpirun) {
  char cmd[512];
  /* mpirun is "mpirun" or "mpiexec": no shell metacharacters to quote. */
  snprintf(cmd, sizeof cmd, "%s --version 2>&1", mpirun);
  fflush(NULL);
  FILE *p = popen(cmd, "r");
  if (!p) return ACC_MPI_UNKNOWN;
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  buf[n] = '\0';
  int st = pclose(p);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) == 127) return ACC_MPI_UNKNOWN;
  return acc_mpi_flavor_parse(buf);
}
