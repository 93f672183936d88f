/* Checkpoint directories and the project configuration: automatic naming, total_limit pruning
 * by number (checkpoint_10 > checkpoint_9), "latest", the counter after a load, incomplete
 * checkpoints, existing targets. */
#include <dirent.h>

#include "acc_test.h"
#include "ckpt_util.h"

/* Sorted, comma-separated names in dir (no "." entries). */
static void list_dir(const char *dir, char *out, size_t cap) {
  char names[64][256];
  int n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL && n < 64) {
    if (e->d_name[0] == '.') continue;
    snprintf(names[n++], 256, "%s", e->d_name);
  }
  if (d) closedir(d);
  qsort(names, (size_t)n, 256, (int (*)(const void *, const void *))strcmp);
  out[0] = 0;
  for (int i = 0; i < n; i++) {
    size_t l = strlen(out);
    snprintf(out + l, cap - l, "%s%s", i ? "," : "", names[i]);
  }
}

static float W[3];

static void save_one(acc_project_config *p, float value) {
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  int64_t s[1] = {3};
  W[0] = W[1] = W[2] = value;
  REQUIRE_OK(acc_model_add_parameter(m, "w", W, NULL, 1, s));
  acc_checkpoint *c;
  REQUIRE_OK(acc_checkpoint_begin(p, NULL, &c));
  CHECK_OK(acc_save_model(NULL, m, acc_checkpoint_dir(c), 0, ACC_F32));
  CHECK_OK(acc_checkpoint_commit(c));
  acc_model_destroy(m);
}

static void test_rotation(const char *root) {
  char proj[1024], ck[1100], listing[2048], expected[1300];
  snprintf(proj, sizeof proj, "%s/p2", root);
  snprintf(ck, sizeof ck, "%s/checkpoints", proj);
  acc_project_options o = ACC_PROJECT_OPTIONS_INIT;
  o.project_dir = proj;
  o.automatic_checkpoint_naming = 1;
  o.total_limit = 2;
  acc_project_config *p;
  REQUIRE_OK(acc_project_config_create(&p, &o));
  for (int i = 0; i < 12; i++) {
    save_one(p, (float)i);
    CHECK(acc_project_config_iteration(p) == i + 1, "iteration %ld after save %d", acc_project_config_iteration(p), i);
    if (i == 10) {
      /* Accelerate's test: total_limit=2, 11 saves -> checkpoint_9 and checkpoint_10 remain. */
      list_dir(ck, listing, sizeof listing);
      CHECK(strcmp(listing, "checkpoint_10,checkpoint_9") == 0, "after 11 saves: %s", listing);
    }
  }
  list_dir(ck, listing, sizeof listing);
  CHECK(strcmp(listing, "checkpoint_10,checkpoint_11") == 0, "after 12 saves: %s", listing);
  snprintf(expected, sizeof expected, "%s/checkpoint_11", ck);
  list_dir(expected, listing, sizeof listing);
  CHECK(strcmp(listing, "COMPLETE,model.safetensors") == 0, "checkpoint content: %s", listing);
  char *latest = NULL;
  CHECK_OK(acc_project_latest_checkpoint(p, &latest));
  CHECK(latest && strcmp(latest, expected) == 0, "latest %s", latest ? latest : "(null)");
  acc_free(latest);

  /* Existing complete target. */
  CHECK_OK(acc_project_config_set_iteration(p, 11));
  acc_checkpoint *c = NULL;
  CHECK_ERR(acc_checkpoint_begin(p, NULL, &c), ACC_ERR_INVALID_USAGE, "checkpoint_11' already exists");
  CHECK(c == NULL, "handle on failure");
  CHECK_ERR(acc_checkpoint_begin(p, "/elsewhere", &c), ACC_ERR_INVALID_ARGUMENT, "automatic checkpoint naming is on");
  acc_project_config_destroy(p);

  /* total_limit = 1, two saves -> only checkpoint_1. */
  snprintf(proj, sizeof proj, "%s/p1", root);
  snprintf(ck, sizeof ck, "%s/checkpoints", proj);
  o.project_dir = proj;
  o.total_limit = 1;
  REQUIRE_OK(acc_project_config_create(&p, &o));
  save_one(p, 0);
  save_one(p, 1);
  list_dir(ck, listing, sizeof listing);
  CHECK(strcmp(listing, "checkpoint_1") == 0, "total_limit 1: %s", listing);
  acc_project_config_destroy(p);
}

