/* mpirun flavor detection from `mpirun --version` outputs, the command-line forms per flavor, and
 * the Linux kernel version warning (below 5.5.0), as pure functions. */
#include <string.h>

#include "acc_test.h"
#include "cli/mpirun.h"
#include "core/internal.h"

/* Open MPI's text was captured from this build machine (Debian openmpi-bin 4.1.4); the Intel
 * MPI, MVAPICH (mpirun_rsh and Hydra) and MPICH texts follow those launchers' version banners. */
static const char openmpi4[] =
    "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n";
static const char openmpi1[] =
    "mpirun (Open MPI) 1.10.7\n\nReport bugs to http://www.open-mpi.org/community/help/\n";
static const char orterun[] =
    "orterun (OpenRTE) 2.1.1\n\nReport bugs to http://www.open-mpi.org/community/help/\n";
static const char intel[] =
    "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: c2e19c2f3e)\n"
    "Copyright 2003-2023, Intel Corporation.\n";
static const char mvapich_rsh[] = "OSU MVAPICH2 2.3.7-1\n";
static const char mvapich_hydra[] =
    "HYDRA build details:\n    Version:                                 3.2.1\n"
    "    Configure options:                       '--prefix=/opt/mvapich2-2.3.7' "
    "'--with-device=ch3:mrail' 'MVAPICH2_VERSION=2.3.7'\n";
static const char mpich[] =
    "HYDRA build details:\n    Version:                                 4.0.2\n"
    "    Release Date:                            Thu Apr  7 12:34:45 CDT 2022\n"
    "    Configure options:                       '--prefix=/usr' '--with-device=ch4:ofi'\n";

static void render(char **argv, char *buf, size_t cap) {
  size_t pos = 0;
  buf[0] = '\0';
  for (int i = 0; argv[i]; i++)
    pos += (size_t)snprintf(buf + pos, cap - pos, "%s%s", i ? " " : "", argv[i]);
}

static void test_flavors(void) {
  CHECK(acc_mpi_flavor_parse(openmpi4) == ACC_MPI_OPENMPI, "Open MPI 4");
  CHECK(acc_mpi_flavor_parse(openmpi1) == ACC_MPI_OPENMPI, "Open MPI 1");
  CHECK(acc_mpi_flavor_parse(orterun) == ACC_MPI_OPENMPI, "OpenRTE");
  CHECK(acc_mpi_flavor_parse(intel) == ACC_MPI_INTEL, "Intel MPI");
  CHECK(acc_mpi_flavor_parse(mvapich_rsh) == ACC_MPI_MVAPICH, "MVAPICH (mpirun_rsh)");
  CHECK(acc_mpi_flavor_parse(mvapich_hydra) == ACC_MPI_MVAPICH, "MVAPICH (Hydra)");
  CHECK(acc_mpi_flavor_parse(mpich) == ACC_MPI_MPICH, "MPICH");
  CHECK(acc_mpi_flavor_parse("") == ACC_MPI_UNKNOWN, "empty");
  CHECK(acc_mpi_flavor_parse(NULL) == ACC_MPI_UNKNOWN, "NULL");
  CHECK(acc_mpi_flavor_parse("bash: mpirun: command not found") == ACC_MPI_UNKNOWN, "not found");
  CHECK(acc_mpi_flavor_exports_with_x(ACC_MPI_OPENMPI) &&
            !acc_mpi_flavor_exports_with_x(ACC_MPI_INTEL) &&
            !acc_mpi_flavor_exports_with_x(ACC_MPI_MVAPICH),
        "-x only for Open MPI");
}

static void test_forms(void) {
  char *argv[16], buf[512];
  acc_mpirun_prefix(ACC_MPI_OPENMPI, "mpirun", "/home/user/hostfile", "4", "16", argv);
  render(argv, buf, sizeof buf);
  CHECK(
      strcmp(buf, "mpirun --hostfile /home/user/hostfile --npernode 4 -n 16 --bind-to socket") == 0,
      "%s", buf);
  static const acc_mpi_flavor hydra[] = {ACC_MPI_INTEL, ACC_MPI_MVAPICH, ACC_MPI_MPICH,
                                         ACC_MPI_UNKNOWN};
  for (size_t i = 0; i < 4; i++) {
    acc_mpirun_prefix(hydra[i], "mpirun", "/home/user/hostfile", "4", "16", argv);
    render(argv, buf, sizeof buf);
    CHECK(strcmp(buf, "mpirun -f /home/user/hostfile -ppn 4 -n 16") == 0, "%s: %s",
          acc_mpi_flavor_name(hydra[i]), buf);
  }
  /* --use_mpi without a hostfile: just the process count (no binding). */
  acc_mpirun_prefix(ACC_MPI_OPENMPI, "mpiexec", NULL, "2", "2", argv);
  render(argv, buf, sizeof buf);
  CHECK(strcmp(buf, "mpiexec -n 2") == 0, "%s", buf);
  acc_mpirun_prefix(ACC_MPI_INTEL, "mpirun", NULL, "3", "3", argv);
  render(argv, buf, sizeof buf);
  CHECK(strcmp(buf, "mpirun -n 3") == 0, "%s", buf);
}

static void test_kernel(void) {
  char msg[512];
  static const struct {
    const char *rel;
    int below;
  } k[] = {{"5.4.0-150-generic", 1},
           {"4.19.0-25-amd64", 1},
           {"3.10.0-1160.el7.x86_64", 1},
           {"5.5.0", 0},
           {"5.5", 0},
           {"5.10.0-28-amd64", 0},
           {"6.1.0-18-amd64", 0},
           {"5.15.153.1-microsoft-standard-WSL2", 0},
           {"5.4", 1},
           {"10.0.0", 0},
           {"garbage", -1},
           {"5", -1},
           {"", -1}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    CHECK(acc__kernel_below(k[i].rel, 5, 5, 0) == k[i].below, "%s: %d, want %d", k[i].rel,
          acc__kernel_below(k[i].rel, 5, 5, 0), k[i].below);
  CHECK(acc__kernel_warning("Linux", "5.4.0-150-generic", msg, sizeof msg) == 1 &&
            strstr(msg,
                   "Detected kernel version 5.4.0-150-generic, which is below the recommended "
                   "minimum of 5.5.0; this can cause the process to hang.") != NULL,
        "warning text: %s", msg);
  CHECK(acc__kernel_warning("Linux", "6.1.0", msg, sizeof msg) == 0 && msg[0] == '\0',
        "no warning on 6.1");
  CHECK(acc__kernel_warning("Darwin", "4.0.0", msg, sizeof msg) == 0, "Linux only");
  CHECK(acc__kernel_warning("Linux", "garbage", msg, sizeof msg) == 0, "unparsable: no warning");
}

int main(void) {
  test_flavors();
  test_forms();
  test_kernel();
  return acc_test_finish("cli_mpirun");
}
