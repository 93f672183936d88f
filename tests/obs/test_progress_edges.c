/* Progress bar edges: an unknown total (UINT64_MAX) gives a clamped ETA, not a double converted
 * out of range (red-team 3, N11: undefined behaviour); TERM=dumb gets no escape sequence, the
 * previous line is padded over with spaces (cluster trial F-items). */
#include <stdint.h>
#include <stdlib.h>

#include "acc_test.h"

int main(void) {
  acc_progress_options o = ACC_PROGRESS_OPTIONS_INIT;
  FILE *f = tmpfile();
  REQUIRE_OK(f ? ACC_OK : ACC_ERR_IO);
  o.out = f;
  o.tty = 0;
  acc_progress *p = NULL;
  REQUIRE_OK(acc_progress_create(&p, NULL, "", UINT64_MAX, &o));
  acc_progress_update_at(p, 1, 0, 0.5);
  char line[256];
  acc_progress_format(p, 10.0, line, sizeof line);
  CHECK(strstr(line, "ETA >100000:00:00") != NULL, "an unknown total gives a clamped ETA: %s", line);
  acc_progress_destroy(p);

  setenv("TERM", "dumb", 1);
  rewind(f);
  o.tty = 1;
  REQUIRE_OK(acc_progress_create(&p, NULL, "longer label", 10, &o));
  acc_progress_update_at(p, 5, 0, 1.0);
  acc_progress_finish_at(p, 2.0);
  acc_progress_destroy(p);
  fflush(f);
  rewind(f);
  char out[4096];
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  CHECK(n > 0 && strchr(out, '\033') == NULL, "TERM=dumb: no escape sequence in %zu bytes", n);
  CHECK(strstr(out, "\r") != NULL && strstr(out, "5/10 50%") != NULL, "TERM=dumb: still redrawn in place: %s", out);
  fclose(f);
  return acc_test_finish("obs_progress_edges");
}
