/* accelerate-c version macros.
 * Threads: macros and constant functions: any thread. */
#ifndef ACCELERATE_VERSION_H
#define ACCELERATE_VERSION_H

#define ACC_VERSION_MAJOR 0
#define ACC_VERSION_MINOR 1
#define ACC_VERSION_PATCH 0
#define ACC_VERSION_STRING "0.1.0"
#define ACC_VERSION_NUMBER ((ACC_VERSION_MAJOR << 16) | (ACC_VERSION_MINOR << 8) | ACC_VERSION_PATCH)
/* True when the headers are at least version x.y.z. */
#define ACC_VERSION_CHECK(x, y, z) (ACC_VERSION_NUMBER >= (((x) << 16) | ((y) << 8) | (z)))

#endif
