/* Prints, as JSON, the layout of basp_head_chunk_choice_v1 (basp.h, "Head chunks") for
 * test_head_chunks.py, which compares the ctypes mirror in basp/_head_chunks.py with it: struct size, field offsets and
 * sizes, the bytes of BASP_HEAD_CHUNK_CHOICE_INITIALIZER and its constants. */
#include <stddef.h>
#include <stdio.h>

#include "basp/basp.h"

#define T basp_head_chunk_choice_v1
#define FIELD(f, sep) \
  printf("    {\"name\": \"%s\", \"offset\": %zu, \"size\": %zu}%s\n", #f, offsetof(T, f), sizeof(((T*)0)->f), sep)

int main(void) {
  const T init = BASP_HEAD_CHUNK_CHOICE_INITIALIZER;
  const unsigned char* b = (const unsigned char*)&init;
  size_t i;
  printf("{\n  \"struct\": \"basp_head_chunk_choice_v1\",\n  \"sizeof\": %zu,\n  \"initializer\": \"", sizeof(T));
  for (i = 0; i < sizeof(T); ++i) printf("%02x", b[i]);
  printf("\",\n  \"magic\": %lld,\n  \"version\": %lld,\n", (long long)BASP_HEAD_CHUNK_CHOICE_MAGIC,
         (long long)BASP_HEAD_CHUNK_CHOICE_VERSION);
  printf("  \"fields\": [\n");
  FIELD(size, ",");
  FIELD(magic, ",");
  FIELD(version, ",");
  FIELD(num_chunks, ",");
  FIELD(max_head_chunks, ",");
  FIELD(attention_seconds, ",");
  FIELD(seconds_one, ",");
  FIELD(seconds_chosen, "");
  printf("  ]\n}\n");
  return 0;
}
