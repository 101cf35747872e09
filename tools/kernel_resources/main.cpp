// tools/kernel_resources/main.cpp: the kernel resources check of the nvcc flavour (target
// kernel_resources; kernel_resources.h says what it reads and checks).
//
//   reel_kernel_resources_tool [--arch sm_90] [--allow FILE] [--out FILE] OBJECT...
//
// Each OBJECT named *.cu.o is read with its <OBJECT>.ptxas (capture.sh writes it beside the
// object); other objects (the library's C++ ones) are skipped. Prints the table (with --out: only
// when a kernel fails; the table goes to that file when none does) and exits 1 when one fails.
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "tools/kernel_resources/kernel_resources.h"

namespace kr = reel::kernel_resources;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int run(int argc, char** argv) {
  std::string arch_name = "sm_90", allow_path, out_path;
  std::vector<std::string> objects;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--arch" || a == "--allow" || a == "--out") && i + 1 < argc) {
      (a == "--arch" ? arch_name : a == "--allow" ? allow_path : out_path) = argv[++i];
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "usage: " << argv[0] << " [--arch sm_90] [--allow FILE] [--out FILE] OBJECT...\n";
      return 2;
    } else {
      objects.push_back(a);
    }
  }
  const kr::Arch* arch = kr::find_arch(arch_name);
  if (!arch) throw std::runtime_error("no SM limits known for " + arch_name + " (tools/kernel_resources: find_arch)");
  const auto allow = allow_path.empty() ? std::map<std::string, std::string>{} : kr::parse_allow_list(read_file(allow_path));

  std::vector<kr::Kernel> kernels;
  for (const std::string& object : objects) {
    if (!ends_with(object, ".cu.o")) continue;
    std::ifstream ptxas(object + ".ptxas");
    if (!ptxas)
      throw std::runtime_error("no " + object + ".ptxas: the object was compiled without "
                               "tools/kernel_resources/capture.sh; delete it and build again");
    std::ostringstream text;
    text << ptxas.rdbuf();
    std::vector<kr::Kernel> found = kr::parse_ptxas(text.str());
    const auto bounds = kr::parse_launch_bounds(read_file(object));
    for (kr::Kernel& k : found) {
      if (const auto it = bounds.find(k.mangled); it != bounds.end()) k.max_threads = it->second;
      kernels.push_back(k);
    }
  }
  const std::vector<kr::Row> rows = kr::check(kernels, *arch, allow);
  const std::string table = kr::format_table(rows, *arch, allow);
  int failures = 0;
  for (const kr::Row& r : rows) failures += r.fails();
  // With --out, a passing build says one line (the table is in the file); a failing one shows it all.
  if (out_path.empty() || failures) std::cout << table;
  if (failures) {
    std::cerr << failures << " kernel(s) fail the resource check: make them fit, or name each in "
              << (allow_path.empty() ? "an allow-list (--allow)" : allow_path) << " with its reason\n";
    return 1;
  }
  if (!out_path.empty()) {
    std::ofstream out(out_path);
    out << table;
    if (!out) throw std::runtime_error("cannot write " + out_path);
    std::cout << "kernel resources on " << arch_name << ": " << rows.size()
              << " kernels checked, none fails; the table: " << out_path << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "kernel_resources: " << e.what() << "\n";
    return 1;
  }
}
