/* A program of the build (linked with libaccelerate.a, in a folder of the build tree below the
 * modules, as the examples, tests and benchmarks are) finds the modules of its own build with
 * ACCELERATE_MODULE_DIR unset: gloo, the MPI modules and the CUDA module (found and loaded even
 * where no driver lets it start). With the variable set to another folder, that folder alone is
 * searched and the error lists it.
 * Usage: test_module_build_tree <build dir> <gloo 0|1> <mpi flavors, comma-separated or -> <cuda 0|1> */
#include <limits.h>
#include <stdlib.h>

#include "acc_test.h"
#include "backend/module.h"
#include "device/device.h"

static void expect_in_build(const char *name, const char *build) {
  char path[PATH_MAX + 64], want[PATH_MAX + 64], real[PATH_MAX];
  CHECK(realpath(build, real) != NULL, "build dir %s", build);
  snprintf(want, sizeof want, "%s/libaccelerate-%s.so", real, name);
  acc_result rc = acc__module_find(name, "(test)", path, sizeof path);
  CHECK(rc == ACC_OK, "the %s module is found from the build tree: %s", name, acc_last_error());
  if (rc == ACC_OK) CHECK(strcmp(path, want) == 0, "%s: found %s, expected %s", name, path, want);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: test_module_build_tree <build dir> <gloo> <mpi flavors|-> <cuda>\n");
    return 2;
  }
  const char *build = argv[1];
  unsetenv("ACCELERATE_MODULE_DIR");
  unsetenv("ACCELERATE_CUDA_MODULE");
  int checked = 0;
  if (atoi(argv[2])) {
    expect_in_build("gloo", build);
    const acc__module_ops *ops = NULL;
    CHECK_OK(acc__module_load("gloo", "(test)", &ops));
    CHECK(ops && strcmp(ops->name, "gloo") == 0, "the gloo module loads");
    checked++;
  }
  if (strcmp(argv[3], "-") != 0) {
    char list[256];
    snprintf(list, sizeof list, "%s", argv[3]);
    for (char *f = strtok(list, ","); f; f = strtok(NULL, ",")) {
      char name[64];
      snprintf(name, sizeof name, "mpi-%s", f);
      expect_in_build(name, build);
      checked++;
    }
  }
  if (atoi(argv[4])) {
    expect_in_build("cuda", build);
    const acc__device_ops *ops = NULL;
    CHECK_OK(acc__device_module_load("cuda", &ops)); /* loads without a driver; probe says why */
    CHECK(ops != NULL, "the CUDA module loads");
    checked++;
  }
  CHECK(checked > 0, "this build has at least one module to find");
  /* ACCELERATE_MODULE_DIR still comes first, and alone */
  setenv("ACCELERATE_MODULE_DIR", "/nonexistent-acc-module-dir", 1);
  char path[PATH_MAX + 64];
  CHECK_ERR(acc__module_find("gloo", "build it with libgloo-dev installed", path, sizeof path),
            ACC_ERR_NOT_SUPPORTED, "/nonexistent-acc-module-dir/libaccelerate-gloo.so");
  CHECK(strstr(acc_last_error(), "build it with libgloo-dev installed") != NULL,
        "the error says how the module is built: %s", acc_last_error());
  unsetenv("ACCELERATE_MODULE_DIR");
  /* a module that no directory has: every directory searched is named */
  CHECK_ERR(acc__module_find("nosuch", "(hint)", path, sizeof path), ACC_ERR_NOT_SUPPORTED,
            "libaccelerate-nosuch.so");
  char real[PATH_MAX];
  if (realpath(build, real)) {
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "%s/libaccelerate-nosuch.so", real);
    CHECK(strstr(acc_last_error(), want) != NULL, "the build directory is among those searched: %s",
          acc_last_error());
  }
  return acc_test_finish("module_build_tree");
}
