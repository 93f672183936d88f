/* Allocation-failure torture (regression for new-user review R14): for save_state, load_state,
 * save_model, load_checkpoint_in_model and the config-file parser, allocation number n is made
 * to fail, for n = 0, 1, ... until the operation runs through without reaching n. Every failure
 * must come back as an error with a message (no crash, no silent success), the previous
 * checkpoint must stay loadable with its values, a failed save must leave no checkpoint and no
 * temporary directory behind, and a successful run must read back exactly. Under the asan preset
 * LeakSanitizer checks that no failure path leaks. jansson's allocations go through the same
 * wrappers (json_set_alloc_funcs), so JSON building and parsing fail too.
 * Usage: test_alloc_fail <scratch dir>   (one process, no launcher) */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "acc_test.h"
#include "cli/config_file.h"
#include "core/internal.h"
#include "alloc_torture.h"

#define NP 5

static char root[512];
static float w[NP], gw[NP], b[1], gb[1];
static int64_t counter_value;

static acc_result counter_save(void *obj, void *buf, size_t cap, size_t *len) {
  *len = sizeof(int64_t);
  if (buf && cap >= sizeof(int64_t)) memcpy(buf, obj, sizeof(int64_t));
  return ACC_OK;
}
static acc_result counter_load(void *obj, const void *data, size_t len) {
  if (len != sizeof(int64_t)) return ACC_ERR_FORMAT;
  memcpy(obj, data, sizeof(int64_t));
  return ACC_OK;
}

static void set_params(float base) {
  for (int i = 0; i < NP; i++) w[i] = base + (float)i;
  b[0] = base * 10;
  counter_value = (int64_t)base;
}
static int params_are(float base) {
  for (int i = 0; i < NP; i++)
    if (w[i] != base + (float)i) return 0;
  return b[0] == base * 10;
}

static int exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}
static void rmtree(const char *p) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
  if (system(cmd) != 0) fprintf(stderr, "rm -rf %s failed\n", p);
}
/* Entries of root whose name starts with prefix (to find leftover temporary directories). */
static int count_entries(const char *prefix) {
  DIR *d = opendir(root);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  if (d) closedir(d);
  return n;
}

/* torture(what, op, check): the loop of tests/alloc_torture.h */
#define torture acc_test_torture

/* ---- save_state / load_state ---------------------------------------------------------------- */
static acc_accelerator *acc;
static char dirA[600], dirB[600];

static acc_result op_save(void) { return acc_accelerator_save_state(acc, dirB, NULL); }
static void check_save(acc_result rc, long n) {
  if (rc != ACC_OK) {
    CHECK(!exists(dirB), "save_state n=%ld failed but left %s", n, dirB);
    CHECK(count_entries("B") == 0, "save_state n=%ld left a temporary directory (error: %s)", n,
          acc_last_error());
    set_params(-1);
    CHECK_OK(acc_accelerator_load_state(acc, dirA, NULL)); /* the previous checkpoint is intact */
    CHECK(params_are(1) && counter_value == 1, "checkpoint A changed after failed save n=%ld", n);
    set_params(2);
  } else {
    set_params(-1);
    CHECK_OK(acc_accelerator_load_state(acc, dirB, NULL));
    CHECK(params_are(2) && counter_value == 2, "save_state n=%ld succeeded but reads back wrong",
          n);
    rmtree(dirB);
    set_params(2);
  }
}

static acc_result op_load(void) { return acc_accelerator_load_state(acc, dirA, NULL); }
static void check_load(acc_result rc, long n) {
  if (rc == ACC_OK) CHECK(params_are(1) && counter_value == 1, "load_state n=%ld: wrong values", n);
  set_params(3);
}

/* ---- save_model / load_checkpoint_in_model ----------------------------------------------- */
static acc_model *model;
static char dirM1[600], dirM2[600];

