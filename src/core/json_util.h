/* JSON helpers shared by the checkpoint writers. */
#ifndef ACC_JSON_UTIL_H
#define ACC_JSON_UTIL_H

#include <jansson.h>

#include "core/internal.h"

/* json_dumps, checked: NULL (with an ACC_ERR_NOMEM message naming `what`) when serializing
 * fails or when the text does not read back as the same JSON. jansson can drop part of its
 * output when an allocation fails in the middle of a dump and still return text, which would
 * become a corrupt checkpoint file. Free the result with acc__free. */
char *acc__json_dumps(const json_t *j, size_t flags, const char *what);

#endif
