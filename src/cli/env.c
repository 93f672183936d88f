/* `accelerate env`: what a bug report needs, paste-ready. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/config_file.h"
#include "device/device.h"
#include "device/placement.h"
#include "core/env.h"
#include "core/internal.h"
#include "backend/module.h"

static void print_version(FILE *out, const char *what, int v, int nccl) {
  if (nccl) fprintf(out, "%s %d.%d.%d", what, v / 10000, v / 100 % 100, v % 100);
  else fprintf(out, "%s %d.%d", what, v / 1000, v % 1000 / 10);
}

/* What the CUDA module sees (or the fake machine under ACCELERATE_TEST_FAKE_GPUS): the driver,
 * CUDA and NCCL versions and each GPU, or one line saying why there are none. */
static void print_cuda(FILE *out) {
  acc__device_probe_info info;
  int fake = 0;
  acc_result rc = acc__placement_gpus(&info, &fake, 0);
  fprintf(out, "- CUDA: ");
  if (fake) {
    fprintf(out, "%s: ", info.module_path);
  } else if (info.module_path[0]) {
    fprintf(out, "module %s (", info.module_path);
    print_version(out, "CUDA runtime", info.runtime_version, 0);
    if (info.driver_version) print_version(out, ", driver for CUDA", info.driver_version, 0);
    if (info.nccl_version) print_version(out, ", NCCL", info.nccl_version, 1);
    else fprintf(out, ", no NCCL");
    fprintf(out, "): ");
  }
  if (rc != ACC_OK) {
    fprintf(out, "%s\n", acc_last_error());
    return;
  }
  const char *cvd = acc__env_str("CUDA_VISIBLE_DEVICES");
  fprintf(out, "%d GPU%s", info.device_count, info.device_count == 1 ? "" : "s");
  if (cvd) fprintf(out, " (CUDA_VISIBLE_DEVICES=%s)", cvd);
  fprintf(out, "\n");
  for (int i = 0; i < info.device_count && i < ACC__MAX_GPUS; i++) {
    const acc__gpu_info *g = &info.gpus[i];
    fprintf(out, "\tcuda:%d: %s, %.1f GiB, compute capability %d.%d, PCI %s\n", i, g->name,
            (double)g->total_mem / (1024.0 * 1024.0 * 1024.0), g->cc_major, g->cc_minor,
            g->pci_bus_id);
  }
}

static void print_gpus(FILE *out) {
  /* nvidia-smi only when it is on PATH; its absence is not an error. */
  const char *path = acc__env_str("PATH");
  int found = 0;
  char buf[4096];
  while (path && *path && !found) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    snprintf(buf, sizeof buf, "%.*s/nvidia-smi", (int)n, path);
    found = access(buf, X_OK) == 0;
    path = colon ? colon + 1 : NULL;
  }
  if (found) {
    FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
    int lines = 0;
    char line[512];
    while (p && fgets(line, sizeof line, p)) {
      line[strcspn(line, "\n")] = '\0';
      fprintf(out, "%s%s", lines++ ? "; " : "- GPUs visible: ", line);
    }
    if (p) pclose(p);
    if (lines) {
      fprintf(out, "\n");
      return;
    }
  }
  fprintf(out, "- GPUs visible: none\n");
}

int acc_cli_env(int argc, char **argv) {
  const char *explicit_path = NULL;
  for (int i = 1; i < argc; i++) {
    int m = acc_cli_match_opt(argc, argv, &i, "config_file", &explicit_path);
    if (m > 0) continue;
    if (m < 0) {
      fprintf(stderr, "accelerate env: --config_file needs a value\n");
      return 1;
    }
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: accelerate env [--config_file PATH]\n\nPrints the version, build, system and "
             "config file, to paste into a bug report.\n");
      return 0;
    }
    fprintf(stderr, "accelerate env: unknown argument '%s'\n", argv[i]);
    return 1;
  }
  FILE *out = stdout;
  struct utsname u;
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = '\0';
  fprintf(out, "\nCopy-and-paste the text below in your GitHub issue\n\n");
  fprintf(out, "- `Accelerate` version: accelerate-c %s\n", acc_version_string());
  if (uname(&u) == 0)
    fprintf(out, "- Platform: %s-%s-%s (%s)\n", u.sysname, u.release, u.machine, u.version);
  fprintf(out, "- `accelerate` executable: %s\n", n > 0 ? self : "unknown"); /* a C program, not a script */