static acc_result op_save_model(void) { return acc_save_model(NULL, model, dirM2, 0, ACC_F32); }
static void check_save_model(acc_result rc, long n) {
  set_params(-1);
  CHECK_OK(acc_load_checkpoint_in_model(model, dirM1, NULL, NULL));
  CHECK(params_are(4), "model M1 changed after save_model n=%ld", n);
  if (rc == ACC_OK) {
    set_params(-1);
    CHECK_OK(acc_load_checkpoint_in_model(model, dirM2, NULL, NULL));
    CHECK(params_are(5), "save_model n=%ld succeeded but reads back wrong", n);
  }
  rmtree(dirM2);
  set_params(5);
}

static acc_result op_load_model(void) {
  return acc_load_checkpoint_in_model(model, dirM1, NULL, NULL);
}
static void check_load_model(acc_result rc, long n) {
  if (rc == ACC_OK) CHECK(params_are(4), "load_checkpoint_in_model n=%ld: wrong values", n);
  else CHECK(params_are(6), "load_checkpoint_in_model n=%ld failed but changed the model", n);
  set_params(6);
}

/* ---- config file -------------------------------------------------------------------------- */
static char cfg_path[600];
static acc_cli_cfg cfg;
static acc_result op_config(void) { return acc_cli_config_load(&cfg, cfg_path); }
static void check_config(acc_result rc, long n) {
  if (rc == ACC_OK)
    CHECK(cfg.num_processes.set && cfg.num_processes.i == 3 &&
              strcmp(cfg.mixed_precision.s, "bf16") == 0,
          "config n=%ld: wrong values", n);
}

/* ---- training on the fake device (src/device/train_*.c) ------------------------------------ */
static acc_accelerator *dacc;
static acc_model *dmodel;
static acc_optimizer *dopt;
static float *dw; /* NP + 1 floats: w then b, on the fake device */
static char dirD[600];

static acc_result op_dev_step(void) {
  float norm = 0;
  ACC_CHECK(acc_accelerator_accumulate(dacc));
  ACC_CHECK(acc_accelerator_backward(dacc));
  ACC_CHECK(acc_accelerator_clip_grad_norm(dacc, 1.0f, 2.0, &norm));
  ACC_CHECK(acc_accelerator_clip_grad_value(dacc, 1.0f));
  ACC_CHECK(acc_accelerator_optimizer_step(dacc, dopt));
  return acc_accelerator_optimizer_zero_grad(dacc, dopt);
}
static void check_nothing(acc_result rc, long n) { (void)rc, (void)n; }
static acc_result op_dev_save(void) { return acc_accelerator_save_state(dacc, dirD, NULL); }
static void check_dev_save(acc_result rc, long n) {
  if (rc == ACC_OK) rmtree(dirD);
  CHECK(rc == ACC_OK || !exists(dirD), "device save_state n=%ld failed but left %s", n, dirD);
}
static char dirE[600];
static acc_result op_dev_load(void) { return acc_accelerator_load_state(dacc, dirE, NULL); }
static acc_result op_dev_save_model(void) {
  return acc_save_model(NULL, dmodel, dirM2, 0, ACC_F32);
}
static void check_dev_save_model(acc_result rc, long n) {
  (void)n;
  if (rc == ACC_OK) rmtree(dirM2);
}
static acc_result op_dev_load_model(void) {
  return acc_load_checkpoint_in_model(dmodel, dirM1, NULL, NULL);
}

