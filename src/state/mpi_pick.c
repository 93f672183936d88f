/* The MPI module that matches the launcher. Each MPI implementation has its own module
 * (libaccelerate-mpi-openmpi.so, libaccelerate-mpi-mpich.so): an MPI library started under a
 * process manager it does not speak either aborts the process inside MPI_Init (Open MPI under
 * Slurm's pmi2) or runs every task as rank 0 of 1 (MPICH under PMIx), and neither can be undone.
 * So the module is chosen from the environment, never by trying. See docs/slurm-and-mpi.md. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/env.h"
#include "state/mpi_pick.h"

static const char *flavor_name(const char *f) {
  return strcmp(f, "openmpi") == 0 ? "Open MPI" : "MPICH";
}

static int has(const char *name) {
  const char *v = acc__env_str(name);
  return v && *v;
}

const char *acc__mpi_flavor(const acc__env_info *e, const char **why) {
  const char *force = acc__env_str("ACCELERATE_MPI_FLAVOR");
  if (force && *force) {
    *why = "ACCELERATE_MPI_FLAVOR";
    if (strcasecmp(force, "openmpi") == 0) return "openmpi";
    if (strcasecmp(force, "mpich") == 0) return "mpich";
  }
  /* accelerate launch's own processes are no MPI processes: PMI variables they carry come from
   * an outer srun (the per-node recipe) and describe another group. Under --use_mpi the launcher
   * removes ACCELERATE_RUN_ID, so mpirun's variables decide. */
  if (strcmp(e->launcher, "accelerate") == 0) {
    *why = "accelerate launch";
    return NULL;
  }
  /* The process manager that started this process, whatever variables the ranks were read from
   * (a torchrun-style environment set under mpirun still runs under mpirun). */
  if (has("OMPI_COMM_WORLD_RANK")) {
    *why = "Open MPI's mpirun (OMPI_COMM_WORLD_RANK)";
    return "openmpi";
  }
  if (has("MV2_COMM_WORLD_RANK")) {
    *why = "MVAPICH's mpirun (MV2_COMM_WORLD_RANK)";
    return "mpich";
  }
  if (has("MPI_LOCALRANKID")) {
    *why = "MPICH's Hydra (PMI_RANK, MPI_LOCALRANKID)";
    return "mpich";
  }
  int srun = strcmp(e->launcher, "slurm") == 0;
  if (has("PMIX_RANK")) {
    *why = srun ? "srun --mpi=pmix (PMIX_RANK)" : "a PMIx process manager (PMIX_RANK)";
    return "openmpi";
  }
  if (has("PMI_RANK")) {
    *why = srun ? "srun --mpi=pmi2 (PMI_RANK)" : "a PMI process manager (PMI_RANK)";
    return "mpich";
  }
  *why = srun ? "srun --mpi=none (no PMI_RANK, no PMIX_RANK)" : "no MPI launcher";
  return NULL;
}

acc_result acc__mpi_module_for(const acc__env_info *e, const acc__module_ops **mod) {
  const char *force = acc__env_str("ACCELERATE_MPI_FLAVOR");
  if (force && *force && strcasecmp(force, "openmpi") != 0 && strcasecmp(force, "mpich") != 0)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "ACCELERATE_MPI_FLAVOR=\"%s\" is not one of openmpi, mpich", force);
  const char *why = "";
  const char *flavor = acc__mpi_flavor(e, &why);
  if (!flavor) {
    if (strcmp(e->launcher, "slurm") == 0)
      return acc__error(ACC_ERR_NOT_SUPPORTED,
                        "the MPI backend cannot start under %s: srun gave the tasks no process "
                        "manager MPI can join. Run srun --mpi=pmix (Open MPI) or --mpi=pmi2 "
                        "(MPICH), or keep all tasks on one node for the shared-memory backend",
                        why);
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "the MPI backend needs an MPI launcher (Open MPI's mpirun, MPICH's "
                      "mpirun.mpich, srun --mpi=pmix or --mpi=pmi2) but this process was started "
                      "by %s (launch environment: %s); set ACCELERATE_MPI_FLAVOR=openmpi or mpich "
                      "if the MPI runtime can start anyway", why, e->launcher);
  }
  char name[32], hint[512];
  snprintf(name, sizeof name, "mpi-%s", flavor);
  snprintf(hint, sizeof hint,
           "the launcher is %s, so the %s module is needed; it is built when %s is installed "
           "(Debian: %s) and installed in <libdir>/accelerate/, or set ACCELERATE_MODULE_DIR to "
           "its directory",
           why, flavor_name(flavor), flavor_name(flavor),
           strcmp(flavor, "openmpi") == 0 ? "libopenmpi-dev" : "libmpich-dev");
  acc_result rc = acc__module_load(name, hint, mod);
  if (rc == ACC_OK) return ACC_OK;
  /* Only the other flavor's module there: say so, and load nothing. */
  const char *other = strcmp(flavor, "openmpi") == 0 ? "mpich" : "openmpi";
  char oname[32], opath[4096 + 64], first[2048];
  snprintf(first, sizeof first, "%s", acc_last_error());
  snprintf(oname, sizeof oname, "mpi-%s", other);
  char mpath[4096 + 64];
  if (acc__module_find(name, "", mpath, sizeof mpath) != ACC_OK && /* ours is missing, */
      acc__module_find(oname, "", opath, sizeof opath) == ACC_OK)  /* the other is there */
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "the launcher is %s, which only %s can join, but the installed MPI module "
                      "is %s's (%s): it is not loaded, because %s cannot join processes started "
                      "this way (it aborts the process inside MPI_Init or runs every process as "
                      "rank 0 of 1, neither of which the library could undo). Build the %s module "
                      "(install %s and rebuild: one module is built per MPI found) or launch with %s",
                      why, flavor_name(flavor), flavor_name(other), opath, flavor_name(other),
                      flavor_name(flavor),
                      strcmp(flavor, "openmpi") == 0 ? "libopenmpi-dev" : "libmpich-dev",
                      strcmp(other, "openmpi") == 0 ? "Open MPI's mpirun or srun --mpi=pmix"
                                                    : "MPICH's mpirun.mpich or srun --mpi=pmi2");
  acc__error(rc, "%s", first);
  return rc;
}