static void test_resume(const char *root) {
  char proj[1024], ck[1100], p20[1200], tmp[1200];
  snprintf(proj, sizeof proj, "%s/p2", root);
  snprintf(ck, sizeof ck, "%s/checkpoints", proj);
  acc_project_options o = ACC_PROJECT_OPTIONS_INIT;
  o.project_dir = proj;
  o.automatic_checkpoint_naming = 1;
  acc_project_config *p;
  REQUIRE_OK(acc_project_config_create(&p, &o));
  CHECK(acc_project_config_iteration(p) == 0, "fresh iteration");

  /* Leftovers of crashed saves: a final-named dir without marker, and a temporary dir. */
  snprintf(p20, sizeof p20, "%s/checkpoint_20", ck);
  snprintf(tmp, sizeof tmp, "%s/checkpoint_21.tmp-writing", ck);
  REQUIRE_OK(acc__mkdirs(p20));
  REQUIRE_OK(acc__mkdirs(tmp));
  char *dir = NULL;
  CHECK_OK(acc_project_resolve_load(p, NULL, &dir));
  char expected[1300];
  snprintf(expected, sizeof expected, "%s/checkpoint_11", ck);
  CHECK(dir && strcmp(dir, expected) == 0, "resolve latest: %s", dir ? dir : "(null)");
  float w[3] = {0};
  acc_model *m;
  REQUIRE_OK(acc_model_create(&m));
  int64_t s[1] = {3};
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, NULL, 1, s));
  CHECK_OK(acc_load_checkpoint_in_model(m, dir, NULL, NULL));
  CHECK(w[0] == 11.0f && w[2] == 11.0f, "loaded %g", w[0]);
  CHECK_OK(acc_project_checkpoint_loaded(p, dir));
  CHECK(acc_project_config_iteration(p) == 12, "after loading checkpoint_11 the iteration is %ld (expected 12)",
        acc_project_config_iteration(p));
  acc_free(dir);
  acc_checkpoint *c;
  CHECK_OK(acc_checkpoint_begin(p, NULL, &c));
  snprintf(expected, sizeof expected, "%s/checkpoint_12", ck);
  CHECK(strcmp(acc_checkpoint_target(c), expected) == 0, "next target %s", acc_checkpoint_target(c));
  snprintf(expected, sizeof expected, "%s/checkpoint_12.tmp-writing", ck);
  CHECK(strcmp(acc_checkpoint_dir(c), expected) == 0 && acc__is_dir(expected), "tmp dir %s", acc_checkpoint_dir(c));
  acc_checkpoint_abort(c);
  CHECK(!acc__is_dir(expected), "abort left the tmp dir");
  acc_checkpoint_abort(NULL);

  /* Naming an incomplete checkpoint explicitly. */
  CHECK_ERR(acc_project_resolve_load(p, p20, &dir), ACC_ERR_INVALID_USAGE, "is incomplete (no COMPLETE marker)");
  CHECK_ERR(acc_project_resolve_load(p, tmp, &dir), ACC_ERR_INVALID_USAGE, "is a temporary directory of a save that did not finish");
  snprintf(expected, sizeof expected, "%s/nope", ck);
  CHECK_ERR(acc_project_resolve_load(p, expected, &dir), ACC_ERR_INVALID_ARGUMENT, "but the folder does not exist");
  /* Saving over the incomplete leftover replaces it. */
  CHECK_OK(acc_project_config_set_iteration(p, 20));
  save_one(p, 20.0f);
  CHECK(acc_checkpoint_is_complete(p20), "checkpoint_20 complete after re-save");
  CHECK_OK(acc_project_resolve_load(p, p20, &dir));
  acc_free(dir);
  CHECK_OK(acc_project_latest_checkpoint(p, &dir));
  CHECK(dir && strcmp(dir, p20) == 0, "latest %s", dir);
  acc_free(dir);
  acc_model_destroy(m);
  acc_project_config_destroy(p);

  /* Without automatic naming. */
  o.automatic_checkpoint_naming = 0;
  REQUIRE_OK(acc_project_config_create(&p, &o));
  CHECK_ERR(acc_project_resolve_load(p, NULL, &dir), ACC_ERR_INVALID_ARGUMENT, "automatic checkpoint naming is off");
  CHECK_ERR(acc_checkpoint_begin(p, NULL, &c), ACC_ERR_INVALID_ARGUMENT, "no output directory given");
  snprintf(expected, sizeof expected, "%s/manual/", root);
  CHECK_OK(acc_checkpoint_begin(p, expected, &c));
  CHECK_OK(acc_checkpoint_commit(c));
  snprintf(expected, sizeof expected, "%s/manual", root);
  CHECK(acc_checkpoint_is_complete(expected), "manual checkpoint complete");
  CHECK(acc_project_config_iteration(p) == 1, "a save advances the iteration (as save_state does): %ld", acc_project_config_iteration(p));
  CHECK_ERR(acc_checkpoint_begin(p, expected, &c), ACC_ERR_INVALID_USAGE, "already exists");
  acc_project_config_destroy(p);
  acc_project_config_destroy(NULL);

  acc_project_options bad = {0};
  CHECK_ERR(acc_project_config_create(&p, &bad), ACC_ERR_INVALID_USAGE, "ACC_PROJECT_OPTIONS_INIT");
  o.iteration = -3;
  CHECK_ERR(acc_project_config_create(&p, &o), ACC_ERR_INVALID_ARGUMENT, "iteration is -3");
}

int main(void) {
  char *root = ckpt_tmpdir("proj");
  test_rotation(root);
  test_resume(root);
  acc__rmtree(root);
  free(root);
  return acc_test_finish("ckpt_project");
}
