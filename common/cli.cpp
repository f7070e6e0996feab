#include "cli.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "check.h"

namespace fa {

namespace {

// --head-dim and --head_dim are the same option: one spelling to remember, either one works.
std::string canonical(std::string name) {
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

bool is_list(Cli::Type t) {
  return t == Cli::IntList || t == Cli::TextList;
}

bool is_integer(Cli::Type t) {
  return t == Cli::Int || t == Cli::IntList;
}

// A bound as the user would write it: 16, not 16.000000; 0.5, not 5e-01.
std::string bound(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  return buf;
}

// The items of a value: one for a scalar, each comma-separated one for a list ("" is none).
std::vector<std::string> items_of(const std::string& value, Cli::Type type) {
  if (!is_list(type)) return {value};
  std::vector<std::string> out;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

Cli::Cli(std::string program, std::string about)
    : program_(std::move(program)), about_(std::move(about)) {
  // A seed is a 64-bit pattern, but a negative one would wrap to 2^64 - 1 and print as a number
  // the user never typed: seeds are the integers from 0 up.
  option("seed", Int, "20261121", "seed of the random inputs (printed with every run)").at_least(0);
}

Cli& Cli::option(const std::string& name, Type type, const std::string& def,
                 const std::string& help) {
  Opt o;
  o.name = canonical(name);
  o.value = o.default_value = def;
  o.help = help;
  o.type = type;
  opts_.push_back(o);
  return *this;
}

Cli& Cli::flag(const std::string& name, const std::string& help) {
  Opt o;
  o.name = canonical(name);
  o.value = o.default_value = "false";
  o.help = help;
  o.is_flag = true;
  opts_.push_back(o);
  return *this;
}

Cli& Cli::at_least(double min) {
  FA_REQUIRE(!opts_.empty() && !opts_.back().is_flag && opts_.back().type != Text &&
                 opts_.back().type != TextList,
             "at_least() follows the declaration of a numeric option");
  opts_.back().has_min = true;
  opts_.back().min = min;
  return *this;
}

Cli& Cli::at_most(double max) {
  FA_REQUIRE(!opts_.empty() && !opts_.back().is_flag && opts_.back().type != Text &&
                 opts_.back().type != TextList,
             "at_most() follows the declaration of a numeric option");
  opts_.back().has_max = true;
  opts_.back().max = max;
  return *this;
}

Cli& Cli::power_of_two() {
  FA_REQUIRE(!opts_.empty() && !opts_.back().is_flag && is_integer(opts_.back().type),
             "power_of_two() follows the declaration of an integer option");
  opts_.back().pow2 = true;
  return *this;
}

Cli& Cli::example(const std::string& args) {
  example_ = args;
  return *this;
}

Cli& Cli::section(const std::string& title, const std::string& text) {
  sections_.emplace_back(title, text);
  return *this;
}

// What a value (each item of a list) must be, in words: "an integer, a power of two, at least 16".
std::string Cli::rule(const Opt& o) {
  std::string r = is_integer(o.type) ? "an integer" : o.type == Number ? "a number" : "any text";
  if (o.pow2) r += ", a power of two";
  if (o.has_min && o.has_max)
    r += ", from " + bound(o.min) + " to " + bound(o.max);
  else if (o.has_min)
    r += ", at least " + bound(o.min);
  else if (o.has_max)
    r += ", at most " + bound(o.max);
  return r;
}

// The value of `o` against its type and rules; fa::UsageError stating the rule when it breaks one.
void Cli::check(const Opt& o) {
  if (o.is_flag || o.type == Text || o.type == TextList) return;
  const std::string what = "--" + o.name;
  for (const std::string& item : items_of(o.value, o.type)) {
    double v = 0;
    bool pow2 = true;
    if (is_integer(o.type)) {
      const int64_t i = parse_int(what, item);
      v = double(i);
      pow2 = i > 0 && (i & (i - 1)) == 0;
    } else {
      v = parse_double(what, item);
    }
    if ((o.pow2 && !pow2) || (o.has_min && v < o.min) || (o.has_max && v > o.max)) {
      if (is_list(o.type))
        throw UsageError(what + "=" + o.value + ": " + item +
                         " is not allowed: each item must be " + rule(o));
      throw UsageError(what + "=" + o.value + ": must be " + rule(o));
    }
  }
}

std::string Cli::usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [options]\n" << about_ << "\n\noptions:\n";
  for (const Opt& o : opts_) {
    std::string left =
        "  --" + o.name + (o.is_flag ? "[=true|false]" : "=<" + o.default_value + ">");
    os << left;
    for (size_t i = left.size(); i < 34; ++i) os << ' ';
    os << " " << o.help;
    if (!o.is_flag && o.type != Text && o.type != TextList)  // "[an integer, at least 1]"
      os << " [" << (is_list(o.type) ? "a list, each item " : "") << rule(o) << "]";
    os << "\n";
  }
  os << "  --help                            this message\n";
  for (const auto& s : sections_) os << "\n" << s.first << ":\n" << s.second;
  if (!example_.empty()) os << "\nexample:\n  " << program_ << " " << example_ << "\n";
  return os.str();
}

bool Cli::parse(const std::vector<std::string>& args) {
  // The defaults obey their own rules, or the declaration is wrong (not the user's input).
  for (const Opt& o : opts_) {
    try {
      check(o);
    } catch (const UsageError& e) {
      throw Error("internal: the default of --" + o.name + " breaks its own rule (" + e.what() +
                  ")");
    }
  }
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a == "--help" || a == "-h") {
        std::cout << usage();
        exit_code_ = 0;
        return false;
      }
      if (a.rfind("--", 0) != 0)
        throw UsageError("unexpected argument '" + a + "' (options start with --)");
      std::string body = a.substr(2), value;
      bool has_value = false;
      const size_t eq = body.find('=');
      if (eq != std::string::npos) {
        value = body.substr(eq + 1);
        body = body.substr(0, eq);
        has_value = true;
      }
      Opt* opt = nullptr;
      for (Opt& o : opts_)
        if (o.name == canonical(body)) opt = &o;
      if (opt == nullptr) throw UsageError("unknown option --" + body);
      opt->given = true;
      if (opt->is_flag) {
        if (has_value && value != "true" && value != "false" && value != "1" && value != "0")
          throw UsageError("--" + body + " is a flag: give it alone, or =true / =false");
        opt->value = !has_value || value == "true" || value == "1" ? "true" : "false";
        continue;
      }
      if (!has_value) {
        if (i + 1 >= args.size()) throw UsageError("--" + body + " needs a value");
        value = args[++i];
      }
      opt->value = value;
    }
    // Every value against its declared type and rules now, so that a mistake fails before any
    // work starts.
    for (const Opt& o : opts_)
      if (o.given) check(o);
  } catch (const UsageError& e) {
    std::cerr << program_ << ": error: " << e.what() << "\n(" << program_
              << " --help lists the options)\n";
    exit_code_ = 2;
    return false;
  }
  return true;
}

