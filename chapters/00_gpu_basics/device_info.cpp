// device_info.cpp: device attributes that fa::GpuInfo (common/gpu.h) does not carry, asked from
// the runtime one by one with cudaDeviceGetAttribute.
#include "ch00_gpu_basics.h"
#include "check.h"

namespace fa::ch00 {

ExtraDeviceInfo extra_device_info() {
  ExtraDeviceInfo e;
  int reserved = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&e.max_threads_per_block, cudaDevAttrMaxThreadsPerBlock, 0));
  FA_CUDA_CHECK(
      cudaDeviceGetAttribute(&e.max_blocks_per_sm, cudaDevAttrMaxBlocksPerMultiprocessor, 0));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, 0));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&e.max_grid_x, cudaDevAttrMaxGridDimX, 0));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&e.max_grid_y, cudaDevAttrMaxGridDimY, 0));
  e.smem_reserved_per_block = reserved;
  return e;
}

}  // namespace fa::ch00
