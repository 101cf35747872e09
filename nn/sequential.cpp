// Sequential, the checkpoint policies and MLP.
#include "nn/sequential.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/tape.h"
#include "nn/layers.h"

namespace reel::nn {

namespace {

int64_t parse_int(const std::string& text, const std::string& whole) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  REEL_CHECK(used == text.size() && !text.empty(), "checkpoint policy '", whole,
             "': '", text, "' is not a whole number (use none, every:K, sqrt or list:i,j,...)");
  return v;
}

}  // namespace

CheckpointPolicy CheckpointPolicy::parse(const std::string& text) {
  CheckpointPolicy p;
  if (text == "none" || text.empty()) return p;
  if (text == "sqrt") {
    p.kind = Kind::Sqrt;
    return p;
  }
  if (text.rfind("every:", 0) == 0) {
    p.kind = Kind::Every;
    p.every = parse_int(text.substr(6), text);
    REEL_CHECK(p.every >= 1, "checkpoint policy '", text, "': K must be at least 1");
    return p;
  }
  if (text.rfind("list:", 0) == 0) {
    p.kind = Kind::List;
    std::string rest = text.substr(5);
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t comma = std::min(rest.find(',', start), rest.size());
      const int64_t i = parse_int(rest.substr(start, comma - start), text);
      REEL_CHECK(i >= 0, "checkpoint policy '", text, "': indices must be >= 0");
      p.list.push_back(i);
      start = comma + 1;
    }
    std::sort(p.list.begin(), p.list.end());
    p.list.erase(std::unique(p.list.begin(), p.list.end()), p.list.end());
    return p;
  }
  REEL_FAIL("checkpoint policy '", text, "' is not one of none, every:K, sqrt, list:i,j,...");
}

std::string CheckpointPolicy::str() const {
  switch (kind) {
    case Kind::None: return "none";
    case Kind::Sqrt: return "sqrt";
    case Kind::Every: return "every:" + std::to_string(every);
    case Kind::List: {
      std::string s = "list:";
      for (size_t i = 0; i < list.size(); ++i) s += (i ? "," : "") + std::to_string(list[i]);
      return s;
    }
  }
  return "?";
}

std::vector<CheckpointPolicy::Run> CheckpointPolicy::plan(int64_t n) const {
  std::vector<Run> runs;
  if (n <= 0) return runs;
  if (kind == Kind::None) return {{0, n, false}};
  if (kind == Kind::List) {
    const std::set<int64_t> chosen(list.begin(), list.end());
    for (int64_t i = 0; i < n; ++i) {
      const bool ck = chosen.count(i) > 0;
      if (!ck && !runs.empty() && !runs.back().checkpointed) runs.back().end = i + 1;
      else runs.push_back({i, i + 1, ck});
    }
    return runs;
  }
  const int64_t k = kind == Kind::Every
                        ? every
                        : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n)))));
  for (int64_t b = 0; b < n; b += k) runs.push_back({b, std::min(n, b + k), true});
  runs.back().checkpointed = false;
  return runs;
}

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

Module& Sequential::operator[](int64_t i) const {
  REEL_CHECK(i >= 0 && i < size(), name(), "[", i, "]: index out of range for ", size(), " modules");
  return *children()[static_cast<size_t>(i)].second;
}

void Sequential::set_checkpoint(const CheckpointPolicy& policy) {
  for (int64_t i : policy.list)
    REEL_CHECK(i < size(), name(), ".set_checkpoint(", policy.str(), "): index ", i, " is out of range for ",
               size(), " modules");
  policy_ = policy;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const CheckpointPolicy::Run& run : policy_.plan(size())) {
    if (run.checkpointed) {
      autograd::Checkpoint segment;
      for (int64_t i = run.begin; i < run.end; ++i) h = (*this)[i](h);
    } else {
      for (int64_t i = run.begin; i < run.end; ++i) h = (*this)[i](h);
    }
  }
  return h;
}

MLP::MLP(const std::vector<int64_t>& sizes, const std::string& activation, double dropout) {
  REEL_CHECK(sizes.size() >= 2, "MLP: needs at least {in, out} sizes, got ", sizes.size());
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) {
      push_back(make_activation(activation));
      if (dropout > 0) push_back(std::make_shared<Dropout>(dropout));
    }
  }
}

}  // namespace reel::nn
