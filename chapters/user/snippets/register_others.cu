// One registration line per problem, at namespace scope (below a launcher of that signature).
#include "registry.h"

void my_gemm(const void* A, const void* B, float* C, fa::GemmShape s, fa::DType t, cudaStream_t st);
void my_transpose(const float* in, float* out, fa::TransposeShape s, cudaStream_t st);
void my_fwd(const fa::AttentionFwdArgs& args, cudaStream_t st);
void my_bwd(const fa::AttentionBwdArgs& args, cudaStream_t st);

FA_REGISTER(GemmKernel, {"03/user_tiled", my_gemm, "my tiled GEMM",
                         {fa::DType::F32, fa::DType::BF16}, 80});
FA_REGISTER(TransposeKernel, {"04/user_smem", my_transpose, "shared-memory tiles", 70});
FA_REGISTER(AttentionFwdKernel, {"05/user_flash", my_fwd, "my FlashAttention forward",
                                 {fa::DType::BF16}, {64, 128}, 80});
FA_REGISTER(AttentionBwdKernel, {"06/user_flash_bwd", my_bwd, "my backward",
                                 {fa::DType::BF16}, {64}, 80, /*deterministic=*/false});
