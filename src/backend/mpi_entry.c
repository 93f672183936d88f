/* The MPI module's entry point (libaccelerate-mpi-<flavor>.so, one per MPI implementation; CMake
 * sets ACC_MPI_MODULE_NAME to "mpi-openmpi" or "mpi-mpich"): checks the host's table, hands it to the
 * forwarders of mpi_module.c and offers the MPI backend (mpi.c). Compiled only into the module. */
#include <string.h>

#include "backend/module.h"

void acc__mpi_module_set_host(const acc__module_host *host); /* mpi_module.c */

#ifndef ACC_MPI_MODULE_NAME
#error "ACC_MPI_MODULE_NAME (mpi-openmpi, mpi-mpich) is set by CMakeLists.txt"
#endif
static const acc__module_ops ops = {ACC__MODULE_ABI_VERSION, ACC_VERSION_STRING, ACC_MPI_MODULE_NAME,
                                    acc__backend_mpi_create, NULL};

__attribute__((visibility("default"))) const acc__module_ops *acc_module_entry_v1(
    const acc__module_host *host) {
  if (!host || host->abi_version != ACC__MODULE_ABI_VERSION || !host->library_version ||
      strcmp(host->library_version, ACC_VERSION_STRING) != 0)
    return NULL;
  acc__mpi_module_set_host(host);
  return &ops;
}
