// cli.h: a small command-line parser shared by every chapter program.
//
//   fa::Cli cli("ch04_coalesced_loads", "Strides, coalescing, bank conflicts.");
//   cli.option("rows", "8192", "rows of the timed matrix").example("--rows=4096 --cols=16384");
//   if (!cli.parse(args)) return cli.exit_code();   // --help, or a malformed value
//   int64_t rows = cli.get_count("rows");            // an integer >= 1, else exit 2
//
// Options are written --name=value or --name value; a flag is --name alone or --name=true/false.
// In option names '-' and '_' are the same letter: --head-dim is --head_dim. --help lists the
// options, then the sections a program adds (its kernels), then one example. A malformed value or
// an unknown option prints a clear error and the program exits with code 2.
//
// The option names shared by all programs, and what each means, are in common/README.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fa {

class Cli {
 public:
  Cli(std::string program, std::string about);
  Cli& option(const std::string& name, const std::string& default_value, const std::string& help);
  Cli& flag(const std::string& name, const std::string& help);  // boolean, default false
  Cli& example(const std::string& args);  // --help prints "example: <program> <args>"
  Cli& section(const std::string& title, const std::string& text);  // more --help text

  // false when the program should stop now (help printed: exit 0; bad input: exit 2).
  bool parse(const std::vector<std::string>& args);
  int exit_code() const { return exit_code_; }

  const std::string& program() const { return program_; }
  bool given(const std::string& name) const;  // was it on the command line?
  std::string get(const std::string& name) const;
  int64_t get_int(const std::string& name) const;  // accepts 4096, 4k, 1M (k=1024, M=1024^2)
  // An integer >= min_value; anything smaller throws fa::UsageError naming the option.
  int64_t get_count(const std::string& name, int64_t min_value = 1) const;
  double get_double(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  std::vector<int64_t> get_int_list(const std::string& name) const;  // "1,17,128"
  std::vector<std::string> get_list(const std::string& name) const;  // "a,b"
  uint64_t seed() const;  // the --seed option every program has
  std::string usage() const;

 private:
  struct Opt {
    std::string name, value, help;
    bool is_flag = false;
    bool given = false;
    std::string default_value;
  };
  const Opt& find(const std::string& name) const;
  std::string program_, about_, example_;
  std::vector<Opt> opts_;
  std::vector<std::pair<std::string, std::string>> sections_;
  int exit_code_ = 0;
};

// Parsing helpers that throw fa::UsageError with the option name in the message.
int64_t parse_int(const std::string& what, const std::string& text);
double parse_double(const std::string& what, const std::string& text);

}  // namespace fa
