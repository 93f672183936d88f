/* JSON helpers shared by the checkpoint writers. */
#include "core/json_util.h"

#include <stdlib.h>

char *acc__json_dumps(const json_t *j, size_t flags, const char *what) {
  char *text = j ? json_dumps(j, flags) : NULL;
  if (!text) {
    acc__error(ACC_ERR_NOMEM, "out of memory writing %s", what);
    return NULL;
  }
  json_error_t err;
  json_t *back = json_loads(text, JSON_DECODE_ANY, &err);
  int same = back && json_equal(back, (json_t *)j);
  json_decref(back);
  if (!same) {
    acc__free(text);
    acc__error(ACC_ERR_NOMEM, "out of memory writing %s (the JSON text came out incomplete)", what);
    return NULL;
  }
  return text;
}
