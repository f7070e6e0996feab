#include "buffer.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "check.h"

namespace fa {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) {
    const cudaError_t err = cudaMalloc(&ptr_, bytes_);
    // A failed allocation is also recorded as the "last error"; clear it, or the next launch check
    // (cudaGetLastError) would report this out-of-memory as its own failure.
    if (err != cudaSuccess) (void)cudaGetLastError();
    FA_CUDA_CHECK(err);
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);  // never throw from a destructor
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::poison() {
  if (bytes_) FA_CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes_));
}
void DeviceBuffer::zero() {
  if (bytes_) FA_CUDA_CHECK(cudaMemset(ptr_, 0, bytes_));
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  FA_REQUIRE(bytes <= bytes_, "upload larger than the buffer");
  if (bytes) FA_CUDA_CHECK(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  FA_REQUIRE(bytes <= bytes_, "download larger than the buffer");
  if (bytes) FA_CUDA_CHECK(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost));
}

DeviceBuffer to_device(DType t, const std::vector<float>& values) {
  std::vector<uint8_t> bytes = encode(t, values);
  DeviceBuffer buf(bytes.size());
  buf.upload(bytes.data(), bytes.size());
  return buf;
}

std::vector<float> to_host(DType t, const DeviceBuffer& buf, size_t count) {
  std::vector<uint8_t> bytes(count * dtype_size(t));
  buf.download(bytes.data(), bytes.size());
  return decode(t, bytes.data(), count);
}

}  // namespace fa
