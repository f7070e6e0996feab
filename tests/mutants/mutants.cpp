#include "mutants.h"

#include <cstdio>
#include <cstdlib>

namespace fa {

bool register_mutant_failed(const std::string& name) {
  std::fprintf(stderr, "fa mutants: '%s' is registered twice\n", name.c_str());
  std::abort();
}

}  // namespace fa
