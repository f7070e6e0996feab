// The command line (common/cli.h): every option declares its type and its rules, and a value that
// breaks one is refused before any work, with exit code 2 and the rule in the message. The
// programs' own refusals (each chapter program run with a bad value) are in
// test_readme_commands.cpp (ReadmeCommands.BadInputExitsTwoWithAPlainMessage).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chapter.h"
#include "check.h"
#include "cli.h"

namespace {

using fa::Cli;

// What parse(args) did on a fresh Cli made by `declare`.
struct Parsed {
  bool ok = false;
  int code = 0;     // exit_code()
  std::string err;  // what it printed on stderr
};

template <class Declare>
Parsed parse_with(Declare declare, const std::vector<std::string>& args) {
  Cli cli("prog", "about");
  declare(cli);
  testing::internal::CaptureStderr();
  Parsed r;
  r.ok = cli.parse(args);
  r.err = testing::internal::GetCapturedStderr();
  r.code = cli.exit_code();
  return r;
}

// Refused with exit code 2, and the message says `says`.
void expect_refused(const Parsed& r, const std::string& says) {
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
}

TEST(Cli, ParsesAndRejectsMalformedValues) {
  Cli ok("p", "t");
  ok.option("rows", Cli::Int, "4096", "r").option("sizes", Cli::IntList, "1,17", "s");
  ok.flag("fast", "f");
  EXPECT_TRUE(ok.parse({"--rows=1k", "--sizes", "3,5", "--fast"}));
  EXPECT_EQ(ok.get_int("rows"), 1024);
  EXPECT_EQ(ok.get_int_list("sizes"), (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(ok.get_bool("fast"));

  auto rows = [](Cli& c) { c.option("rows", Cli::Int, "4096", "r"); };
  expect_refused(parse_with(rows, {"--rows=12x"}), "'12x' is not an integer");
  expect_refused(parse_with(rows, {"--rows=2.5"}), "'2.5' is not an integer");
  expect_refused(parse_with(rows, {"--nope=1"}), "unknown option --nope");
}

// The defect that made types declared: --scale's default "0" looked like an integer, so the old
// parser refused --scale=0.125. A Number takes any finite number, whatever its default looks like.
TEST(Cli, TheTypeIsDeclaredNotGuessedFromTheDefault) {
  auto scale = [](Cli& c) { c.option("scale", Cli::Number, "0", "softmax scale"); };
  EXPECT_TRUE(parse_with(scale, {"--scale=0.125"}).ok);
  EXPECT_TRUE(parse_with(scale, {"--scale=1e-3"}).ok);
  EXPECT_TRUE(parse_with(scale, {"--scale=-0.5"}).ok);  // legal: the kernels handle its sign
  expect_refused(parse_with(scale, {"--scale=abc"}), "'abc' is not a number");
  expect_refused(parse_with(scale, {"--scale=inf"}), "not a finite number");

  Cli c("p", "t");
  c.option("scale", Cli::Number, "0", "s");
  ASSERT_TRUE(c.parse({"--scale=0.125"}));
  EXPECT_EQ(c.get_double("scale"), 0.125);

  // Text is anything; a TextList of texts is split at commas, empty items dropped.
  Cli t("p", "t");
  t.option("out", Cli::Text, "a.csv", "o").option("parts", Cli::TextList, "x,y", "p");
  ASSERT_TRUE(t.parse({"--out=12", "--parts=varlen,,window"}));
  EXPECT_EQ(t.get("out"), "12");
  EXPECT_EQ(t.get_list("parts"), (std::vector<std::string>{"varlen", "window"}));
}

// The chapters 05-08 options (add_attention_options) take a fractional scale, and
// read_attention_options passes it on.
TEST(Cli, AttentionOptionsTakeAFractionalScale) {
  Cli cli("p", "t");
  fa::add_attention_options(cli);
  ASSERT_TRUE(cli.parse({"--scale=0.125", "--dtype=bf16"}));
  EXPECT_EQ(fa::read_attention_options(cli).shape.scale, 0.125f);
}

TEST(Cli, OutOfRangeValuesExitTwoWithTheRule) {
  auto counted = [](Cli& c) { c.option("batch", Cli::Int, "2", "B").at_least(1); };
  expect_refused(parse_with(counted, {"--batch=0"}), "--batch=0: must be an integer, at least 1");
  EXPECT_TRUE(parse_with(counted, {"--batch=1"}).ok);

  auto bounded = [](Cli& c) { c.option("n", Cli::Int, "4096", "n").at_least(16).at_most(16384); };
  expect_refused(parse_with(bounded, {"--n=16385"}),
                 "--n=16385: must be an integer, from 16 to 16384");
  expect_refused(parse_with(bounded, {"--n=8"}), "from 16 to 16384");
  EXPECT_TRUE(parse_with(bounded, {"--n=16384"}).ok);

  auto number = [](Cli& c) { c.option("p", Cli::Number, "0.5", "p").at_least(0).at_most(1); };
  expect_refused(parse_with(number, {"--p=1.5"}), "--p=1.5: must be a number, from 0 to 1");

  // A list's rule holds for each item, and the message names the item that breaks it.
  auto lengths = [](Cli& c) { c.option("lengths", Cli::IntList, "", "l").at_least(0); };
  EXPECT_TRUE(parse_with(lengths, {}).ok);  // "" is the empty list
  EXPECT_TRUE(parse_with(lengths, {"--lengths=0,1,17"}).ok);
  expect_refused(parse_with(lengths, {"--lengths=3,-1"}),
                 "--lengths=3,-1: -1 is not allowed: each item must be an integer, at least 0");
}

// ch09_serving's --page_size: powers of two of at least 16, the rule of every paged kernel.
TEST(Cli, PowersOfTwo) {
  auto pages = [](Cli& c) {
    c.option("page_size", Cli::IntList, "16,64,256", "p").power_of_two().at_least(16);
  };
  for (const char* bad :
       {"--page_size=7", "--page_size=48", "--page_size=8", "--page_size=16,0", "--page_size=-16"})
    expect_refused(parse_with(pages, {bad}),
                   "each item must be an integer, a power of two, at least 16");
  EXPECT_TRUE(parse_with(pages, {"--page_size=16,32,1024"}).ok);
  EXPECT_THROW(Cli("p", "t").option("x", Cli::Number, "1", "x").power_of_two(), fa::Error);
}

// Every program's --seed: the integers from 0 up. -1 used to wrap to 2^64 - 1.
TEST(Cli, SeedsAreNotNegative) {
  auto none = [](Cli&) {};
  expect_refused(parse_with(none, {"--seed=-1"}), "--seed=-1: must be an integer, at least 0");
  Cli cli("p", "t");
  ASSERT_TRUE(cli.parse({"--seed=0"}));
  EXPECT_EQ(cli.seed(), 0u);
  Cli dflt("p", "t");
  ASSERT_TRUE(dflt.parse({}));
  EXPECT_EQ(dflt.seed(), 20261121u);
}

// Mistakes of the program's author, not the user's: internal errors.
TEST(Cli, DeclarationMistakesAreInternalErrors) {
  Cli broken("p", "t");
  broken.option("n", Cli::Int, "0", "n").at_least(1);  // a default that breaks its own rule
  try {
    broken.parse({});
    ADD_FAILURE() << "a default below its minimum was accepted";
  } catch (const fa::UsageError&) {
    ADD_FAILURE() << "the program's mistake was blamed on the user";
  } catch (const fa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the default of --n breaks its own rule"),
              std::string::npos)
        << e.what();
  }
  Cli c("p", "t");
  c.option("scale", Cli::Number, "0", "s").option("name", Cli::Text, "a", "n").flag("f", "f");
  ASSERT_TRUE(c.parse({}));
  EXPECT_THROW(c.get_int("scale"), fa::Error);  // read as another type than declared
  EXPECT_THROW(c.get_int_list("name"), fa::Error);
  EXPECT_THROW(c.get_bool("name"), fa::Error);
  EXPECT_THROW(c.get("nope"), fa::Error);  // never declared
  EXPECT_THROW(Cli("p", "t").option("t", Cli::Text, "", "t").at_least(1), fa::Error);
}

// --help states each option's type and rules, so that the rule a refusal quotes can be read first.
TEST(Cli, HelpShowsTypesAndRules) {
  Cli cli("p", "t");
  cli.option("page_size", Cli::IntList, "16,64", "page sizes").power_of_two().at_least(16);
  cli.option("scale", Cli::Number, "0", "softmax scale");
  testing::internal::CaptureStdout();
  EXPECT_FALSE(cli.parse({"--help"}));
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_EQ(cli.exit_code(), 0);
  EXPECT_NE(help.find("[a list, each item an integer, a power of two, at least 16]"),
            std::string::npos)
      << help;
  EXPECT_NE(help.find("softmax scale [a number]"), std::string::npos) << help;
  EXPECT_NE(help.find("[an integer, at least 0]"), std::string::npos) << help;  // --seed
}

}  // namespace
