// test_readme_commands.cpp: every command the documentation shows, run on this machine.
//
// Run (one test each: Readme/DocumentedCommand.ExitsZero/N_program, Printed/.../N_program, and
// LongCommand/.../N_program and LongCommandPrinted/.../N_program, label cpu-long, for the lines
// whose comment says "(minutes)" and those slow_on_a_gpu lists):
// each line of a code block (fenced, or indented by 4 spaces) in README.md, chapters/*/README.md
// and the tuning appendices, chapters/*/tuning/README.md and chapters/*/*/tuning/README.md (a
// ladder's own appendix: chapters/07_flash_hopper/fp8/tuning/), whose first word is one of this
// build's programs (`./build/bin/X`, `build/bin/X`, `./build-exercises/bin/X` or a bare `X`), and
// every row of fa::printed_commands() (the --help examples and the advice the programs print) that
// no README already shows word for word. Each runs with
// the program of THIS build (the exercise build's programs take the same options), through
// /bin/sh (for quotes and # comments), in a scratch directory, and must exit 0 (a test program
// must also have run a test: a --gtest_filter that selects none exits 0 too). On a machine
// without a GPU that is the CPU path: the programs run their CPU tier, say what they skipped and
// exit 0; exit 2 would mean the command line itself is wrong.
//
// Checked, not run: cmake and ctest lines (the build cannot run itself from its own test):
// every --preset must exist in CMakePresets.json for its kind, and every --target must be a target
// of this build. python3 lines are not checked.
#include <glob.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "chapter.h"
#include "test_util.h"

namespace {

const std::string kSource = FA_SOURCE_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The folder of this test program: build*/bin, where every program of the build is.
std::string bin_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string self = n > 0 ? std::string(buf, size_t(n)) : std::string("./fa_cpu_tests");
  return self.substr(0, self.find_last_of('/'));
}

bool is_program(const std::string& name) {
  return !name.empty() && access((bin_dir() + "/" + name).c_str(), X_OK) == 0;
}

struct Ran {
  int code = -1;
  std::string output;
};

