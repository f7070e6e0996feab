// The head dims each attention kernel registers: sorted, no repeats, and each one of the dims the
// chapters instantiate (32, 64, 96, 128, 256). The GPU test RegisteredFwdHeadDims /
// RegisteredBwdHeadDims (tests/gpu/test_registered_head_dims.cpp) then runs every one of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "registry.h"

namespace {

const std::vector<int> kHeadDims = {32, 64, 96, 128, 256};

std::string list(const std::vector<int>& dims) {
  std::string s;
  for (int d : dims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "{" + s + "}";
}

template <class K>
void check_head_dims(const char* what) {
  int kernels = 0;
  for (const K* k : fa::entries_with_prefix<K>("")) {
    ++kernels;
    SCOPED_TRACE(std::string(what) + " " + k->name + " head_dims " + list(k->head_dims));
    EXPECT_FALSE(k->head_dims.empty());
    EXPECT_FALSE(k->dtypes.empty());
    EXPECT_TRUE(std::is_sorted(k->head_dims.begin(), k->head_dims.end()));
    EXPECT_EQ(std::adjacent_find(k->head_dims.begin(), k->head_dims.end()), k->head_dims.end())
        << "a head dim listed twice";
    for (int d : k->head_dims)
      EXPECT_NE(std::find(kHeadDims.begin(), kHeadDims.end(), d), kHeadDims.end())
          << "D=" << d << " is none of " << list(kHeadDims);
  }
  EXPECT_GT(kernels, 0) << "no " << what << " kernel registered";
}

TEST(RegistryHeadDims, ForwardListsAreSortedAndKnown) {
  check_head_dims<fa::AttentionFwdKernel>("forward");
}

TEST(RegistryHeadDims, BackwardListsAreSortedAndKnown) {
  check_head_dims<fa::AttentionBwdKernel>("backward");
}

}  // namespace
