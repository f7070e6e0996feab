// stream_buffer.h: a temporary device buffer ordered on a stream: allocated from the device's
// default memory pool with cudaMallocAsync on the stream, freed with cudaFreeAsync on it when the
// object goes out of scope, after every launch the caller queued on that stream before. Two calls
// on two streams never share it. The pool hands freed memory back to the device at the next
// synchronisation unless its release threshold says otherwise, so a call after a synchronisation
// may map it afresh.
//
// For a kernel's scratch that the caller's arguments do not provide: the fp32 parts of a group
// split among blocks (chapter 06's t22 and chapter 09's bwd_v6, where the caller's workspace
// holds dQ's sum). No allocation, ptr() == nullptr, when the pool cannot give it (the error is
// cleared): the caller then runs without it, as it can.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace fa {

class StreamBuffer {
 public:
  StreamBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes == 0) return;
    if (cudaMallocAsync(&ptr_, bytes, stream) != cudaSuccess) {
      (void)cudaGetLastError();  // not an error of the call: the caller runs without the buffer
      ptr_ = nullptr;
    }
  }
  ~StreamBuffer() {
    if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace fa
