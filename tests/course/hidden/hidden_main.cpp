// fa_hidden_tests' main: GoogleTest's, plus two listings the grader reads before it grades.
//   fa_hidden_tests --fa_list_kernels   every registered kernel name, one a line
//   fa_hidden_tests --fa_list_mutants   every mutant, "<type> <name>" a line (mutants.h)
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>

#include "mutants.h"
#include "registry.h"

namespace {

template <class K>
void list_kernels() {
  for (const std::string& n : fa::entry_names<K>()) std::cout << n << "\n";
}

template <class K>
void list_mutants(const char* type) {
  for (const K& m : fa::mutants<K>()) std::cout << type << " " << m.name << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--fa_list_kernels") == 0) {
      list_kernels<fa::SoftmaxKernel>();
      list_kernels<fa::GemmKernel>();
      list_kernels<fa::TransposeKernel>();
      list_kernels<fa::AttentionFwdKernel>();
      list_kernels<fa::AttentionBwdKernel>();
      return 0;
    }
    if (std::strcmp(argv[i], "--fa_list_mutants") == 0) {
      list_mutants<fa::SoftmaxKernel>("softmax");
      list_mutants<fa::GemmKernel>("gemm");
      list_mutants<fa::TransposeKernel>("transpose");
      list_mutants<fa::AttentionFwdKernel>("attn_fwd");
      list_mutants<fa::AttentionBwdKernel>("attn_bwd");
      return 0;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
