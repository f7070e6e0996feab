#include "cli.h"

#include <cstdio>
#include <iostream>
#include <sstream>

#include "check.h"

namespace fa {

Cli::Cli(std::string program, std::string about)
    : program_(std::move(program)), about_(std::move(about)) {
  option("seed", "20261121", "seed of the random inputs (printed with every run)");
}

Cli& Cli::option(const std::string& name, const std::string& def, const std::string& help) {
  opts_.push_back({name, def, help, false});
  declared_.push_back(opts_.back());
  return *this;
}

Cli& Cli::flag(const std::string& name, const std::string& help) {
  opts_.push_back({name, "false", help, true});
  return *this;
}

std::string Cli::usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [options]\n" << about_ << "\n\noptions:\n";
  for (const Opt& o : opts_) {
    std::string left = "  --" + o.name + (o.is_flag ? "" : "=<" + o.value + ">");
    os << left;
    for (size_t i = left.size(); i < 34; ++i) os << ' ';
    os << " " << o.help << "\n";
  }
  os << "  --help                             this message\n";
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
      FA_REQUIRE(a.rfind("--", 0) == 0, "unexpected argument '" + a + "' (options start with --)");
      std::string body = a.substr(2), value;
      bool has_value = false;
      size_t eq = body.find('=');
      if (eq != std::string::npos) {
        value = body.substr(eq + 1);
        body = body.substr(0, eq);
        has_value = true;
      }
      Opt* opt = nullptr;
      for (Opt& o : opts_)
        if (o.name == body) opt = &o;
      FA_REQUIRE(opt != nullptr, "unknown option --" + body + " (see --help)");
      if (opt->is_flag) {
        FA_REQUIRE(!has_value || value == "true" || value == "false" || value == "1" || value == "0",
                   "--" + body + " is a flag: give it alone, or =true / =false");
        opt->value = !has_value || value == "true" || value == "1" ? "true" : "false";
        continue;
      }
      if (!has_value) {
        FA_REQUIRE(i + 1 < args.size(), "--" + body + " needs a value");
        value = args[++i];
      }
      opt->value = value;
    }
    // Validate typed values now, so a typo fails before any work starts: an option whose default
    // is an integer (or a number) must be given an integer (or a number).
    for (const Opt& o : opts_) {
      if (o.is_flag) continue;
      const Opt* decl = nullptr;
      for (const Opt& d : declared_) if (d.name == o.name) decl = &d;
      if (decl == nullptr || decl->value.empty()) continue;
      bool def_is_int = true, def_is_num = true;
      try { parse_int("", decl->value); } catch (...) { def_is_int = false; }
      try { parse_double("", decl->value); } catch (...) { def_is_num = false; }
      if (def_is_int) parse_int("--" + o.name, o.value);
      else if (def_is_num) parse_double("--" + o.name, o.value);
    }
  } catch (const Error& e) {
    std::cerr << program_ << ": " << e.what() << "\n";
    exit_code_ = 2;
    return false;
  }
  return true;
}

const Cli::Opt& Cli::find(const std::string& name) const {
  for (const Opt& o : opts_)
    if (o.name == name) return o;
  throw Error("internal: option --" + name + " was never declared");
}

std::string Cli::get(const std::string& name) const { return find(name).value; }

int64_t parse_int(const std::string& what, const std::string& text) {
  FA_REQUIRE(!text.empty(), what + ": empty value");
  size_t pos = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &pos);
  } catch (...) {
    throw Error(what + ": '" + text + "' is not an integer");
  }
  std::string suffix = text.substr(pos);
  if (suffix == "k" || suffix == "K") v *= 1024;
  else if (suffix == "M" || suffix == "m") v *= 1024 * 1024;
  else if (!suffix.empty()) throw Error(what + ": '" + text + "' is not an integer");
  return v;
}

double parse_double(const std::string& what, const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    throw Error(what + ": '" + text + "' is not a number");
  }
  if (pos != text.size()) throw Error(what + ": '" + text + "' is not a number");
  return v;
}

int64_t Cli::get_int(const std::string& name) const { return parse_int("--" + name, get(name)); }
double Cli::get_double(const std::string& name) const {
  return parse_double("--" + name, get(name));
}
bool Cli::get_bool(const std::string& name) const { return get(name) == "true"; }
uint64_t Cli::seed() const { return static_cast<uint64_t>(get_int("seed")); }

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
