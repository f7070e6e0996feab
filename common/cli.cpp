#include "cli.h"

#include <cmath>
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

// Does `text` parse with parse_int (or parse_double)?
template <class Parse>
bool parses(Parse parse, const std::string& text) {
  try {
    parse("", text);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

Cli::Cli(std::string program, std::string about)
    : program_(std::move(program)), about_(std::move(about)) {
  option("seed", "20261121", "seed of the random inputs (printed with every run)");
}

Cli& Cli::option(const std::string& name, const std::string& def, const std::string& help) {
  opts_.push_back({canonical(name), def, help, false, false, def});
  return *this;
}

Cli& Cli::flag(const std::string& name, const std::string& help) {
  opts_.push_back({canonical(name), "false", help, true, false, "false"});
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

std::string Cli::usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [options]\n" << about_ << "\n\noptions:\n";
  for (const Opt& o : opts_) {
    std::string left =
        "  --" + o.name + (o.is_flag ? "[=true|false]" : "=<" + o.default_value + ">");
    os << left;
    for (size_t i = left.size(); i < 34; ++i) os << ' ';
    os << " " << o.help << "\n";
  }
  os << "  --help                            this message\n";
  for (const auto& s : sections_) os << "\n" << s.first << ":\n" << s.second;
  if (!example_.empty()) os << "\nexample:\n  " << program_ << " " << example_ << "\n";
  return os.str();
}

bool Cli::parse(const std::vector<std::string>& args) {
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
    // Validate typed values now, so a typo fails before any work starts: an option whose default
    // is an integer (or a number), or a list of them, must be given integers (or numbers). Whether
    // a list is allowed is the program's business (get_int refuses one).
    for (const Opt& o : opts_) {
      if (o.is_flag || o.default_value.empty()) continue;
      const std::string first_default = o.default_value.substr(0, o.default_value.find(','));
      const bool ints = parses(parse_int, first_default);
      const bool numbers = parses(parse_double, first_default);
      std::stringstream items(o.value);
      std::string item;
      while (std::getline(items, item, ',')) {
        if (ints)
          parse_int("--" + o.name, item);
        else if (numbers)
          parse_double("--" + o.name, item);
      }
    }
  } catch (const Error& e) {
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

int64_t Cli::get_int(const std::string& name) const {
  return parse_int("--" + name, get(name));
}

int64_t Cli::get_count(const std::string& name, int64_t min_value) const {
  const int64_t v = get_int(name);
  if (v < min_value)
    throw UsageError("--" + name + " must be at least " + std::to_string(min_value) + ", got " +
                     get(name));
  return v;
}

double Cli::get_double(const std::string& name) const {
  return parse_double("--" + name, get(name));
}
bool Cli::get_bool(const std::string& name) const {
  return get(name) == "true";
}
uint64_t Cli::seed() const {
  return static_cast<uint64_t>(get_int("seed"));
}

std::vector<std::string> Cli::get_list(const std::string& name) const {
  std::vector<std::string> out;
  std::stringstream ss(get(name));
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> Cli::get_int_list(const std::string& name) const {
  std::vector<int64_t> out;
  for (const std::string& s : get_list(name)) out.push_back(parse_int("--" + name, s));
  return out;
}

}  // namespace fa
