// The head dims each attention kernel registers: sorted, no repeats, and each one of the dims the
// chapters instantiate (32, 64, 96, 128, 192, 256: 192 is 07/t52's alone); and the head dims between them that some kernels
// round up (rounds_head_dim). The GPU test RegisteredFwdHeadDims /
// RegisteredBwdHeadDims (tests/gpu/test_registered_head_dims.cpp) then runs every one of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "harness.h"
#include "registry.h"
#include "test_util.h"

namespace {

const std::vector<int> kHeadDims = {32, 64, 96, 128, 192, 256};

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

// Head dims a kernel rounds up (rounds_head_dim): the multiples of 8 between its instances run at
// the next one (D 40 as 64, 80 and 96 as 128, 136 to 248 as 256); a head dim off the step of 8,
// past the largest instance, or listed is computed as itself, and the refusal says what the kernel
// rounds.
TEST(RegistryHeadDims, RoundingUpToTheNextInstance) {
  const std::vector<int> dims = {64, 128, 256};
  for (auto [d, at] : std::vector<std::pair<int, int>>{{8, 64},
                                                       {40, 64},
                                                       {64, 64},
                                                       {72, 128},
                                                       {80, 128},
                                                       {96, 128},
                                                       {128, 128},
                                                       {136, 256},
                                                       {160, 256},
                                                       {192, 256},
                                                       {224, 256},
                                                       {248, 256},
                                                       {256, 256}}) {
    SCOPED_TRACE("D " + std::to_string(d));
    EXPECT_EQ(fa::computed_head_dim(dims, true, d), at);
    EXPECT_TRUE(fa::takes_head_dim(dims, true, d));
    EXPECT_EQ(fa::missing_version({fa::DType::BF16}, dims, fa::DType::BF16, d, true), "");
    EXPECT_EQ(fa::takes_head_dim(dims, false, d), d == at);
  }
  for (int d : {0, 59, 111, 250, 264, 512}) {
    SCOPED_TRACE("D " + std::to_string(d));
    EXPECT_EQ(fa::computed_head_dim(dims, true, d), d);
    EXPECT_FALSE(fa::takes_head_dim(dims, true, d));
  }
  EXPECT_EQ(fa::missing_version({fa::DType::BF16}, dims, fa::DType::BF16, 59, true),
            "this kernel has no bf16 D=59 version (it rounds head dims up to 256 that are "
            "multiples of 8)");
  EXPECT_EQ(fa::missing_version({fa::DType::BF16}, dims, fa::DType::BF16, 96),
            "this kernel has no bf16 D=96 version");
  EXPECT_FALSE(fa::takes_head_dim({64, 128}, true, 192)) << "past the largest instance";
  // Step 1 (05/t15, 06/t17, 06/t21): every head dim up to the largest instance, 59 and 111 included.
  for (auto [d, at] : std::vector<std::pair<int, int>>{
           {1, 32}, {17, 32}, {33, 64}, {59, 64}, {97, 128}, {111, 128}, {129, 256}, {255, 256}})
    EXPECT_EQ(fa::computed_head_dim({32, 64, 96, 128, 256}, true, d, 1), at) << "D " << d;
  EXPECT_FALSE(fa::takes_head_dim({32, 64, 96, 128}, true, 129, 1));
  EXPECT_EQ(
      fa::missing_version({fa::DType::BF16}, {32, 64, 96, 128}, fa::DType::BF16, 130, true, 1),
      "this kernel has no bf16 D=130 version (it rounds every head dim up to 128)");
  // With an instance at 192 (07/t52): 136-192 run there, 200-248 at 256.
  for (auto [d, at] : std::vector<std::pair<int, int>>{
           {128, 128}, {136, 192}, {160, 192}, {192, 192}, {200, 256}, {248, 256}})
    EXPECT_EQ(fa::computed_head_dim({64, 128, 192, 256}, true, d), at) << "D " << d;
  // And at 96 (07/t52): 72-96 run there, 104-120 at 128.
  for (auto [d, at] : std::vector<std::pair<int, int>>{
           {64, 64}, {72, 96}, {88, 96}, {96, 96}, {104, 128}, {120, 128}, {136, 192}})
    EXPECT_EQ(fa::computed_head_dim({64, 96, 128, 192, 256}, true, d), at) << "D " << d;
}

// The sanitizers run one head dim between instances for each instance a kernel rounds up to
// (tests/test_util.h): 80 and 192 where the instances are 64, 128, 256, and 160 too where 192 is
// one of them.
TEST(RegistryHeadDims, SanitizedDimsReachEveryRoundedInstance) {
  fa::AttentionFwdKernel k;
  k.head_dims = {64, 128, 256};
  k.rounds_head_dim = true;
  EXPECT_EQ(sanitized_dims(k), (std::vector<int>{64, 128, 256, 80, 192}));
  k.head_dims = {64, 128, 192, 256};
  EXPECT_EQ(sanitized_dims(k), (std::vector<int>{64, 128, 192, 256, 80, 160}));
  k.head_dims = {32, 64, 96, 128, 256};  // 05/t15: every head dim, 59, 111 and 201 too
  k.rounds_head_dim = true;
  k.head_dim_step = 1;
  EXPECT_EQ(sanitized_dims(k), (std::vector<int>{32, 64, 96, 128, 256, 80, 192, 59, 111, 201}));
  k.rounds_head_dim = false;
  EXPECT_EQ(sanitized_dims(k), k.head_dims);
}

// The kernels that round head dims up must fill the columns past the real head dim with zeros,
// or a row's load reads the next row there. Two ways are known to be right, each with its GPU
// test (RoundedFwdHeadDims, RoundedBwdHeadDims, the serving tests' RoundedHeadDims): chapter 07's
// sm_90a kernels (and chapter 09's Hopper rungs built on them) read by TMA, whose boxes zero-fill
// past the tensor's d columns; the mma.sync kernels below copy 16-byte chunks and zero the chunks
// past d themselves: once, before their loop (08/t07, 08/t09, 09/paged_v1_decode,
// 09/paged_v5_decode_d256; 08/t08 and
// 09/paged_v4_decode_any_head_dim as well, their chunk that holds column d - 1 copied element by
// element with zeros past d in every step), or by cp.async with
// src-size 0 in every copy (05/t14, 05/t16, 06/t16, 06/t19, 06/t20, 06/t22), or in the 16-byte store of a chunk copied element
// by element (05/t15, 05/t17, 06/t17, 06/t21, 09/v3_varlen_any_head_dim, 09/v4_window_any_head_dim, 09/paged_v3_prefill_any_head_dim, 09/bwd_v3_varlen_any_head_dim, 09/bwd_v4_window_any_head_dim, 09/bwd_v5_window_d256, 09/bwd_v6_varlen_grouped, 09/bwd_v7_window_grouped, 09/bwd_v8_grouped_d256, head dims off the step of 8). A new kernel that claims rounding joins this list
// when its own zeroing has been reviewed and tested.
const std::vector<std::string> kMmaKernelsThatZeroTheirOwnColumns = {
    "08/t07_rounded_head_dims",
    "09/paged_v1_decode",
    "05/t14_rounded_head_dims",
    "06/t16_rounded_head_dims",
    "05/t15_any_head_dim",
    "05/t16_grouped_heads",
    "06/t17_any_head_dim",
    "05/t17_grouped_any_head_dim",
    "06/t19_d256_rounded",
    "06/t20_grouped_heads",
    "06/t21_d256_any_head_dim",
    "09/v3_varlen_any_head_dim",
    "09/v4_window_any_head_dim",
    "09/paged_v3_prefill_any_head_dim",
    "09/bwd_v3_varlen_any_head_dim",
    "09/bwd_v4_window_any_head_dim",
    "09/bwd_v5_window_d256",
    "06/t22_group_split",
    "09/bwd_v6_varlen_grouped",
    "08/t08_any_head_dim",
    "09/paged_v4_decode_any_head_dim",
    "09/bwd_v7_window_grouped",
    "09/bwd_v8_grouped_d256",
    "08/t09_d256",
    "09/paged_v5_decode_d256"};
bool rounds_by_tma(const std::string& name, int min_sm) {
  return (name.rfind("07/", 0) == 0 || name.rfind("09/hopper_", 0) == 0) && min_sm == 90;
}
template <class K>
void rounding_kernels_zero_past_the_head_dim() {
  for (const K* k : fa::entries_with_prefix<K>(""))
    if (k->rounds_head_dim)
      EXPECT_TRUE(rounds_by_tma(k->name, k->min_sm) ||
                  std::find(kMmaKernelsThatZeroTheirOwnColumns.begin(),
                            kMmaKernelsThatZeroTheirOwnColumns.end(),
                            k->name) != kMmaKernelsThatZeroTheirOwnColumns.end())
          << k->name;
}
TEST(RegistryHeadDims, KernelsThatRoundZeroPastTheHeadDim) {
  rounding_kernels_zero_past_the_head_dim<fa::AttentionFwdKernel>();
  rounding_kernels_zero_past_the_head_dim<fa::AttentionBwdKernel>();
  rounding_kernels_zero_past_the_head_dim<fa::VarlenFwdKernel>();
  rounding_kernels_zero_past_the_head_dim<fa::VarlenBwdKernel>();
  rounding_kernels_zero_past_the_head_dim<fa::PagedFwdKernel>();
}

}  // namespace
