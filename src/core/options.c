/* Options structs: the one reader every options-taking function uses, and the _init functions.
 *
 * Every public options struct starts with `size_t size; uint32_t version;`, both set by its INIT
 * macro (or its _init function) from the header the program was compiled with. Rules:
 *   - NULL options mean all defaults;
 *   - size 0 or version 0: the struct was not initialized (ACC_ERR_INVALID_USAGE);
 *   - a version newer than the library's: the program was built against a newer header
 *     (ACC_ERR_NOT_SUPPORTED);
 *   - size larger than the library's struct: accepted only when the extra bytes are all zero
 *     (fields this library does not know, left at zero); otherwise ACC_ERR_NOT_SUPPORTED;
 *   - size smaller (an older header): the fields it has are copied, the newer ones keep their
 *     defaults.
 * When a field is appended to a struct, bump its VERSION macro and add the previous size to the
 * table of its _init function below, so that old programs calling _init with the old version
 * get only the bytes they have. */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

typedef struct options_head {
  size_t size;
  uint32_t version;
} options_head;

/* Writes size and version only: the head's padding may hold the struct's first field. */
static void write_head(void *opts, size_t size, uint32_t version) {
  memcpy(opts, &size, sizeof size);
  memcpy((char *)opts + offsetof(options_head, version), &version, sizeof version);
}

static void init_name(char *buf, size_t n, const char *type) {
  size_t i = 0;
  for (; type[i] && i + 6 < n; i++) buf[i] = (char)toupper((unsigned char)type[i]);
  snprintf(buf + i, n - i, "_INIT");
}

acc_result acc__options_read(void *dst, size_t dst_size, uint32_t version, const void *user,
                             const char *fn, const char *type) {
  if (!user) return ACC_OK;
  options_head h;
  memcpy(&h.size, user, sizeof h.size);
  memcpy(&h.version, (const char *)user + offsetof(options_head, version), sizeof h.version);
  char init[64];
  init_name(init, sizeof init, type);
  if (h.size == 0 || h.version == 0)
    return acc__error(ACC_ERR_INVALID_USAGE,
                      "%s: the %s were not initialized with %s or %s_init() (size %zu, version %u)",
                      fn, type, init, type, h.size, h.version);
  if (h.size < offsetof(options_head, version) + sizeof h.version)
    return acc__error(ACC_ERR_INVALID_USAGE, "%s: %s.size is %zu, smaller than any version of it",
                      fn, type, h.size);
  if (h.version > version)
    return acc__error(ACC_ERR_NOT_SUPPORTED,
                      "%s: %s version %u is newer than this library's (%u): the program was built "
                      "against a newer header than the libaccelerate it runs with; upgrade the "
                      "library",
                      fn, type, h.version, version);
  if (h.size > dst_size) {
    const unsigned char *extra = (const unsigned char *)user + dst_size;
    for (size_t i = 0; i < h.size - dst_size; i++)
      if (extra[i] != 0)
        return acc__error(ACC_ERR_NOT_SUPPORTED,
                          "%s: %s has %zu bytes but this library knows %zu, and the extra bytes "
                          "are set: the program was built against a newer header; upgrade the "
                          "library (the new fields would be ignored)",
                          fn, type, h.size, dst_size);
  }
  memcpy(dst, user, h.size < dst_size ? h.size : dst_size);
  write_head(dst, dst_size, version);
  return ACC_OK;
}

/* Writes the defaults of `version` into opts: sizes[v] bytes (sizes[0] unused, sizes[current] is
 * sizeof). */
static acc_result options_init(void *opts, const void *defaults, const size_t *sizes,
                               uint32_t current, uint32_t version, const char *type) {
  if (!opts) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s_init: opts is NULL", type);
  if (version == 0 || version > current)
    return acc__error(ACC_ERR_INVALID_ARGUMENT,
                      "%s_init: version %u is unknown (this library knows 1 to %u): the program "
                      "was built against a newer header; upgrade the library",
                      type, version, current);
  memcpy(opts, defaults, sizes[version]);
  write_head(opts, sizes[version], version);
  return ACC_OK;
}

