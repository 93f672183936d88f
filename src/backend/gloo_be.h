/* The gloo backend (src/backend/gloo.cc, in the module libaccelerate-gloo.so). Internal. */
#ifndef ACC_GLOO_BE_H
#define ACC_GLOO_BE_H

#include "backend/backend.h"
#include "backend/module.h"

/* Joins a gloo group of info->size processes (info->rank) through info->store; the store keys
 * are under prefix (different groups of one job use different prefixes). */
acc_result acc__backend_gloo_create(acc__backend **out, const acc__proc_info *info,
                                    const char *prefix);
void acc__gloo_set_host(const acc__module_host *host);

#endif