#ifdef __VERSION__
  fprintf(out, "- C compiler: %s\n", __VERSION__);
#endif
  /* One MPI module per implementation; found, not loaded (each would map its libmpi). */
  char mpi[96] = "", mpath[4096 + 64];
  static const char *const flavors[][2] = {{"mpi-openmpi", "Open MPI"}, {"mpi-mpich", "MPICH"}};
  const acc__module_ops *builtin = NULL;
  for (int i = 0; i < 2; i++)
    /* the load only answers when MPI is built into the library: the file was not found */
    if (acc__module_find(flavors[i][0], "", mpath, sizeof mpath) == ACC_OK ||
        acc__module_load(flavors[i][0], "", &builtin) == ACC_OK)
      snprintf(mpi + strlen(mpi), sizeof mpi - strlen(mpi), "%s%s", mpi[0] ? ", " : "yes (",
               flavors[i][1]);
  if (mpi[0]) snprintf(mpi + strlen(mpi), sizeof mpi - strlen(mpi), ")");
  else snprintf(mpi, sizeof mpi, "no (module not installed)");
  acc_clear_error();
  const acc__device_ops *cuda_mod = NULL;
  const char *nccl = acc__device_module_load("cuda", &cuda_mod) != ACC_OK
                         ? "no (CUDA module not installed)"
                     : cuda_mod->nccl_init ? "yes (CUDA module)"
                                           : "no (CUDA module built without NCCL)";
  acc_clear_error();
  /* gloo: what a job across machines without MPI needs; the hierarchical backend (shm inside a
   * machine, gloo between machines, the default there) comes with it. Found, not loaded. */
  char gloo[4096 + 96];
  if (acc__module_find("gloo", "", mpath, sizeof mpath) == ACC_OK)
    snprintf(gloo, sizeof gloo, "yes (%s)", mpath);
  else
    snprintf(gloo, sizeof gloo, "no (module not installed: no runs across machines without MPI)");
  const int have_gloo = gloo[0] == 'y';
  acc_clear_error();
  fprintf(out, "- Backends: single, shm, gloo: %s, hierarchical (shm + gloo across machines): %s, MPI: %s, NCCL: %s\n",
          gloo, have_gloo ? "yes" : "no (needs the gloo module)", mpi, nccl);
  print_cuda(out);
  fprintf(out, "- CPUs: %ld online\n", sysconf(_SC_NPROCESSORS_ONLN));
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && psize > 0)
    fprintf(out, "- System RAM: %.2f GB\n", (double)pages * (double)psize / (1024.0 * 1024.0 * 1024.0));
  print_gpus(out);
  fprintf(out, "- Environment variables read by accelerate-c that are set:\n");
  if (acc__env_print_set(out, "\t") == 0) fprintf(out, "\tnone\n");

  char path[4096];
  int found = 0;
  acc_cli_cfg cfg;
  acc_result rc = acc_cli_config_find(explicit_path, path, sizeof path, &found);
  fprintf(out, "- `Accelerate` %s:", explicit_path ? "config passed" : "default config");
  if (rc != ACC_OK) {
    fprintf(out, "\n\t%s\n", acc_last_error());
    return 1;
  }
  if (!found) {
    fprintf(out, "\n\tNot found\n");
    return 0;
  }
  fprintf(out, " %s\n", path);
  if (acc_cli_config_load(&cfg, path) != ACC_OK) {
    fprintf(out, "\tcannot be loaded: %s\n", acc_last_error());
    return 1;
  }
  acc_cli_config_print_env(&cfg, out);
  return 0;
}
