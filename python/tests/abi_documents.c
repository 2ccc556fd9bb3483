/* Prints, as JSON, the layout of basp_doc_assignment_v1 (basp.h, "Packed batches: documents to groups") for
 * test_documents.py, which compares the ctypes mirror in basp/_abi.py with it: struct size, field offsets and
 * sizes, the bytes of BASP_DOC_ASSIGNMENT_INITIALIZER and its constants. */
#include <stddef.h>
#include <stdio.h>

#include "basp/basp.h"

#define T basp_doc_assignment_v1
#define FIELD(f, sep) \
  printf("    {\"name\": \"%s\", \"offset\": %zu, \"size\": %zu}%s\n", #f, offsetof(T, f), sizeof(((T*)0)->f), sep)

int main(void) {
  const T init = BASP_DOC_ASSIGNMENT_INITIALIZER;
  const unsigned char* b = (const unsigned char*)&init;
  size_t i;
  printf("{\n  \"struct\": \"basp_doc_assignment_v1\",\n  \"sizeof\": %zu,\n  \"initializer\": \"", sizeof(T));
  for (i = 0; i < sizeof(T); ++i) printf("%02x", b[i]);
  printf("\",\n  \"magic\": %lld,\n  \"version\": %lld,\n", (long long)BASP_DOC_ASSIGNMENT_MAGIC,
         (long long)BASP_DOC_ASSIGNMENT_VERSION);
  printf("  \"fields\": [\n");
  FIELD(size, ",");
  FIELD(magic, ",");
  FIELD(version, ",");
  FIELD(rank, ",");
  FIELD(group_index, ",");
  FIELD(group_position, ",");
  FIELD(group_size, ",");
  FIELD(num_docs, ",");
  FIELD(reserved0, ",");
  FIELD(stream_tokens, ",");
  FIELD(token_begin, ",");
  FIELD(token_end, ",");
  FIELD(first_doc, ",");
  FIELD(reserved1, ",");
  FIELD(first_doc_offset, ",");
  FIELD(max_seqlen, ",");
  FIELD(max_group_tokens, ",");
  FIELD(imbalance, "");
  printf("  ]\n}\n");
  return 0;
}