// The scratch directory of this test process: made on first use, removed with everything the
// commands wrote in it when the process exits (one per test; thousands of runs would otherwise
// leave thousands behind in /tmp).
class ScratchDir {
 public:
  ScratchDir() {
    char dir[] = "/tmp/fa_readme_XXXXXX";
    if (mkdtemp(dir) == nullptr)
      throw std::runtime_error("mkdtemp: cannot make a scratch directory");
    path_ = dir;
  }
  ~ScratchDir() {
    std::error_code ignored;  // a destructor must not throw; a leftover directory is harmless
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `program args` from a scratch directory (files a command writes land there).
Ran run(const std::string& program, const std::string& args) {
  static const ScratchDir scratch;
  const std::string cmd = "cd " + scratch.path() + " && FA_README_TEST_CHILD=1 timeout 600 " +
                          bin_dir() + "/" + program + " " + args + " 2>&1";
  Ran r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char buf[4096];
  size_t got = 0;
  while ((got = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, got);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string tail(const std::string& s) {
  return s.size() > 1500 ? s.substr(s.size() - 1500) : s;
}

// A README's code lines: inside ``` fences, or indented by at least 4 spaces.
std::vector<std::string> code_lines(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(read_text(path));
  std::string line;
  bool fenced = false;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    if (line.compare(first, 3, "```") == 0) {
      fenced = !fenced;
      continue;
    }
    if (fenced || first >= 4) out.push_back(line.substr(first));
  }
  return out;
}

std::vector<std::string> readmes() {
  std::vector<std::string> out = {kSource + "/README.md"};
  glob_t g{};
  if (glob((kSource + "/chapters/*/README.md").c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  // The tuning appendices' READMEs after them, so that the numbers of the others stay.
  for (const char* pattern : {"/chapters/*/tuning/README.md", "/chapters/*/*/tuning/README.md"}) {
    glob_t t{};
    if (glob((kSource + pattern).c_str(), 0, nullptr, &t) == 0)
      for (size_t i = 0; i < t.gl_pathc; ++i) out.push_back(t.gl_pathv[i]);
    globfree(&t);
  }
  return out;
}

std::vector<std::string> split_and(const std::string& line) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t amp; (amp = line.find("&&", at)) != std::string::npos; at = amp + 2)
    out.push_back(line.substr(at, amp - at));
  out.push_back(line.substr(at));
  for (std::string& s : out) s = s.substr(std::min(s.size(), s.find_first_not_of(' ')));
  return out;
}

// "./build/bin/ch05_flash_forward" -> "ch05_flash_forward" when it names one of our programs:
// chNN_*, fa_* or tour, by name. Not by looking in bin/: ctest lists these tests right after
// fa_cpu_tests is linked, when other programs (fa_bench) may not be built yet, and a command
// skipped then was silently never run (it happened in CI). A name that matches but is not built
// fails its test ("no program").
std::string program_of(const std::string& command) {
  static const std::regex word(
      R"(^(\./)?(build[A-Za-z0-9_-]*/bin/)?(ch[0-9][0-9]_[a-z0-9_]+|fa_[a-z0-9_]+|tour)(\s|$))");
  std::smatch m;
  if (!std::regex_search(command, m, word)) return "";
  return std::string(m[3]);
}

// The names of one kind of preset ("configurePresets") in CMakePresets.json.
std::vector<std::string> presets(const std::string& kind) {
  const std::string json = read_text(kSource + "/CMakePresets.json");
  std::vector<std::string> names;
  size_t at = json.find("\"" + kind + "\"");
  if (at == std::string::npos) return names;
  at = json.find('[', at);
  int depth = 0;
  size_t end = at;
  for (; end < json.size(); ++end) {
    depth += json[end] == '[' ? 1 : json[end] == ']' ? -1 : 0;
    if (depth == 0) break;
  }
  const std::string section = json.substr(at, end - at);
  static const std::regex name(R"re("name"\s*:\s*"([^"]+)")re");
  for (std::sregex_iterator i(section.begin(), section.end(), name), e; i != e; ++i) {
    const std::string n = (*i)[1];
    // Only the presets themselves, not the configurePreset they point at or a workflow's steps.
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  return names;
}

std::string targets() {
  static const std::string all = [] {
    const std::string build = bin_dir().substr(0, bin_dir().find_last_of('/'));
    FILE* p = popen(
        (std::string(FA_CMAKE_COMMAND) + " --build " + build + " --target help 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    size_t got = 0;
    while (p != nullptr && (got = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, got);
    if (p != nullptr) pclose(p);
    return "\n" + out;
  }();
  return all;
}

// A cmake or ctest line: "" when its presets and targets exist, else what is wrong.
std::string check_cmake_line(const std::string& cmd) {
  std::istringstream in(cmd);
  std::vector<std::string> w;
  for (std::string s; in >> s && s[0] != '#';) w.push_back(s);
  std::string kind = "configurePresets";
  if (w[0] == "ctest") kind = "testPresets";
  for (const std::string& s : w) {
    if (s == "--build") kind = "buildPresets";
    if (s == "--workflow") kind = "workflowPresets";
  }
  for (size_t i = 1; i + 1 < w.size(); ++i) {
    if (w[i] == "--preset") {
      const std::vector<std::string> names = presets(kind);
      if (std::find(names.begin(), names.end(), w[i + 1]) == names.end())
        return "no " + kind + " entry '" + w[i + 1] + "' in CMakePresets.json";
    }
    if (w[i] == "--target" && targets().find("\n" + w[i + 1] + ":") == std::string::npos)
      return "no target '" + w[i + 1] + "' in this build";
  }
  return "";
}

bool in_child() {
  return std::getenv("FA_README_TEST_CHILD") != nullptr;
}

// Did a test program run no test at all? A --gtest_filter that matches nothing (a suite renamed)
// exits 0 like a passing run; gtest says "Running 0 tests from 0 test suites".
bool ran_no_test(const std::string& output) {
  static const std::regex none(R"(\[=+\] Running 0 tests? from)");
  return std::regex_search(output, none);
}

// One documented command: where it comes from, and the program line itself.
struct Documented {
  std::string where;    // "README.md" or "ch02.compare_with_ch01"
  std::string program;  // one of this build's programs
  std::string args;
  size_t number = 0;  // its place in document order (the test name)
};

void PrintTo(const Documented& d, std::ostream* os) {
  *os << d.where << ": " << d.program << " " << d.args;
}

// A test name for gtest, numbered so that it is unique and stable while the documents do not
// change.
std::string test_name(const Documented& d) {
  return test_name_of(std::to_string(d.number) + "_" + d.program);
}

// A README command whose comment says "(minutes)" runs for minutes on a GPU (a benchmark sweep,
// a whole test suite's worth of kernels): its test is instantiated as LongCommand/... and
// tests/CMakeLists.txt gives it the label cpu-long, so the default label stays a few minutes long.
bool takes_minutes(const std::string& line) {
  const size_t hash = line.find(" #");
  return hash != std::string::npos && line.find("(minutes)", hash) != std::string::npos;
}

// A command line as the shell would split it, without its comment: "a  b # c" -> "a b".
std::string words_of(const std::string& program, const std::string& args) {
  std::istringstream in(args.substr(0, args.find(" #")));
  std::string out = program, word;
  while (in >> word) out += " " + word;
  return out;
}

// The commands that are quick on a CPU but took 24 s or more each on an H100 (2026-11-26: 63, 46,
// 43, 42, 35 and 24 s; notes/measured/h100-2026-11-26/ctest.log): big shapes checked against
// the float64 reference, a benchmark. Like the "(minutes)" ones they get the label cpu-long, so
// the default label (the README's test command) stays short on a GPU; CI and `ctest -L long` run
// them. A command edited in its README leaves this list and runs in the default label again.
// Each one's code path keeps a shorter check in the default label. The second group took 29 to
// 169 s each in the default label of 2026-11-26 on an H100, 16 tests at once
// (notes/measured/h100-2026-11-26g/ctest_default.log.gz), where their float64 checks run on
// one core each; next to each, the default-label check of the same path:
bool slow_on_a_gpu(const std::string& program, const std::string& args) {
  static const std::vector<std::string> slow = {
      "ch08_decoding --batch=1 --heads=16 --heads_kv=16 --seq_k=131072 --causal=false",
      "ch06_flash_backward --seq_q=4096 --head_dim=128 --dtype=bf16 --repeats=50",
      "ch06_flash_backward --seq_q=4096 --head_dim=128 --dtype=bf16",
      "fa_bench --benchmark_filter='attn_decode|ceiling' --benchmark_out=decode.json "
      "--benchmark_out_format=json",
      "ch05_flash_forward --memory_demo",
      "tour 01 05",
      // 169 s: the chapter 07 README's same run without the N 8192 row (--big_seq=0, 41 s).
      "ch07_flash_hopper",
      // 68 s (--help's example): the README's same line with --big_seq=0 (10 s).
      "ch07_flash_hopper --seq_q=4096 --head_dim=64 --causal",
      // 162 s (the README's second command on an H200, 2026-12-02, 16 tests at once): the
      // default run of ch09_serving, every part and every kernel; the chapter 09 README's run
      // on smaller shapes (--tokens=1024 --seq_k=4096 ...) takes the same paths.
      "ch09_serving",
      // 99 s (--help's example): the default run of ch09_serving, every part and every kernel.
      "ch09_serving --lengths=0,1,17,1000,2048 --window=127,0 --window_seq=2048 --page_size=64 "
      "--seq_k=8192",
      // 48 s, the float64 GEMM of its 1000 x 4800 x 4000 check: the GPU tests of 03/t13 and
      // 03/t14 (Registered/GemmKernels.*/03_t13_*, 03_t14_*) and the README's other tuning runs.
      "ch03_tiled_matmul --kernel=03/t13_lean_mainloop,03/t14_stream_k_if_it_pays --dtype=bf16 "
      "--check=1000,4800,4000 --m=1000 --n=4800 --k=4000",
      // 29 s: the serving kernels' GPU tests, and fa_bench in the chapter user README's run.
      "fa_bench --benchmark_filter='attn_varlen|attn_window|attn_paged|ceiling'",
  };
  return std::find(slow.begin(), slow.end(), words_of(program, args)) != slow.end();
}

// Every program line of the READMEs, in document order: all of them, only the quick ones, or only
// those marked "(minutes)". Numbers count all of them, so a test keeps its name in either list.
// A line that repeats an earlier one word for word (the exercise build's line of a chapter is
// often the solution build's: this build runs both with its own program) is run once.
enum class Lines { All, Quick, Minutes };
std::vector<Documented> readme_program_lines(Lines which = Lines::All) {
  std::vector<Documented> out;
  std::vector<std::string> seen;
  size_t number = 0;
  for (const std::string& readme : readmes())
    for (const std::string& line : code_lines(readme))
      for (const std::string& cmd : split_and(line)) {
        const std::string program = program_of(cmd);
        if (program.empty() || cmd.rfind("cmake ", 0) == 0 || cmd.rfind("ctest ", 0) == 0) continue;
        const size_t n = number++;
        const std::string args = cmd.substr(cmd.find(program) + program.size());
        const std::string words = words_of(program, args);
        if (std::find(seen.begin(), seen.end(), words) != seen.end()) continue;
        seen.push_back(words);
        const bool long_ = takes_minutes(line) || slow_on_a_gpu(program, args);
        if (which != Lines::All && (which == Lines::Minutes) != long_) continue;
        out.push_back({readme.substr(kSource.size() + 1), program, args, n});
      }
  return out;
}

// The printed commands, except those a README already shows word for word: the README's test
// runs them (chapter 06's example takes minutes on a GPU; running it twice doubled that).
// Numbered in the order of fa::printed_commands(), quick and slow ones alike (slow_on_a_gpu).
std::vector<Documented> printed_program_lines(Lines which = Lines::All) {
  std::vector<std::string> shown;
  for (const Documented& d : readme_program_lines()) shown.push_back(words_of(d.program, d.args));
  std::vector<Documented> out;
  size_t number = 0;
  for (const fa::PrintedCommand& c : fa::printed_commands())
    if (std::find(shown.begin(), shown.end(), words_of(c.program, c.args)) == shown.end()) {
      const size_t n = number++;
      if (which != Lines::All && (which == Lines::Minutes) != slow_on_a_gpu(c.program, c.args))
        continue;
      out.push_back({c.id, c.program, c.args, n});
    }
  return out;
}

}  // namespace

// Each documented command is its own test (so that ctest runs them in parallel, each under its
// own time limit: on a GPU machine the programs run their kernels for real, which takes seconds
// to minutes per command).
class DocumentedCommand : public ::testing::TestWithParam<Documented> {};

TEST_P(DocumentedCommand, ExitsZero) {
  if (in_child()) GTEST_SKIP() << "run by a README command: not again";
  const Documented& d = GetParam();
  ASSERT_TRUE(is_program(d.program)) << d.where << ": no program " << d.program;
  const Ran r = run(d.program, d.args);
#if defined(FA_README_EXERCISE_BUILD)
  // In the exercise build a command that runs a CPU exercise's tests (chapter 02's README:
  // fa_cpu_tests --gtest_filter='CpuExerciseCh02*') fails until the student writes it, and says
  // which TODO is left: that is the exercise's state, not a wrong command (label cpu-exercise).
  if (r.code != 0 && r.output.find("TODO in chapters/") != std::string::npos)
    GTEST_SKIP() << d.program << " " << d.args << ": an exercise's TODO is left\n"
                 << tail(r.output);
#endif
  EXPECT_EQ(r.code, 0) << d.where << ": " << d.program << " " << d.args << "\n" << tail(r.output);
  EXPECT_FALSE(ran_no_test(r.output))
      << d.where << ": " << d.program << " " << d.args
      << "\nselects no test (gtest exits 0 then): a filter that names no test checks nothing\n"
      << tail(r.output);
}

std::string param_name(const ::testing::TestParamInfo<Documented>& i) {
  return test_name(i.param);
}
INSTANTIATE_TEST_SUITE_P(Readme, DocumentedCommand,
                         ::testing::ValuesIn(readme_program_lines(Lines::Quick)), param_name);
INSTANTIATE_TEST_SUITE_P(LongCommand, DocumentedCommand,
                         ::testing::ValuesIn(readme_program_lines(Lines::Minutes)), param_name);
INSTANTIATE_TEST_SUITE_P(Printed, DocumentedCommand,
                         ::testing::ValuesIn(printed_program_lines(Lines::Quick)), param_name);
INSTANTIATE_TEST_SUITE_P(LongCommandPrinted, DocumentedCommand,
                         ::testing::ValuesIn(printed_program_lines(Lines::Minutes)), param_name);

// The counts guard the parser: a README change that hides every command from it must fail.
TEST(ReadmeCommands, TheReadmesShowProgramAndCmakeLines) {
  EXPECT_GE(readme_program_lines().size(), 20u)
      << "the READMEs show fewer program lines than expected: parser broken?";
  int cmake_lines = 0;
  for (const std::string& readme : readmes())
    for (const std::string& line : code_lines(readme))
      for (const std::string& cmd : split_and(line))
        if (cmd.rfind("cmake ", 0) == 0 || cmd.rfind("ctest ", 0) == 0) {
          ++cmake_lines;
          EXPECT_EQ(check_cmake_line(cmd), "") << readme << ": " << cmd;
        }
  EXPECT_GE(cmake_lines, 10);
}

// --help of every chapter program: exit 0, its options, its kernels, and the example it prints
// (which the test above runs) is the one in fa::printed_commands().
TEST(ReadmeCommands, HelpListsOptionsKernelsAndTheExample) {
  for (const fa::PrintedCommand& c : fa::printed_commands()) {
    if (c.id.size() < 5 || c.id.compare(c.id.size() - 5, 5, ".help") != 0) continue;
    const Ran r = run(c.program, "--help");
    EXPECT_EQ(r.code, 0) << c.program << " --help\n" << r.output;
    EXPECT_NE(r.output.find("example:\n  " + c.line() + "\n"), std::string::npos)
        << c.program << " --help should end with its example\n"
        << r.output;
    if (c.program.rfind("ch0", 0) == 0 && c.program != "ch00_gpu_basics") {
      EXPECT_NE(r.output.find("--kernel"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("kernels ("), std::string::npos)
          << c.program << " --help should list its kernels\n"
          << r.output;
    }
  }
}

// Mistakes a user makes: exit 2 and a message that speaks of the input, not of our source code.
TEST(ReadmeCommands, BadInputExitsTwoWithAPlainMessage) {
  struct Bad {
    std::string program, args, says;
  };
  const std::vector<Bad> cases = {
      {"ch05_flash_forward", "--kernel=nope", "05/v1_scalar_fp32"},  // lists the kernels
      {"ch05_flash_forward", "--head_dim=48", "head_dim 48"},
      {"ch05_flash_forward", "--kernel=05/v1_scalar_fp32 --dtype=bf16", "it takes"},
      {"ch05_flash_forward", "--seq_q=99999999999", "GPU memory"},
      {"ch05_flash_forward", "--seq_q=99999999999999999999", "out of range"},
      {"ch05_flash_forward", "--repeats=-5", "at least 1"},
      {"ch05_flash_forward", "--batch=0", "at least 1"},
      {"ch05_flash_forward", "--causal=maybe", "flag"},
      {"ch06_flash_backward", "--dtype=fp8", "unknown dtype"},
      {"ch06_flash_backward", "--head_dim=100000", "head_dim 100000"},
      {"ch01_safe_softmax", "--rows=0 --cols=5", "at least 1"},
      {"ch01_safe_softmax", "--rows=1,2 --cols=1,2,3", "paired"},
      {"ch02_online_softmax", "--nope", "unknown option --nope"},
      {"ch03_tiled_matmul", "--sweep=9:1", "--sweep"},
      {"ch03_tiled_matmul", "--kernel=03/v1_naive --dtype=bf16", "it takes"},
      {"ch04_coalesced_loads", "--repeats=0", "at least 1"},
      {"tour", "99", "no chapter '99'"},
      {"tour", "--nope", "no chapter '--nope'"},
      // Values out of the range an option declares (common/cli.h): exit 2 with the rule.
      {"ch05_flash_forward", "--seed=-1", "--seed=-1: must be an integer, at least 0"},
      {"ch05_flash_forward", "--scale=abc", "'abc' is not a number"},
      {"ch06_flash_backward", "--seq_k=-5", "at least 0"},
      {"ch07_flash_hopper", "--big_seq=-1", "at least 0"},
      {"ch08_decoding", "--heads_kv=-2", "at least 0"},
      {"ch09_serving", "--page_size=7",
       "each item must be an integer, a power of two, at least 16"},
      {"ch09_serving", "--page_size=16,24", "24 is not allowed"},
      {"ch09_serving", "--page_size=8", "at least 16"},
      {"ch09_serving", "--window=-2,0", "at least -1"},
      {"ch09_serving", "--lengths=5,-1", "at least 0"},
      {"ch03_tiled_matmul", "--explain=-1", "at least 0"},
      {"ch00_gpu_basics", "--gemm_n=8", "from 16 to 16384"},
      {"ch00_gpu_basics", "--fma_iters=100", "a multiple of 16"},
  };
  for (const Bad& b : cases) {
    const Ran r = run(b.program, b.args);
    EXPECT_EQ(r.code, 2) << b.program << " " << b.args << "\n" << r.output;
    EXPECT_NE(r.output.find(b.says), std::string::npos) << b.program << " " << b.args << "\n"
                                                        << r.output;
    EXPECT_EQ(r.output.find(".cpp:"), std::string::npos) << "a source location in\n" << r.output;
    EXPECT_EQ(r.output.find("requirement failed"), std::string::npos) << r.output;
  }
}

// --scale=0.125 in every attention program (chapters 05-09). Each is given a kernel that does not
// exist too, so that it stops right after reading its options (exit 2, "no kernel named"): the
// scale was accepted, and no GPU work runs. A scale the parser refused would be named instead.
TEST(ReadmeCommands, FractionalScaleIsAccepted) {
  for (const std::string program : {"ch05_flash_forward", "ch06_flash_backward",
                                    "ch07_flash_hopper", "ch08_decoding", "ch09_serving"}) {
    const Ran r = run(program, "--scale=0.125 --kernel=nope");
    EXPECT_EQ(r.code, 2) << program << "\n" << r.output;
    EXPECT_NE(r.output.find("no kernel named 'nope'"), std::string::npos) << program << "\n"
                                                                          << r.output;
    EXPECT_EQ(r.output.find("--scale"), std::string::npos) << program << "\n" << r.output;
  }
}

// The check above that a test program ran some test: it must see gtest's words for "none".
TEST(ReadmeCommands, AFilterThatSelectsNoTestIsCaught) {
  const Ran none = run("fa_cpu_tests", "--gtest_filter='NoSuchSuite*'");
  EXPECT_EQ(none.code, 0) << none.output;  // gtest itself is content: the reason for the check
  EXPECT_TRUE(ran_no_test(none.output)) << none.output;
  const Ran one = run("fa_cpu_tests", "--gtest_filter='Cli.SeedsAreNotNegative'");
  EXPECT_FALSE(ran_no_test(one.output)) << one.output;
}

// The code the READMEs print is compiled by the build (chapters/user/snippets/): each copy that
// says "<!-- snippet: PATH" must equal that file, so the two cannot drift apart.
TEST(ReadmeSnippets, EqualTheFilesTheBuildCompiles) {
  int found = 0;
  for (const std::string readme : {kSource + "/README.md", kSource + "/chapters/user/README.md"}) {
    const std::string text = read_text(readme);
    const std::string mark = "<!-- snippet: ";
    int here = 0;
    for (size_t at = text.find(mark); at != std::string::npos; at = text.find(mark, at + 1)) {
      const size_t path_at = at + mark.size();
      const std::string path = text.substr(path_at, text.find_first_of(" \n", path_at) - path_at);
      const size_t open = text.find("```", at);
      const size_t body = text.find('\n', open) + 1;
      const size_t close = text.find("\n```", body - 1);
      ASSERT_NE(close, std::string::npos) << readme << ": no code block after " << path;
      const std::string quoted = text.substr(body, close + 1 - body);
      EXPECT_EQ(quoted, read_text(kSource + "/" + path))
          << readme << " quotes " << path << ", but the two differ: copy the file into the README";
      ++here;
    }
    EXPECT_GE(here, 1) << readme << " should quote a compiled snippet";
    found += here;
  }
  EXPECT_GE(found, 2);
}
