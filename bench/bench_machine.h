/* The line every benchmark prints first, so that each figure names the machine it came from:
 * "# CPU: <model name>, <n> CPUs online, load average <1 5 15>". Header-only (benchmarks are
 * separate programs); include it from any bench/ program. */
#ifndef ACC_BENCH_MACHINE_H
#define ACC_BENCH_MACHINE_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline void bench_machine(void) {
  char line[512], model[256] = "unknown", load[64] = "?";
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "model name", 10) == 0) {
      char *c = strchr(line, ':');
      if (c) {
        snprintf(model, sizeof model, "%s", c + 2);
        model[strcspn(model, "\n")] = '\0';
      }
      break;
    }
  if (f) fclose(f);
  f = fopen("/proc/loadavg", "r");
  char l1[16], l5[16], l15[16];
  if (f && fscanf(f, "%15s %15s %15s", l1, l5, l15) == 3) snprintf(load, sizeof load, "%s %s %s", l1, l5, l15);
  if (f) fclose(f);
  printf("# CPU: %s, %ld CPUs online, load average %s\n", model, sysconf(_SC_NPROCESSORS_ONLN), load);
}

#endif
