#include "registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace fa {

namespace {
const std::string& key_of(const Chapter& c) {
  return c.number;
}
template <class K>
const std::string& key_of(const K& k) {
  return k.name;
}
}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      size_t iz = i, jz = j;  // skip leading zeros, then the longer run is the larger number
      while (iz + 1 < ie && a[iz] == '0') ++iz;
      while (jz + 1 < je && b[jz] == '0') ++jz;
      if (ie - iz != je - jz) return ie - iz < je - jz;
      const int c = a.compare(iz, ie - iz, b, jz, je - jz);
      if (c != 0) return c < 0;
      if (ie - i != je - j) return ie - i < je - j;  // same value: fewer leading zeros first
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

template <class K>
std::vector<K>& registry() {
  static std::vector<K> entries;  // function-local: safe during static initialisation
  return entries;
}

template <class K>
bool register_entry(const K& entry) {
  auto& all = registry<K>();
  for (const K& e : all) {
    if (key_of(e) == key_of(entry)) {
      // Static initialisation: there is nobody to catch an exception yet.
      std::fprintf(stderr, "fa registry: '%s' is registered twice\n", key_of(entry).c_str());
      std::abort();
    }
  }
  all.push_back(entry);
  return true;
}

template <class K>
const K* find_entry(const std::string& name) {
  for (const K& e : registry<K>())
    if (key_of(e) == name) return &e;
  return nullptr;
}

template <class K>
std::vector<const K*> entries_with_prefix(const std::string& prefix) {
  std::vector<const K*> out;
  for (const K& e : registry<K>())
    if (key_of(e).compare(0, prefix.size(), prefix) == 0) out.push_back(&e);
  std::sort(out.begin(), out.end(),
            [](const K* a, const K* b) { return natural_less(key_of(*a), key_of(*b)); });
  return out;
}

template <class K>
std::vector<std::string> entry_names(const std::string& prefix) {
  std::vector<std::string> names;
  for (const K* e : entries_with_prefix<K>(prefix)) names.push_back(key_of(*e));
  return names;
}

std::vector<const Chapter*> chapters_in_order() {
  return entries_with_prefix<Chapter>("");
}

#define FA_INSTANTIATE_REGISTRY(K)                                           \
  template std::vector<K>& registry<K>();                                    \
  template bool register_entry<K>(const K&);                                 \
  template const K* find_entry<K>(const std::string&);                       \
  template std::vector<const K*> entries_with_prefix<K>(const std::string&); \
  template std::vector<std::string> entry_names<K>(const std::string&);

FA_INSTANTIATE_REGISTRY(SoftmaxKernel)
FA_INSTANTIATE_REGISTRY(GemmKernel)
FA_INSTANTIATE_REGISTRY(TransposeKernel)
FA_INSTANTIATE_REGISTRY(AttentionFwdKernel)
FA_INSTANTIATE_REGISTRY(AttentionBwdKernel)
FA_INSTANTIATE_REGISTRY(AttentionBwdPreprocessKernel)
FA_INSTANTIATE_REGISTRY(AttentionFwdFp8Kernel)
FA_INSTANTIATE_REGISTRY(VarlenFwdKernel)
FA_INSTANTIATE_REGISTRY(VarlenBwdKernel)
FA_INSTANTIATE_REGISTRY(PagedFwdKernel)
FA_INSTANTIATE_REGISTRY(PagedAppendKernel)
FA_INSTANTIATE_REGISTRY(SmemNeed)
FA_INSTANTIATE_REGISTRY(Chapter)
FA_INSTANTIATE_REGISTRY(Exercise)

}  // namespace fa
