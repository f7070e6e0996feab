// buffer.h: device memory that frees itself (RAII), with poison, upload and download.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtype.h"

namespace fa {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return ptr_; }
  const void* data() const { return ptr_; }
  template <class T>
  T* as() {
    return static_cast<T*>(ptr_);
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

  // Fill every byte with 0xFF: NaN in fp32, fp16 and bf16 alike, so an element the kernel never
  // writes fails the comparison instead of passing as a lucky zero.
  void poison();
  void zero();
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Round-trip helpers for float values stored on the device as dtype `t`.
DeviceBuffer to_device(DType t, const std::vector<float>& values);
std::vector<float> to_host(DType t, const DeviceBuffer& buf, size_t count);

}  // namespace fa
