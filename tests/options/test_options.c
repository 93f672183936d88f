/* Options structs (regression for new-user review R7): for every options struct of the public
 * API, the one reader rejects size 0 and version 0 (not initialized), a version newer than the
 * library's, a larger struct whose extra bytes are set (newer header); it accepts a larger struct
 * whose extra bytes are zero and an older, smaller one; every struct has an _init() function that
 * writes the defaults of the version asked for, and only that version's bytes. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "acc_test.h"

static char dir[] = "/tmp/acc-options-XXXXXX";
static acc_model *model;
static acc_dataset *ds;
static float w[2] = {1, 2}, gw[2];

static acc_result use_state(const void *o) {
  acc_state *st;
  acc_result rc = acc_state_create(&st, o);
  if (rc == ACC_OK) acc_state_destroy(st);
  return rc;
}
static acc_result use_accelerator(const void *o) {
  acc_accelerator *a;
  acc_result rc = acc_accelerator_create(&a, o);
  if (rc == ACC_OK) acc_accelerator_destroy(a);
  return rc;
}
static acc_result use_dataloader(const void *o) {
  acc_dataloader *dl;
  acc_result rc = acc_dataloader_create(&dl, ds, o);
  if (rc == ACC_OK) acc_dataloader_destroy(dl);
  return rc;
}
static acc_result use_sgd(const void *o) {
  acc_optimizer *opt;
  acc_result rc = acc_optimizer_create_sgd(&opt, model, o);
  if (rc == ACC_OK) acc_optimizer_destroy(opt);
  return rc;
}
static acc_result use_adamw(const void *o) {
  acc_optimizer *opt;
  acc_result rc = acc_optimizer_create_adamw(&opt, model, o);
  if (rc == ACC_OK) acc_optimizer_destroy(opt);
  return rc;
}
static acc_result use_scheduler(const void *o) {
  acc_optimizer *opt;
  acc_scheduler *s;
  acc_result rc = acc_optimizer_create_sgd(&opt, model, NULL);
  if (rc != ACC_OK) return rc;
  rc = acc_scheduler_create(&s, opt, o);
  if (rc == ACC_OK) acc_scheduler_destroy(s);
  acc_optimizer_destroy(opt);
  return rc;
}
static acc_result use_scaler(const void *o) {
  acc_grad_scaler *s;
  acc_result rc = acc_grad_scaler_create(&s, o);
  if (rc == ACC_OK) acc_grad_scaler_destroy(s);
  return rc;
}
static acc_result use_project(const void *o) {
  acc_project_config *p;
  acc_result rc = acc_project_config_create(&p, o);
  if (rc == ACC_OK) acc_project_config_destroy(p);
  return rc;
}
static acc_result use_load(const void *o) {
  char path[256];
  snprintf(path, sizeof path, "%s/model", dir);
  return acc_load_checkpoint_in_model(model, path, o, NULL);
}

typedef struct kind {
  const char *type, *init;
  size_t size;
  uint32_t version;
  acc_result (*init_fn)(void *opts, uint32_t version);
  acc_result (*use)(const void *opts);
} kind;

#define KIND(T, UPPER, use)                                                                   \
  {                                                                                           \
    #T, #UPPER "_INIT", sizeof(T), UPPER##_VERSION, (acc_result(*)(void *, uint32_t))T##_init, \
        use                                                                                   \
  }

static const kind kinds[] = {
    KIND(acc_state_options, ACC_STATE_OPTIONS, use_state),
    KIND(acc_accelerator_options, ACC_ACCELERATOR_OPTIONS, use_accelerator),
    KIND(acc_dataloader_options, ACC_DATALOADER_OPTIONS, use_dataloader),
    KIND(acc_sgd_options, ACC_SGD_OPTIONS, use_sgd),
    KIND(acc_adamw_options, ACC_ADAMW_OPTIONS, use_adamw),
    KIND(acc_scheduler_options, ACC_SCHEDULER_OPTIONS, use_scheduler),
    KIND(acc_grad_scaler_options, ACC_GRAD_SCALER_OPTIONS, use_scaler),
    KIND(acc_project_options, ACC_PROJECT_OPTIONS, use_project),
    KIND(acc_load_options, ACC_LOAD_OPTIONS, use_load),
};

typedef struct head {
  size_t size;
  uint32_t version;
} head;

static void set_head(unsigned char *buf, size_t size, uint32_t version) {
  memcpy(buf, &size, sizeof size);
  memcpy(buf + offsetof(head, version), &version, sizeof version);
}

static head get_head(const unsigned char *buf) {
  head h;
  memcpy(&h.size, buf, sizeof h.size);
  memcpy(&h.version, buf + offsetof(head, version), sizeof h.version);
  return h;
}

int main(void) {
  REQUIRE_OK(mkdtemp(dir) ? ACC_OK : ACC_ERR_SYSTEM);
  REQUIRE_OK(acc_model_create(&model));
  int64_t shape[1] = {2};
  REQUIRE_OK(acc_model_add_parameter(model, "w", w, gw, 1, shape));
  char path[256];
  snprintf(path, sizeof path, "%s/model", dir);
  REQUIRE_OK(acc_save_model(NULL, model, path, 0, ACC_F32));
  float col[4] = {1, 2, 3, 4};
  acc_field_desc f = {ACC_F32, 1};
  const void *data[1] = {col};
  REQUIRE_OK(acc_dataset_create_memory(&ds, 4, &f, 1, data));

  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    const kind *K = &kinds[k];
    unsigned char buf[1024], ref[1024];
    fprintf(stderr, "-- %s\n", K->type);
    /* _init: the current version equals the INIT macro's values (checked through use) */
    memset(buf, 0xab, sizeof buf);
    CHECK_OK(K->init_fn(buf, K->version));
    head h = get_head(buf);
    CHECK(h.size == K->size && h.version == K->version, "%s_init wrote size %zu version %u",
          K->type, h.size, h.version);
    CHECK(buf[K->size] == 0xab, "%s_init wrote past the struct", K->type);
    CHECK_OK(K->use(NULL));
    CHECK_OK(K->use(buf));
    CHECK_ERR(K->init_fn(buf, K->version + 1), ACC_ERR_INVALID_ARGUMENT, "newer header");
    CHECK_ERR(K->init_fn(buf, 0), ACC_ERR_INVALID_ARGUMENT, "is unknown");
    CHECK_ERR(K->init_fn(NULL, K->version), ACC_ERR_INVALID_ARGUMENT, "opts is NULL");
    memset(buf, 0, sizeof buf);
    CHECK_OK(K->init_fn(buf, K->version));
    memcpy(ref, buf, sizeof ref);

    /* size 0 and version 0: not initialized */
    set_head(buf, 0, K->version);
    CHECK_ERR(K->use(buf), ACC_ERR_INVALID_USAGE, K->init);
    set_head(buf, K->size, 0);
    CHECK_ERR(K->use(buf), ACC_ERR_INVALID_USAGE, K->init);
    /* a newer version than the library knows */
    set_head(buf, K->size, K->version + 1);
    CHECK_ERR(K->use(buf), ACC_ERR_NOT_SUPPORTED, "newer header");
    /* larger struct (newer header): extra bytes zero are accepted, set ones are refused */
    memcpy(buf, ref, sizeof buf);
    set_head(buf, K->size + 16, K->version);
    CHECK_OK(K->use(buf));
    buf[K->size + 9] = 1;
    CHECK_ERR(K->use(buf), ACC_ERR_NOT_SUPPORTED, "built against a newer header");
    /* a smaller struct than any version */
    memcpy(buf, ref, sizeof buf);
    set_head(buf, 4, K->version);
    CHECK_ERR(K->use(buf), ACC_ERR_INVALID_USAGE, "smaller than any version");
  }

  /* An older (version 1) accelerator struct: only its bytes are written by _init and read by
   * acc_accelerator_create, so low_precision_params keeps its default. */
  {
    const size_t v1 = offsetof(acc_accelerator_options, low_precision_params);
    unsigned char buf[sizeof(acc_accelerator_options) + 8];
    memset(buf, 0xcd, sizeof buf);
    CHECK(ACC_ACCELERATOR_OPTIONS_VERSION == 5, "version %d", ACC_ACCELERATOR_OPTIONS_VERSION);
    CHECK_OK(acc_accelerator_options_init((acc_accelerator_options *)buf, 1));
    head h = get_head(buf);
    CHECK(h.size == v1 && h.version == 1, "v1 init: size %zu version %u", h.size, h.version);
    CHECK(buf[v1] == 0xcd, "v1 init wrote low_precision_params");
    CHECK_OK(use_accelerator(buf)); /* 0xcd bytes after the v1 size are never read */
  }
  /* Version 2 (before zero_stage): zero_stage is never read (0xcd bytes would be a bad stage). */
  {
    const size_t v2 = offsetof(acc_accelerator_options, zero_stage);
    unsigned char buf[sizeof(acc_accelerator_options) + 8];
    memset(buf, 0xcd, sizeof buf);
    CHECK_OK(acc_accelerator_options_init((acc_accelerator_options *)buf, 2));
    head h = get_head(buf);
    CHECK(h.size == v2 && h.version == 2, "v2 init: size %zu version %u", h.size, h.version);
    CHECK(buf[v2] == 0xcd, "v2 init wrote zero_stage");
    CHECK_OK(use_accelerator(buf));
  }
  /* Version 3 (before device): device is never read (0xcd bytes would be a bad device). */
  {
    const size_t v3 = offsetof(acc_accelerator_options, device);
    unsigned char buf[sizeof(acc_accelerator_options) + 8];
    memset(buf, 0xcd, sizeof buf);
    CHECK_OK(acc_accelerator_options_init((acc_accelerator_options *)buf, 3));
    head h = get_head(buf);
    CHECK(h.size == v3 && h.version == 3, "v3 init: size %zu version %u", h.size, h.version);
    CHECK(buf[v3] == 0xcd, "v3 init wrote device");
    CHECK_OK(use_accelerator(buf));
  }
  /* Version 4 (before comm_hook): comm_hook is never read (0xcd bytes would be a bad hook). */
  {
    const size_t v4 = offsetof(acc_accelerator_options, comm_hook);
    unsigned char buf[sizeof(acc_accelerator_options) + 8];
    memset(buf, 0xcd, sizeof buf);
    CHECK_OK(acc_accelerator_options_init((acc_accelerator_options *)buf, 4));
    head h = get_head(buf);
    CHECK(h.size == v4 && h.version == 4, "v4 init: size %zu version %u", h.size, h.version);
    CHECK(buf[v4] == 0xcd, "v4 init wrote comm_hook");
    CHECK_OK(use_accelerator(buf));
  }

  acc_dataset_destroy(ds);
  acc_model_destroy(model);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return acc_test_finish("options");
}
