/* Where a program's next large block lands after the library's calls (docs/PERFORMANCE.md, "The
 * cost of adoption"): prepare_flat over a 1.6 MB parameter buffer, then optionally save_state or
 * load_state, then the allocations a lazily allocating trainer makes next (its gradients, its
 * activations). glibc serves blocks >= its mmap threshold (128 KiB at start) with mmap, at page
 * offset 0x010; freeing a large mmapped block raises the threshold to that block's size, and later
 * blocks up to that size come from the heap, at other offsets (and another speed: the gradients'
 * alignment moves bench/adopt's trainer by 9 %).
 * usage: adopt_load_placement none|save|load CHECKPOINT_DIR */
#include <accelerate.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s none|save|load CHECKPOINT_DIR\n", argv[0]);
    return 2;
  }
  size_t n = 403456; /* the parameters of bench/adopt's trainer */
  acc_accelerator *acc = NULL;
  float *p = calloc(n, sizeof(float)), *m = NULL;
  acc_param_spec t[1] = {{"w", 1, {(int64_t)n}}};
  if (acc_accelerator_create(&acc, NULL) != ACC_OK || acc_accelerator_prepare_flat(acc, t, 1, p, NULL, NULL) != ACC_OK ||
      acc_accelerator_register_buffers(acc, "adamw", (acc_named_buffer[]){{"m", ACC_F32, (void **)&m, n, NULL}}, 1) !=
          ACC_OK) {
    fprintf(stderr, "%s\n", acc_last_error());
    return 1;
  }
  acc_result rc = ACC_OK;
  if (strcmp(argv[1], "save") == 0) {
    m = calloc(n, sizeof(float));
    rc = acc_accelerator_save_state(acc, argv[2], NULL);
  } else if (strcmp(argv[1], "load") == 0) {
    rc = acc_accelerator_load_state(acc, argv[2], NULL);
  }
  if (rc != ACC_OK) {
    fprintf(stderr, "%s\n", acc_last_error());
    return 1;
  }
  float *g = malloc(n * sizeof(float)), *a = malloc((size_t)6 << 20);
  printf("%s: params offset 0x%03lx, then gradients 0x%03lx, activations 0x%03lx (page offsets)\n", argv[1],
         (unsigned long)((uintptr_t)p % 4096), (unsigned long)((uintptr_t)g % 4096), (unsigned long)((uintptr_t)a % 4096));
  acc_accelerator_destroy(acc);
  free(p), free(m), free(g), free(a);
  return 0;
}
