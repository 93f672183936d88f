/* Thread-local last-error message, result strings. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define ACC_ERROR_SIZE 2048

static _Thread_local char tls_error[ACC_ERROR_SIZE];
static _Thread_local acc_result tls_rc; /* the code of the message in tls_error */

const char *acc_result_string(acc_result rc) {
  switch (rc) {
    case ACC_OK: return "success";
    case ACC_ERR_INVALID_ARGUMENT: return "invalid argument";
    case ACC_ERR_INVALID_USAGE: return "invalid usage";
    case ACC_ERR_SYSTEM: return "system call failed";
    case ACC_ERR_BACKEND: return "communication backend error";
    case ACC_ERR_REMOTE: return "a peer process failed or left the group";
    case ACC_ERR_TIMEOUT: return "timed out waiting for peer processes (see ACCELERATE_TIMEOUT)";
    case ACC_ERR_NOMEM: return "out of memory";
    case ACC_ERR_NOT_SUPPORTED: return "not supported by this build or machine";
    case ACC_ERR_INTERNAL: return "internal error (please report it)";
    case ACC_ERR_IO: return "file input/output error";
    case ACC_ERR_FORMAT: return "malformed file or value";
    case ACC_ERR_MISMATCH: return "processes or saved state disagree";
    case ACC_ERR_NOT_FOUND: return "not found";
  }
  return "unknown result code";
}

const char *acc_result_name(acc_result rc) {
  switch (rc) {
    case ACC_OK: return "ACC_OK";
    case ACC_ERR_INVALID_ARGUMENT: return "ACC_ERR_INVALID_ARGUMENT";
    case ACC_ERR_INVALID_USAGE: return "ACC_ERR_INVALID_USAGE";
    case ACC_ERR_SYSTEM: return "ACC_ERR_SYSTEM";
    case ACC_ERR_BACKEND: return "ACC_ERR_BACKEND";
    case ACC_ERR_REMOTE: return "ACC_ERR_REMOTE";
    case ACC_ERR_TIMEOUT: return "ACC_ERR_TIMEOUT";
    case ACC_ERR_NOMEM: return "ACC_ERR_NOMEM";
    case ACC_ERR_NOT_SUPPORTED: return "ACC_ERR_NOT_SUPPORTED";
    case ACC_ERR_INTERNAL: return "ACC_ERR_INTERNAL";
    case ACC_ERR_IO: return "ACC_ERR_IO";
    case ACC_ERR_FORMAT: return "ACC_ERR_FORMAT";
    case ACC_ERR_MISMATCH: return "ACC_ERR_MISMATCH";
    case ACC_ERR_NOT_FOUND: return "ACC_ERR_NOT_FOUND";
  }
  return "ACC_ERR_?";
}

acc_result acc_error_set(acc_result rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  acc__verror(rc, fmt ? fmt : "", ap);
  va_end(ap);
  return rc;
}

acc_result acc__callback_result(acc_result rc, const char *fmt, ...) {
  if (rc == ACC_OK) return rc;
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (!tls_error[0])
    return acc__error(rc, "%s returned %s (and set no message; use acc_error_set)", what, acc_result_name(rc));
  return acc__error_context(rc, "%s", what);
}

const char *acc_last_error(void) { return tls_error[0] ? tls_error : "no error"; }

void acc_clear_error(void) {
  tls_error[0] = '\0';
  tls_rc = ACC_OK;
}

acc_result acc__last_error_code(void) { return tls_error[0] ? tls_rc : ACC_OK; }

acc_result acc__verror(acc_result rc, const char *fmt, va_list ap) {
  vsnprintf(tls_error, sizeof tls_error, fmt, ap);
  tls_rc = rc;
  return rc;
}

acc_result acc__error(acc_result rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  acc__verror(rc, fmt, ap);
  va_end(ap);
  return rc;
}

acc_result acc__error_context(acc_result rc, const char *fmt, ...) {
  char prev[ACC_ERROR_SIZE];
  memcpy(prev, tls_error, sizeof prev);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tls_error, sizeof tls_error, fmt, ap);
  va_end(ap);
  tls_rc = rc;
  if (n >= 0 && (size_t)n < sizeof tls_error)
    snprintf(tls_error + n, sizeof tls_error - (size_t)n, ": %s", prev);
  return rc;
}

unsigned acc_version(void) { return ACC_VERSION_NUMBER; }
const char *acc_version_string(void) { return ACC_VERSION_STRING; }
