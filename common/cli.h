// cli.h: a small command-line parser shared by every chapter program.
//
//   fa::Cli cli("ch01_safe_softmax", "Row softmax, from three passes to one.");
//   cli.option("rows", "4096", "number of rows");
//   if (!cli.parse(args)) return cli.exit_code();   // --help, or a malformed value
//   int64_t rows = cli.get_int("rows");
//
// Options are written --name=value or --name value; --help lists them. A malformed value or an
// unknown option prints a clear error and makes the program exit with code 2.
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

  // false when the program should stop now (help printed: exit 0; bad input: exit 2).
  bool parse(const std::vector<std::string>& args);
  int exit_code() const { return exit_code_; }

  std::string get(const std::string& name) const;
  int64_t get_int(const std::string& name) const;  // accepts 4096, 4k, 1M (k=1024, M=1024^2)
  double get_double(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  std::vector<int64_t> get_int_list(const std::string& name) const;  // "1,17,128"
  std::vector<std::string> get_list(const std::string& name) const;   // "a,b"
  uint64_t seed() const;  // the --seed option every program has
  std::string usage() const;

 private:
  struct Opt {
    std::string name, value, help;
    bool is_flag = false;
  };
  const Opt& find(const std::string& name) const;
  std::string program_, about_;
  std::vector<Opt> opts_;
  std::vector<Opt> declared_;  // the options with their default values
  int exit_code_ = 0;
};

// Parsing helpers that throw fa::Error with the option name in the message.
int64_t parse_int(const std::string& what, const std::string& text);
double parse_double(const std::string& what, const std::string& text);

}  // namespace fa
