#include "reference_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace fa {

namespace {

std::string& folder_now() {
  static std::string folder;
  return folder;
}

// Two 64-bit hashes (multiply, then fold the high bits down) over the same bytes, eight at a time
// (a 1025 x 1025 problem's inputs are megabytes, hashed by every test process that checks it): a
// 128-bit name, so that two different sets of inputs sharing a file name is not a case to reckon
// with.
struct Hash128 {
  uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull;
  void mix(uint64_t w) {
    a = (a ^ w) * 0x100000001b3ull;
    a ^= a >> 32;
    b = (b ^ w) * 0x9e3779b97f4a7c15ull;
    b ^= b >> 29;
  }
  void add(const void* p, size_t n) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    size_t i = 0;
    for (uint64_t w; i + 8 <= n; i += 8) {
      std::memcpy(&w, c + i, 8);
      mix(w);
    }
    uint64_t tail = 0;
    if (n > i) std::memcpy(&tail, c + i, n - i);
    mix(tail ^ (uint64_t(n - i) << 56));
  }
  std::string hex() const {
    char out[33];
    std::snprintf(out, sizeof(out), "%016llx%016llx", static_cast<unsigned long long>(a),
                  static_cast<unsigned long long>(b));
    return out;
  }
};

void put_size(std::ostream& os, uint64_t n) {
  os.write(reinterpret_cast<const char*>(&n), sizeof(n));
}

bool get_size(std::istream& in, uint64_t& n) {
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&n), sizeof(n)));
}

const char kMagic[8] = {'F', 'A', 'R', 'E', 'F', '0', '0', '1'};

}  // namespace

void share_references_in(const std::string& folder) {
  folder_now() = folder;
}

const std::string& shared_references_folder() {
  return folder_now();
}

SharedReferenceFile::SharedReferenceFile(const std::string& folder, const std::string& scalars,
                                         const std::vector<std::vector<float>>& inputs)
    : scalars_(scalars) {
  Hash128 h;
  h.add(scalars.data(), scalars.size());
  for (const std::vector<float>& t : inputs) {
    const uint64_t n = t.size();
    h.add(&n, sizeof(n));
    h.add(t.data(), t.size() * sizeof(float));
  }
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  path_ = folder + "/" + h.hex();
  lock_fd_ = ::open((path_ + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  // Without a lock (a folder we cannot write) every process computes for itself, as without
  // sharing.
  if (lock_fd_ >= 0 && ::flock(lock_fd_, LOCK_EX) != 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
}

SharedReferenceFile::~SharedReferenceFile() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

bool SharedReferenceFile::load(std::vector<std::string>& fields) const {
  std::ifstream in(path_ + ".ref", std::ios::binary);
  char magic[sizeof(kMagic)];
  uint64_t n = 0;
  if (!in.read(magic, sizeof(magic)) || !std::equal(magic, magic + sizeof(magic), kMagic) ||
      !get_size(in, n) || n != scalars_.size())
    return false;
  std::string scalars(n, '\0');
  if (!in.read(&scalars[0], std::streamsize(n)) || scalars != scalars_ || !get_size(in, n))
    return false;
  fields.assign(n, std::string());
  for (std::string& f : fields) {
    uint64_t bytes = 0;
    if (!get_size(in, bytes)) return false;
    f.resize(bytes);
    if (bytes > 0 && !in.read(&f[0], std::streamsize(bytes))) return false;
  }
  return true;
}

void SharedReferenceFile::store(const std::vector<std::string>& fields) const {
  if (lock_fd_ < 0) return;  // another process may be writing the same file
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(kMagic, sizeof(kMagic));
    put_size(out, scalars_.size());
    out.write(scalars_.data(), std::streamsize(scalars_.size()));
    put_size(out, fields.size());
    for (const std::string& f : fields) {
      put_size(out, f.size());
      out.write(f.data(), std::streamsize(f.size()));
    }
    if (!out.flush()) {
      out.close();
      std::remove(tmp.c_str());
      return;
    }
  }
  if (std::rename(tmp.c_str(), (path_ + ".ref").c_str()) != 0) std::remove(tmp.c_str());
}

}  // namespace fa
