/* tvm_memsched micro runtime (see tvm_memsched_rt.h). Needs no libc beyond <stddef.h>/<stdint.h>. */
#include <tvm/runtime/c_backend_api.h> /* TVMBackend* prototypes; pulls in tvm/ffi/c_api.h, dlpack.h */

#include "tvm_memsched_rt.h"

static uint8_t* g_ws_base;
static size_t g_ws_size;
static size_t g_ws_top;
static size_t g_ws_high;
static char g_error[192];

/* ---------------------------------------------------------------- errors */
static size_t append(size_t n, const char* s) {
  while (s != NULL && *s != '\0' && n + 1 < sizeof(g_error)) g_error[n++] = *s++;
  g_error[n] = '\0';
  return n;
}

static size_t append_uint(size_t n, uint64_t v) {
  char digits[24];
  size_t k = sizeof(digits) - 1;
  digits[k] = '\0';
  do {
    digits[--k] = (char)('0' + (int)(v % 10u));
    v /= 10u;
  } while (v != 0u && k > 0u);
  return append(n, digits + k);
}

__attribute__((noinline)) void tvm_memsched_set_error(const char* message) {
  g_error[0] = '\0';
  (void)append(0, message);
}

const char* tvm_memsched_last_error(void) { return g_error; }

void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message) {
  size_t n = append(0, kind);
  n = append(n, ": ");
  (void)append(n, message);
}

void TVMFFIErrorSetRaisedFromCStrParts(const char* kind, const char** parts, int32_t num_parts) {
  size_t n = append(0, kind);
  n = append(n, ": ");
  for (int32_t i = 0; i < num_parts; ++i) n = append(n, parts[i]);
}

/* ------------------------------------------------------------- workspace */
void tvm_memsched_set_workspace(void* base, size_t bytes) {
  g_ws_base = (uint8_t*)base;
  g_ws_size = bytes;
  g_ws_top = 0;
}

size_t tvm_memsched_workspace_high_water(void) { return g_ws_high; }

void* tvm_memsched_workspace(size_t bytes) {
  if (bytes > g_ws_size) { /* (a call with no region planned has size 0) */
    tvm_memsched_set_error("a library kernel needs more workspace than was planned for its call");
    return NULL;
  }
  if (bytes > g_ws_high) g_ws_high = bytes;
  return g_ws_base;
}

void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes, int dtype_code_hint,
                               int dtype_bits_hint) {
  (void)device_type;
  (void)device_id;
  (void)dtype_code_hint;
  (void)dtype_bits_hint;
  size_t start = (g_ws_top + (TVM_MEMSCHED_WS_ALIGN - 1u)) & ~(size_t)(TVM_MEMSCHED_WS_ALIGN - 1u);
  if (g_ws_base == NULL || start > g_ws_size || nbytes > (uint64_t)(g_ws_size - start)) {
    size_t n = append(0, "workspace request of ");
    n = append_uint(n, nbytes);
    n = append(n, " bytes does not fit: ");
    n = append_uint(n, g_ws_top);
    n = append(n, " of the ");
    n = append_uint(n, g_ws_size);
    (void)append(n, " bytes planned for this kernel call are in use");
    return NULL; /* the kernel checks for NULL and returns -1 */
  }
  g_ws_top = start + (size_t)nbytes;
  if (g_ws_top > g_ws_high) g_ws_high = g_ws_top;
  return g_ws_base + start;
}

int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr) {
  (void)device_type;
  (void)device_id;
  uintptr_t p = (uintptr_t)ptr, base = (uintptr_t)g_ws_base;
  if (g_ws_base == NULL || p < base || p > base + g_ws_top) {
    tvm_memsched_set_error("TVMBackendFreeWorkspace: pointer is not from the current workspace");
    return -1;
  }
  g_ws_top = (size_t)(p - base); /* LIFO: kernels free in reverse order of allocation */
  return 0;
}

/* ------------------------------------------- parallel loops (run serially) */
int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  (void)num_task;
  TVMParallelGroupEnv env;
  env.sync_handle = NULL;
  env.num_task = 1;
  return flambda(0, &env, cdata);
}

int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id;
  (void)penv;
  return 0;
}
