// cli.h: a small command-line parser shared by every chapter program.
//
//   fa::Cli cli("ch04_coalesced_loads", "Strides, coalescing, bank conflicts.");
//   cli.option("rows", Cli::Int, "8192", "rows of the timed matrix").at_least(1);
//   cli.example("--rows=4096 --cols=16384");
//   if (!cli.parse(args)) return cli.exit_code();   // --help, or a value that breaks a rule
//   int64_t rows = cli.get_int("rows");              // parsed, and at least 1
//
// Every option declares its type; the default is only a value of that type, never a guess at it
// (a default "0" once made --scale an integer, and --scale=0.125 was refused). Rules on the value
// (at_least, at_most, power_of_two) are declared with the option and checked by parse(), before
// the program does any work: a value that breaks one exits 2 with the rule in the message
// ("--seed=-1: must be at least 0"). --help shows each option's type and rules.
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
#include <utility>
#include <vector>

namespace fa {

class Cli {
 public:
  // What an option's value is. A list's rules apply to each of its items.
  enum Type {
    Int,       // 4096, 4k, 1M (k = 1024, M = 1024^2)
    Number,    // a finite real number: 0.125, 1e-3, 2
    Text,      // any text: a kernel name, a file
    IntList,   // integers, comma-separated: 1,17,128 ("" is the empty list)
    TextList,  // texts, comma-separated: varlen,window
  };

  Cli(std::string program, std::string about);
  Cli& option(const std::string& name, Type type, const std::string& default_value,
              const std::string& help);
  Cli& flag(const std::string& name, const std::string& help);  // boolean, default false
  // Rules on the value of the option declared last (of each item of a list):
  Cli& at_least(double min);              // value >= min
  Cli& at_most(double max);               // value <= max
  Cli& power_of_two();                    // 1, 2, 4, 8, ... (an integer type)
  Cli& example(const std::string& args);  // --help prints "example: <program> <args>"
  Cli& section(const std::string& title, const std::string& text);  // more --help text

  // false when the program should stop now (help printed: exit 0; bad input: exit 2).
  bool parse(const std::vector<std::string>& args);
  int exit_code() const { return exit_code_; }

  const std::string& program() const { return program_; }
  bool given(const std::string& name) const;       // was it on the command line?
  std::string get(const std::string& name) const;  // the text as given, any type
  // The typed getters: asking an option for another type than it declared is an internal error.
  int64_t get_int(const std::string& name) const;                    // Int
  double get_double(const std::string& name) const;                  // Number (or Int)
  bool get_bool(const std::string& name) const;                      // a flag
  std::vector<int64_t> get_int_list(const std::string& name) const;  // IntList
  std::vector<std::string> get_list(const std::string& name) const;  // TextList
  uint64_t seed() const;  // the --seed option every program has (an Int, at least 0)
  std::string usage() const;

 private:
  struct Opt {
    std::string name, value, help;
    Type type = Text;
    bool is_flag = false;
    bool given = false;
    std::string default_value;
    bool has_min = false, has_max = false, pow2 = false;
    double min = 0, max = 0;
  };
  const Opt& find(const std::string& name) const;
  const Opt& find(const std::string& name, Type type) const;
  static std::string rule(const Opt& o);  // "an integer, at least 1", "numbers", ...
  static void check(const Opt& o);        // throws fa::UsageError naming the rule
  std::string program_, about_, example_;
  std::vector<Opt> opts_;
  std::vector<std::pair<std::string, std::string>> sections_;
  int exit_code_ = 0;
};

// Parsing helpers that throw fa::UsageError with the option name in the message.
int64_t parse_int(const std::string& what, const std::string& text);
double parse_double(const std::string& what, const std::string& text);

}  // namespace fa
