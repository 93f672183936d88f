/* Handle checks against the one table of handle magics in internal.h. */
#include <string.h>

#include "core/internal.h"

static const struct {
  uint32_t magic;
  const char *type, *noun;
} kinds[ACC__HANDLE_KIND_COUNT] = {
#define ACC__X(kind, magic, type, noun) {magic, type, noun},
    ACC__HANDLE_KINDS(ACC__X)
#undef ACC__X
};

/* Never called: a duplicated magic in the table is a duplicate case label, a compile error. */
int acc__handle_magics_are_distinct(uint32_t m);
int acc__handle_magics_are_distinct(uint32_t m) {
  switch (m) {
#define ACC__X(kind, magic, type, noun) case magic:
    ACC__HANDLE_KINDS(ACC__X)
#undef ACC__X
    case ACC__MAGIC_DEAD:
      return 1;
  }
  return 0;
}

int acc__handle_ok(const void *h, acc__handle_kind kind) {
  uint32_t m;
  if (!h) return 0;
  memcpy(&m, h, sizeof m);
  return m == kinds[kind].magic;
}

acc_result acc__check_handle(const void *h, acc__handle_kind kind, const char *fn) {
  if (!h) return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, kinds[kind].noun);
  uint32_t m;
  memcpy(&m, h, sizeof m);
  if (m == kinds[kind].magic) return ACC_OK;
  if (m == ACC__MAGIC_DEAD)
    return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: the %s handle was already destroyed", fn,
                      kinds[kind].type);
  for (int k = 0; k < ACC__HANDLE_KIND_COUNT; k++)
    if (m == kinds[k].magic)
      return acc__error(ACC_ERR_INVALID_ARGUMENT, "%s: expected an %s handle, got an %s", fn,
                        kinds[kind].type, kinds[k].type);
  return acc__error(ACC_ERR_INVALID_ARGUMENT,
                    "%s: not an %s handle (a stray pointer, or memory overwritten)", fn,
                    kinds[kind].type);
}
