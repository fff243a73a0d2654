#include <flashattn.h>
#include <stdio.h>

int main(void) {
  if (fa_version_number() != FA_VERSION_NUMBER) return 1;
  printf("consumer linked libflashattn %s with %zu kernels\n", fa_version_string(), fa_kernel_count());
  return 0;
}
