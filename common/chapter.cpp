#include "chapter.h"

#include <iostream>
#include <sstream>

#include "check.h"
#include "gpu.h"

namespace fa {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void throw_unknown_kernel(const std::string& name, const std::vector<std::string>& choices) {
  std::ostringstream os;
  os << "no kernel named '" << name << "'; registered here:";
  for (const std::string& c : choices) os << " " << c;
  throw Error(os.str());
}

void print_chapter_header(std::ostream& os, const std::string& number, const std::string& title,
                          const Cli& cli) {
  os << "\n################################################################################\n"
     << "# Chapter " << number << ": " << title << "\n"
     << "# GPU: " << describe_gpu() << "   seed: " << cli.seed() << "\n"
     << "################################################################################\n";
}

void print_no_gpu(std::ostream& os, const std::string& what) {
  os << "\n[no GPU] " << gpu_info().why_absent << ": skipped " << what
     << ". The CPU tier above ran in full.\n";
}

int run_chapter(const Chapter& c, const std::vector<std::string>& args) {
  try {
    return c.run(args);
  } catch (const Error& e) {
    std::cerr << "chapter " << c.number << ": error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "chapter " << c.number << ": unexpected error: " << e.what() << "\n";
    return 2;
  }
}

int chapter_main(const std::string& number, int argc, char** argv) {
  const Chapter* c = find_entry<Chapter>(number);
  if (c == nullptr) {
    std::cerr << "chapter " << number << " is not linked into this program\n";
    return 2;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  return run_chapter(*c, args);
}

}  // namespace fa
