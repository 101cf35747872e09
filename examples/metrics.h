// --metrics FILE in the training examples: one JSON object per optimizer step, a line each (step,
// loss, lr, grad_norm (null unless --clip computes it), loss scale, whether the window was
// skipped, tokens or samples per second over the step, the device's peak bytes so far), and at
// the end the loss curve beside it as an SVG (FILE with its extension replaced by .svg; through
// report/svg_chart.h), drawn from every line in the file. A resumed run (--resume) keeps the lines
// up to the step it resumes after and appends, so the file and its curve cover the whole run.
#pragma once
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reel.h"
#include "report/svg_chart.h"

namespace examples {

class MetricsLog {
 public:
  // `resumed_after`: the step a --resume continues after (0: a fresh run, the file is started anew).
  MetricsLog(std::string path, int64_t resumed_after, std::string unit)
      : path_(std::move(path)), unit_(std::move(unit)) {
    if (path_.empty()) return;
    std::vector<std::string> kept;
    if (resumed_after > 0) {
      std::ifstream in(path_);
      for (std::string line; std::getline(in, line);) {
        try {
          if (nlohmann::json::parse(line).at("step").get<int64_t>() <= resumed_after) kept.push_back(line);
        } catch (const std::exception&) {  // a line cut short by the kill: dropped
        }
      }
    }
    out_.open(path_, std::ios::trunc);
    REEL_CHECK(out_.good(), "--metrics: cannot write '", path_, "'");
    for (const std::string& line : kept) out_ << line << '\n';
    out_.flush();
  }

  // After optimizer step `step`: `r` its window, `seconds` its wall time, `peak_bytes` the device's.
  void log(int64_t step, const reel::optim::WindowResult& r, double seconds, int64_t peak_bytes) {
    if (path_.empty()) return;
    nlohmann::json j;
    j["step"] = step;
    // A line per step: its values are read here (the host waits for the step; --metrics asks for it).
    j["loss"] = r.loss.get();
    j["lr"] = r.lr;
    const double grad_norm = r.grad_norm.get();
    j["grad_norm"] = grad_norm > 0 ? nlohmann::json(grad_norm) : nlohmann::json(nullptr);
    j["scale"] = r.loss_scale.get();
    j["skipped"] = r.skipped_nonfinite.get();
    j[unit_ + "_per_s"] = seconds > 0 ? static_cast<double>(r.count) / seconds : 0.0;
    j["peak_bytes"] = peak_bytes;
    out_ << j.dump() << '\n';
    out_.flush();  // a kill loses at most the line being written
  }

  // After training: the loss curve of every line in the file, as an SVG beside it; its path ("" when off).
  std::string finish(const std::string& title) {
    if (path_.empty()) return "";
    out_.close();
    reel::report::Series loss("loss (window mean)");
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      loss.x.push_back(static_cast<double>(j.at("step").get<int64_t>()));
      loss.y.push_back(j.at("loss").get<double>());
    }
    if (loss.x.empty()) return "";
    const std::string svg = std::filesystem::path(path_).replace_extension(".svg").string();
    reel::report::write_svg(svg, {title, "optimizer step", "training loss", false, false, {loss}});
    std::printf("metrics: %zu steps in %s, the loss curve in %s\n", loss.x.size(), path_.c_str(), svg.c_str());
    return svg;
  }

 private:
  std::string path_, unit_;
  std::ofstream out_;
};

}  // namespace examples