const Cli::Opt& Cli::find(const std::string& name) const {
  for (const Opt& o : opts_)
    if (o.name == canonical(name)) return o;
  throw Error("internal: option --" + name + " was never declared");
}

const Cli::Opt& Cli::find(const std::string& name, Type type) const {
  const Opt& o = find(name);
  if (o.is_flag || o.type != type)
    throw Error("internal: option --" + name + " is read as another type than it declared");
  return o;
}

bool Cli::given(const std::string& name) const {
  return find(name).given;
}
std::string Cli::get(const std::string& name) const {
  return find(name).value;
}

int64_t parse_int(const std::string& what, const std::string& text) {
  if (text.empty()) throw UsageError(what + ": empty value");
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &pos);
  } catch (const std::out_of_range&) {
    throw UsageError(what + ": " + text + " is out of range (the largest integer is " +
                     std::to_string(std::numeric_limits<int64_t>::max()) + ")");
  } catch (...) {
    throw UsageError(what + ": '" + text + "' is not an integer");
  }
  const std::string suffix = text.substr(pos);
  int64_t unit = 1;
  if (suffix == "k" || suffix == "K")
    unit = 1024;
  else if (suffix == "M" || suffix == "m")
    unit = 1024 * 1024;
  else if (!suffix.empty())
    throw UsageError(what + ": '" + text + "' is not an integer");
  if (v > std::numeric_limits<int64_t>::max() / unit ||
      v < std::numeric_limits<int64_t>::min() / unit)
    throw UsageError(what + ": " + text + " is out of range");
  return v * unit;
}

double parse_double(const std::string& what, const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::out_of_range&) {
    throw UsageError(what + ": " + text + " is out of range");
  } catch (...) {
    throw UsageError(what + ": '" + text + "' is not a number");
  }
  if (pos != text.size() || !std::isfinite(v))
    throw UsageError(what + ": '" + text + "' is not a finite number");
  return v;
}

// The values were checked by parse(): these only convert them.
int64_t Cli::get_int(const std::string& name) const {
  return parse_int("--" + name, find(name, Int).value);
}

double Cli::get_double(const std::string& name) const {
  const Opt& o = find(name);
  return o.type == Int ? double(get_int(name))
                       : parse_double("--" + name, find(name, Number).value);
}

bool Cli::get_bool(const std::string& name) const {
  const Opt& o = find(name);
  if (!o.is_flag) throw Error("internal: option --" + name + " is not a flag");
  return o.value == "true";
}

uint64_t Cli::seed() const {
  return static_cast<uint64_t>(get_int("seed"));  // at least 0 (its rule)
}

std::vector<std::string> Cli::get_list(const std::string& name) const {
  std::vector<std::string> out;
  for (const std::string& item : items_of(find(name, TextList).value, TextList))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> Cli::get_int_list(const std::string& name) const {
  std::vector<int64_t> out;
  for (const std::string& item : items_of(find(name, IntList).value, IntList))
    out.push_back(parse_int("--" + name, item));
  return out;
}

}  // namespace fa