static void device_torture(void) {
  setenv("ACCELERATE_TEST_DEVICE", "fake", 1);
  acc_accelerator_options o = ACC_ACCELERATOR_OPTIONS_INIT;
  o.device = ACC_DEVICE_AUTO;
  REQUIRE_OK(acc_accelerator_create(&dacc, &o));
  REQUIRE_OK(acc_accelerator_device_type(dacc) == ACC_DEVICE_FAKE ? ACC_OK : ACC_ERR_INTERNAL);
  float *dg = NULL;
  REQUIRE_OK(acc_accelerator_alloc(dacc, (NP + 1) * sizeof(float), (void **)&dw));
  REQUIRE_OK(acc_accelerator_alloc(dacc, (NP + 1) * sizeof(float), (void **)&dg));
  REQUIRE_OK(acc_model_create(&dmodel));
  int64_t shape[1] = {NP}, shape1[1] = {1};
  REQUIRE_OK(acc_model_add_parameter(dmodel, "w", dw, dg, 1, shape));
  REQUIRE_OK(acc_model_add_parameter(dmodel, "b", dw + NP, dg + NP, 1, shape1));
  REQUIRE_OK(acc_accelerator_prepare_model(dacc, dmodel));
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  REQUIRE_OK(acc_optimizer_create_adamw(&dopt, dmodel, &ao));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(dacc, dopt));
  snprintf(dirD, sizeof dirD, "%s/D", root);
  torture("device step", op_dev_step, check_nothing);
  torture("device save_state", op_dev_save, check_dev_save);
  snprintf(dirE, sizeof dirE, "%s/E", root);
  REQUIRE_OK(acc_accelerator_save_state(dacc, dirE, NULL));
  torture("device load_state", op_dev_load, check_nothing);
  torture("device save_model", op_dev_save_model, check_dev_save_model);
  torture("device load_checkpoint_in_model", op_dev_load_model, check_nothing);
  acc_accelerator_free(dacc, dg);
  acc_accelerator_free(dacc, dw);
  acc_optimizer_destroy(dopt);
  acc_model_destroy(dmodel);
  acc_accelerator_destroy(dacc);
  unsetenv("ACCELERATE_TEST_DEVICE");
}

int main(int argc, char **argv) {
  snprintf(root, sizeof root, "%s/acc-alloc-XXXXXX", argc > 1 ? argv[1] : "/tmp");
  REQUIRE_OK(mkdtemp(root) ? ACC_OK : ACC_ERR_SYSTEM);
  json_set_alloc_funcs(acc__malloc, acc__free);
  snprintf(dirA, sizeof dirA, "%s/A", root);
  snprintf(dirB, sizeof dirB, "%s/B", root);
  snprintf(dirM1, sizeof dirM1, "%s/M1", root);
  snprintf(dirM2, sizeof dirM2, "%s/M2", root);

  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  REQUIRE_OK(acc_model_create(&model));
  int64_t shape[1] = {NP}, shape1[1] = {1};
  REQUIRE_OK(acc_model_add_parameter(model, "w", w, gw, 1, shape));
  REQUIRE_OK(acc_model_add_parameter(model, "b", b, gb, 1, shape1));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, model));
  acc_optimizer *opt;
  acc_adamw_options ao = ACC_ADAMW_OPTIONS_INIT;
  REQUIRE_OK(acc_optimizer_create_adamw(&opt, model, &ao));
  REQUIRE_OK(acc_accelerator_prepare_optimizer(acc, opt));
  acc_scheduler *sched;
  REQUIRE_OK(acc_scheduler_create(&sched, opt, NULL));
  REQUIRE_OK(acc_accelerator_prepare_scheduler(acc, sched));
  REQUIRE_OK(
      acc_accelerator_register_for_checkpointing(acc, &counter_value, counter_save, counter_load));

  set_params(1);
  REQUIRE_OK(acc_accelerator_save_state(acc, dirA, NULL));
  set_params(2);
  torture("save_state", op_save, check_save);
  set_params(3);
  torture("load_state", op_load, check_load);

  set_params(4);
  REQUIRE_OK(acc_save_model(NULL, model, dirM1, 0, ACC_F32));
  set_params(5);
  torture("save_model", op_save_model, check_save_model);
  set_params(6);
  torture("load_checkpoint_in_model", op_load_model, check_load_model);
  device_torture();

  snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", root);
  FILE *f = fopen(cfg_path, "w");
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_IO);
  fprintf(f, "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\n"
             "mixed_precision: bf16\nnum_machines: 1\nnum_processes: 3\nuse_cpu: true\n");
  fclose(f);
  torture("config_load", op_config, check_config);

  acc_accelerator_destroy(acc);
  acc_scheduler_destroy(sched);
  acc_optimizer_destroy(opt);
  acc_model_destroy(model);
  rmtree(root);
  return acc_test_finish("alloc_fail");
}