#define DEFINE_OPTIONS_INIT(type, VERSION, INIT, ...)                               \
  acc_result type##_init(type *opts, uint32_t version) {                            \
    static const type defaults = INIT;                                              \
    static const size_t sizes[] = {0, __VA_ARGS__};                                 \
    _Static_assert(sizeof sizes / sizeof sizes[0] == (VERSION) + 1,                 \
                   #type ": one size per version");                                 \
    return options_init(opts, &defaults, sizes, VERSION, version, #type);           \
  }

DEFINE_OPTIONS_INIT(acc_state_options, ACC_STATE_OPTIONS_VERSION, ACC_STATE_OPTIONS_INIT,
                    sizeof(acc_state_options))
DEFINE_OPTIONS_INIT(acc_accelerator_options, ACC_ACCELERATOR_OPTIONS_VERSION,
                    ACC_ACCELERATOR_OPTIONS_INIT,
                    offsetof(acc_accelerator_options, low_precision_params), /* 1 */
                    offsetof(acc_accelerator_options, zero_stage),           /* 2 */
                    offsetof(acc_accelerator_options, device),               /* 3 */
                    offsetof(acc_accelerator_options, comm_hook),            /* 4 */
                    sizeof(acc_accelerator_options))                         /* 5 */
DEFINE_OPTIONS_INIT(acc_dataloader_options, ACC_DATALOADER_OPTIONS_VERSION,
                    ACC_DATALOADER_OPTIONS_INIT,
                    offsetof(acc_dataloader_options, batch_indices),    /* 1 */
                    offsetof(acc_dataloader_options, device_placement), /* 2 */
                    offsetof(acc_dataloader_options, take_dataset),     /* 3 */
                    sizeof(acc_dataloader_options))                     /* 4 */
DEFINE_OPTIONS_INIT(acc_token_options, ACC_TOKEN_OPTIONS_VERSION, ACC_TOKEN_OPTIONS_INIT,
                    offsetof(acc_token_options, stride), /* 1 */
                    sizeof(acc_token_options))           /* 2 */
DEFINE_OPTIONS_INIT(acc_token_loader_options, ACC_TOKEN_LOADER_OPTIONS_VERSION, ACC_TOKEN_LOADER_OPTIONS_INIT,
                    offsetof(acc_token_loader_options, host_batches), /* 1 */
                    sizeof(acc_token_loader_options))                 /* 2 */
DEFINE_OPTIONS_INIT(acc_sgd_options, ACC_SGD_OPTIONS_VERSION, ACC_SGD_OPTIONS_INIT,
                    sizeof(acc_sgd_options))
DEFINE_OPTIONS_INIT(acc_adamw_options, ACC_ADAMW_OPTIONS_VERSION, ACC_ADAMW_OPTIONS_INIT,
                    sizeof(acc_adamw_options))
DEFINE_OPTIONS_INIT(acc_scheduler_options, ACC_SCHEDULER_OPTIONS_VERSION,
                    ACC_SCHEDULER_OPTIONS_INIT, sizeof(acc_scheduler_options))
DEFINE_OPTIONS_INIT(acc_grad_scaler_options, ACC_GRAD_SCALER_OPTIONS_VERSION,
                    ACC_GRAD_SCALER_OPTIONS_INIT, sizeof(acc_grad_scaler_options))
DEFINE_OPTIONS_INIT(acc_project_options, ACC_PROJECT_OPTIONS_VERSION, ACC_PROJECT_OPTIONS_INIT,
                    offsetof(acc_project_options, logging_dir), /* 1 */
                    sizeof(acc_project_options))               /* 2 */
DEFINE_OPTIONS_INIT(acc_load_options, ACC_LOAD_OPTIONS_VERSION, ACC_LOAD_OPTIONS_INIT,
                    sizeof(acc_load_options))
