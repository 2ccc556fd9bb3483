/* An NVTX injection library for the tests (NVTX_INJECTION64_PATH=libbasp_nvtx_count.so): counts the pushes and
 * pops of each range name of NVTX's core ranges, per process, and writes them at exit to
 * $BASP_NVTX_COUNTS.<pid>, one line per name: "<name> <pushes> <pops>", then "unbalanced <depth left>". A pop
 * is charged to the name on top of the calling thread's stack. Nothing here is libbasp's. */
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_NAMES 64
#define MAX_DEPTH 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char names[MAX_NAMES][64];
static long pushes[MAX_NAMES];
static long pops[MAX_NAMES];
static int count;
static long unbalanced;
static __thread int stack[MAX_DEPTH];
static __thread int depth;

static int slot(const char* name) {
  for (int i = 0; i < count; ++i) {
    if (strcmp(names[i], name) == 0) return i;
  }
  if (count == MAX_NAMES) return -1;
  strncpy(names[count], name, sizeof names[count] - 1);
  return count++;
}

static int NVTX_API push_a(const char* message) {
  pthread_mutex_lock(&lock);
  const int i = slot(message != NULL ? message : "(null)");
  if (i >= 0) ++pushes[i];
  ++unbalanced;
  pthread_mutex_unlock(&lock);
  if (depth < MAX_DEPTH) stack[depth] = i;
  return depth++;
}

static int NVTX_API pop(void) {
  if (depth == 0) return -1;
  --depth;
  pthread_mutex_lock(&lock);
  const int i = depth < MAX_DEPTH ? stack[depth] : -1;
  if (i >= 0) ++pops[i];
  --unbalanced;
  pthread_mutex_unlock(&lock);
  return depth;
}

static void report(void) {
  const char* base = getenv("BASP_NVTX_COUNTS");
  if (base == NULL) return;
  char path[4096];
  snprintf(path, sizeof path, "%s.%ld", base, (long)getpid());
  FILE* f = fopen(path, "w");
  if (f == NULL) return;
  for (int i = 0; i < count; ++i) fprintf(f, "%s %ld %ld\n", names[i], pushes[i], pops[i]);
  fprintf(f, "unbalanced %ld\n", unbalanced);
  fclose(f);
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const NvtxExportTableCallbacks* callbacks = (const NvtxExportTableCallbacks*)get_export_table(NVTX_ETID_CALLBACKS);
  if (callbacks == NULL) return 0;
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || table == NULL) return 0;
  if (size <= NVTX_CBID_CORE_RangePop) return 0;
  *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push_a;
  *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
  atexit(report);
  return 1;
}
