/* Pruning (total_limit) never deletes through a symlink (red-team 3, N10): a checkpoint_N that is
 * a link to another run's checkpoint is pruned by removing the link only; the target keeps its
 * COMPLETE marker and files. */
#include <sys/stat.h>
#include <unistd.h>

#include "acc_test.h"
#include "ckpt/ckpt_util.h"

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(1);
  }
}

int main(void) {
  char *root = ckpt_tmpdir("prune_link");
  char proj[600], victim[600], path[800], link0[800];
  snprintf(proj, sizeof proj, "%s/proj", root);
  snprintf(victim, sizeof victim, "%s/victim", root);
  REQUIRE_OK(mkdir(victim, 0700) == 0 ? ACC_OK : ACC_ERR_IO);
  snprintf(path, sizeof path, "%s/%s", victim, ACC_CHECKPOINT_MARKER);
  write_text(path, "accelerate-c checkpoint complete\n");
  snprintf(path, sizeof path, "%s/a.txt", victim);
  write_text(path, "x\n");

  acc_accelerator *acc = NULL;
  REQUIRE_OK(acc_accelerator_create(&acc, NULL));
  float w[2] = {1, 2}, g[2] = {0};
  acc_model *m = NULL;
  REQUIRE_OK(acc_model_create(&m));
  REQUIRE_OK(acc_model_add_parameter(m, "w", w, g, 1, (int64_t[]){2}));
  REQUIRE_OK(acc_accelerator_prepare_model(acc, m));
  acc_project_options po = ACC_PROJECT_OPTIONS_INIT;
  po.project_dir = proj;
  po.automatic_checkpoint_naming = 1;
  po.total_limit = 2;
  REQUIRE_OK(acc_accelerator_set_project_config(acc, &po));
  REQUIRE_OK(acc_accelerator_save_state(acc, NULL, NULL)); /* checkpoint_0 */
  /* checkpoint_0 becomes a link to the other run's checkpoint */
  snprintf(link0, sizeof link0, "%s/checkpoints/checkpoint_0", proj);
  char cmd[4000];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && ln -s '%s' '%s'", link0, victim, link0);
  REQUIRE_OK(system(cmd) == 0 ? ACC_OK : ACC_ERR_IO);
  for (int i = 0; i < 3; i++) CHECK_OK(acc_accelerator_save_state(acc, NULL, NULL)); /* prunes checkpoint_0 */

  struct stat sb;
  CHECK(lstat(link0, &sb) != 0, "the link checkpoint_0 was pruned");
  snprintf(path, sizeof path, "%s/%s", victim, ACC_CHECKPOINT_MARKER);
  CHECK(stat(path, &sb) == 0, "the link's target keeps its %s marker", ACC_CHECKPOINT_MARKER);
  snprintf(path, sizeof path, "%s/a.txt", victim);
  CHECK(stat(path, &sb) == 0, "the link's target keeps its files");

  acc_accelerator_destroy(acc);
  acc_model_destroy(m);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) return 1;
  free(root);
  return acc_test_finish("ckpt_prune_link");
}
